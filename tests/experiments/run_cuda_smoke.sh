#!/bin/sh
# canopy run of cuda_smoke.toml: on a GPU, one row per (input, options, design), each "ok", checked
# against the fp64 reference and timed, exit 0; without a GPU every row is "skipped" for that reason,
# canopy exits 4 (needs a GPU this host lacks) and the test prints SKIP (ctest marks it skipped).
# Usage: run_cuda_smoke.sh CANOPY_BINARY SOURCE_DIR OUT_DIR
set -u
canopy="$1"
src="$2"
out="$3"
config="$src/tests/experiments/cuda_smoke.toml"
rm -rf "$out"
"$canopy" run "$config" --out "$out" --quiet > "$out.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then
  cat "$out.log"
  echo "canopy run exited $rc" >&2
  exit 1
fi
exec /usr/bin/python3 - "$config" "$out/results.json" "$rc" <<'PY'
import json, sys, tomllib
config = tomllib.load(open(sys.argv[1], "rb"))
rows = json.load(open(sys.argv[2]))["rows"]
rc = int(sys.argv[3])
sw, opt = config["inputs"]["sweep"][0], config["options"]
expected = len(sw["batch"]) * len(sw["tree"]) * len(sw["prefix"]) * len(config["designs"]["names"])
for k in ("mask", "nsplit", "workspace", "mode", "l2_flush"):
    expected *= len(opt[k])
if len(rows) != expected:
    sys.exit("expected %d rows, got %d" % (expected, len(rows)))
no_gpu = all(r["status"] == "skipped" and "no usable GPU" in r["note"] for r in rows)
if rc != (4 if no_gpu else 0):
    sys.exit("canopy run exited %d with %s" % (rc, "every row skipped for want of a GPU" if no_gpu else "rows that ran"))
if no_gpu:
    print("SKIP: %s" % rows[0]["note"])
    sys.exit(0)
bad = [r for r in rows if r["status"] != "ok" or r["samples"] < 1 or r["checked_steps"] < 1 or not r["median_s"] > 0]
for r in bad:
    print("bad row: %s %s %s ns=%s %s %s: %s (samples %d, checked %d) %s" % (
        r["design"], r["input"], r["mask"], r["nsplit"], r["workspace"], r["mode"], r["status"], r["samples"],
        r["checked_steps"], r["note"]))
print("%d rows, %d bad" % (len(rows), len(bad)))
sys.exit(1 if bad else 0)
PY
