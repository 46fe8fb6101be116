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

    def test_fp8_rows_are_rows_of_their_own_and_join_the_results(self):
        # Two rows of one design and shape that differ only in the KV dtype are two rows, each beside
        # the peer's row of the same dtype; with --results-out the peer's rows become results rows.
        rows = [dict(row("cuda-sm90", (1, 17, 65536), 40.0), kv_dtype="bf16"),
                dict(row("cuda-sm90", (1, 17, 65536), 22.0), kv_dtype="fp8-e4m3", numerics="dequant")]
        torch_rows = [{"design": "torch-gather-bmm", "B": 1, "T": 17, "P": 65536, "H": 8, "median_us": m,
                       "kv_dtype": d, "kv_scale": 1.0, "numerics": "dequant", "finite": True, "check": "ok",
                       "kv_bytes": (65536 + 17) * (1152 if d == "bf16" else 576)}
                      for d, m in (("bf16", 200.0), ("fp8-e4m3", 260.0))]
        with tempfile.TemporaryDirectory() as d:
            merged = os.path.join(d, "all", "results.json")
            out = self.merge(rows, [torch_rows], "--results-out", merged)
            self.assertEqual(out.returncode, 0, out.stderr)
            c = self.cells(out)
            self.assertEqual([x[:5] for x in c], [["1", "8", "17", "65536", "bf16"], ["1", "8", "17", "65536", "fp8-e4m3"]])
            self.assertEqual(c[0][8:10], ["40.0", "0.20x"])
            self.assertEqual(c[1][8:10], ["22.0", "0.08x"])
            with open(merged) as f:
                res = json.load(f)
        peer = [r for r in res["rows"] if r["design"] == "torch-gather-bmm"]
        self.assertEqual(len(res["rows"]), 4)
        self.assertEqual([(r["kv_dtype"], r["status"]) for r in peer], [("bf16", "ok"), ("fp8-e4m3", "ok")])
        self.assertAlmostEqual(peer[0]["median_s"], 200e-6, delta=1e-12)
        self.assertAlmostEqual(peer[1]["median_s"], 260e-6, delta=1e-12)
        self.assertEqual((peer[1]["batch"], peer[1]["tree"], peer[1]["prefix"], peer[1]["mode"]), (1, 17, 65536, "graph"))
        self.assertEqual(peer[1]["kv_bytes"], (65536 + 17) * 576)

    def test_rows_of_both_numerics_are_refused_until_picked(self):
        rows = [dict(row("cuda-sm90", (1, 17, 16384), 20.0), kv_dtype="fp8-e4m3", numerics="dequant"),
                dict(row("cuda-sm90", (1, 17, 16384), 15.0), kv_dtype="fp8-e4m3", numerics="fp8-mma")]
        peer = [[{"design": "torch-gather-bmm", "B": 1, "T": 17, "P": 16384, "H": 8, "median_us": 90.0,
                  "kv_dtype": "fp8-e4m3"}]]
        out = self.merge(rows, peer)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--numerics", out.stderr)
        out = self.merge(rows, peer, "--numerics", "fp8-mma")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.cells(out)[0][8:10], ["15.0", "0.17x"])


if __name__ == "__main__":
    unittest.main()
