#!/usr/bin/env python3
"""Whether a sharded sweep's merged results hold the rows of the unsharded run of the same config:
the same inputs, designs, options, kernel paths, statuses, checks and errors, in the same order.
Timings and the device each row ran on may differ; the device of every merged row is counted, so a
sweep over several GPUs shows which card made how many rows.

    experiments/tools/same_rows.py UNSHARDED/results.json MERGED/results.json

Exit 0: the same rows. Exit 1: they differ (the first differing rows and fields are named).
"""
import collections
import json
import sys

# What must not depend on sharding (experiments/replay/canopy_Results.hpp, forEachField).
SAME = ["input", "group", "design", "path", "mask", "nsplit", "workspace", "mode", "l2_flush", "status", "steps",
        "samples", "checked_steps", "max_abs_error", "rel_l2_error", "flops", "bytes_min", "order"]


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    docs = []
    for path in argv[1:]:
        with open(path, encoding="utf-8") as f:
            docs.append(json.load(f))
    whole, merged = (d["rows"] for d in docs)
    bad = [(i, [k for k in SAME if x.get(k) != y.get(k)]) for i, (x, y) in enumerate(zip(whole, merged))]
    bad = [(i, keys) for i, keys in bad if keys]
    if len(whole) != len(merged) or bad or not whole:
        print("same_rows: DIFFER: %d unsharded rows, %d merged; differing rows (index, fields): %s"
              % (len(whole), len(merged), bad[:10]))
        return 1
    env = docs[1]["environment"]
    devices = collections.Counter(r.get("device", "?") for r in merged)
    print("same_rows: %d merged rows = the unsharded run (%s; hosts %s)" % (len(merged), env.get("shard"), env.get("host")))
    for device, count in sorted(devices.items()):
        print("  %4d rows on %s" % (count, device))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
