"""Shared helpers of the package's tests: the fp64 reference of docs/design.md §1, written here in
numpy (independent of the library's own reference), and the error contract of `canopy check`."""
import numpy as np
import pytest

from canopy.problems import D_V, fp8_values, from_bf16_bits, to_fp8


def reference(p, sees=None, pool=None, fp8_mma=None):
    """fp64 tree-verify attention of problem ``p``: node i of request b attends to b's prefix, itself and
    its ancestors. ``sees(parents, i)`` overrides the tree part (tests that the checks can fail).
    ``pool``: the pool's values (float64 [slots, 576], an FP8 pool dequantised) instead of its bf16
    bits. ``fp8_mma`` ("e4m3" or "e5m2"): fp8-mma numerics (docs/design.md §8), Q and the softmax
    weights (relative to the row's final max; the denominator before the cast) rounded to that format."""
    q = from_bf16_bits(p["q"])
    pool = from_bf16_bits(p["kv_pool"]) if pool is None else pool
    cast = (lambda x: fp8_values(fp8_mma)[to_fp8(x, fp8_mma)]) if fp8_mma else (lambda x: x)
    q = cast(q)
    out = np.zeros((q.shape[0], q.shape[1], D_V))
    parents = p["tree_parent"]
    for b in range(len(p["qo_indptr"]) - 1):
        n0, n1 = p["qo_indptr"][b], p["qo_indptr"][b + 1]
        prefix = list(p["kv_indices"][p["kv_indptr"][b]:p["kv_indptr"][b + 1]])
        tree_parents = list(parents[n0:n1])
        for i in range(n1 - n0):
            if sees is None:
                tree = []
                k = i
                while k >= 0:
                    tree.append(k)
                    k = tree_parents[k]
            else:
                tree = sees(tree_parents, i)
            rows = pool[prefix + [p["out_cache_loc"][n0 + j] for j in tree]]
            scores = p["sm_scale"] * q[n0 + i] @ rows.T  # [heads, keys]
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[n0 + i] = (cast(weights) @ rows[:, :D_V]) / weights.sum(axis=1, keepdims=True)
    return out


def errors(out_bits, ref):
    """(rel-L2 over everything, worst rel-L2 of one (node, head) row), as `canopy check` measures."""
    out = from_bf16_bits(out_bits).reshape(ref.shape)
    if not np.all(np.isfinite(out)):
        return float("inf"), float("inf")
    total = np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)
    rows = np.linalg.norm(out - ref, axis=2) / np.maximum(np.linalg.norm(ref, axis=2), 1e-30)
    return float(total), float(rows.max(initial=0.0))


def passes(out_bits, ref):
    """The check contract (docs/design.md §4): rel-L2 <= 1e-2 overall and <= 2e-2 on every row."""
    total, worst = errors(out_bits, ref)
    return total <= 1e-2 and worst <= 2e-2


