"""Random verify batches as numpy arrays (SGLang's buffers and dtypes, docs/design.md §1), for tests
and examples. Needs numpy; ``import canopy`` does not.

    p = canopy.problems.random_problem(seed=1, batch=3, heads=2, max_prefix=40, max_tree=9, mask="tree")
    out = canopy.problems.empty_out(p)
    canopy.verify_attention(p["q"], p["kv_pool"], out, **canopy.problems.metadata(p), mask="tree",
                            sm_scale=p["sm_scale"])
"""
from __future__ import annotations

import numpy as np

D_QK, D_V = 576, 512
METADATA = ("kv_indptr", "kv_indices", "qo_indptr", "out_cache_loc", "custom_mask", "mask_indptr", "tree_parent")


def to_bf16_bits(x):
    """float -> bf16 bits (uint16), rounded to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(bits):
    """bf16 bits (uint16) -> float64."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def random_parents(rng, size):
    """A random tree: node 0 the root (-1), every other node a parent below it."""
    return [-1] + [int(rng.integers(0, i)) for i in range(1, size)] if size > 0 else []


def masks(parents, prefix, layout):
    """One request's custom_mask bytes for ``layout`` ("full": T x (P+T), "tree": T x T, "parents": none)."""
    size = len(parents)
    vis = np.zeros((size, size), dtype=np.uint8)
    for i in range(size):
        k = i
        while k >= 0:
            vis[i, k] = 1
            k = parents[k]
    if layout == "tree":
        return vis.reshape(-1)
    if layout == "full":
        return np.concatenate([np.ones((size, prefix), dtype=np.uint8), vis], axis=1).reshape(-1)
    return np.zeros(0, dtype=np.uint8)


def random_problem(seed, batch=3, heads=2, max_prefix=40, max_tree=9, mask="tree", dominant=False, slots=None,
                   sizes=None):
    """A seeded batch: requests with 0..max_prefix prefix tokens and 0..max_tree nodes (or ``sizes``,
    a list of (P, T)), distinct pool slots in random order, random bf16 values. ``dominant``: the tree
    keys carry the attention (a shared direction added to every q row and every tree node's K row), so
    a visibility error moves the output far beyond bf16 rounding at any prefix length."""
    rng = np.random.default_rng(seed)
    if sizes is None:
        sizes = [(int(rng.integers(0, max_prefix + 1)), int(rng.integers(0, max_tree + 1))) for _ in range(batch)]
    need = sum(p + t for p, t in sizes)
    slots = max(need, 1) + 7 if slots is None else slots
    order = rng.permutation(slots)[:need].astype(np.int64)
    kv_indptr, qo_indptr, mask_indptr = [0], [0], [0]
    kv_indices, out_cache_loc, tree_parent, custom_mask = [], [], [], []
    used = 0
    for p, t in sizes:
        kv_indices.append(order[used:used + p])
        out_cache_loc.append(order[used + p:used + p + t])
        used += p + t
        parents = random_parents(rng, t)
        tree_parent += parents
        custom_mask.append(masks(parents, p, mask))
        kv_indptr.append(kv_indptr[-1] + p)
        qo_indptr.append(qo_indptr[-1] + t)
        mask_indptr.append(mask_indptr[-1] + custom_mask[-1].size)
    nodes = qo_indptr[-1]
    q = rng.uniform(-1, 1, size=(nodes, heads, D_QK))
    pool = rng.uniform(-1, 1, size=(slots, D_QK))
    sm_scale = 1.0 / np.sqrt(192.0)
    tree_slots = np.concatenate(out_cache_loc) if out_cache_loc else np.zeros(0, np.int64)
    if dominant:
        u = np.where(rng.uniform(-1, 1, D_QK) < 0, -1.0, 1.0) / np.sqrt(D_QK)
        a = np.sqrt(12.0 / sm_scale)
        q += a * u
        pool[tree_slots] += a * u
    p = {
        "kv_indptr": np.array(kv_indptr, dtype=np.int32),
        "kv_indices": np.concatenate(kv_indices).astype(np.int64) if kv_indices else np.zeros(0, np.int64),
        "qo_indptr": np.array(qo_indptr, dtype=np.int64),
        "out_cache_loc": tree_slots.astype(np.int64),
        "custom_mask": np.concatenate(custom_mask).astype(np.uint8) if custom_mask else np.zeros(0, np.uint8),
        "mask_indptr": np.array(mask_indptr, dtype=np.int64),
        "tree_parent": np.array(tree_parent, dtype=np.int32),
        "q": to_bf16_bits(q),
        "kv_pool": to_bf16_bits(pool),
        "sm_scale": float(sm_scale),
        "mask": mask,
        "heads": heads,
    }
    if mask == "parents":
        p["custom_mask"] = None
        p["mask_indptr"] = None
    return p


def metadata(p):
    """The metadata buffers of ``p`` as keyword arguments of verify_attention / Plan.run."""
    return {name: p[name] for name in METADATA}


def empty_out(p, fill=0xFFFF):
    """An output buffer for ``p`` filled with ``fill`` (bf16 bits; 0xFFFF is a NaN)."""
    return np.full((p["q"].shape[0], p["heads"], D_V), fill, dtype=np.uint16)


# --- FP8 KV pools (docs/design.md §8) ------------------------------------------------------------

#: Bytes of one pool row per kv dtype.
ROW_BYTES = {"fp8-e4m3": D_QK, "fp8-e5m2": D_QK, "fp8-e4m3-blockscaled": 656}
_FORMATS = {"e4m3": (4, 3, 7, False), "e5m2": (5, 2, 15, True)}


def fp8_values(fmt):
    """The value of each of the 256 bytes of ``fmt`` ("e4m3": OCP e4m3fn, "e5m2"), float64 (NaN where
    the byte encodes NaN, +-inf for e5m2's infinities)."""
    exp_bits, man_bits, bias, has_inf = _FORMATS[fmt]
    byte = np.arange(256)
    sign = np.where(byte >> 7, -1.0, 1.0)
    e = (byte >> man_bits) & ((1 << exp_bits) - 1)
    m = byte & ((1 << man_bits) - 1)
    normal = (1.0 + m / (1 << man_bits)) * np.exp2(e - bias)
    subnormal = m / (1 << man_bits) * np.exp2(1 - bias)
    v = sign * np.where(e == 0, subnormal, normal)
    top = e == (1 << exp_bits) - 1
    if has_inf:
        v = np.where(top & (m == 0), sign * np.inf, np.where(top, np.nan, v))
    else:
        v = np.where(top & (m == (1 << man_bits) - 1), np.nan, v)
    return v


def to_fp8(x, fmt):
    """float -> bytes of ``fmt``, rounded to the nearest value, ties to the even byte (as torch's
    ``.to(float8_*)``), for values within the finite range."""
    values = fp8_values(fmt)
    finite = np.nonzero(np.isfinite(values[:128]))[0]  # magnitudes in increasing order with the byte
    mags = values[finite]
    a = np.abs(np.asarray(x, dtype=np.float64))
    if np.any(a > mags[-1]):
        raise ValueError(f"to_fp8: |x| up to {a.max()} exceeds the largest {fmt} value {mags[-1]}")
    hi = np.clip(np.searchsorted(mags, a), 0, len(mags) - 1)
    lo = np.clip(hi - 1, 0, len(mags) - 1)
    d_lo, d_hi = a - mags[lo], mags[hi] - a
    pick = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (finite[hi] % 2 == 0)), hi, lo)
    return (finite[pick] | np.where(np.signbit(np.asarray(x, dtype=np.float64)), 0x80, 0)).astype(np.uint8)


def quantise_pool(kv_pool_bits, kv_dtype, kv_scale=1.0):
    """A bf16 pool (uint16 bits [slots, 576]) as a serving stack stores it in FP8: (the uint8 pool
    [slots, row bytes], its dequantised values float64 [slots, 576]). fp8-e4m3 / fp8-e5m2: bytes of
    x / kv_scale (SGLang); fp8-e4m3-blockscaled: 512 e4m3 bytes scaled by 2^ceil(log2(amax / 448)) per
    128 values (1 for an all-zero block), the 4 fp32 scales, the 64 rope values as bf16 (DeepSeek V3.2)."""
    x = from_bf16_bits(kv_pool_bits).reshape(-1, D_QK)
    if kv_dtype in ("fp8-e4m3", "fp8-e5m2"):
        fmt = kv_dtype[4:]
        pool = to_fp8(x / kv_scale, fmt)
        return pool, fp8_values(fmt)[pool] * np.float64(np.float32(kv_scale))
    if kv_dtype != "fp8-e4m3-blockscaled":
        raise ValueError(f"kv_dtype: unknown FP8 dtype '{kv_dtype}'")
    slots = x.shape[0]
    latent = x[:, :512].reshape(slots, 4, 128)
    amax = np.abs(latent).max(axis=2)
    ratio = np.where(amax > 0, amax, 1.0) / 448.0
    scales = np.where(amax > 0, np.exp2(np.ceil(np.log2(ratio))), 1.0).astype(np.float32)
    codes = to_fp8(latent / scales[:, :, None], "e4m3").reshape(slots, 512)
    rope_bits = np.asarray(kv_pool_bits, dtype=np.uint16).reshape(-1, D_QK)[:, 512:]
    pool = np.concatenate([codes, scales.view(np.uint8).reshape(slots, 16),
                           np.ascontiguousarray(rope_bits).view(np.uint8).reshape(slots, 128)], axis=1)
    latent_values = fp8_values("e4m3")[codes].reshape(slots, 4, 128) * scales[:, :, None]
    values = np.concatenate([latent_values.reshape(slots, 512), from_bf16_bits(rope_bits)], axis=1)
    return np.ascontiguousarray(pool), values
