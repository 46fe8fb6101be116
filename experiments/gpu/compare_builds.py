#!/usr/bin/python3
"""Kernel-variant builds side by side: the compare.md of `run_cuda_h200.sh compare`.

    compare_builds.py [--json FILE] OUT ROUNDS BASE VARIANT...

reads OUT/<name>-round<r>/results.json for every build name and round (a missing one counts as a
failed run) and prints, per (design, input, options), the base build's best median and each
variant's change against it (best of the rounds: process-to-process spread on the H200 was about
1%), then per variant the mean change over the shapes with P >= 16K (the targets' range) and the
rows that failed or are missing. Rows are matched by their fields (design, the input's axes, mask,
nsplit, workspace, mode), never by their labels; an option that varies within the run is named
beside the input. --json FILE also writes the compare's rows with their fields (design, dims B, H, T,
P, variant flags, options, the base's best median and each variant's change as a fraction), what
readers such as experiments/model/arch_model.py take instead of the table's labels.
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from plots import data  # noqa: E402

OPTIONS = ("mask", "nsplit", "workspace", "mode", "numerics")
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
                key = (row.design, row.shape_key(), tuple(raw.get(k) for k in OPTIONS))
                medians[key][build].append(row.median * 1e6)
    return medians, shapes, failed


def compare(out, rounds, base, others):
    """The compare as data: {"base", "variants", "rows": [{design, dims, variant, options, base_us,
    change: {variant: fraction or None}, label}], "means": {variant: text}, "failed": {build: count}}."""
    medians, shapes, failed = collect(out, rounds, [base] + others)
    # An option that takes more than one value in the run (an nsplit sweep) is named in the input
    # column; otherwise rows that differ only in it would read as repeated shapes.
    varied = [i for i in range(len(OPTIONS))
              if len({options[i] for (_d, _s, options) in medians}) > 1]
    rows = []
    for (design, shape, options), by in medians.items():
        if not by.get(base):
            continue
        b = min(by[base])
        row = shapes[shape]
        rows.append({"design": design, "dims": row.dims, "variant": row.variant, "options": dict(zip(OPTIONS, options)),
                     "base_us": b, "change": {o: (min(by[o]) / b - 1 if by.get(o) else None) for o in others},
                     "label": " ".join([row.label()] + [f"{OPTIONS[i]}={options[i]}" for i in varied])})
    means = {}
    for o in [base] + others:
        ch = [min(by[o]) / min(by[base]) - 1 for (_d, shape, _o), by in medians.items()
              if shapes[shape].dims.get("P", 0) >= LONG_PREFIX and by.get(o) and by.get(base)]
        if o == base:
            means[o] = "base"
        elif ch:
            means[o] = f"mean {100 * sum(ch) / len(ch):+.1f}% over {len(ch)} shapes with P >= 16K"
        else:
            means[o] = "no shape with P >= 16K measured by both"
    return {"base": base, "variants": others, "rows": rows, "means": means,
            "failed": {o: failed[o] for o in [base] + others}}


def report(result):
    """The compare as the Markdown of compare.md."""
    base, others = result["base"], result["variants"]
    lines = [f"| design | input | {base} µs (best median) | {' | '.join(others)} |",
             "|---|---|---:|" + "---:|" * len(others)]
    for r in result["rows"]:
        rel = [f"{100 * r['change'][o]:+.1f}%" if r["change"][o] is not None else "n/a" for o in others]
        lines.append(f"| {r['design']} | {r['label']} | {r['base_us']:.1f} | {' | '.join(rel)} |")
    for o in [base] + others:
        lines.append(f"\n{o}: {result['means'][o]}; {result['failed'][o]} rows failed or missing")
    return "\n".join(lines)


def main(argv):
    json_path = None
    if argv[:1] == ["--json"] and len(argv) > 1:
        json_path, argv = argv[1], argv[2:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, rounds, base, others = argv[0], int(argv[1]), argv[2], argv[3:]
    result = compare(out, rounds, base, others)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump({k: result[k] for k in ("base", "variants", "rows")}, f, indent=1)
            f.write("\n")
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
