#!/usr/bin/env python3
"""Join a `canopy run`'s results.json with the rows of one or more peers (JSON lines, one row per
shape: design, B, T, P, H, median_us, p10_us, p90_us; written by experiments/peers/flashmla_peer
or experiments/peers/torch_reference.py) into one Markdown table per shape (B, H, T, P) and KV dtype.

The first peer is the reference: every other column gets its ratio to it (time / reference time;
below 1 is faster). A peer row's own `what` says what it times: FlashMLA's rows time the prefix part
only (non-causal, every tree node against the whole prefix), while a Canopy design's row is the whole
verify step (prefix, tree part and their merge), so "cuda-sm90 / flashmla-dense" compares a whole step
against a prefix part.

  peer_merge.py RESULTS_JSON PEER_JSONL [PEER_JSONL ...] [--designs cuda-sm90,cuda-sm120]
                [--mask tree] [--nsplit 0] [--workspace persistent] [--numerics dequant]
                [--results-out MERGED.json]

Only rows of synthetic shapes (no trace) with status ok, graph mode and the L2 flushed count.
A design with more than one row for a shape (several masks, nsplit values, workspaces or numerics
in the run) is refused (exit 2) until --mask / --nsplit / --workspace / --numerics pick one. Rows
and peer rows without a kv_dtype are bf16; a KV dtype column appears when one is not.
--results-out writes RESULTS_JSON with every peer's rows added as rows of their own design (the
fields a peer has: shape, KV dtype, numerics, times, status from its finite/check fields), which
experiments/plot.py draws beside the run's designs. Needs no GPU and no torch.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from plots.data import Run, ceilings  # noqa: E402  (the one reader of a run's ceilings)


def load_peer(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise SystemExit("peer_merge: %s line %d: not JSON (%s)" % (path, n, e))
            for k in ("design", "B", "T", "P", "median_us"):
                if k not in r:
                    raise SystemExit("peer_merge: %s line %d: no field '%s'" % (path, n, k))
            rows.append(r)
    if not rows:
        raise SystemExit("peer_merge: %s holds no rows" % path)
    return rows


def peer_result_row(r):
    """A peer's JSON line as a results.json row: the fields it has, named as canopy run names them."""
    us = lambda k: float(r[k]) * 1e-6 if k in r else 0.0  # noqa: E731
    ok = r.get("finite", True) and r.get("check", "ok") == "ok"
    H = r.get("H", 8)
    return {"design": r["design"], "group": "all", "trace": "", "batch": r["B"], "heads": H, "tree": r["T"],
            "prefix": r["P"], "ragged": False, "compacted": False, "values": "random", "recorded_values": False,
            "kv_dtype": r.get("kv_dtype", "bf16"), "kv_scale": r.get("kv_scale", 1.0),
            "path": r["design"], "mode": "graph", "l2_flush": True, "numerics": r.get("numerics", "dequant"),
            "status": "ok" if ok else "FAILED", "note": "; ".join(x for x in (r.get("what", ""), r.get("device", "")) if x),
            "device": r.get("device", ""), "steps": 1, "samples": r.get("samples", 0), "median_s": us("median_us"),
            "p10_s": us("p10_us"), "p90_s": us("p90_us"), "total_median_s": us("median_us"),
            "flops": r.get("flops", 2.0 * r["B"] * H * r["T"] * (r["P"] + r["T"]) * (576 + 512)),
            "kv_bytes": r.get("kv_bytes", 0)}


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("peers", nargs="+")
    ap.add_argument("--designs", default="", help="comma list of Canopy designs (default: every design of the run)")
    ap.add_argument("--mask", default="", help="only rows of this mask (tree, full, parents)")
    ap.add_argument("--nsplit", type=int, default=None, help="only rows of this nsplit (0 = auto)")
    ap.add_argument("--workspace", default="persistent", help="only rows of this workspace ('' = any)")
    ap.add_argument("--numerics", default="", help="only rows of this numerics (dequant, fp8-mma; '' = any)")
    ap.add_argument("--results-out", default="", help="write the results with the peers' rows added here")
    args = ap.parse_args()

    with open(args.results) as f:
        results = json.load(f)
    env = results.get("environment", {})
    peers = [load_peer(p) for p in args.peers]

    by = {}      # (B, H, T, P) -> design -> row
    order = []   # designs in run order
    for r in results.get("rows", []):
        if r.get("trace") or r.get("status") != "ok" or r.get("mode") != "graph" or not r.get("l2_flush"):
            continue
        if args.mask and r.get("mask") != args.mask:
            continue
        if args.nsplit is not None and r.get("nsplit") != args.nsplit:
            continue
        if args.workspace and r.get("workspace") != args.workspace:
            continue
        if args.numerics and r.get("numerics", "dequant") != args.numerics:
            continue
        key = (r["batch"], r["heads"], r["tree"], r["prefix"], r.get("kv_dtype", "bf16"))
        d = r["design"]
        if d in by.setdefault(key, {}):
            o = by[key][d]
            print("peer_merge: %s has several rows for %s at B=%d H=%d T=%d P=%d %s (mask %s/%s, nsplit %s/%s, "
                  "workspace %s/%s, numerics %s/%s): pick one with --mask, --nsplit, --workspace or --numerics" %
                  (args.results, d, *key, o.get("mask"), r.get("mask"), o.get("nsplit"), r.get("nsplit"),
                   o.get("workspace"), r.get("workspace"), o.get("numerics", "dequant"),
                   r.get("numerics", "dequant")), file=sys.stderr)
            return 2
        by[key][d] = r
        if d not in order:
            order.append(d)
    designs = [d for d in args.designs.split(",") if d] if args.designs else order

    peer_names = []
    peer_by = []
    for rows in peers:
        name = rows[0]["design"]
        peer_names.append(name)
        peer_by.append({(r["B"], r.get("H", 8), r["T"], r["P"], r.get("kv_dtype", "bf16")): r for r in rows})
    ref_name, ref = peer_names[0], peer_by[0]
    peak = ceilings(Run(results)).get("gemm", 0.0)
    with_dtype = any(k[4] != "bf16" for k in list(by) + [k for pb in peer_by for k in pb])

    nan = float("nan")
    head = ["B", "H", "T", "P"] + (["KV dtype"] if with_dtype else []) + ["%s us [p10, p90]" % ref_name, "TFLOP/s"]
    if peak > 0:
        head.append("% of GEMM peak")
    with_meta = any("with_metadata_median_us" in r for r in ref.values())
    if with_meta:
        head.append("with metadata us")
    for d in designs:
        head += ["%s us" % d, "%s / %s" % (d, ref_name)]
    for name in peer_names[1:]:
        head += ["%s us" % name, "%s / %s" % (name, ref_name)]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key in sorted(ref):
        r = ref[key]
        ru = r["median_us"]
        cells = ["%d" % key[0], "%d" % key[1], "%d" % key[2], "%d" % key[3]] + ([key[4]] if with_dtype else []) + \
                ["%.1f [%.1f, %.1f]" % (ru, r.get("p10_us", nan), r.get("p90_us", nan))]
        flops = r.get("flops", 2.0 * key[0] * key[1] * key[2] * key[3] * (576 + 512))
        tf = flops / (ru * 1e-6) / 1e12 if ru > 0 else nan
        cells.append("%.0f" % tf)
        if peak > 0:
            cells.append("%.1f%%" % (100 * tf / peak))
        if with_meta:
            cells.append("%.1f" % r.get("with_metadata_median_us", nan))
        row = by.get(key, {})
        for d in designs:
            us = row[d]["median_s"] * 1e6 if d in row else nan
            cells += ["%.1f" % us, "%.2fx" % (us / ru) if not math.isnan(us) and ru > 0 else "-"]
        for pb in peer_by[1:]:
            us = pb[key]["median_us"] if key in pb else nan
            cells += ["%.1f" % us, "%.2fx" % (us / ru) if not math.isnan(us) and ru > 0 else "-"]
        print("| " + " | ".join(cells) + " |")
    print()
    print("%s; %s" % (env.get("device", "device unknown"), env.get("peaks", "peaks unknown")))
    for name, rows in zip(peer_names, peers):
        what = rows[0].get("what", "")
        dev = rows[0].get("device", "")
        print("- %s: %s%s" % (name, what or "(no 'what' field)", "; %s" % dev if dev else ""))
    masks = sorted({r.get("mask", "?") for k in by for r in by[k].values()})
    print("- Canopy designs: the whole verify step (prefix, tree part, merge), mask %s, graph replay, L2 flushed"
          % ", ".join(masks or ["-"]))
    if args.results_out:
        if os.path.abspath(args.results_out) == os.path.abspath(args.results):
            print("peer_merge: --results-out: '%s' is the results it reads; choose another file" % args.results_out,
                  file=sys.stderr)
            return 2
        rows = list(results.get("rows", [])) + [peer_result_row(r) for p in peers for r in p]
        write_json(args.results_out, dict(results, rows=rows))
        print("wrote %s (%d rows, %d from peers)" % (args.results_out, len(rows), sum(len(p) for p in peers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
