#!/usr/bin/python3
"""Every figure type of experiments/plot.py renders from small results.json files built here (the
row schema of docs/results/h200-replay/designs-w32 and h200-kokkos4), through the command line:
a multi-shape multi-design run, a merged PyTorch peer, option sweeps, a T sweep, a single row."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PLOT = os.path.join(ROOT, "experiments", "plot.py")
sys.path.insert(0, os.path.join(ROOT, "experiments"))
from plots import data, style  # noqa: E402

GEMM, MMA, FMA, COPY = 800e12, 640e12, 60e12, 4.27e12
GPU_ENV = {
    "canopy_version": "0.1.0", "config": "experiments/configs/designs.toml", "config_hash": "1eab1f92dd594e2d",
    "date": "2026-11-29T09:43:55Z", "git": "62ef037f954f", "gpu": "NVIDIA H200", "gpu_cc": "9.0",
    "device": "GPU: NVIDIA H200 (sm_90, 132 SMs, 60 MB L2, 140 GB, driver 13.0, runtime 13.0) — an H200 "
              "(sm_90) proxy for the sm_120 design target",
    "peaks": "bf16 GEMM 800.0 TFLOP/s (cuBLAS 8192x8192x8192, random data, median of 10); D2D copy 4.27 TB/s "
             "(2.1 GB, read + write, median of 10); mma.sync bf16 640.0 TFLOP/s (registers, 16 warps/SM, median of 5); "
             "fp32 FMA 60.0 TFLOP/s (registers, 64 warps/SM, median of 5)",
    "host_cores": "16", "kokkos_version": "3.4.1", "seed": "1",
}
HOST_ENV = {"canopy_version": "0.1.0", "config": "tests/experiments/tiny_run.toml", "date": "2026-12-02T03:20:46Z",
            "device": "host: AMD EPYC", "git": "a759f0c2d554", "host_cores": "2", "seed": "1"}
SLOWDOWN = {"cuda-sm120": 4.0, "cuda-sm120-w32": 4.3, "cuda-flat": 40.0, "kokkos-team": 4.02,
            "torch-reference": 9.0}


def row(design, B, T, P, H=8, slowdown=None, **fields):
    """One results.json row with every field `canopy run` writes except the display label `input`
    (figures read the axis fields), numbers from a simple cost model."""
    flops = 2.0 * B * H * T * (P + T) * (576 + 512)
    nbytes = B * (P + T) * 576 * 2.0 + B * H * T * 576 * 4.0
    bound = max(flops / GEMM, nbytes / COPY)
    median = bound * (slowdown or SLOWDOWN.get(design, 6.0)) + 4e-6
    r = {"bytes_min": nbytes, "checked_steps": 1, "design": design, "flops": flops, "gbps": nbytes / median / 1e9,
         "group": "all", "trace": "", "batch": B, "heads": H, "tree": T, "prefix": P, "ragged": False,
         "compacted": False, "values": "random", "recorded_values": False, "l2_flush": True, "mask": "tree",
         "max_abs_error": 1.6e-4, "median_s": median, "mode": "graph", "note": "", "nsplit": 0,
         "p10_s": median * 0.98, "p90_s": median * 1.03, "path": f"{design}/mma/tree", "splits": 16, "rel_l2_error": 1.9e-3,
         "roofline_fraction": bound / median, "roofline_s": bound, "mma_roofline_s": max(flops / MMA, nbytes / COPY),
         "mma_roofline_fraction": max(flops / MMA, nbytes / COPY) / median, "samples": 30, "speedup": 1.0,
         "fma_roofline_s": max(flops / FMA, nbytes / COPY), "fma_roofline_fraction": max(flops / FMA, nbytes / COPY) / median,
         "status": "ok", "steps": 1, "tflops": flops / median / 1e12, "total_median_s": median,
         "workspace": "persistent", "workspace_bytes": 1.2e7}
    r.update(fields)
    return r


def results(name, rows, baseline, env=GPU_ENV):
    return {"experiment": name, "description": f"{name} fixture", "baseline": baseline, "repetitions": 30,
            "environment": dict(env), "rows": rows}


def grid(designs, Bs, Ts, Ps, **fields):
    return [row(d, B, T, P, **fields) for B in Bs for T in Ts for P in Ps for d in designs]


FP8_SPEEDUP = {"cuda-sm90": 1.8, "torch-gather-bmm": 0.8}


def fp8_rows():
    rows = []
    for r in grid(["cuda-sm90", "torch-gather-bmm"], [1, 8], [17, 65, 256], [4096, 65536]):
        r["kv_dtype"], r["numerics"] = "bf16", "dequant"
        rows.append(r)
        k = FP8_SPEEDUP[r["design"]]
        rows.append(dict(r, kv_dtype="fp8-e4m3", **{f: r[f] / k for f in ("median_s", "p10_s", "p90_s",
                                                                            "total_median_s")}))
    rows.append(row("cuda-sm120", 1, 17, 4096, kv_dtype="fp8-e4m3", numerics="dequant", status="unsupported",
                    samples=0, median_s=0.0, note="cuda-sm120: kv dtype fp8-e4m3 with numerics dequant: reads bf16 "
                                                  "KV pools only"))
    return rows


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    return struct.unpack(">II", head[16:24])


def fixtures():
    """name -> (results, plot.py arguments, figures expected)."""
    out = {}
    out["designs"] = (results("designs", grid(["cuda-sm120", "cuda-flat"], [1, 8], [17, 33, 65], [4096, 16384, 65536]),
                              "cuda-flat"), ["--format", "png"], ["prefix", "tree", "roofline", "speedup"])
    # a PyTorch peer merged in: fewer fields, a design name like any other
    rows = grid(["cuda-sm120", "cuda-flat"], [1, 8], [33], [4096, 16384, 65536, 131072])
    for r in grid(["torch-reference"], [1, 8], [33], [4096, 16384, 65536, 131072]):
        rows.append({k: v for k, v in r.items()
                     if k not in ("mma_roofline_s", "mma_roofline_fraction", "fma_roofline_s", "fma_roofline_fraction", "path",
                                  "workspace_bytes", "checked_steps")})
    out["peer"] = (results("designs", rows, "cuda-flat"), ["--format", "png"], ["prefix", "roofline", "speedup"])
    # option sweeps: NSPLIT (one design), graph vs eager (two designs), fragmented vs compacted slots
    rows = [row("cuda-sm120", B, 33, P, nsplit=n, slowdown=4 + abs(n - 16) / 8)
            for B in (1, 8) for P in (4096, 65536) for n in (0, 1, 4, 16, 64)]
    out["nsplit"] = (results("nsplit", rows, "cuda-sm120"), ["--format", "png"], ["roofline", "options"])
    rows = [row(d, B, 33, P, mode=m, l2_flush=False, nsplit=16, slowdown=SLOWDOWN[d] * (1.1 if m == "eager" else 1))
            for B in (1, 8) for P in (1024, 4096, 32768) for d in ("cuda-sm120", "cuda-flat") for m in ("eager", "graph")]
    out["graph"] = (results("graph_vs_eager", rows, "cuda-sm120"), ["--out", "figs", "--format", "png"],
                    ["prefix", "roofline", "speedup", "options"])
    rows = [row(d, B, 33, P, compacted=c) for B in (1, 8) for P in (16384, 65536)
            for d in ("cuda-sm120", "cuda-flat") for c in (False, True)]
    out["frag"] = (results("fragmentation", rows, "cuda-sm120"), ["--format", "png"], ["roofline", "speedup", "options"])
    # T over five sizes: the budget curve
    rows = grid(["cuda-sm120", "kokkos-team", "cuda-flat"], [1, 8], [17, 33, 65, 129, 256], [16384, 65536])
    out["tsweep"] = (results("portability-gpu", rows, "cuda-sm120"), ["--format", "png"], ["tree", "roofline", "speedup"])
    # one row: only the roofline applies
    out["single"] = (results("single", [row("cuda-sm120", 1, 33, 4096)], "cuda-sm120"), ["--format", "png", "pdf"],
                     ["roofline"])
    # a host run: no peaks (roofline_s = 0), the mask swept
    rows = [row("reference", B, 5, 32, H=2, mask=m, roofline_s=0.0, mma_roofline_s=0.0, ragged=True,
                mode="eager", l2_flush=False) for B in (1, 3) for m in ("tree", "parents")]
    out["host"] = (results("tiny", rows, "reference", env=HOST_ENV), ["--format", "png"], ["roofline", "options"])
    # bf16 against FP8 (the fp8.toml run with the PyTorch peer merged in): cuda-sm90 1.8x faster in
    # fp8-e4m3, the peer 1.25x slower (it dequantises inside its time), a design without FP8 unsupported
    out["fp8"] = (results("fp8", fp8_rows(), "cuda-sm90"), ["--format", "png"],
                  ["tree", "roofline", "speedup", "options", "kv_dtype"])
    # nothing timed
    out["failed"] = (results("failed", [row("cuda-sm120", 1, 33, 4096, status="FAILED", samples=0)], "cuda-sm120"),
                     ["--format", "png"], [])
    return out


class PlotsRender(unittest.TestCase):
    """plot.py on every fixture, all started at once in setUpClass (they overlap on two cores)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="canopy_plots_")
        cls.fixtures = fixtures()
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
        procs = {}
        for name, (res, args, _kinds) in cls.fixtures.items():
            folder = os.path.join(cls.tmp.name, name)
            os.makedirs(folder)
            path = os.path.join(folder, "results.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(res, f)
            procs[name] = subprocess.Popen([sys.executable, PLOT, path, *args], cwd=folder, env=env, text=True,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        cls.runs = {}
        for name, p in procs.items():
            output = p.communicate(timeout=120)[0]
            cls.runs[name] = (p.returncode, output)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name):
        """plot.py exited 0 and wrote exactly the expected figures, each a real PNG of paper width."""
        res, args, kinds = self.fixtures[name]
        rc, output = self.runs[name]
        self.assertEqual(rc, 0, output)
        written = {}
        for line in output.splitlines():
            if line.startswith("wrote ") and line.endswith(".png"):
                png = os.path.join(self.tmp.name, name, line[len("wrote "):])  # --out may be relative
                written[os.path.basename(png)[len(res["experiment"]) + 1:-len(".png")]] = png
        self.assertEqual(sorted(written), sorted(kinds), output)
        for kind, path in written.items():
            self.assertGreater(os.path.getsize(path), 10_000, f"{path} looks empty")
            w, h = png_size(path)
            # one (3.5 in) or two (7 in) columns at 200 dpi, plus the caption's margins
            self.assertLessEqual(w, 7.3 * style.PNG_DPI, f"{path}: {w} px wide")
            self.assertGreater(h, 1.0 * style.PNG_DPI, f"{path}: {h} px high")
        for kind in {"prefix", "tree", "roofline", "speedup", "options", "kv_dtype"} - set(kinds):
            self.assertIn(f"skipped {'all' if not kinds else kind}:", output)
        return written, output

    def test_designs_grid(self):
        self.check("designs")

    def test_merged_pytorch_peer(self):
        self.check("peer")

    def test_option_sweeps(self):
        self.check("nsplit")
        self.check("frag")
        written, _ = self.check("graph")  # --out figs, relative to the working folder
        self.assertTrue(all(os.path.dirname(p) == os.path.join(self.tmp.name, "graph", "figs")
                            for p in written.values()), written)

    def test_fp8_against_bf16(self):
        written, output = self.check("fp8")
        table = os.path.join(os.path.dirname(written["kv_dtype"]), "fp8_kv_dtype.md")
        self.assertIn(f"wrote {table}", output)
        with open(table, encoding="utf-8") as f:
            text = f.read()
        lines = [l for l in text.splitlines() if l.startswith("| ") and not l.startswith("| design")]
        self.assertEqual(len(lines), 2 * 2 * 3 * 2, text)  # designs x B x T x P: one line per pair
        cells = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines]
        self.assertEqual(cells[0][:5], ["cuda-sm90", "1", "8", "17", "4K"])
        self.assertTrue(all(c[-1] == "1.80x" for c in cells if c[0] == "cuda-sm90"), text)
        self.assertTrue(all(c[-1] == "0.80x" for c in cells if c[0] == "torch-gather-bmm"), text)
        self.assertIn("cuda-sm120 fp8-e4m3: unsupported (cuda-sm120: kv dtype fp8-e4m3", text)
        self.assertIn("dequantises the rows it gathers", text)

    def test_tree_sweep(self):
        self.check("tsweep")

    def test_single_row_png_and_pdf(self):
        written, _ = self.check("single")
        for path in written.values():
            pdf = path[:-4] + ".pdf"
            with open(pdf, "rb") as f:
                self.assertEqual(f.read(5), b"%PDF-", pdf)
            self.assertGreater(os.path.getsize(pdf), 8_000, pdf)

    def test_host_run_without_peaks(self):
        self.assertEqual(data.ceilings(data.Run(self.fixtures["host"][0])), {})
        self.check("host")

    def test_nothing_to_plot_and_bad_input(self):
        _, output = self.check("failed")
        self.assertIn("no timed rows", output)
        proc = subprocess.run([sys.executable, PLOT, os.path.join(self.tmp.name, "missing.json")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("cannot read results", proc.stderr)


class PlotsData(unittest.TestCase):
    def test_fp8_pairs_match_design_shape_and_options_only(self):
        from plots import kv_dtype
        rows = fp8_rows()
        rows.append(dict(rows[1], mask="full"))  # an FP8 row of another mask: no bf16 row beside it
        rows.append(dict(rows[1], kv_dtype="fp8-e5m2", numerics="fp8-mma", total_median_s=rows[0]["total_median_s"] / 2))
        run = data.Run(results("fp8", rows, "cuda-sm90"))
        pairs = kv_dtype.pairs(run)
        self.assertEqual(len(pairs), 2 * 2 * 3 * 2 + 1)
        self.assertTrue(all(p.bf16.get("kv_dtype") == "bf16" and p.bf16.design == p.design for p in pairs))
        self.assertTrue(all(p.bf16.input_key() == p.fp8.input_key() for p in pairs))
        # ... while to scripts that match rows by their problem (compare_builds.py) they are two problems
        self.assertTrue(all(p.bf16.shape_key() != p.fp8.shape_key() for p in pairs))
        self.assertEqual(pairs[0].fp8.label(), "B=1 H=8 T=17 P=4K fp8-e4m3")
        self.assertEqual(pairs[0].bf16.label(), "B=1 H=8 T=17 P=4K")
        mma = [p for p in pairs if p.numerics == "fp8-mma"]
        self.assertEqual(len(mma), 1)
        self.assertAlmostEqual(mma[0].speedup, 2.0)
        # rows of files written before FP8 (no kv_dtype field) are bf16 and pair with nothing
        old = [{k: v for k, v in r.items() if k not in ("kv_dtype", "numerics")} for r in fp8_rows()[:4]]
        self.assertEqual(kv_dtype.pairs(data.Run(results("old", old, "cuda-sm90"))), [])
        self.assertEqual(kv_dtype.table(data.Run(results("old", old, "cuda-sm90"))), "")


    def test_axes_come_from_fields_never_the_label(self):
        # The label says one shape, the fields another: the fields win.
        r = data.Row(dict(row("cuda-sm120", 8, 65, 16384), input="B=1 H=2 T=5 P=32"))
        self.assertEqual(r.dims, {"B": 8, "H": 8, "T": 65, "P": 16384})
        self.assertEqual(r.variant, "")
        r = data.Row(row("reference", 1, 5, 32, H=2, ragged=True, compacted=True, values="tree-dominant"))
        self.assertEqual(r.variant, "ragged compacted tree-dominant")
        self.assertEqual(r.label(), "B=1 H=2 T=5 P=32")
        traced = data.Row(row("reference", 2, 9, 300, trace="data/run_B1_T2_P3.h5", recorded_values=True))
        self.assertEqual((traced.dims, traced.variant), ({"B": 2, "H": 8, "T": 9, "P": 300}, "recorded values"))
        self.assertEqual(traced.label(), "run_B1_T2_P3.h5")
        self.assertNotEqual(traced.shape_key(), data.Row(row("reference", 2, 9, 300)).shape_key())

    def test_fixtures_carry_no_label(self):
        self.assertTrue(all("input" not in r for res, _, _ in fixtures().values() for r in res["rows"]))

    def test_ceilings_from_environment_and_rows(self):
        res = results("designs", grid(["cuda-sm120"], [1, 8], [33], [4096, 65536]), "cuda-sm120")
        self.assertEqual(data.ceilings(data.Run(res)), {"gemm": 800.0, "copy": 4.27, "mma": 640.0, "fma": 60.0})
        del res["environment"]["peaks"]
        derived = data.ceilings(data.Run(res))  # every row is compute-bound: the bandwidth stays unknown
        self.assertAlmostEqual(derived["gemm"], 800.0, places=6)
        self.assertAlmostEqual(derived["mma"], 640.0, places=6)
        self.assertAlmostEqual(derived["fma"], 60.0, places=6)
        self.assertNotIn("copy", derived)
        res["rows"].append(row("cuda-sm120", 1, 1, 64))  # a memory-bound row pins the bandwidth down
        self.assertAlmostEqual(data.ceilings(data.Run(res))["copy"], 4.27, places=6)

    def test_design_colours_fixed_and_distinct(self):
        known = list(style.DESIGN_COLOURS)
        self.assertEqual(len({style.design_colour(d) for d in known}), len(known))
        # Designs without a fixed colour get the same one in every process (figures of separate runs
        # match): compare with a process whose string hashing is seeded differently.
        names = ["my-new-design", "variant-a", "variant-b", "kokkos-new", "cuda-new"]
        code = ("import sys; sys.path.insert(0, %r); from plots import style; print(*[style.design_colour(n) for n in %r])"
                % (os.path.join(ROOT, "experiments"), names))
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONHASHSEED="12345"))
        self.assertEqual(other.returncode, 0, other.stderr)
        self.assertEqual(other.stdout.split(), [str(style.design_colour(n)) for n in names])
        self.assertEqual(style.design_colour("torch-reference"), style.PEER_COLOUR)


if __name__ == "__main__":
    unittest.main(verbosity=2)
