#!/usr/bin/python3
"""A split-count sweep (a run whose `nsplit` option lists 0 and fixed counts) as one table: per shape
and design, the design's own split (nsplit 0: time, share of the fp32 FMA ceiling, workspace,
splits), the fastest split of the sweep, and the fastest split whose workspace stays within
FACTOR x the yardstick design's (at its own split).

    split_sweep.py RESULTS.json... [--yardstick cuda-sm120] [--factor 2] [--designs A,B]

Rows are matched by their fields (design, batch, heads, tree, prefix, nsplit), rows that did not
time (plots.data.timed) are left out; a shape the yardstick did not run is skipped. Times in ms.
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from plots import data  # noqa: E402


def load(paths):
    """{(batch, heads, tree, prefix): {(design, nsplit): row}} over the ok rows of every file."""
    shapes = collections.defaultdict(dict)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for r in json.load(f)["rows"]:
                if data.timed(r):
                    shapes[(r["batch"], r["heads"], r["tree"], r["prefix"])][(r["design"], r["nsplit"])] = r
    return shapes


def cell(r, with_ws=False):
    text = f"{r['nsplit'] or 'own'}: {r['median_s'] * 1e3:.3f}, {100 * r['fma_roofline_fraction']:.0f}%"
    return text + (f", {r['workspace_bytes'] / 1e6:.0f} MB" if with_ws else "")


def table(shapes, yardstick, factor, designs=None):
    lines = [f"| B | H | T | P | {yardstick} ms (MB) | design | own split: ms, FMA %, MB (splits) | fastest: split, ms, FMA % "
             f"| fastest within {factor:g}x {yardstick}'s workspace |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (B, H, T, P), by in sorted(shapes.items()):
        ref = by.get((yardstick, 0))
        if not ref:
            continue
        cap = factor * ref["workspace_bytes"]
        names = designs or sorted({d for (d, _n) in by} - {yardstick})
        for design in names:
            own = by.get((design, 0))
            if not own:
                continue
            runs = [r for (d, _n), r in by.items() if d == design]
            fastest = min(runs, key=lambda r: r["median_s"])
            lean = [r for r in runs if r["workspace_bytes"] <= cap]
            within = cell(min(lean, key=lambda r: r["median_s"]), True) if lean else "none"
            lines.append(f"| {B} | {H} | {T} | {P // 1024}K | {ref['median_s'] * 1e3:.3f} ({ref['workspace_bytes'] / 1e6:.0f}) "
                         f"| {design} | {cell(own, True)} ({own.get('splits', '?')}) | {cell(fastest)} | {within} |")
    return "\n".join(lines)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--yardstick", default="cuda-sm120")
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--designs", help="comma-separated (default: every design but the yardstick)")
    a = ap.parse_args(argv)
    print(table(load(a.results), a.yardstick, a.factor, a.designs.split(",") if a.designs else None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
