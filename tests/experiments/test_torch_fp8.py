#!/usr/bin/python3
"""experiments/peers/torch_reference.py in FP8: the pool written as the serving stacks write it, the
gathered rows dequantised to bf16 before the bmm, checked against an fp64 reference of the dequantised
pool; the shapes and dtypes of a canopy run config. The config and argument checks need no torch; the
rest runs on the CPU where torch is installed and is skipped, saying so, where it is not."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEERS = os.path.join(ROOT, "experiments", "peers")
PEER = os.path.join(PEERS, "torch_reference.py")
sys.path.insert(0, PEERS)
import torch_reference as tr  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def decode_e4m3(b):
    """e4m3fn by its definition (bias 7, no infinity, S.1111.111 NaN), independent of torch."""
    sign = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 0xF, b & 7
    if e == 15 and m == 7:
        return math.nan
    return sign * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def decode_e5m2(b):
    """e5m2 by its definition (bias 15, IEEE-like infinities and NaNs)."""
    sign = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 2) & 0x1F, b & 3
    if e == 31:
        return sign * math.inf if m == 0 else math.nan
    return sign * (m / 4 * 2.0 ** -14 if e == 0 else (1 + m / 4) * 2.0 ** (e - 15))


class ConfigGrid(unittest.TestCase):
    """No torch needed: what the peer runs for a config, and what it refuses."""

    def test_the_acceptance_config_gives_every_shape_in_both_dtypes(self):
        grid = tr.config_grid(os.path.join(ROOT, "experiments", "configs", "fp8.toml"))
        self.assertEqual(len(grid), 2 * 7 * 3 * 2)
        self.assertEqual({g[4] for g in grid}, {"bf16", "fp8-e4m3"})
        self.assertIn((8, 8, 1024, 65536, "fp8-e4m3", 1.0), grid)
        self.assertIn((1, 8, 16, 4096, "bf16", 1.0), grid)

    def write(self, d, text):
        path = os.path.join(d, "c.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_bad_configs_and_flags_exit_2_naming_the_key(self):
        cases = [
            ('[inputs]\nkv_dtype = "fp8"\n[[inputs.sweep]]\n', "inputs.sweep[0].kv_dtype"),
            ('[inputs]\nkv_scale = 0\n[[inputs.sweep]]\nkv_dtype = "fp8-e4m3"\n', "kv_scale must be a finite number > 0"),
            ('[[inputs.sweep]]\nkv_scale = nan\n', "kv_scale must be a finite number > 0"),
            ('[[inputs.sweep]]\nragged = true\n', "inputs.sweep[0].ragged"),
            ('[inputs]\ntraces = ["t.h5"]\n', "inputs.sweep"),
            ('[[inputs.sweep]\n', "c.toml"),
        ]
        with tempfile.TemporaryDirectory() as d:
            for text, needle in cases:
                with self.subTest(text=text):
                    out = subprocess.run([sys.executable, PEER, "--config", self.write(d, text)], capture_output=True,
                                         text=True)
                    self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
                    self.assertIn(needle, out.stderr)
        for flags, needle in ((["--kv-dtypes", "bf16,fp16"], "unknown kv dtype 'fp16'"),
                              (["--kv-scale", "-1", "--kv-dtypes", "fp8-e5m2"], "kv_scale"),
                              (["--kv-scale", "inf"], "kv_scale")):
            out = subprocess.run([sys.executable, PEER, *flags], capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
            self.assertIn(needle, out.stderr)


@unittest.skipIf(torch is None, "SKIP: torch is not installed")
class Fp8Pool(unittest.TestCase):
    def pool(self, n=64, amplitude=3.0):
        g = torch.Generator().manual_seed(5)
        x = (torch.rand(n, 576, generator=g) * 2 - 1) * amplitude
        x[3, :128] = 0  # an all-zero block: scale 1, not a division by zero
        return x.to(torch.bfloat16)

    def test_one_scale_bytes_are_x_over_the_scale_rounded_to_nearest(self):
        x = self.pool()
        # step: the spacing of a binade relative to its bottom (3 and 2 mantissa bits)
        for dtype, decode, step in (("fp8-e4m3", decode_e4m3, 2.0 ** -3), ("fp8-e5m2", decode_e5m2, 2.0 ** -2)):
            for scale in (1.0, 0.0371):
                with self.subTest(dtype=dtype, scale=scale):
                    stored = tr.quantise_pool(torch, x, dtype, scale)
                    self.assertEqual(tuple(stored.shape), (64, tr.KV_ROW_BYTES[dtype]))
                    self.assertEqual(stored.dtype, torch.uint8)
                    want = x.float().flatten().tolist()
                    got = [decode(b) for b in stored.flatten().tolist()]
                    for w, c in zip(want, got):
                        self.assertFalse(math.isnan(c))
                        # round to nearest: within half a step of the value's binade (relative), or of
                        # the subnormal spacing for tiny values
                        self.assertLessEqual(abs(c - w / scale), max(abs(w / scale) * step / 2 * 1.0001, 2.0 ** -9))
                    deq = tr.dequantise_rows(torch, stored, dtype, scale).float().flatten().tolist()
                    for c, v in zip(got, deq):
                        self.assertLessEqual(abs(v - c * scale), abs(c * scale) * 2.0 ** -8 + 1e-30)

    def test_block_scaled_rows_hold_codes_power_of_two_scales_and_the_bf16_rope(self):
        x = self.pool()
        stored = tr.quantise_pool(torch, x, "fp8-e4m3-blockscaled")
        self.assertEqual(tuple(stored.shape), (64, 656))
        scales = stored[:, 512:528].contiguous().view(torch.float32)
        for r in range(64):
            for blk in range(4):
                s = float(scales[r, blk])
                self.assertEqual(math.frexp(s)[0], 0.5, "a power of two")
                amax = float(x[r, blk * 128:(blk + 1) * 128].float().abs().max())
                if amax == 0:
                    self.assertEqual(s, 1.0)
                else:
                    self.assertLessEqual(amax / s, 448.0)
                    self.assertGreater(amax / s, 224.0)
        self.assertTrue(torch.equal(stored[:, 528:].contiguous().view(torch.bfloat16), x[:, 512:]))
        deq = tr.dequantise_rows(torch, stored, "fp8-e4m3-blockscaled").float()
        self.assertTrue(torch.equal(deq[:, 512:], x[:, 512:].float()), "the rope part is read as bf16, not FP8")
        codes = [decode_e4m3(b) for b in stored[:, :512].flatten().tolist()]
        want = torch.tensor(codes).view(64, 4, 128) * scales[..., None]
        self.assertTrue(torch.equal(deq[:, :512], want.view(64, 512)))

    def test_the_step_matches_the_fp64_reference_and_a_misread_scale_does_not(self):
        for dtype in tr.KV_DTYPES:
            scale = 0.5 if dtype in ("fp8-e4m3", "fp8-e5m2") else 1.0
            with self.subTest(dtype=dtype):
                step, forward = tr.make_step(torch, 2, 9, 70, 2, "cpu", dtype, scale)
                step["out"].fill_(float("nan"))  # poisoned: an unwritten element fails
                forward()
                self.assertTrue(bool(torch.isfinite(step["out"].float()).all()))
                err = tr.check_step(torch, step, dtype, scale)
                self.assertGreater(err, 0)  # bf16 products against fp64: never exactly equal
                self.assertLessEqual(err, tr.CHECK_REL_L2)
        # The same step with the rows dequantised without their scale fails the check.
        real = tr.dequantise_rows
        try:
            tr.dequantise_rows = lambda t, rows, d, s=1.0: real(t, rows, d, 1.0)
            step, forward = tr.make_step(torch, 2, 9, 70, 2, "cpu", "fp8-e4m3", 0.5)
            forward()
            tr.dequantise_rows = real
            self.assertGreater(tr.check_step(torch, step, "fp8-e4m3", 0.5), tr.CHECK_REL_L2)
        finally:
            tr.dequantise_rows = real


if __name__ == "__main__":
    unittest.main()
