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
