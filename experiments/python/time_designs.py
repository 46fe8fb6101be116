#!/usr/bin/env python3
"""Times every runnable CUDA design of the build, a plain PyTorch reference and (where importable)
SGLang's Triton extend kernel in one process, on the same torch tensors, each replayed from a CUDA
graph (docs/python.md). Numbers from a GPU other than sm_120 are a proxy for the sm_120 target.

  PYTHONPATH=build/full/python experiments/python/time_designs.py --batch 8 --tree 33 --prefix 4096
"""
import argparse
import math
import sys

import numpy as np
import torch

import canopy
from canopy.problems import D_V, metadata, random_problem


def median_us(fn, samples, warmup):
    """Median of CUDA-event times (us) of graph replays of fn, after eager warm-up and one capture."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(1000.0 * start.elapsed_time(end))
    return float(np.median(times))


def torch_reference(t, p, out):
    """Gather + bmm per request (requests of equal P and T): S = Q K^T, tree mask, softmax in fp32, O = P V."""
    B = len(p["qo_indptr"]) - 1
    P = int(p["kv_indptr"][1]) if B else 0
    T = int(p["qo_indptr"][1]) if B else 0
    H = p["heads"]
    slots = torch.cat([t["kv_indices"].view(B, P), t["out_cache_loc"].view(B, T)], dim=1)  # [B, P+T]
    visible = torch.from_numpy(p["custom_mask"].reshape(B, T, T).astype(bool)).cuda()     # tree layout

    def forward():
        k = t["kv_pool"][slots]                                       # [B, P+T, 576]
        q = t["q"].view(B, T * H, -1)                                 # [B, T*H, 576]
        s = torch.bmm(q, k.transpose(1, 2)).float() * p["sm_scale"]   # [B, T*H, P+T]
        s = s.view(B, T, H, P + T)
        s[..., P:].masked_fill_(~visible[:, :, None, :], -math.inf)
        w = torch.softmax(s, dim=-1).to(torch.bfloat16).view(B, T * H, P + T)
        out.view(B, T * H, D_V).copy_(torch.bmm(w, k[..., :D_V]))
    return forward


def sglang_triton(t, p, out):
    """SGLang's Triton extend kernel on the same buffers, or None when SGLang is not importable."""
    try:
        from sglang.srt.layers.attention.triton_ops.extend_attention import extend_attention_fwd
    except Exception as e:  # not installed, or a version without this entry point
        print(f"SGLang Triton: skipped ({e})", file=sys.stderr)
        return None
    B, T = len(p["qo_indptr"]) - 1, int(p["qo_indptr"][1])
    kv = t["kv_pool"].view(-1, 1, 576)
    q = t["q"]

    def forward():
        extend_attention_fwd(q, kv[t["out_cache_loc"]], kv[t["out_cache_loc"]][..., :D_V], out,
                             kv, kv[..., :D_V], t["qo_indptr"].int(), t["kv_indptr"], t["kv_indices"],
                             t["custom_mask"], True, t["mask_indptr"], T, sm_scale=p["sm_scale"])
    return forward


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tree", type=int, default=33)
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    p = random_problem(seed=1, heads=args.heads, mask="tree", sizes=[(args.prefix, args.tree)] * args.batch)
    t = {k: None if v is None else torch.from_numpy(v.view(np.int16) if v.dtype == np.uint16 else v).cuda()
         for k, v in list(metadata(p).items()) + [("q", p["q"]), ("kv_pool", p["kv_pool"])]}
    t["q"], t["kv_pool"] = t["q"].view(torch.bfloat16), t["kv_pool"].view(torch.bfloat16)
    out = torch.empty((p["q"].shape[0], args.heads, D_V), dtype=torch.bfloat16, device="cuda")
    major, minor = torch.cuda.get_device_capability()
    print(f"{torch.cuda.get_device_name()} (sm_{major}{minor}); B={args.batch} T={args.tree} P={args.prefix} "
          f"H={args.heads}, tree mask, median of {args.samples} graph replays\n")
    print("| kernel | path | median us |\n|---|---|---|")
    bufs = dict(t)
    q, kv_pool = bufs.pop("q"), bufs.pop("kv_pool")
    for d in canopy.designs():
        if d["memory"] != "cuda" or not d["runnable"] or d["experimental"]:
            continue
        try:
            plan = canopy.Plan(d["name"], heads=args.heads, max_batch=args.batch, max_nodes=q.shape[0],
                               max_prefix=args.prefix, max_tree=args.tree, mask="tree")
        except canopy.UnsupportedError as e:
            print(f"| {d['name']} | unsupported: {e} | |")
            continue
        stream = lambda: torch.cuda.current_stream().cuda_stream  # the capture stream inside torch.cuda.graph
        us = median_us(lambda: plan.run(q, kv_pool, out, **bufs, sm_scale=p["sm_scale"], stream=stream()),
                       args.samples, args.warmup)
        print(f"| {d['name']} | {plan.describe()['path']} | {us:.1f} |")
    print(f"| pytorch | gather + bmm | {median_us(torch_reference(t, p, out), args.samples, args.warmup):.1f} |")
    triton = sglang_triton(t, p, out)
    if triton is not None:
        print(f"| sglang-triton | extend_attention_fwd | {median_us(triton, args.samples, args.warmup):.1f} |")


if __name__ == "__main__":
    main()
