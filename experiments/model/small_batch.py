#!/usr/bin/env python3
"""Small batches: what a split design's step costs besides its KV tiles, from a split-count sweep.

At B = 1 a step is one grid of (row tiles x splits) CTAs and a combine over the rows' partials.
With the launcher's split rule (beginTile: chunk = ceil((P + T) / nsplit) rounded up to the KV tile,
the CTA of split s takes [s * chunk, (s + 1) * chunk); arch_model.block_tiles replicates it), one
CTA per SM (cuda-sm90's 200 KB of shared memory) and every CTA of a wave as long as its longest
split, the model is

    t = fixed + per_tile * waves * tiles_per_split + per_mb * partial_mb

  waves           ceil(row tiles x active splits / SMs)
  tiles_per_split chunk / 64
  partial_mb      rows x active splits x (512 + 1) x 4 bytes: the fp32 partial O and lse rows the
                  split kernel writes and the combine reads (MB, 1e6 bytes)
  fixed           what no split count removes: graph launch, the first CTA's prologue (Q, slots,
                  the window), the gap to the combine and the combine's own launch

fitted by least squares to the rows of a committed sweep (canopy run results.json with explicit
NSPLIT; default the cuda-sm90 sweep docs/results/h200-sm90/run11-combine/nsplit.json). It prints the
fit, each row's prediction, and for each target (B = 1 shapes and the time the issue asks for) the
best split count and the fixed cost that the target leaves once the tiles and partials are paid.
With the launch floor (`canopy peaks` measures it: graph replay of an empty split grid and an empty
combine grid; `canopy run` records it in its results' environment, where this script finds it, or
--floor) the fixed cost is split into that floor and what the kernels' prologues, epilogues and the
combine's body add.

    experiments/model/small_batch.py [--results FILE] [--design cuda-sm90] [--floor US]
                                     [--target T,P,US ...] [--sms 132]
    experiments/model/small_batch.py --self-test
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import arch_model  # noqa: E402  (the launcher's split rule: block_tiles)
from plots.data import launch_floor_us  # noqa: E402  (the floor in a results environment's peaks text)

DEFAULT_RESULTS = os.path.join(HERE, "..", "..", "docs", "results", "h200-sm90", "run11-combine", "nsplit.json")
SM90 = arch_model.DESIGNS["cuda-sm90"]  # 64-row CTAs (heads x nodes folded), 64-key tiles
D_V = 512       # value columns: a partial row is D_V floats and its lse
# The issue-24 targets at B = 1, H = 8: T = 17, P = 16K <= 25 us; 2x the PyTorch reference of the
# budget study at P = 4K, T = 16 (36.4 us) and P = 16K, T = 16 (63.2 us).
DEFAULT_TARGETS = ["17,16384,25", "16,4096,18.2", "16,16384,31.6"]


def geometry(T, P, H, nsplit, sms):
    """(row tiles, active splits, tiles per split, waves, partial MB) of a B = 1 step."""
    live = [n for n in arch_model.block_tiles(SM90, 1, T, P, nsplit, H) if n]  # empty splits exit at once
    row_tiles = math.ceil(T * H / SM90.rows)
    active = len(live) // row_tiles
    waves = math.ceil(len(live) / sms)
    partial_mb = T * H * active * (D_V + 1) * 4 / 1e6
    return row_tiles, active, max(live), waves, partial_mb


def features(T, P, H, nsplit, sms):
    _, _, tiles, waves, mb = geometry(T, P, H, nsplit, sms)
    return [1.0, waves * tiles, mb]


def solve(a, b):
    """Gaussian elimination with partial pivoting: a x = b (a small dense system)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-12:
            raise ValueError("singular system: the sweep does not separate the model's terms")
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(rows, sms):
    """Least squares of t (us) on the features; rows are (T, P, H, nsplit, us)."""
    xs = [features(T, P, H, n, sms) for T, P, H, n, _ in rows]
    ys = [us for *_, us in rows]
    k = len(xs[0])
    ata = [[sum(x[i] * x[j] for x in xs) for j in range(k)] for i in range(k)]
    aty = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(k)]
    return solve(ata, aty)


def predict(coef, T, P, H, nsplit, sms):
    return sum(c * f for c, f in zip(coef, features(T, P, H, nsplit, sms)))


def load(path, design):
    """(T, P, H, splits, us) of the B = 1 rows of `design` with an explicit split count, and the
    launch floor the run recorded (None where its build did not measure one)."""
    with open(path) as f:
        doc = json.load(f)
    rows = []
    for r in doc["rows"]:
        if r.get("design") != design or r.get("status") != "ok" or r.get("batch") != 1 or not r.get("nsplit"):
            continue
        rows.append((r["tree"], r["prefix"], r["heads"], r["nsplit"], r["median_s"] * 1e6))
    if len(rows) < 4:
        raise ValueError(f"{path}: {len(rows)} B = 1 rows of {design} with an explicit NSPLIT; the fit needs 4 or more")
    return rows, launch_floor_us(doc.get("environment", {}).get("peaks"))


def report(rows, coef, sms, targets, heads, floor):
    fixed, per_tile, per_mb = coef
    print(f"fit over {len(rows)} rows: t = {fixed:.1f} us + {per_tile:.2f} us x waves x tiles per split"
          f" + {per_mb:.3f} us x partial MB")
    print()
    print("| T | P | NSPLIT | waves x tiles | partial MB | measured us | model us | error |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for T, P, H, n, us in rows:
        _, _, tiles, waves, mb = geometry(T, P, H, n, sms)
        m = predict(coef, T, P, H, n, sms)
        err = (m - us) / us
        worst = max(worst, abs(err))
        print(f"| {T} | {P} | {n} | {waves * tiles} | {mb:.1f} | {us:.1f} | {m:.1f} | {100 * err:+.1f}% |")
    print(f"\nworst error {100 * worst:.1f}%")
    if floor is not None:
        print(f"launch floor (canopy peaks, split + combine grids): {floor:.1f} us of the {fixed:.1f} us fixed cost;"
              f" the kernels' prologues, epilogues and the combine's body: {fixed - floor:.1f} us")
    print()
    print("| target | best NSPLIT | model us | tiles + partials us | fixed cost the target leaves |")
    print("|---|---:|---:|---:|---:|")
    for T, P, goal in targets:
        best = min(range(1, 129), key=lambda n: predict(coef, T, P, heads, n, sms))
        m = predict(coef, T, P, heads, best, sms)
        variable = m - fixed
        print(f"| T={T} P={P} <= {goal:g} us | {best} | {m:.1f} | {variable:.1f} | {goal - variable:.1f} us"
              f" (now {fixed:.1f}) |")
    return worst


def self_test():
    # Geometry worked out by hand: T = 17, H = 8 is 136 rows, 3 row tiles; P = 16K + 17 keys over 43
    # splits is a 382-key chunk rounded to 384 (6 tiles), 43 active splits, 129 CTAs: one wave.
    assert geometry(17, 16384, 8, 43, 132) == (3, 43, 6, 1, 17 * 8 * 43 * 513 * 4 / 1e6)
    # T = 65: 520 rows, 9 row tiles; 16 splits of 1,029 -> 1,088 keys (17 tiles), 16 active: 144 CTAs,
    # two waves.
    rt, act, tiles, waves, _ = geometry(65, 16384, 8, 16, 132)
    assert (rt, act, tiles, waves) == (9, 16, 17, 2), (rt, act, tiles, waves)
    # A split count past the keys leaves splits empty: 100 keys over 8 splits of 13 -> 64 keys, 2 active.
    assert geometry(4, 96, 8, 8, 132)[1] == 2
    # The fit recovers a model it was generated from.
    truth = [7.0, 2.2, 0.15]
    rows = [(T, P, 8, n, predict(truth, T, P, 8, n, 132))
            for T in (17, 65) for P in (4096, 16384) for n in (4, 8, 16, 24, 32, 43, 64)]
    got = fit(rows, 132)
    assert all(abs(g - t) < 1e-6 for g, t in zip(got, truth)), got
    # The floor as `canopy run` records it in its environment's peaks text.
    assert launch_floor_us("fp32 FMA 65.3 TFLOP/s (registers); launch floor 4.5 µs one grid, 7.25 µs with a "
                        "combine grid (132 blocks of 384 threads and 227 KB shared)") == 7.25
    assert launch_floor_us("fp32 FMA 65.3 TFLOP/s (registers, 64 warps/SM, median of 5)") is None
    # And it refuses a sweep that cannot separate the terms (one row repeated).
    try:
        fit([(17, 4096, 8, 8, 30.0)] * 5, 132)
    except ValueError:
        pass
    else:
        raise AssertionError("a singular sweep was fitted")
    print("small_batch self-test: ok")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=DEFAULT_RESULTS, help="results.json of a split-count sweep")
    ap.add_argument("--design", default="cuda-sm90")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--heads", type=int, default=8, help="heads of the target shapes")
    ap.add_argument("--floor", type=float, help="the launch floor in us (default: the one the run recorded)")
    ap.add_argument("--target", action="append", help="T,P,US (repeatable; default the issue's B = 1 targets)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    try:
        targets = [tuple(float(v) if i == 2 else int(v) for i, v in enumerate(t.split(",")))
                   for t in (a.target or DEFAULT_TARGETS)]
        if any(len(t) != 3 for t in targets):
            raise ValueError("a target is T,P,US")
        rows, recorded_floor = load(a.results, a.design)
        coef = fit(rows, a.sms)
    except (OSError, ValueError, KeyError) as e:
        print(f"small_batch: {e}", file=sys.stderr)
        return 2
    report(rows, coef, a.sms, targets, a.heads, a.floor if a.floor is not None else recorded_floor)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
