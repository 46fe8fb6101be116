"""Shared helpers of the package's tests: the fp64 reference of docs/design.md §1, written here in
numpy (independent of the library's own reference), and the error contract of `canopy check`."""
import numpy as np
import pytest

from canopy.problems import D_V, from_bf16_bits


def reference(p, sees=None):
    """fp64 tree-verify attention of problem ``p``: node i of request b attends to b's prefix, itself and
    its ancestors. ``sees(parents, i)`` overrides the tree part (tests that the checks can fail)."""
    q = from_bf16_bits(p["q"])
    pool = from_bf16_bits(p["kv_pool"])
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
            weights /= weights.sum(axis=1, keepdims=True)
            out[n0 + i] = weights @ rows[:, :D_V]
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


