#!/usr/bin/python3
"""Figures from a Canopy results.json (written by `canopy run`).

    experiments/plot.py out/designs/results.json [--out-dir DIR] [--format png pdf]

Makes, for each input group, a bar chart of the per-step median time per design and option set
(p10-p90 as error bars), and, when rows carry a roofline bound, the fraction of the roofline.
Reads named fields only (never parses table text).
"""
import argparse
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def option_label(row, varying):
    parts = [row["design"]]
    for key in ("mask", "nsplit", "workspace", "mode", "l2_flush"):
        if key in varying:
            parts.append(f"{key}={row[key]}")
    return " ".join(str(p) for p in parts)


def varying_keys(rows):
    keys = set()
    for key in ("mask", "nsplit", "workspace", "mode", "l2_flush"):
        if len({str(r[key]) for r in rows}) > 1:
            keys.add(key)
    return keys


def plot(results, out_dir, formats):
    rows = [r for r in results["rows"] if r["status"] == "ok" and r["samples"] > 0]
    if not rows:
        print("plot.py: no timed rows in the results", file=sys.stderr)
        return []
    varying = varying_keys(rows)
    by_input = collections.OrderedDict()
    for r in rows:
        by_input.setdefault(f'{r["input"]} [{r["group"]}]', []).append(r)
    scale, unit = (1e3, "ms") if max(r["median_s"] for r in rows) > 0.02 else (1e6, "µs")
    has_roofline = any(r["roofline_s"] > 0 for r in rows)

    labels = sorted({option_label(r, varying) for r in rows})
    inputs = list(by_input)
    ncols = 2 if has_roofline else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 2.5 + 0.35 * len(inputs) * max(1, len(labels))),
                             squeeze=False)
    width = 0.8 / max(1, len(labels))
    for li, label in enumerate(labels):
        ys, meds, lo, hi, fr = [], [], [], [], []
        for ii, key in enumerate(inputs):
            match = [r for r in by_input[key] if option_label(r, varying) == label]
            if not match:
                continue
            r = match[0]
            ys.append(ii + li * width)
            meds.append(r["median_s"] * scale)
            lo.append((r["median_s"] - r["p10_s"]) * scale)
            hi.append((r["p90_s"] - r["median_s"]) * scale)
            fr.append(100.0 * r["roofline_fraction"])
        axes[0][0].barh(ys, meds, height=width, xerr=[lo, hi], label=label, capsize=2)
        if has_roofline:
            axes[0][1].barh(ys, fr, height=width, label=label)
    for ax in axes[0]:
        ax.set_yticks([i + 0.4 - width / 2 for i in range(len(inputs))])
        ax.set_yticklabels(inputs, fontsize=8)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_xlabel(f"time per verify step ({unit}), median, p10-p90")
    if has_roofline:
        axes[0][1].set_xlabel("fraction of the roofline bound (%)")
    fig.legend(*axes[0][0].get_legend_handles_labels(), fontsize=7, loc="lower center",
               ncol=min(3, len(labels)), frameon=False)
    env = results.get("environment", {})
    fig.suptitle(f'{results["experiment"]} — {env.get("device", "")} (git {env.get("git", "?")})', fontsize=9)
    fig.tight_layout(rect=(0, 0.06 + 0.03 * ((len(labels) + 2) // 3), 1, 1))
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for fmt in formats:
        path = os.path.join(out_dir, f'{results["experiment"]}.{fmt}')
        fig.savefig(path, dpi=150)
        written.append(path)
    plt.close(fig)
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.json written by canopy run")
    ap.add_argument("--out-dir", default=None, help="where figures go (default: beside results.json)")
    ap.add_argument("--format", nargs="+", default=["png", "pdf"], choices=["png", "pdf", "svg"])
    args = ap.parse_args(argv)
    try:
        with open(args.results, encoding="utf-8") as f:
            results = json.load(f)
        results["rows"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot.py: error: cannot read results '{args.results}': {e}", file=sys.stderr)
        return 2
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.results))
    for path in plot(results, out_dir, args.format):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
