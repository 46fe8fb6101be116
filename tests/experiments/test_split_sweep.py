#!/usr/bin/python3
"""experiments/plots/split_sweep.py on a synthetic split-count sweep: the design's own split, the
fastest split and the fastest within the workspace bound are the right rows, failed rows never
count, and a shape without the yardstick is skipped."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "experiments", "plots", "split_sweep.py")


def row(design, T, nsplit, ms, mb, status="ok", splits=None):
    return {"design": design, "batch": 1, "heads": 8, "tree": T, "prefix": 16384, "nsplit": nsplit,
            "status": status, "median_s": ms * 1e-3, "fma_roofline_fraction": 0.5 / ms,
            "workspace_bytes": mb * 1e6, "splits": splits if splits is not None else nsplit}


class SplitSweep(unittest.TestCase):
    def run_tool(self, rows, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.json")
            with open(path, "w") as f:
                json.dump({"rows": rows}, f)
            proc = subprocess.run([sys.executable, TOOL, path, *args], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout.splitlines()

    def test_own_fastest_and_within_the_bound(self):
        rows = [row("ref", 17, 0, 0.05, 10, splits=40),
                row("k", 17, 0, 1.0, 40, splits=64),   # own split: 40 MB, over 2 x 10
                row("k", 17, 16, 1.2, 15),              # within the bound
                row("k", 17, 32, 0.9, 25),              # fastest, but over the bound
                row("k", 17, 8, 0.5, 5, status="FAILED"),  # faster but failed: never counts
                row("k", 65, 0, 2.0, 40)]               # no yardstick at T = 65: skipped
        lines = self.run_tool(rows, "--yardstick", "ref")
        self.assertIn("| 1 | 8 | 17 | 16K | 0.050 (10) | k | own: 1.000, 50%, 40 MB (64) | 32: 0.900, 56% "
                      "| 16: 1.200, 42%, 15 MB |", lines)
        self.assertFalse(any("| 65 |" in line for line in lines))

    def test_nothing_within_the_bound(self):
        rows = [row("ref", 17, 0, 0.05, 0, splits=1), row("k", 17, 0, 1.0, 40)]
        lines = self.run_tool(rows, "--yardstick", "ref", "--factor", "3")
        self.assertTrue(lines[0].endswith("| fastest within 3x ref's workspace |"))
        self.assertTrue(lines[-1].endswith("| none |"), lines[-1])


if __name__ == "__main__":
    unittest.main()
