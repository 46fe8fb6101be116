#!/usr/bin/env python3
"""Plain PyTorch gather + bmm reference for tree-verify attention (absorbed MLA), timed like
`canopy run` in graph mode with l2_flush: CUDA graph replay, L2 flushed before every sample, median /
p10 / p90 with Canopy's one quantile definition.

Per batch: K = pool[slots] (B, P+T, 576) gathered once, S = Q K^T in bf16 (cuBLAS), tree mask on the
last T columns, softmax in fp32, O = softmax(S) V with V = K[..., :512]. Shapes as in the CUDA sweep
(every request of a batch has the same P and T, experiments/configs/cuda-kernels.toml). Numbers
from an H200 are an sm_90 proxy.

  torch_reference.py [--batches 1,8] [--trees 17,33,65] [--prefixes 4096,...] [--out torch.jsonl]
  torch_reference.py --merge results.json torch.jsonl   # canopy run's results vs this reference
"""
import argparse
import json
import math
import os
import sys


def quantile(sorted_samples, q):
    """Canopy's one quantile definition (core/canopy_Statistics.hpp): linear between the closest
    ranks at position q (n - 1), numpy's default."""
    pos = q * (len(sorted_samples) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (pos - lo) * (sorted_samples[hi] - sorted_samples[lo])

def target_label():
    """How numbers from this GPU are labelled: a proxy for the sm_120 target unless it is sm_120."""
    import torch
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    return name if (major, minor) == (12, 0) else "%s (sm_%d%d) proxy for the sm_120 target" % (name, major, minor)

def draft_tree(size, seed):
    """A DDTree-like tree: a spine (top-1 path) plus side branches, parent[i] < i."""
    import random
    rng = random.Random(seed)
    if size <= 0:
        return []
    parent = [-1]
    spine = min(size, max(1, min(16, size // 2 + 1)))
    parent += list(range(0, spine - 1))
    depth = list(range(spine))
    while len(parent) < size:
        n = len(parent)
        p = rng.randrange(n) if rng.random() < 0.3 else min(spine - 1, rng.randrange(spine) // 2 + rng.randrange(2))
        if depth[p] >= 15:
            p = 0
        parent.append(p)
        depth.append(depth[p] + 1)
    return parent


def visibility(parent, torch, device):
    """T x T bool: node i sees node j when j is i or an ancestor of i."""
    T = len(parent)
    vis = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        k = i
        while k >= 0:
            vis[i, k] = True
            k = parent[k]
    return vis.to(device)


def fragmented_slots(need, torch, device, seed):
    """Slots from a pool 1.25x the rows needed, handed out in shuffled runs of 16."""
    num_slots = need + need // 4 + 16
    runs = (num_slots + 15) // 16
    g = torch.Generator(device="cpu").manual_seed(seed)
    order = torch.randperm(runs, generator=g)
    slots = (order[:, None] * 16 + torch.arange(16)[None, :]).reshape(-1)
    slots = slots[slots < num_slots][:need]
    return slots.to(device), num_slots


def bench_shape(torch, B, T, P, H, samples, warmup, flush_buf):
    dev = "cuda"
    need = B * (P + T)
    slots, num_slots = fragmented_slots(need, torch, dev, 1000 + B * 131 + T * 7 + P)
    gen = torch.Generator(device=dev).manual_seed(42 + P + T)
    pool = (torch.rand(num_slots, 576, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
    q = (torch.rand(B, T * H, 576, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
    idx = slots.view(B, P + T)  # prefix then tree slots of each request
    vis = torch.stack([visibility(draft_tree(T, 7919 * (b + 1)), torch, dev) for b in range(B)])  # (B, T, T)
    tree_mask = vis.repeat_interleave(H, dim=1)  # (B, T*H, T): row = node * H + head
    scale = 1.0 / math.sqrt(192.0)
    out = torch.empty(B, T * H, 512, device=dev, dtype=torch.bfloat16)

    def forward():
        k = pool[idx]                                   # gather (B, P+T, 576)
        s = torch.bmm(q, k.transpose(1, 2)).float() * scale   # (B, T*H, P+T)
        s[:, :, P:].masked_fill_(~tree_mask, float("-inf"))
        p = torch.softmax(s, dim=-1).to(torch.bfloat16)
        out.copy_(torch.bmm(p, k[:, :, :512]))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    for _ in range(warmup):
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for i in range(samples):
        if flush_buf is not None:
            flush_buf.fill_(i & 0xFF)
        starts[i].record()
        graph.replay()
        stops[i].record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in zip(starts, stops))
    rank = lambda f: quantile(ms, f)
    finite = bool(torch.isfinite(out.float()).all().item())
    del graph
    return {"design": "torch-gather-bmm", "B": B, "T": T, "P": P, "H": H, "median_us": rank(0.5) * 1e3,
            "p10_us": rank(0.1) * 1e3, "p90_us": rank(0.9) * 1e3, "samples": samples, "finite": finite,
            "torch": torch.__version__, "device": target_label()}


def run(args):
    import torch
    if not torch.cuda.is_available():
        print("SKIP: torch_reference needs a CUDA device")
        return 0
    ints = lambda s: [int(x) for x in s.split(",") if x]
    batches, trees, prefixes = ints(args.batches), ints(args.trees), ints(args.prefixes)
    if args.smoke:
        batches, trees, prefixes, args.samples = [1], [17], [256], 3
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    rows = []
    for B in batches:
        for T in trees:
            for P in prefixes:
                r = bench_shape(torch, B, T, P, args.heads, args.samples, args.warmup, flush_buf)
                rows.append(r)
                print("| torch | B=%d T=%2d P=%6d | %10.1f us [%10.1f, %10.1f] | finite=%s |" %
                      (B, T, P, r["median_us"], r["p10_us"], r["p90_us"], r["finite"]), flush=True)
                torch.cuda.empty_cache()
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, args.out)
    return 0 if all(r["finite"] for r in rows) else 1


def shape_of(row):
    """(B, T, P) of a synthetic shape's row (its axis fields); None for a trace, whose requests vary."""
    if row.get("trace"):
        return None
    return row["batch"], row["tree"], row["prefix"]


def merge(results_path, torch_path):
    """Markdown table: the CUDA designs of one `canopy run` (results.json, e.g. of
    experiments/configs/cuda-kernels.toml) against the PyTorch reference and cuda-flat, per shape.
    Only rows with the full mask, the persistent workspace and status ok count; `splits` is the prefix
    splits cuda-sm120 ran with (docs/experiments.md)."""
    with open(results_path) as f:
        results = json.load(f)
    ref = [json.loads(l) for l in open(torch_path) if l.strip()]
    torch_us = {(r["B"], r["T"], r["P"]): r["median_us"] for r in ref}
    by = {}
    for r in results["rows"]:
        key = shape_of(r)
        if key and r["status"] == "ok" and r["mask"] == "full" and r["workspace"] == "persistent":
            by.setdefault(key, {})[r["design"]] = r
    nan = float("nan")
    print("| B | T | P | splits | cuda-sm120 us | % of bound | % of mma.sync bound | TFLOP/s | bf16-partials us | "
          "cuda-sm120-w32 us | cuda-flat us | torch us | x torch | x flat |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in sorted(by):
        d = by[k]
        s = d.get("cuda-sm120")
        if not s:
            continue
        us = lambda name: d[name]["median_s"] * 1e6 if name in d else nan
        pct = lambda x: "%.1f%%" % (100 * x) if x > 0 else "-"
        su, tu = us("cuda-sm120"), torch_us.get(k, nan)
        print("| %d | %d | %d | %d | %.1f | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1fx | %.1fx |" %
              (k[0], k[1], k[2], s["splits"], su, pct(s["roofline_fraction"]),
               pct(s["mma_roofline_fraction"]), s["tflops"], us("cuda-sm120-bf16p"), us("cuda-sm120-w32"),
               us("cuda-flat"), tu, tu / su, us("cuda-flat") / su))
    print("\n%s; %s" % (results["environment"].get("device", "device unknown"),
                        results["environment"].get("peaks", "peaks unknown")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--trees", default="17,33,65")
    ap.add_argument("--prefixes", default="4096,16384,65536,131072")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--merge", nargs=2, metavar=("RESULTS_JSON", "TORCH_JSONL"))
    args = ap.parse_args()
    if args.merge:
        merge(*args.merge)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
