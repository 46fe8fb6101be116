#!/usr/bin/env python3
"""Writes traces with experiments/tools/trace_recorder.py from SGLang-style numpy arrays, plus a JSON
file of what every step must read back as (requests and the full-layout SGLang buffers, built here
independently of the C++ code). The C++ test tstTraceRecorder.cpp reads both and compares.

usage: recorder_roundtrip.py --recorder DIR --out DIR
"""

import argparse
import json
import os
import sys

import numpy as np


def random_tree(rng, size):
    return np.array([-1] + [int(rng.integers(0, i)) for i in range(1, size)], dtype=np.int32)


def full_mask(parents, prefix_len):
    """T x (P+T) bytes: prefix columns 1, then self + ancestors."""
    T = len(parents)
    m = np.zeros((T, prefix_len + T), dtype=np.uint8)
    m[:, :prefix_len] = 1
    for i in range(T):
        k = i
        while k >= 0:
            m[i, prefix_len + k] = 1
            k = parents[k]
    return m


def bf16_bits(rng, shape):
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def make_steps(rng, num_steps, num_slots, padded):
    """Requests that persist across steps; each step: B rows (+1 padded row on odd steps)."""
    free = list(rng.permutation(np.arange(1, num_slots)))
    contexts = {rid: [free.pop() for _ in range(int(rng.integers(0, 30)))] for rid in (11, 12, 13)}
    steps = []
    for s in range(num_steps):
        reqs, rejected = [], []
        for rid, ctx in contexts.items():
            T = int(rng.integers(1, 9))
            parents = random_tree(rng, T)
            tree_slots = [free.pop() for _ in range(T)]
            # accepted: a root path of random length
            path = [0]
            while True:
                kids = [i for i in range(T) if parents[i] == path[-1]]
                if not kids or rng.random() < 0.3:
                    break
                path.append(kids[int(rng.integers(0, len(kids)))])
            reqs.append(dict(id=rid, prefix_slots=list(ctx), parent=parents.tolist(), tree_slots=tree_slots,
                             accepted=len(path)))
            ctx.extend(tree_slots[n] for n in path)
            rejected.extend(tree_slots[n] for n in range(T) if n not in path)
        free[:0] = rejected  # freed after the whole step is verified, reused last
        steps.append(dict(requests=reqs, padded=padded and s % 2 == 1))
    return steps


def sglang_arrays(step):
    """The buffers a Triton-backend verify sees: padded rows have P = T = 0; kv_indices has spare capacity."""
    reqs = step["requests"]
    P = [len(r["prefix_slots"]) for r in reqs]
    T = [len(r["parent"]) for r in reqs]
    if step["padded"]:
        P.append(0)
        T.append(0)
    kv_indptr = np.concatenate([[0], np.cumsum(P)]).astype(np.int32)
    qo_indptr = np.concatenate([[0], np.cumsum(T)]).astype(np.int64)
    kv_indices = np.array(sum((r["prefix_slots"] for r in reqs), []) + [0] * 5, dtype=np.int64)  # + capacity
    out_cache_loc = np.array(sum((r["tree_slots"] for r in reqs), []), dtype=np.int64)
    parents = np.array(sum((r["parent"] for r in reqs), []), dtype=np.int32)
    return kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents


def expected_full(step):
    reqs = step["requests"]
    masks = [full_mask(np.array(r["parent"]), len(r["prefix_slots"])).reshape(-1) for r in reqs]
    sizes = [m.size for m in masks]
    return dict(
        kv_indptr=np.concatenate([[0], np.cumsum([len(r["prefix_slots"]) for r in reqs])]).tolist(),
        kv_indices=sum((r["prefix_slots"] for r in reqs), []),
        qo_indptr=np.concatenate([[0], np.cumsum([len(r["parent"]) for r in reqs])]).tolist(),
        out_cache_loc=sum((r["tree_slots"] for r in reqs), []),
        custom_mask=np.concatenate(masks).tolist() if masks else [],
        mask_indptr=np.concatenate([[0], np.cumsum(sizes)]).tolist())


def plain(x):
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [plain(v) for v in x]
    if isinstance(x, np.integer):
        return int(x)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recorder", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.recorder)
    from trace_recorder import TraceRecorder, mask_to_parents

    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(2024)
    num_slots = 400

    # Trace 1: metadata only; the tree given as parents, as a full mask and as a QLEN_ONLY mask.
    steps = make_steps(rng, 6, num_slots, padded=True)
    path = os.path.join(args.out, "recorded.h5")
    with TraceRecorder(path, num_heads=8, num_slots=num_slots, source="recorder test") as rec:
        for s, step in enumerate(steps):
            kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(step)
            ids = [r["id"] for r in step["requests"]] + ([99] if step["padded"] else [])
            acc = [r["accepted"] for r in step["requests"]] + ([1] if step["padded"] else [])
            how = s % 3
            if how == 0:
                rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, request_ids=ids,
                             accepted=acc)
            else:
                layout = "full" if how == 1 else "tree"
                reqs = step["requests"] + ([dict(prefix_slots=[], parent=[])] if step["padded"] else [])
                masks = [full_mask(np.array(r["parent"], dtype=np.int32), len(r["prefix_slots"]) if layout == "full" else 0)
                         for r in reqs]
                mask = np.concatenate([m.reshape(-1) for m in masks])
                if how == 1:
                    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, custom_mask=mask, mask_layout=layout,
                                 request_ids=ids, accepted=acc)
                else:  # accepted lengths known only after verification
                    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, custom_mask=mask, mask_layout=layout,
                                 request_ids=ids)
                    rec.set_accepted(acc)

    # Trace 2: with values (q, out, and the pool rows each step reads).
    vsteps = make_steps(rng, 2, num_slots, padded=False)
    H = 2
    pool = bf16_bits(rng, (num_slots, 576))
    vpath = os.path.join(args.out, "recorded_values.h5")
    q_all, out_all = [], []
    with TraceRecorder(vpath, num_heads=H, num_slots=num_slots, sm_scale=0.1, source="recorder values") as rec:
        for step in vsteps:
            kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(step)
            n = int(qo_indptr[-1])
            q = bf16_bits(rng, (n, H, 576))
            out = bf16_bits(rng, (n, H, 512))
            q_all.append(q)
            out_all.append(out)
            rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, q=q, out=out, kv_pool=pool,
                         request_ids=[r["id"] for r in step["requests"]])
    referenced = sorted({s for st in vsteps for r in st["requests"] for s in r["prefix_slots"] + r["tree_slots"]})

    # The recorder refuses what it cannot record faithfully.
    bad = full_mask(np.array([-1, 0, 1]), 2)
    bad[2, 2 + 0] = 0  # node 2 no longer sees the root: not self + ancestors
    try:
        mask_to_parents(bad.reshape(-1), [0], [2], [3], "full")
        sys.exit("mask_to_parents accepted a mask that is not a tree")
    except ValueError:
        pass
    rec = TraceRecorder(os.path.join(args.out, "never.h5"), num_heads=H, num_slots=num_slots)
    kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(vsteps[0])
    n = int(qo_indptr[-1])
    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, q=bf16_bits(rng, (n, H, 576)),
                 kv_pool=pool)
    changed = pool.copy()
    changed[int(kv_indices[0])] ^= 1
    try:
        rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents,
                     q=bf16_bits(rng, (n, H, 576)), kv_pool=changed)
        sys.exit("recorder accepted a pool slot that changed between steps")
    except ValueError:
        pass

    expected = dict(
        traces=[
            dict(file="recorded.h5", num_heads=8, num_slots=num_slots, source="recorder test",
                 steps=[dict(requests=st["requests"], full=expected_full(st)) for st in steps]),
            dict(file="recorded_values.h5", num_heads=H, num_slots=num_slots, source="recorder values",
                 steps=[dict(requests=st["requests"], full=expected_full(st)) for st in vsteps],
                 q=np.concatenate(q_all).reshape(-1).tolist(), out=np.concatenate(out_all).reshape(-1).tolist(),
                 kv_rows={str(s): pool[s].tolist() for s in referenced}),
        ])
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(plain(expected), f)
    print(f"wrote {path}, {vpath} and expected.json")


if __name__ == "__main__":
    main()
