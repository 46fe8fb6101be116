#!/usr/bin/python3
"""Kernel-variant builds side by side: the compare.md of `run_cuda_h200.sh compare`.

    compare_builds.py OUT ROUNDS BASE VARIANT...

reads OUT/<name>-round<r>/results.json for every build name and round (a missing one counts as a
failed run) and prints, per (design, input, options), the base build's best median and each
variant's change against it (best of the rounds: process-to-process spread on the H200 was about
1%), then per variant the mean change over the shapes with P >= 16K (the targets' range) and the
rows that failed or are missing. Rows are matched by their fields (design, the input's axes, mask,
nsplit, workspace, mode), never by their labels; an option that varies within the run is named
beside the input.
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from plots import data  # noqa: E402

OPTIONS = ("mask", "nsplit", "workspace", "mode")
LONG_PREFIX = 16384


def collect(out, rounds, builds):
    """{(design, shape, options): {build: [median µs]}}, {shape: Row}, Counter of failed rows per build."""
    medians = collections.defaultdict(lambda: collections.defaultdict(list))
    shapes, failed = {}, collections.Counter()
    for build in builds:
        for r in range(1, rounds + 1):
            path = os.path.join(out, f"{build}-round{r}", "results.json")
            if not os.path.exists(path):
                failed[build] += 1
                continue
            with open(path, encoding="utf-8") as f:
                rows = json.load(f)["rows"]
            for raw in rows:
                if not data.timed(raw):
                    failed[build] += 1
                    continue
                row = data.Row(raw)
                shapes.setdefault(row.shape_key(), row)
                key = (row.design, row.shape_key(), tuple(raw[k] for k in OPTIONS))
                medians[key][build].append(row.median * 1e6)
    return medians, shapes, failed


def report(out, rounds, base, others):
    medians, shapes, failed = collect(out, rounds, [base] + others)
    # An option that takes more than one value in the run (an nsplit sweep) is named in the input
    # column; otherwise rows that differ only in it would read as repeated shapes.
    varied = [i for i in range(len(OPTIONS))
              if len({options[i] for (_d, _s, options) in medians}) > 1]
    lines = [f"| design | input | {base} µs (best median) | {' | '.join(others)} |",
             "|---|---|---:|" + "---:|" * len(others)]
    for (design, shape, options), by in medians.items():
        if not by.get(base):
            continue
        b = min(by[base])
        rel = [f"{100 * (min(by[o]) / b - 1):+.1f}%" if by.get(o) else "n/a" for o in others]
        label = " ".join([shapes[shape].label()] + [f"{OPTIONS[i]}={options[i]}" for i in varied])
        lines.append(f"| {design} | {label} | {b:.1f} | {' | '.join(rel)} |")
    for o in [base] + others:
        ch = [min(by[o]) / min(by[base]) - 1 for (_d, shape, _o), by in medians.items()
              if shapes[shape].dims.get("P", 0) >= LONG_PREFIX and by.get(o) and by.get(base)]
        if o == base:
            mean = "base"
        elif ch:
            mean = f"mean {100 * sum(ch) / len(ch):+.1f}% over {len(ch)} shapes with P >= 16K"
        else:
            mean = "no shape with P >= 16K measured by both"
        lines.append(f"\n{o}: {mean}; {failed[o]} rows failed or missing")
    return "\n".join(lines)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, rounds, base, others = argv[0], int(argv[1]), argv[2], argv[3:]
    print(report(out, rounds, base, others))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
