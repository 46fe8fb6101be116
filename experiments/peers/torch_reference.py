#!/usr/bin/env python3
"""Plain PyTorch gather + bmm reference for tree-verify attention (absorbed MLA), timed like
`canopy run` in graph mode with l2_flush: CUDA graph replay, L2 flushed before every sample, median /
p10 / p90 with Canopy's one quantile definition.

Per batch: K = pool[slots] (B, P+T, 576) gathered once, S = Q K^T in bf16 (cuBLAS), tree mask on the
last T columns, softmax in fp32, O = softmax(S) V with V = K[..., :512]. Shapes as in the CUDA sweep
(every request of a batch has the same P and T, experiments/configs/cuda-kernels.toml). Numbers
from an H200 are an sm_90 proxy.

FP8 KV caches (docs/design.md §8): with --kv-dtypes the pool is stored as a serving stack writes it
(fp8-e4m3 / fp8-e5m2: SGLang's (x / k_scale).to(fp8) bytes, one --kv-scale; fp8-e4m3-blockscaled:
DeepSeek V3.2's 656-byte rows, four power-of-two scales per row, bf16 rope) and the gathered rows are
dequantised to bf16 (the bytes viewed as torch.float8_*, times their scale) before the same bmm:
dequant numerics, and the dequantisation of the rows a step reads is inside its time.

  torch_reference.py [--batches 1,8] [--trees 17,33,65] [--prefixes 4096,...] [--kv-dtypes bf16,fp8-e4m3]
                     [--kv-scale 1.0] [--out torch.jsonl]
  torch_reference.py --config experiments/configs/fp8.toml --out torch.jsonl   # a config's sweep shapes and dtypes
  torch_reference.py --merge results.json torch.jsonl   # canopy run's results vs this reference
Exit codes: 0 every shape ran with finite outputs within the check, 1 otherwise, 2 bad arguments.
"""
import argparse
import json
import math
import os
import sys

KV_DTYPES = ("bf16", "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-blockscaled")
KV_ROW_BYTES = {"bf16": 1152, "fp8-e4m3": 576, "fp8-e5m2": 576, "fp8-e4m3-blockscaled": 656}
FP8_E4M3_MAX = 448.0
WHAT = ("the whole verify step in plain PyTorch (gather, bmm, tree mask, softmax, bmm); an FP8 pool's "
        "gathered rows are dequantised to bf16 inside the time")
CHECK_ROWS = 64        # output rows of the first request checked against an fp64 reference
CHECK_REL_L2 = 2e-2    # bf16 products and P: Canopy's per-row bound (docs/experiments.md, "Checks")


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


def check_kv(kv_dtype, kv_scale, where="--kv-dtypes"):
    """A KV dtype and scale as Canopy's config keys take them; ValueError naming \p where otherwise."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError("%s: unknown kv dtype '%s' (expected one of %s)" % (where, kv_dtype, ", ".join(KV_DTYPES)))
    if not (isinstance(kv_scale, (int, float)) and not isinstance(kv_scale, bool) and math.isfinite(kv_scale)
            and kv_scale > 0):
        raise ValueError("%s: kv_scale must be a finite number > 0, got %r" % (where, kv_scale))


def fp8_type(torch, kv_dtype):
    return torch.float8_e5m2 if kv_dtype == "fp8-e5m2" else torch.float8_e4m3fn


def quantise_pool(torch, pool, kv_dtype, kv_scale=1.0):
    """The pool as the serving stack stores it (Canopy's quantisePool): bf16 as is; fp8-e4m3 /
    fp8-e5m2 the uint8 bytes of (x / k_scale).to(fp8), no clamp (SGLang); fp8-e4m3-blockscaled one
    656-byte row per slot: 512 e4m3 bytes of x / s per 128 values, the four fp32 scales
    s = 2^ceil(log2(amax / 448)) (1 for an all-zero block), the 64 bf16 rope values (DeepSeek V3.2)."""
    check_kv(kv_dtype, kv_scale)
    if kv_dtype == "bf16":
        return pool
    x = pool.float()
    if kv_dtype != "fp8-e4m3-blockscaled":
        return (x / kv_scale).to(fp8_type(torch, kv_dtype)).view(torch.uint8)
    n = pool.shape[0]
    latent = x[:, :512].reshape(n, 4, 128)
    ratio = latent.abs().amax(dim=-1) / FP8_E4M3_MAX
    mant, exp = torch.frexp(ratio)  # ratio = mant * 2^exp, mant in [0.5, 1): a power of two needs exp - 1
    scale = torch.ldexp(torch.ones_like(ratio), torch.where(mant == 0.5, exp - 1, exp))
    scale = torch.where(ratio > 0, scale, torch.ones_like(scale))
    codes = (latent / scale[..., None]).to(torch.float8_e4m3fn).view(torch.uint8).reshape(n, 512)
    scale_bytes = scale.to(torch.float32).contiguous().view(torch.uint8).reshape(n, 16)
    rope_bytes = pool[:, 512:].contiguous().view(torch.uint8).reshape(n, 128)
    return torch.cat([codes, scale_bytes, rope_bytes], dim=1)


def dequantise_rows(torch, rows, kv_dtype, kv_scale=1.0):
    """bf16 K/V rows [..., 576] from pool rows as stored (quantise_pool's layout): what the products
    see in dequant numerics. The rope part of a block-scaled row is its own bf16."""
    if kv_dtype == "bf16":
        return rows
    if kv_dtype != "fp8-e4m3-blockscaled":
        return (rows.view(fp8_type(torch, kv_dtype)).float() * kv_scale).to(torch.bfloat16)
    latent = rows[..., :512].view(torch.float8_e4m3fn).float().unflatten(-1, (4, 128))
    scales = rows[..., 512:528].view(torch.float32)
    latent = (latent * scales[..., None]).flatten(-2).to(torch.bfloat16)
    return torch.cat([latent, rows[..., 528:].view(torch.bfloat16)], dim=-1)


def make_step(torch, B, T, P, H, dev, kv_dtype="bf16", kv_scale=1.0):
    """Seeded inputs of one (B, T, P) step and its forward(): gather the stored rows, dequantise them
    (FP8), S = Q K^T, tree mask, softmax, O = P V, into the returned output buffer."""
    need = B * (P + T)
    slots, num_slots = fragmented_slots(need, torch, dev, 1000 + B * 131 + T * 7 + P)
    gen = torch.Generator(device=dev).manual_seed(42 + P + T)
    pool = (torch.rand(num_slots, 576, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
    q = (torch.rand(B, T * H, 576, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
    stored = quantise_pool(torch, pool, kv_dtype, kv_scale)
    idx = slots.view(B, P + T)  # prefix then tree slots of each request
    vis = torch.stack([visibility(draft_tree(T, 7919 * (b + 1)), torch, dev) for b in range(B)])  # (B, T, T)
    tree_mask = vis.repeat_interleave(H, dim=1)  # (B, T*H, T): row = node * H + head
    scale = 1.0 / math.sqrt(192.0)
    out = torch.empty(B, T * H, 512, device=dev, dtype=torch.bfloat16)

    def forward():
        k = dequantise_rows(torch, stored[idx], kv_dtype, kv_scale)  # gather (B, P+T, 576), then bf16
        s = torch.bmm(q, k.transpose(1, 2)).float() * scale   # (B, T*H, P+T)
        s[:, :, P:].masked_fill_(~tree_mask, float("-inf"))
        p = torch.softmax(s, dim=-1).to(torch.bfloat16)
        out.copy_(torch.bmm(p, k[:, :, :512]))

    step = {"q": q, "stored": stored, "idx": idx, "tree_mask": tree_mask, "scale": scale, "out": out, "P": P}
    return step, forward


def reference_rows(torch, step, kv_dtype, kv_scale, rows=CHECK_ROWS):
    """fp64 output of the first request's first \p rows (node, head) rows, from the exactly
    dequantised pool (fp8 codes and power-of-two or float scales are exact in fp64 products)."""
    P = step["P"]
    rows_stored = step["stored"][step["idx"][0]]
    if kv_dtype in ("fp8-e4m3", "fp8-e5m2"):  # decode * scale in fp64, before the forward's bf16 rounding
        k = rows_stored.view(fp8_type(torch, kv_dtype)).double() * kv_scale
    else:  # bf16, or e4m3 codes times powers of two and bf16 rope: exact in bf16 already
        k = dequantise_rows(torch, rows_stored, kv_dtype, kv_scale).double()
    n = min(rows, step["q"].shape[1])
    s = step["q"][0, :n].double() @ k.T * step["scale"]
    s[:, P:].masked_fill_(~step["tree_mask"][0, :n], float("-inf"))
    return torch.softmax(s, dim=-1) @ k[:, :512], n


def check_step(torch, step, kv_dtype, kv_scale):
    """Relative L2 error of the first request's first rows against reference_rows (worst row)."""
    ref, n = reference_rows(torch, step, kv_dtype, kv_scale)
    got = step["out"][0, :n].double()
    err = (got - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-300)
    return float(err.max().item())


def bench_shape(torch, B, T, P, H, samples, warmup, flush_buf, kv_dtype="bf16", kv_scale=1.0):
    dev = "cuda"
    step, forward = make_step(torch, B, T, P, H, dev, kv_dtype, kv_scale)
    out = step["out"]

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
    rel_l2 = check_step(torch, step, kv_dtype, kv_scale)
    del graph
    return {"design": "torch-gather-bmm", "B": B, "T": T, "P": P, "H": H, "median_us": rank(0.5) * 1e3,
            "p10_us": rank(0.1) * 1e3, "p90_us": rank(0.9) * 1e3, "samples": samples, "finite": finite,
            "kv_dtype": kv_dtype, "kv_scale": kv_scale if kv_dtype in ("fp8-e4m3", "fp8-e5m2") else 1.0,
            "numerics": "dequant", "kv_bytes": B * (P + T) * KV_ROW_BYTES[kv_dtype],
            "max_row_rel_l2_error": rel_l2, "check": "ok" if finite and rel_l2 <= CHECK_REL_L2 else "FAILED",
            "what": WHAT, "torch": torch.__version__, "device": target_label()}


def config_grid(path):
    """[(B, H, T, P, kv_dtype, kv_scale)] of a canopy run config's [[inputs.sweep]] tables, with the
    dtypes and scales the config gives them ([inputs] kv_dtype / kv_scale unless a sweep sets its
    own). ValueError naming the file and key for what the peer cannot run."""
    import tomllib
    with open(path, "rb") as f:
        try:
            cfg = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError("%s: not valid TOML (%s)" % (path, e))
    inputs = cfg.get("inputs", {})
    as_list = lambda v: v if isinstance(v, list) else [v]  # noqa: E731
    dtypes = as_list(inputs.get("kv_dtype", ["bf16"]))
    scale = inputs.get("kv_scale", 1.0)
    sweeps = inputs.get("sweep", [])
    if not sweeps:
        raise ValueError("%s: inputs.sweep: the peer times synthetic shapes only, and the config has none" % path)
    grid = []
    for i, sw in enumerate(sweeps):
        where = "%s: inputs.sweep[%d]" % (path, i)
        if sw.get("ragged"):
            raise ValueError("%s.ragged: the peer times equal requests only" % where)
        sw_dtypes = as_list(sw.get("kv_dtype", dtypes))
        sw_scale = sw.get("kv_scale", scale)
        for d in sw_dtypes:
            check_kv(d, sw_scale, where + ".kv_dtype / kv_scale")
        for B in as_list(sw.get("batch", [1])):
            for H in as_list(sw.get("heads", [8])):
                for T in as_list(sw.get("tree", [33])):
                    for P in as_list(sw.get("prefix", [4096])):
                        for d in sw_dtypes:
                            grid.append((B, H, T, P, d, sw_scale))
    return grid


def run(args):
    try:
        import torch
    except ImportError:
        print("SKIP: torch_reference needs torch with a CUDA device")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: torch_reference needs a CUDA device")
        return 0
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    rows, too_big = [], 0
    for B, H, T, P, kv_dtype, kv_scale in args.grid:
        try:
            r = bench_shape(torch, B, T, P, H, args.samples, args.warmup, flush_buf, kv_dtype, kv_scale)
        except torch.cuda.OutOfMemoryError:  # the dense scores of the largest shapes: a result, not a crash
            too_big += 1
            print("| torch | B=%d T=%2d P=%6d %s | out of memory: no row |" % (B, T, P, kv_dtype), flush=True)
            torch.cuda.empty_cache()
            continue
        rows.append(r)
        print("| torch | B=%d T=%2d P=%6d %s | %10.1f us [%10.1f, %10.1f] | finite=%s | row rel-L2 %.1e |" %
              (B, T, P, kv_dtype, r["median_us"], r["p10_us"], r["p90_us"], r["finite"],
               r["max_row_rel_l2_error"]), flush=True)
        torch.cuda.empty_cache()
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, args.out)
    return 0 if not too_big and all(r["check"] == "ok" for r in rows) else 1


def grid_of(args):
    """[(B, H, T, P, kv_dtype, kv_scale)] from --config or the shape flags; ValueError when bad."""
    if args.config:
        return config_grid(args.config)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    try:
        batches, trees, prefixes = ints(args.batches), ints(args.trees), ints(args.prefixes)
    except ValueError as e:
        raise ValueError("--batches, --trees and --prefixes take comma-separated integers (%s)" % e)
    dtypes = [d for d in args.kv_dtypes.split(",") if d]
    for d in dtypes:
        check_kv(d, args.kv_scale)
    if args.smoke:
        batches, trees, prefixes, args.samples = [1], [17], [256], 3
    return [(B, args.heads, T, P, d, args.kv_scale) for B in batches for T in trees for P in prefixes for d in dtypes]


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
    # bf16 rows only: the table compares the kernels of the bf16 sweep (FP8: peer_merge.py, plot.py)
    torch_us = {(r["B"], r["T"], r["P"]): r["median_us"] for r in ref if r.get("kv_dtype", "bf16") == "bf16"}
    by = {}
    for r in results["rows"]:
        key = shape_of(r)
        if key and r["status"] == "ok" and r["mask"] == "full" and r["workspace"] == "persistent" and \
                r.get("kv_dtype", "bf16") == "bf16":
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
    ap.add_argument("--kv-dtypes", default="bf16", help="comma list of %s" % ", ".join(KV_DTYPES))
    ap.add_argument("--kv-scale", type=float, default=1.0, help="the scale of fp8-e4m3 / fp8-e5m2 (SGLang's k_scale)")
    ap.add_argument("--config", default="", help="a canopy run config: its sweeps' shapes, kv_dtype and kv_scale")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--merge", nargs=2, metavar=("RESULTS_JSON", "TORCH_JSONL"))
    args = ap.parse_args()
    if args.merge:
        merge(*args.merge)
        return 0
    try:
        args.grid = grid_of(args)
    except (ValueError, OSError) as e:
        print("torch_reference: %s" % e, file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
