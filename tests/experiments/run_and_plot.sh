#!/bin/sh
# canopy run on a tiny config, then plot.py on its results: every output must appear.
# Usage: run_and_plot.sh CANOPY_BINARY SOURCE_DIR OUT_DIR
set -eu
canopy="$1"
src="$2"
out="$3"
rm -rf "$out"
"$canopy" run "$src/tests/experiments/tiny_run.toml" --out "$out" --quiet
for f in results.json results.csv table.md table.tex; do
  test -s "$out/$f" || { echo "missing $out/$f" >&2; exit 1; }
done
grep -q "toprule" "$out/table.tex"
/usr/bin/python3 "$src/experiments/plot.py" "$out/results.json" --format png
# tiny sweeps B and the mask (one design): the roofline and the option comparison apply
for f in tiny_roofline.png tiny_options.png; do
  test -s "$out/$f" || { echo "plot.py wrote no $out/$f" >&2; exit 1; }
done
