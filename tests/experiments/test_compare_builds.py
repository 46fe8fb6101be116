#!/usr/bin/python3
"""experiments/gpu/compare_builds.py (the compare.md of run_cuda_h200.sh compare) on results.json
files without display labels: rows match by their fields, the best of the rounds counts, the mean
change covers P >= 16K only, and failed or missing runs are counted."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMPARE = os.path.join(ROOT, "experiments", "gpu", "compare_builds.py")


def row(design, B, T, P, median_us, status="ok", nsplit=0, **extra):
    return {**extra, "design": design, "group": "all", "trace": "", "batch": B, "heads": 8, "tree": T, "prefix": P,
            "ragged": False, "compacted": False, "values": "random", "recorded_values": False, "mask": "tree",
            "nsplit": nsplit, "workspace": "persistent", "mode": "graph", "status": status, "samples": 30,
            "median_s": median_us * 1e-6}


class CompareBuilds(unittest.TestCase):
    def run_compare(self, runs, rounds, builds, fields=None):
        """The compare's Markdown; with ``fields`` (a dict), its --json rows are put there too."""
        with tempfile.TemporaryDirectory() as out:
            for (build, r), rows in runs.items():
                os.makedirs(os.path.join(out, f"{build}-round{r}"))
                with open(os.path.join(out, f"{build}-round{r}", "results.json"), "w") as f:
                    json.dump({"rows": rows}, f)
            path = os.path.join(out, "compare.json")
            proc = subprocess.run([sys.executable, COMPARE, "--json", path, out, str(rounds), *builds],
                                  capture_output=True, text=True)
            if fields is not None and proc.returncode == 0:
                with open(path, encoding="utf-8") as f:
                    fields.update(json.load(f))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def test_best_round_mean_over_long_prefixes_and_failures(self):
        runs = {("base", 1): [row("cuda-sm120", 1, 17, 4096, 40.0), row("cuda-sm120", 8, 65, 16384, 200.0)],
                ("base", 2): [row("cuda-sm120", 1, 17, 4096, 42.0), row("cuda-sm120", 8, 65, 16384, 190.0)],
                ("v1", 1): [row("cuda-sm120", 1, 17, 4096, 20.0), row("cuda-sm120", 8, 65, 16384, 171.0)],
                ("v1", 2): [row("cuda-sm120", 1, 17, 4096, 80.0, status="FAILED")]}
        text = self.run_compare(runs, 2, ["base", "v1"])
        lines = text.splitlines()
        self.assertIn("| cuda-sm120 | B=1 H=8 T=17 P=4K | 40.0 | -50.0% |", lines)
        self.assertIn("| cuda-sm120 | B=8 H=8 T=65 P=16K | 190.0 | -10.0% |", lines)
        # P = 4K is outside the mean; one FAILED row and one missing shape of round 2 are not
        # "missing" runs: only the failed row counts.
        self.assertIn("v1: mean -10.0% over 1 shapes with P >= 16K; 1 rows failed or missing", lines)
        self.assertIn("base: base; 0 rows failed or missing", lines)

    def test_json_rows_carry_the_fields_not_the_labels(self):
        runs = {("base", 1): [row("cuda-sm120", 8, 65, 16384, 200.0)], ("v1", 1): [row("cuda-sm120", 8, 65, 16384, 180.0)]}
        fields = {}
        self.run_compare(runs, 1, ["base", "v1"], fields)
        self.assertEqual(fields["base"], "base")
        self.assertEqual(fields["variants"], ["v1"])
        [r] = fields["rows"]
        self.assertEqual((r["design"], r["dims"], r["options"]["mask"]),
                         ("cuda-sm120", {"B": 8, "H": 8, "T": 65, "P": 16384}, "tree"))
        self.assertAlmostEqual(r["base_us"], 200.0)
        self.assertAlmostEqual(r["change"]["v1"], -0.1)

    def test_an_option_swept_in_the_run_is_named_beside_the_input(self):
        runs = {("base", 1): [row("cuda-sm90", 1, 17, 16384, 30.0, nsplit=0),
                              row("cuda-sm90", 1, 17, 16384, 60.0, nsplit=8)],
                ("v1", 1): [row("cuda-sm90", 1, 17, 16384, 27.0, nsplit=0),
                            row("cuda-sm90", 1, 17, 16384, 57.0, nsplit=8)]}
        lines = self.run_compare(runs, 1, ["base", "v1"]).splitlines()
        self.assertIn("| cuda-sm90 | B=1 H=8 T=17 P=16K nsplit=0 | 30.0 | -10.0% |", lines)
        self.assertIn("| cuda-sm90 | B=1 H=8 T=17 P=16K nsplit=8 | 60.0 | -5.0% |", lines)
        # Options the run does not sweep stay out of the label (the tests above: nsplit is 0 throughout).

    def test_numerics_on_one_pool_are_rows_of_their_own(self):
        fp8 = {"kv_dtype": "fp8-e4m3", "kv_scale": 1.0}
        runs = {(build, 1): [row("cuda-sm90", 8, 256, 16384, 100.0 * f, numerics="dequant", **fp8),
                             row("cuda-sm90", 8, 256, 16384, 50.0 * f, numerics="fp8-mma", **fp8)]
                for build, f in (("base", 1.0), ("v1", 0.9))}
        lines = self.run_compare(runs, 1, ["base", "v1"]).splitlines()
        self.assertIn("| cuda-sm90 | B=8 H=8 T=256 P=16K fp8-e4m3 numerics=dequant | 100.0 | -10.0% |", lines)
        self.assertIn("| cuda-sm90 | B=8 H=8 T=256 P=16K fp8-e4m3 numerics=fp8-mma | 50.0 | -10.0% |", lines)

    def test_missing_run_counts_and_variant_without_rows(self):
        runs = {("base", 1): [row("cuda-sm120", 1, 17, 65536, 100.0)]}
        text = self.run_compare(runs, 1, ["base", "v2"])
        self.assertIn("| cuda-sm120 | B=1 H=8 T=17 P=64K | 100.0 | n/a |", text.splitlines())
        self.assertIn("v2: no shape with P >= 16K measured by both; 1 rows failed or missing", text.splitlines())


if __name__ == "__main__":
    unittest.main()
