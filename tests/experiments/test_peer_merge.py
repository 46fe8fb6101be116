#!/usr/bin/python3
"""experiments/peers/peer_merge.py: canopy run's results.json joined with peers' JSON lines (the
FlashMLA peer as reference, PyTorch beside it) into one table per shape. Needs no GPU: it reads files."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MERGE = os.path.join(ROOT, "experiments", "peers", "peer_merge.py")


def row(design, shape, median_us, status="ok", mask="tree", nsplit=0, mode="graph", trace=""):
    B, T, P = shape
    return {"design": design, "trace": trace, "batch": B, "heads": 8, "tree": T, "prefix": P, "mask": mask,
            "nsplit": nsplit, "workspace": "persistent", "mode": mode, "l2_flush": True, "status": status,
            "median_s": median_us * 1e-6}


def flashmla(shape, median_us):
    B, T, P = shape
    return {"design": "flashmla-dense", "what": "FlashMLA dense decode, prefix part only", "B": B, "T": T, "P": P,
            "H": 8, "median_us": median_us, "p10_us": median_us - 1, "p90_us": median_us + 1,
            "with_metadata_median_us": median_us + 5, "flops": 2.0 * B * T * 8 * P * 1088}


class PeerMerge(unittest.TestCase):
    def merge(self, rows, peers, *flags):
        with tempfile.TemporaryDirectory() as d:
            res = os.path.join(d, "results.json")
            with open(res, "w") as f:
                json.dump({"environment": {"device": "GPU: test", "peaks": "bf16 GEMM 800.0 TFLOP/s (cuBLAS)"},
                           "rows": rows}, f)
            paths = []
            for i, p in enumerate(peers):
                paths.append(os.path.join(d, "peer%d.jsonl" % i))
                with open(paths[-1], "w") as f:
                    f.write("".join(json.dumps(r) + "\n" for r in p))
            out = subprocess.run([sys.executable, MERGE, res, *paths, *flags], capture_output=True, text=True)
        return out

    def cells(self, out):
        lines = [l for l in out.stdout.splitlines() if l.startswith("| ") and l[2].isdigit()]
        return [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines]

    def test_ratios_against_the_first_peer(self):
        out = self.merge([row("cuda-sm90", (1, 256, 16384), 150.0), row("cuda-sm120", (1, 256, 16384), 300.0),
                          row("cuda-sm90", (8, 65, 16384), 500.0)],
                         [[flashmla((1, 256, 16384), 120.0), flashmla((8, 65, 16384), 250.0)],
                          [{"design": "torch-gather-bmm", "B": 1, "T": 256, "P": 16384, "H": 8, "median_us": 480.0}]],
                         "--designs", "cuda-sm90,cuda-sm120")
        self.assertEqual(out.returncode, 0, out.stderr)
        c = self.cells(out)
        self.assertEqual(len(c), 2, out.stdout)
        self.assertEqual(c[0][:5], ["1", "8", "256", "16384", "120.0 [119.0, 121.0]"])
        self.assertEqual(c[0][5], "608")          # 2*2048*16384*1088 / 120 us
        self.assertEqual(c[0][6], "76.1%")        # of the run's 800 TFLOP/s
        self.assertEqual(c[0][7], "125.0")        # with metadata
        self.assertEqual(c[0][8:10], ["150.0", "1.25x"])
        self.assertEqual(c[0][10:12], ["300.0", "2.50x"])
        self.assertEqual(c[0][12:14], ["480.0", "4.00x"])
        self.assertEqual(c[1][8:10], ["500.0", "2.00x"])
        self.assertEqual(c[1][10:14], ["nan", "-", "nan", "-"])
        self.assertIn("prefix part only", out.stdout)

    def test_ambiguous_rows_are_refused_until_picked(self):
        rows = [row("cuda-sm90", (1, 17, 16384), 40.0, mask="tree"), row("cuda-sm90", (1, 17, 16384), 39.0, mask="full"),
                row("cuda-sm90", (1, 17, 16384), 10.0, status="FAILED"),
                row("cuda-sm90", (1, 17, 16384), 10.0, mode="eager"),
                row("cuda-sm90", (1, 17, 16384), 10.0, trace="t.h5")]
        out = self.merge(rows, [[flashmla((1, 17, 16384), 43.0)]])
        self.assertEqual(out.returncode, 2)
        self.assertIn("--mask", out.stderr)
        out = self.merge(rows, [[flashmla((1, 17, 16384), 43.0)]], "--mask", "full")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.cells(out)[0][8:10], ["39.0", "0.91x"])


if __name__ == "__main__":
    unittest.main()
