#!/usr/bin/env python3
"""Records target-verify steps from a serving stack as a Canopy verify trace (HDF5 format v1, or v2
for an FP8 KV pool).

Call ``TraceRecorder.add_step`` from the target-verify hook with the same buffers the attention
backend receives (SGLang's Triton backend names: kv_indptr, kv_indices, qo_indptr, out_cache_loc,
plus either the draft tree's parents or its custom_mask). ``close()`` writes the file atomically
(temporary file + rename). Arrays may be numpy arrays or torch tensors (on any device; bf16
tensors are stored as their raw bits, FP8 tensors as their bytes). The layout is described in
docs/trace-format.md; the C++ reader (``canopy trace validate FILE``) is the authoritative check of
every invariant.

    rec = TraceRecorder("verify.h5", num_heads=8, num_slots=pool_size, source="sglang kimi-k2 tp8")
    ...  # in the verify hook, once per step:
    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc,
                 custom_mask=custom_mask, mask_layout="full", request_ids=rids)
    rec.close()

An FP8 pool is recorded as it is in memory: SGLang's ``--kv-cache-dtype fp8_e4m3`` / ``fp8_e5m2``
pool (``uint8[slots, 1, 576]`` or its float8_e4m3fn / float8_e5m2 view, one fp32 ``k_scale``) with
``TraceRecorder(..., kv_dtype="fp8-e4m3", kv_scale=k_scale)``; DeepSeek V3.2's 656-byte rows
(512 e4m3, 4 fp32 block scales, 64 bf16 rope values) with ``kv_dtype="fp8-e4m3-blockscaled"``.
"""

import datetime
import math
import os

import h5py
import numpy as np

FORMAT_NAME = "canopy-verify-trace"
FORMAT_V1 = 1  # bf16 pools; what a bf16 trace is written as, so v1 readers keep reading it
FORMAT_VERSION = 2  # v1 plus /model kv_dtype and kv_scale, and an FP8 pool's raw row bytes
D_LATENT = 512
D_ROPE = 64
D_QK = D_LATENT + D_ROPE
D_V = D_LATENT
KV_BLOCK = 128
# Bytes of one pool row per KV dtype (docs/design.md section 8).
KV_ROW_BYTES = {"bf16": 2 * D_QK, "fp8-e4m3": D_QK, "fp8-e5m2": D_QK, "fp8-e4m3-blockscaled": D_LATENT + 4 * 4 + 2 * D_ROPE}
KV_SCALES_AT = D_LATENT  # block-scaled row: the four fp32 scales, then the bf16 rope values
KV_ROPE_AT = D_LATENT + 4 * (D_LATENT // KV_BLOCK)
# torch's FP8 dtypes and the KV dtypes whose bytes they view.
_TORCH_FP8 = {"torch.float8_e4m3fn": ("fp8-e4m3", "fp8-e4m3-blockscaled"), "torch.float8_e5m2": ("fp8-e5m2",)}


def _as_numpy(x, dtype=None):
    """numpy view of a numpy array or a torch tensor (copied to the host; bf16 -> uint16 bits)."""
    if x is None:
        return None
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch
        t = x.detach()
        if str(t.dtype) == "torch.bfloat16":
            import torch  # only reached when the caller already uses torch

            t = t.view(torch.int16)
            return t.cpu().numpy().view(np.uint16)
        x = t.cpu().numpy()
    a = np.asarray(x)
    return a.astype(dtype, copy=False) if dtype is not None else a


def _scale_value(kv_scale, kv_dtype):
    """The per-tensor scale as float32 (a float, numpy scalar or one-element array/tensor)."""
    if kv_dtype in ("fp8-e4m3", "fp8-e5m2"):
        if kv_scale is None:
            raise ValueError(f"kv_scale: a {kv_dtype} pool needs its per-tensor scale "
                             "(SGLang's k_scale; 1.0 when the checkpoint has none)")
        a = _as_numpy(kv_scale)
        if a.size != 1:
            raise ValueError(f"kv_scale: one per-tensor scale expected, got {a.size} values")
        value = np.float32(a.reshape(-1)[0])
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"kv_scale: must be finite and > 0, got {value}")
        return value
    if kv_scale is not None:
        raise ValueError(f"kv_scale: a {kv_dtype} pool has no per-tensor scale"
                         + (" (each row carries its block scales)" if kv_dtype != "bf16" else ""))
    return None


def _pool_rows(kv_pool, slots, kv_dtype):
    """Rows ``slots`` of the pool as numpy: uint16 bf16 bits [n, 576], or the raw bytes [n, row] of
    an FP8 pool (uint8, or a torch float8 view of it, of any leading shape: [slots, 1, row],
    [slots, row], paged [blocks, block_size, 1, row]). Only those rows leave the device."""
    row = KV_ROW_BYTES[kv_dtype]
    if hasattr(kv_pool, "detach"):  # torch.Tensor, without importing torch
        t = kv_pool.detach()
        name = str(t.dtype)
        if kv_dtype == "bf16":
            if name != "torch.bfloat16":
                raise ValueError(f"kv_pool: {name} tensor, but the recorder's kv_dtype is bf16 "
                                 "(pass kv_dtype= to TraceRecorder for an FP8 pool)")
            width = D_QK
        else:
            if name in _TORCH_FP8 and kv_dtype not in _TORCH_FP8[name]:
                raise ValueError(f"kv_pool: {name} tensor, but the recorder's kv_dtype is {kv_dtype}")
            if name not in _TORCH_FP8 and name != "torch.uint8":
                raise ValueError(f"kv_pool: {name} tensor; a {kv_dtype} pool is uint8 or its float8 view")
            width = row
        if t.shape[-1] != width:
            raise ValueError(f"kv_pool: rows of {t.shape[-1]} values, but a {kv_dtype} row has {width}")
        t = t.reshape(-1, width)
        if len(slots) and int(max(slots)) >= t.shape[0]:
            raise ValueError(f"kv_pool: has {t.shape[0]} rows, but a step reads slot {int(max(slots))}")
        import torch  # only reached when the caller already uses torch

        rows = t[torch.as_tensor(np.asarray(slots, dtype=np.int64), device=t.device)]
        rows = rows.view(torch.int16) if kv_dtype == "bf16" else rows.view(torch.uint8)
        a = rows.cpu().numpy()
        return a.view(np.uint16) if kv_dtype == "bf16" else a.view(np.uint8)
    a = np.asarray(kv_pool)
    if kv_dtype == "bf16":
        if a.dtype.itemsize != 2:
            raise ValueError(f"kv_pool: {a.dtype} array, but the recorder's kv_dtype is bf16 (uint16 bits; "
                             "pass kv_dtype= to TraceRecorder for an FP8 pool)")
        a = a.view(np.uint16)
        width = D_QK
    else:
        # uint8, or a one-byte float8 dtype (ml_dtypes) viewing the same bytes.
        if a.dtype.itemsize != 1 or not (a.dtype == np.uint8 or "float8" in a.dtype.name):
            raise ValueError(f"kv_pool: {a.dtype} array; a {kv_dtype} pool is its raw bytes (uint8)")
        if "float8" in a.dtype.name and ("e5m2" in a.dtype.name) != (kv_dtype == "fp8-e5m2"):
            raise ValueError(f"kv_pool: {a.dtype.name} array, but the recorder's kv_dtype is {kv_dtype}")
        a = a.view(np.uint8)
        width = row
    if a.shape[-1] != width:
        raise ValueError(f"kv_pool: rows of {a.shape[-1]} {'values' if kv_dtype == 'bf16' else 'bytes'}, "
                         f"but a {kv_dtype} row has {width}")
    a = a.reshape(-1, width)
    if len(slots) and int(max(slots)) >= a.shape[0]:
        raise ValueError(f"kv_pool: has {a.shape[0]} rows, but a step reads slot {int(max(slots))}")
    return a[np.asarray(slots, dtype=np.int64)]


def fp8_row_problem(rows, kv_dtype):
    """First unreadable element of FP8 pool rows [n, row] as (row index, message), or None: a NaN
    encoding (e4m3fn 0x7f/0xff; e5m2 exponent all ones, Inf or NaN), and in the block-scaled layout
    a block scale that is not finite and > 0 or a rope value that is NaN or Inf."""
    rows = np.asarray(rows, dtype=np.uint8)
    fp8 = rows[:, :D_LATENT] if kv_dtype == "fp8-e4m3-blockscaled" else rows
    mag = fp8 & 0x7F
    bad = mag >= 0x7C if kv_dtype == "fp8-e5m2" else mag == 0x7F
    found = []
    if bad.any():
        r, d = np.argwhere(bad)[0]
        found.append((r, f"column {d} is 0x{rows[r, d]:02x}, "
                          f"{'infinity' if kv_dtype == 'fp8-e5m2' and mag[r, d] == 0x7C else 'a NaN encoding'}"))
    if kv_dtype == "fp8-e4m3-blockscaled":
        scales = np.ascontiguousarray(rows[:, KV_SCALES_AT:KV_ROPE_AT]).view("<f4")
        bad = ~(np.isfinite(scales) & (scales > 0))
        if bad.any():
            r, b = np.argwhere(bad)[0]
            found.append((r, f"block scale {b} is {scales[r, b]}, must be finite and > 0"))
        rope = np.ascontiguousarray(rows[:, KV_ROPE_AT:]).view("<u2")
        bad = (rope & 0x7F80) == 0x7F80
        if bad.any():
            r, d = np.argwhere(bad)[0]
            found.append((r, f"rope value {d} (column {D_LATENT + d}) is bf16 NaN or Inf"))
    return min(found, key=lambda x: x[0]) if found else None


def mask_to_parents(custom_mask, mask_indptr, prefix_lens, tree_sizes, layout="full"):
    """Parents (per request, -1 for the root) of the trees encoded in an SGLang custom mask.

    layout "full": per request a T x (P+T) row-major byte matrix whose prefix columns are 1;
    layout "tree" (QLEN_ONLY): per request a T x T matrix. Node i's parent is its deepest visible
    node before it; the mask must be exactly "self + ancestors" of a tree whose parents come first.
    """
    mask = _as_numpy(custom_mask).reshape(-1).astype(bool)
    parents = []
    for b, (P, T) in enumerate(zip(prefix_lens, tree_sizes)):
        P, T = int(P), int(T)
        width = P + T if layout == "full" else T
        start = int(mask_indptr[b])
        m = mask[start : start + T * width].reshape(T, width)
        if layout == "full":
            if not m[:, :P].all():
                raise ValueError(f"custom_mask: request {b} hides part of its prefix")
            m = m[:, P:]
        par = np.full(T, -1, dtype=np.int32)
        anc = []
        for i in range(T):
            row = m[i]
            if not row[i]:
                raise ValueError(f"custom_mask: request {b} node {i} does not see itself")
            if row[i + 1 :].any():
                raise ValueError(
                    f"custom_mask: request {b} node {i} sees a later node; "
                    "record trees with parents before children"
                )
            before = np.flatnonzero(row[:i])
            par[i] = before[-1] if before.size else -1
            expected = {i} | (anc[par[i]] if par[i] >= 0 else set())
            if set(np.flatnonzero(row[: i + 1]).tolist()) != expected:
                raise ValueError(f"custom_mask: request {b} node {i} is not self + ancestors of a tree")
            anc.append(expected)
        parents.append(par)
    return parents


class TraceRecorder:
    """Accumulates verify steps in memory and writes one trace on close(): format v1 for a bf16 pool,
    v2 for an FP8 one.

    ``kv_dtype`` says how the serving stack stores the pool: "bf16" (default), "fp8-e4m3" or
    "fp8-e5m2" (SGLang's fp8_e4m3 / fp8_e5m2, with ``kv_scale`` = its per-tensor ``k_scale``: a
    float, numpy scalar or one-element tensor), or "fp8-e4m3-blockscaled" (DeepSeek V3.2's 656-byte
    rows, no kv_scale). Metadata-only traces record it too: replay then stores its seeded pool so.
    """

    def __init__(self, path, num_heads, num_slots, sm_scale=1.0 / math.sqrt(192.0), source="",
                 compression=4, kv_dtype="bf16", kv_scale=None):
        self.path = str(path)
        self.num_heads = int(num_heads)
        self.num_slots = int(num_slots)
        self.sm_scale = float(sm_scale)
        self.source = str(source)
        self.compression = compression
        if kv_dtype not in KV_ROW_BYTES:
            raise ValueError(f"kv_dtype: unknown kv dtype {kv_dtype!r} (expected one of {', '.join(KV_ROW_BYTES)})")
        self.kv_dtype = kv_dtype
        self.kv_scale = _scale_value(kv_scale, kv_dtype)
        self._request_offset = [0]
        self._cols = {k: [] for k in ("request_id", "prefix_len", "tree_size", "accepted", "parent",
                                      "out_cache_loc", "kv_indices", "q", "out")}
        self._rows = 0
        self._last_step = []            # (row in the caller's batch, row in the trace) of the last step
        self._values = None             # None until a step brings q
        self._pool = None               # captured rows of the KV pool, slot -> bf16 bits
        self._next_id = 0
        self._closed = False

    # ---- recording ---------------------------------------------------------------------------
    def add_step(self, kv_indptr, kv_indices, qo_indptr, out_cache_loc, *, parents=None, custom_mask=None,
                 mask_indptr=None, mask_layout="full", request_ids=None, accepted=None, q=None, out=None,
                 kv_pool=None, skip_empty=True):
        """Appends one verify step.

        kv_indptr [B+1], kv_indices [>= kv_indptr[-1]] (extra capacity is ignored), qo_indptr [B+1],
        out_cache_loc [sum T]: as the attention backend holds them. The tree comes from ``parents``
        ([sum T], per-request parent index, -1 for the root) or from ``custom_mask`` (+ optional
        ``mask_indptr``; ``mask_layout`` "full" or "tree"). ``request_ids`` [B] are stable ids
        across steps (default: fresh ids). ``accepted`` [B] counts accepted nodes incl. the root
        (or pass it later with ``set_accepted``; record it for every step or for none).
        For numerical replay pass ``q`` [sum T, H, 576], ``out`` [sum T, H, 512] (bf16) and
        ``kv_pool`` as the stack holds it: [num_slots, 576] bf16, or for an FP8 recorder the raw
        rows (uint8 or a float8 view, [num_slots, 1, row] or [num_slots, row]); the rows this step
        reads are captured from the pool now (an FP8 row holding a NaN encoding is an error), and
        a slot captured earlier with different contents is an error (record fewer steps). Rows
        with T = 0 (graph padding) are dropped when ``skip_empty``.
        """
        if self._closed:
            raise ValueError("recorder is closed")
        kv_indptr = _as_numpy(kv_indptr, np.int64)
        qo_indptr = _as_numpy(qo_indptr, np.int64)
        kv_indices = _as_numpy(kv_indices, np.int64)
        out_cache_loc = _as_numpy(out_cache_loc, np.int64)
        B = len(qo_indptr) - 1
        if len(kv_indptr) != B + 1:
            raise ValueError(f"kv_indptr has {len(kv_indptr)} entries, qo_indptr {len(qo_indptr)}")
        prefix = np.diff(kv_indptr)
        tree = np.diff(qo_indptr)
        if (prefix < 0).any() or (tree < 0).any() or kv_indptr[0] != 0 or qo_indptr[0] != 0:
            raise ValueError("kv_indptr and qo_indptr must start at 0 and be monotone")
        if kv_indptr[-1] > len(kv_indices) or qo_indptr[-1] > len(out_cache_loc):
            raise ValueError("kv_indices or out_cache_loc shorter than their indptr says")

        if parents is not None:
            flat = _as_numpy(parents, np.int32)
            per_req = [flat[qo_indptr[b] : qo_indptr[b + 1]] for b in range(B)]
        elif custom_mask is not None:
            if mask_indptr is None:
                sizes = tree * (prefix + tree) if mask_layout == "full" else tree * tree
                mask_indptr = np.concatenate([[0], np.cumsum(sizes)])
            per_req = mask_to_parents(custom_mask, _as_numpy(mask_indptr, np.int64), prefix, tree, mask_layout)
        else:
            raise ValueError("give parents or custom_mask")

        if request_ids is None:
            request_ids = np.arange(self._next_id, self._next_id + B)
            self._next_id += B
        request_ids = _as_numpy(request_ids, np.int64)
        accepted = _as_numpy(accepted, np.int32) if accepted is not None else np.full(B, -1, dtype=np.int32)

        with_values = q is not None
        if self._values is None:
            self._values = with_values
        elif self._values != with_values:
            raise ValueError("q must be given for every step or for none")
        if with_values:
            if kv_pool is None:
                raise ValueError("q needs kv_pool (the rows it attends to are captured from it)")
            q = _as_numpy(q).view(np.uint16).reshape(-1, self.num_heads, D_QK)
            out = None if out is None else _as_numpy(out).view(np.uint16).reshape(-1, self.num_heads, D_V)
            self._capture(kv_pool, kv_indices[: kv_indptr[-1]], out_cache_loc[: qo_indptr[-1]])

        self._last_step = []
        for b in range(B):
            if tree[b] == 0 and skip_empty:
                continue
            self._last_step.append((b, len(self._cols["accepted"])))
            n0, n1 = qo_indptr[b], qo_indptr[b + 1]
            if len(per_req[b]) != tree[b]:
                raise ValueError(f"request {b}: {len(per_req[b])} parents for {tree[b]} nodes")
            c = self._cols
            c["request_id"].append(request_ids[b : b + 1])
            c["prefix_len"].append(np.array([prefix[b]], dtype=np.int32))
            c["tree_size"].append(np.array([tree[b]], dtype=np.int64))
            c["parent"].append(np.asarray(per_req[b], dtype=np.int32))
            c["out_cache_loc"].append(out_cache_loc[n0:n1])
            c["kv_indices"].append(kv_indices[kv_indptr[b] : kv_indptr[b + 1]])
            c["accepted"].append(accepted[b : b + 1].copy())
            if with_values:
                c["q"].append(q[n0:n1])
                if out is not None:
                    c["out"].append(out[n0:n1])
            self._rows += 1
        self._request_offset.append(self._rows)

    def set_accepted(self, accepted):
        """Accepted lengths [B] (incl. the root) of the step added last, once verification is done."""
        accepted = _as_numpy(accepted, np.int32)
        for b, row in self._last_step:
            self._cols["accepted"][row][0] = accepted[b]

    def _capture(self, kv_pool, prefix_slots, tree_slots):
        if self._pool is None:
            self._pool = {}
        slots = np.unique(np.concatenate([prefix_slots, tree_slots]))
        if len(slots) and (slots[0] < 0 or slots[-1] >= self.num_slots):
            raise ValueError(f"kv_pool: a step reads slot {slots[0] if slots[0] < 0 else slots[-1]}, "
                             f"outside the recorder's num_slots {self.num_slots}")
        rows = _pool_rows(kv_pool, slots, self.kv_dtype)
        if self.kv_dtype != "bf16":
            problem = fp8_row_problem(rows, self.kv_dtype)
            if problem is not None:
                raise ValueError(f"kv_pool: slot {int(slots[problem[0]])} (read by this step): {problem[1]} "
                                 f"in {self.kv_dtype}; recorded values must be readable")
        for slot, row in zip(slots.tolist(), rows):
            seen = self._pool.get(slot)
            if seen is None:
                self._pool[slot] = row.copy()
            elif not np.array_equal(seen, row):
                raise ValueError(f"kv_pool: slot {slot} changed since an earlier recorded step; "
                                 "record values for fewer steps")

    # ---- writing -----------------------------------------------------------------------------
    def close(self):
        """Writes the trace (temporary file, then rename over ``path``)."""
        if self._closed:
            return
        self._closed = True
        c = self._cols
        cat = lambda key, dtype: (np.concatenate(c[key]).astype(dtype, copy=False) if c[key]
                                  else np.zeros(0, dtype=dtype))
        tree_size = cat("tree_size", np.int64)
        prefix_len = cat("prefix_len", np.int32)
        tmp = f"{self.path}.tmp-{os.getpid()}"
        try:
            with h5py.File(tmp, "w") as f:
                f.attrs["format"] = FORMAT_NAME
                f.attrs["version"] = np.int64(FORMAT_V1 if self.kv_dtype == "bf16" else FORMAT_VERSION)
                f.attrs["source"] = self.source
                f.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
                m = f.create_group("model")
                m.attrs["num_heads"] = np.int64(self.num_heads)
                m.attrs["d_latent"] = np.int64(D_LATENT)
                m.attrs["d_rope"] = np.int64(D_ROPE)
                m.attrs["sm_scale"] = np.float64(self.sm_scale)
                m.attrs["kv_dtype"] = self.kv_dtype
                if self.kv_scale is not None:
                    m.attrs["kv_scale"] = np.float32(self.kv_scale)
                f.create_group("pool").attrs["num_slots"] = np.int64(self.num_slots)
                self._put(f, "steps/request_offset", np.asarray(self._request_offset, dtype="<i8"))
                self._put(f, "requests/request_id", cat("request_id", "<i8"))
                self._put(f, "requests/prefix_len", prefix_len.astype("<i4"))
                self._put(f, "requests/tree_offset", np.concatenate([[0], np.cumsum(tree_size)]).astype("<i8"))
                self._put(f, "requests/kv_offset",
                          np.concatenate([[0], np.cumsum(prefix_len.astype(np.int64))]).astype("<i8"))
                accepted = cat("accepted", "<i4")
                if (accepted >= 0).any():
                    if (accepted < 0).any():
                        raise ValueError("accepted was recorded for some steps only: give it for every step or none")
                    self._put(f, "requests/accepted", accepted)
                self._put(f, "tree/parent", cat("parent", "<i4"))
                self._put(f, "tree/out_cache_loc", cat("out_cache_loc", "<i8"))
                self._put(f, "tokens/kv_indices", cat("kv_indices", "<i8"))
                if self._values:
                    q = (np.concatenate(c["q"]) if c["q"] else np.zeros((0, self.num_heads, D_QK), np.uint16))
                    self._put(f, "values/q", q.astype("<u2"), bf16=True)
                    if self.kv_dtype == "bf16":
                        pool = np.zeros((self.num_slots, D_QK), dtype=np.uint16)
                        for slot, row in self._pool.items():
                            pool[slot] = row
                        self._put(f, "values/kv", pool.astype("<u2"), bf16=True)
                    else:  # the rows' bytes as the stack stores them; rows no step read stay 0
                        pool = np.zeros((self.num_slots, KV_ROW_BYTES[self.kv_dtype]), dtype=np.uint8)
                        for slot, row in self._pool.items():
                            pool[slot] = row
                        self._put(f, "values/kv", pool, dtype=self.kv_dtype)
                    if c["out"]:
                        if len(c["out"]) != len(c["q"]):
                            raise ValueError("out must be given for every step with q, or for none")
                        self._put(f, "values/out", np.concatenate(c["out"]).astype("<u2"), bf16=True)
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def _put(self, f, name, data, bf16=False, dtype=None):
        if data.size:
            ds = f.create_dataset(name, data=data, chunks=True, compression="gzip",
                                  compression_opts=self.compression, shuffle=True)
        else:  # HDF5 cannot chunk an empty fixed-size dataset
            ds = f.create_dataset(name, data=data)
        if bf16:
            ds.attrs["dtype"] = "bfloat16"
        elif dtype is not None:
            ds.attrs["dtype"] = dtype

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._closed = True  # nothing half-written
        return False
