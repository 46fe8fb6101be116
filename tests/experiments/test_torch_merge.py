#!/usr/bin/python3
"""experiments/peers/torch_reference.py --merge: canopy run's results.json (the cuda-kernels
config's rows) joined with the PyTorch reference's torch.jsonl into the per-shape table. Needs no
torch: the merge only reads files."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEER = os.path.join(ROOT, "experiments", "peers", "torch_reference.py")


def row(design, shape, median_us, status="ok", mask="full", workspace="persistent", splits=0, trace=""):
    """A schema-2 row without the display label: the merge must read the axis fields. The path names
    no split count, so a split count read from it could not match."""
    B, T, P = shape
    return {"design": design, "group": "all", "trace": trace, "batch": B, "heads": 8, "tree": T, "prefix": P,
            "ragged": bool(trace), "mask": mask, "workspace": workspace, "mode": "graph", "nsplit": 0,
            "splits": splits, "l2_flush": True, "status": status, "note": "", "path": design + "/mma/full",
            "median_s": median_us * 1e-6, "samples": 30, "tflops": 100.0, "roofline_fraction": 0.25,
            "mma_roofline_fraction": 0.3}


class TorchMerge(unittest.TestCase):
    def merge(self, rows, torch_rows):
        with tempfile.TemporaryDirectory() as d:
            res, tor = os.path.join(d, "results.json"), os.path.join(d, "torch.jsonl")
            with open(res, "w") as f:
                json.dump({"experiment": "cuda-kernels", "environment": {"device": "GPU: test", "peaks": "p"},
                           "rows": rows}, f)
            with open(tor, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in torch_rows))
            out = subprocess.run([sys.executable, PEER, "--merge", res, tor], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        return [l for l in out.stdout.splitlines() if l.startswith("| ") and l[2].isdigit()]

    def test_speedups_and_prefix_splits_per_shape(self):
        lines = self.merge(
            [row("cuda-sm120", (8, 33, 65536), 100.0, splits=13),
             row("cuda-sm120-bf16p", (8, 33, 65536), 110.0),
             row("cuda-flat", (8, 33, 65536), 450.0),
             row("cuda-sm120", (1, 17, 4096), 30.0, splits=43)],
            [{"B": 8, "T": 33, "P": 65536, "median_us": 400.0}, {"B": 1, "T": 17, "P": 4096, "median_us": 60.0}])
        self.assertEqual(len(lines), 2, lines)
        first = [c.strip() for c in lines[0].strip("|").split("|")]
        self.assertEqual(first[:5], ["1", "17", "4096", "43", "30.0"])
        self.assertEqual(first[12], "2.0x")  # torch 60 us / 30 us
        second = [c.strip() for c in lines[1].strip("|").split("|")]
        self.assertEqual(second[:5], ["8", "33", "65536", "13", "100.0"])
        self.assertEqual(second[8], "110.0")   # bf16 partials column
        self.assertEqual(second[9], "nan")     # no cuda-sm120-w32 row
        self.assertEqual(second[12], "4.0x")   # x torch
        self.assertEqual(second[13], "4.5x")   # x flat

    def test_rows_of_other_options_or_failed_rows_are_left_out(self):
        lines = self.merge(
            [row("cuda-sm120", (1, 33, 16384), 50.0, mask="tree"),
             row("cuda-sm120", (1, 65, 16384), 50.0, workspace="per-call"),
             row("cuda-sm120", (8, 65, 16384), 50.0, status="FAILED"),
             row("cuda-sm120", (1, 17, 4096), 50.0, trace="traces/run.h5")],
            [])
        self.assertEqual(lines, [])


if __name__ == "__main__":
    unittest.main()
