#!/usr/bin/python3
"""Every figure of a Canopy run, from its results.json (written by `canopy run`).

    experiments/plot.py RESULTS.json [--out DIR] [--format png,pdf]

Writes, beside results.json unless --out says otherwise, those of these figures that the run's
sweep supports (each skipped figure is named with the reason):
    <experiment>_prefix    time per verify step vs prefix length P (log-log), a panel per (B, T)
    <experiment>_tree      time per verify step vs tree size T (the budget curve), a panel per (B, P)
    <experiment>_roofline  achieved TFLOP/s vs arithmetic intensity with the run's measured ceilings
    <experiment>_speedup   speedup against the run's baseline over (T, P), per design and B
    <experiment>_options   option sweeps (NSPLIT, workspace, graph vs eager, mask, KV slots, KV dtype,
                           numerics) per shape
    <experiment>_kv_dtype  FP8 KV cache against bf16: each FP8 row's speed-up over the bf16 row of the
                           same design, shape and options, a heat map over (T, P); and the same pairs
                           as a table, <experiment>_kv_dtype.md
    <experiment>_model     with --model latency_model.json (experiments/budget/): the latency model
                           against the measured budget curve, a panel per (B, P)
Reads named fields only (never table text). Plotting code: experiments/plots/.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plots import render_all  # noqa: E402

FORMATS = ("png", "pdf", "svg")


def parse_formats(values):
    formats = [f.strip().lower() for v in values for f in v.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise argparse.ArgumentTypeError(f"--format: expected some of {','.join(FORMATS)}, got '{','.join(values)}'")
    return list(dict.fromkeys(formats))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.json written by canopy run")
    ap.add_argument("--out", "--out-dir", dest="out", default=None, help="where figures go (default: beside results.json)")
    ap.add_argument("--format", nargs="+", default=["png,pdf"], help="png, pdf, svg; comma- or space-separated")
    ap.add_argument("--model", default=None, help="a latency model (experiments/budget/) to draw against the rows")
    args = ap.parse_args(argv)
    try:
        formats = parse_formats(args.format)
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    try:
        with open(args.results, encoding="utf-8") as f:
            results = json.load(f)
        if not isinstance(results.get("rows"), list):
            raise KeyError("rows")
    except (OSError, ValueError, KeyError, AttributeError) as e:
        print(f"plot.py: error: cannot read results '{args.results}': {e}", file=sys.stderr)
        return 2
    out_dir = args.out or os.path.dirname(os.path.abspath(args.results))
    model = None
    if args.model:
        try:
            with open(args.model, encoding="utf-8") as f:
                model = json.load(f)
        except (OSError, ValueError) as e:
            print(f"plot.py: error: cannot read model '{args.model}': {e}", file=sys.stderr)
            return 2
    written, skipped = render_all(results, out_dir, formats, model=model)
    for path in written:
        print(f"wrote {path}")
    for kind, reason in skipped:
        print(f"skipped {kind}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
