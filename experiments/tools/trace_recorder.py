#!/usr/bin/env python3
"""Records target-verify steps from a serving stack as a Canopy verify trace (HDF5 format v1).

Call ``TraceRecorder.add_step`` from the target-verify hook with the same buffers the attention
backend receives (SGLang's Triton backend names: kv_indptr, kv_indices, qo_indptr, out_cache_loc,
plus either the draft tree's parents or its custom_mask). ``close()`` writes the file atomically
(temporary file + rename). Arrays may be numpy arrays or torch tensors (on any device; bf16
tensors are stored as their raw bits). The layout is described in docs/trace-format.md; the C++
reader (``canopy trace validate FILE``) is the authoritative check of every invariant.

    rec = TraceRecorder("verify.h5", num_heads=8, num_slots=pool_size, source="sglang kimi-k2 tp8")
    ...  # in the verify hook, once per step:
    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc,
                 custom_mask=custom_mask, mask_layout="full", request_ids=rids)
    rec.close()
"""

import datetime
import math
import os

import h5py
import numpy as np

FORMAT_NAME = "canopy-verify-trace"
FORMAT_VERSION = 1
D_LATENT = 512
D_ROPE = 64
D_QK = D_LATENT + D_ROPE
D_V = D_LATENT


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
    """Accumulates verify steps in memory and writes one v1 trace on close()."""

    def __init__(self, path, num_heads, num_slots, sm_scale=1.0 / math.sqrt(192.0), source="",
                 compression=4):
        self.path = str(path)
        self.num_heads = int(num_heads)
        self.num_slots = int(num_slots)
        self.sm_scale = float(sm_scale)
        self.source = str(source)
        self.compression = compression
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
        For numerical replay pass ``q`` [sum T, H, 576], ``out`` [sum T, H, 512] and ``kv_pool``
        [num_slots, 576] (bf16); the rows this step reads are captured from the pool now, and a
        slot captured earlier with different contents is an error (record fewer steps). Rows with
        T = 0 (graph padding) are dropped when ``skip_empty``.
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
            self._capture(_as_numpy(kv_pool).view(np.uint16).reshape(-1, D_QK), kv_indices[: kv_indptr[-1]],
                          out_cache_loc[: qo_indptr[-1]])

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

    def _capture(self, pool, prefix_slots, tree_slots):
        if self._pool is None:
            self._pool = {}
        for slot in np.concatenate([prefix_slots, tree_slots]).tolist():
            row = pool[slot]
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
                f.attrs["version"] = np.int64(FORMAT_VERSION)
                f.attrs["source"] = self.source
                f.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
                m = f.create_group("model")
                m.attrs["num_heads"] = np.int64(self.num_heads)
                m.attrs["d_latent"] = np.int64(D_LATENT)
                m.attrs["d_rope"] = np.int64(D_ROPE)
                m.attrs["sm_scale"] = np.float64(self.sm_scale)
                m.attrs["kv_dtype"] = "bf16"
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
                    pool = np.zeros((self.num_slots, D_QK), dtype=np.uint16)
                    for slot, row in self._pool.items():
                        pool[slot] = row
                    self._put(f, "values/q", q.astype("<u2"), bf16=True)
                    self._put(f, "values/kv", pool.astype("<u2"), bf16=True)
                    if c["out"]:
                        if len(c["out"]) != len(c["q"]):
                            raise ValueError("out must be given for every step with q, or for none")
                        self._put(f, "values/out", np.concatenate(c["out"]).astype("<u2"), bf16=True)
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def _put(self, f, name, data, bf16=False):
        if data.size:
            ds = f.create_dataset(name, data=data, chunks=True, compression="gzip",
                                  compression_opts=self.compression, shuffle=True)
        else:  # HDF5 cannot chunk an empty fixed-size dataset
            ds = f.create_dataset(name, data=data)
        if bf16:
            ds.attrs["dtype"] = "bfloat16"

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._closed = True  # nothing half-written
        return False
