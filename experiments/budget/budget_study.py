#!/usr/bin/python3
"""The budget study in one command: DDTree traces for each (B, T, P) of a config, `canopy run`, the
PyTorch reference where a GPU and torch are present, then the verify-latency curve (table, figures)
and the latency model a budget controller loads (latency_model.py).

    experiments/budget/budget_study.py --config experiments/configs/budget-study.toml \\
        --canopy build/full/experiments/canopy --out out/budget-study [--peer auto|torch|none]

The grid comes from the config's trace names, ddtree_<profile>_B<b>_T<t>_P<p>.h5 (P as 4K, 16K, ...):
a missing trace is synthesized first with `canopy trace synth` (drafter profile <profile>, budget
T - 1 so the tree has T nodes, b requests at a fixed prompt of P tokens, STEPS steps, a pool that
starts fragmented in runs of 16 slots). Writes into OUT: run/ (canopy run's results), synth/ (the
traces' statistics), and budget/: results.json (canopy and peer rows, inputs as "B= H= T= P="),
budget-curve.md and .csv, latency_model.json, acceptance.json, and the figures (plot.py).
Exit codes: those of canopy run (0 ok, 1 a design failed its check, 2 bad input, 3 runtime).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import latency_model  # noqa: E402
from plots.data import parse_input, size_label  # noqa: E402

NAME = re.compile(r"ddtree_(?P<profile>[a-z0-9]+)_B(?P<B>\d+)_T(?P<T>\d+)_P(?P<P>\d+)(?P<unit>[KM]?)\.h5$")
STEPS = 3          # verify steps per trace: the row's median is over STEPS trees per request
INITIAL_RUN = 16   # fragmented pool: shuffled runs of 16 slots (as the synthetic sweeps' mean_run)
HEADS = 8
PEER = "torch-gather-bmm"


def shape_label(B, T, P):
    """The input label of a (B, T, P) row, as canopy run writes synthetic inputs."""
    return f"B={B} H={HEADS} T={T} P={size_label(P)}"


def shape_of(label):
    """(B, T, P) of a shape_label."""
    dims, _ = parse_input(label)
    return dims["B"], dims["T"], dims["P"]


def parse_trace_name(path):
    m = NAME.search(os.path.basename(path))
    if not m:
        raise ValueError(f"inputs.traces: '{path}' is not named ddtree_<profile>_B<b>_T<t>_P<p>.h5")
    scale = {"": 1, "K": 1024, "M": 1024 * 1024}[m.group("unit")]
    return m.group("profile"), int(m.group("B")), int(m.group("T")), int(m.group("P")) * scale


def synth(canopy, path, profile, B, T, P, summary):
    output = 16 * STEPS + 1  # at most 16 tokens accepted per step: no request finishes while recorded
    slots = math.ceil(1.25 * B * (P + output + T)) + P + output + T + 2
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    cmd = [canopy, "trace", "synth", "--out", path, "--drafter", profile, "--budget", str(T - 1),
           "--concurrency", str(B), "--prompt", str(P), "--output", str(output), "--steps", str(STEPS),
           "--heads", str(HEADS), "--num-slots", str(slots), "--initial-run", str(INITIAL_RUN), "--seed", "1",
           "--summary", summary, "--quiet"]
    subprocess.run(cmd, check=True)


def run_canopy(canopy, config, run_dir, shards):
    """canopy run of the config into run_dir, or shard by shard (skipping finished shards) and merged.
    Returns the worst exit code: 0 ok, 1 a design failed its check, else an error."""
    if shards == 1:
        return subprocess.run([canopy, "run", config, "--out", run_dir, "--overwrite"]).returncode
    rcs, dirs = [], []
    for k in range(shards):
        shard_dir = os.path.join(os.path.dirname(run_dir), "shards", f"shard-{k}")
        dirs.append(shard_dir)
        if os.path.exists(os.path.join(shard_dir, "results.json")):
            continue
        rcs.append(subprocess.run([canopy, "run", config, "--out", shard_dir, "--shard", f"{k}/{shards}",
                                   "--overwrite"]).returncode)
        if rcs[-1] not in (0, 1):
            return rcs[-1]
    rc = subprocess.run([canopy, "merge", *dirs, "--out", run_dir, "--overwrite"]).returncode
    return rc if rc != 0 else max(rcs, default=0)


def torch_rows(grid, samples, warmup):
    """PyTorch gather + bmm reference (experiments/peers/torch_reference.py) on every (B, T, P)."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
    import torch  # noqa: F401
    import torch_reference
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    rows = []
    for B, T, P in grid:
        try:
            r = torch_reference.bench_shape(torch, B, T, P, HEADS, samples, warmup, flush)
            rows.append({"design": PEER, "input": shape_label(B, T, P), "status": "ok"
                         if r["finite"] else "FAILED", "note": r["device"], "steps": 1, "samples": samples,
                         "median_s": r["median_us"] * 1e-6, "p10_s": r["p10_us"] * 1e-6, "p90_s": r["p90_us"] * 1e-6,
                         "mode": "graph", "l2_flush": True})
        except Exception as e:  # noqa: BLE001 (out of memory at the largest shapes is a result too)
            rows.append({"design": PEER, "input": shape_label(B, T, P), "status": "unsupported",
                         "note": str(e).splitlines()[0][:200]})
        torch.cuda.empty_cache()
    return rows


def analyze(results, trace_dims, peer_rows, acceptance, out):
    """Relabels canopy's trace rows with their (B, T, P), adds the peer, writes the curve and model."""
    os.makedirs(out, exist_ok=True)
    rows, unsupported = [], {}
    for r in results["rows"]:
        dims = trace_dims.get(r.get("input"))
        if dims is None:
            continue
        B, T, P = dims
        r = dict(r, input=shape_label(B, T, P), trace=r.get("input"))
        rows.append(r)
    rows += peer_rows
    points = {}
    for r in rows:
        B, T, P = shape_of(r["input"])
        if r.get("status") == "ok" and float(r.get("median_s") or 0) > 0:
            points.setdefault(r["design"], []).append((B, P, T, float(r["median_s"])))
        else:
            unsupported.setdefault(r["design"], []).append(f"B={B} T={T} P={size_label(P)}: {r.get('status')}")
    env = results.get("environment", {})
    source = {"experiment": results.get("experiment"), "device": env.get("device", ""), "git": env.get("git", ""),
              "config": env.get("config", ""), "date": env.get("date", ""), "heads": HEADS,
              "label": "H200 (sm_90) proxy for the sm_120 target" if "H200" in env.get("device", "") else ""}
    model = latency_model.build_model(points, source, unsupported)
    merged = dict(results, rows=rows, experiment=results.get("experiment", "budget-study"))
    write_json(os.path.join(out, "results.json"), merged)
    write_json(os.path.join(out, "latency_model.json"), model)
    write_json(os.path.join(out, "acceptance.json"), {str(k): v for k, v in sorted(acceptance.items())})
    write_curve(rows, model, acceptance, out)
    return model


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def write_curve(rows, model, acceptance, out):
    designs = list(dict.fromkeys(r["design"] for r in rows))
    shapes = sorted({(B, P, T) for B, T, P in (shape_of(r["input"]) for r in rows)})
    cell = {(r["design"], r["input"]): r for r in rows}
    lines = ["| B | P | T | " + " | ".join(f"{d} µs" for d in designs) + " |",
             "|---:|---:|---:|" + "---:|" * len(designs)]
    csv = ["B,P,T," + ",".join(designs)]
    for B, P, T in shapes:
        key = shape_label(B, T, P)
        vals, cvals = [], []
        for d in designs:
            r = cell.get((d, key))
            ok = r is not None and r.get("status") == "ok" and float(r.get("median_s") or 0) > 0
            vals.append(f"{float(r['median_s']) * 1e6:.1f}" if ok else (r.get("status", "-") if r else "-"))
            cvals.append(f"{float(r['median_s']):.6e}" if ok else "")
        lines.append(f"| {B} | {size_label(P)} | {T} | " + " | ".join(vals) + " |")
        csv.append(f"{B},{P},{T}," + ",".join(cvals))
    lines += ["", f"Latency model fit ({latency_model.FORM}, seconds; relative error over "
              "the measured points):", "", "| design | points | max rel. error | median rel. error | max T |",
              "|---|---:|---:|---:|---:|"]
    for name, d in model["designs"].items():
        f = d["fit"]
        lines.append(f"| {name} | {f['points']} | {100 * f['max_rel_error']:.1f}% | "
                     f"{100 * f['median_rel_error']:.1f}% | {d['max_tree']} |")
    if acceptance:
        lm = latency_model.LatencyModel(model)
        lines += ["", "Acceptance curve of the synthesized traces (mean accepted length per request and step, "
                  "bonus token included): " + ", ".join(f"T={t}: {a:.2f}" for t, a in sorted(acceptance.items())),
                  "", "Best tree size by rate(T) = B tau(T) / (61 x verify(T)) (attention only, 61 layers; no "
                  "draft or other cost):", "", "| design | B | P | best T | tokens/s |", "|---|---:|---:|---:|---:|"]
        for name in model["designs"]:
            for B, P in sorted({(b, p) for b, p, _ in shapes}):
                try:
                    T, rate, _ = lm.best_budget(name, B, P, acceptance, layers=61)
                    lines.append(f"| {name} | {B} | {size_label(P)} | {T} | {rate:.0f} |")
                except ValueError:
                    pass
    with open(os.path.join(out, "budget-curve.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "budget-curve.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(csv) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="experiments/configs/budget-study.toml")
    ap.add_argument("--canopy", default="build/full/experiments/canopy")
    ap.add_argument("--out", default="out/budget-study")
    ap.add_argument("--peer", choices=("auto", "torch", "none"), default="auto",
                    help="PyTorch reference: auto = when torch sees a CUDA device")
    ap.add_argument("--peer-samples", type=int, default=30)
    ap.add_argument("--format", default="png,pdf", help="figure formats for plot.py")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--shards", type=int, default=1,
                    help="run the config as N shards one after the other (canopy run --shard K/N into shards/shard-K, "
                         "then canopy merge); a shard whose results exist is not run again, so a study cut short "
                         "resumes where it stopped")
    args = ap.parse_args(argv)
    if args.shards < 1:
        print(f"budget_study: --shards must be at least 1, got {args.shards}", file=sys.stderr)
        return 2
    with open(args.config, "rb") as f:
        config = tomllib.load(f)
    traces = config.get("inputs", {}).get("traces", [])
    if isinstance(traces, str):
        traces = [traces]
    if not traces:
        print(f"budget_study: {args.config}: inputs.traces is empty", file=sys.stderr)
        return 2
    synth_dir = os.path.join(args.out, "synth")
    os.makedirs(synth_dir, exist_ok=True)
    trace_dims, acceptance, grid = {}, {}, []
    try:
        for path in traces:
            profile, B, T, P = parse_trace_name(path)
            summary = os.path.join(synth_dir, os.path.basename(path)[:-3] + ".json")
            if not os.path.exists(path) or not os.path.exists(summary):
                synth(args.canopy, path, profile, B, T, P, summary)
            with open(summary, encoding="utf-8") as f:
                acceptance.setdefault(T, []).append(json.load(f)["mean_accepted"])
            trace_dims[os.path.basename(path)] = (B, T, P)
            grid.append((B, T, P))
    except ValueError as e:
        print(f"budget_study: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        return e.returncode
    run_dir = os.path.join(args.out, "run")
    rc = run_canopy(args.canopy, args.config, run_dir, args.shards)
    if rc not in (0, 1):
        return rc
    peer_path = os.path.join(args.out, "peer.json")  # the peer's rows, kept so a resumed study reuses them
    peer_rows = []
    if args.peer != "none" and os.path.exists(peer_path):
        with open(peer_path, encoding="utf-8") as f:
            peer_rows = json.load(f)
    elif args.peer != "none":
        try:
            peer_rows = torch_rows(grid, args.peer_samples, 3)
            write_json(peer_path, peer_rows)
        except (ImportError, RuntimeError) as e:
            if args.peer == "torch":
                print(f"budget_study: --peer torch: {e}", file=sys.stderr)
                return 3
            print(f"budget_study: no PyTorch reference ({e})")
    with open(os.path.join(run_dir, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    curve = {T: sum(v) / len(v) for T, v in acceptance.items()}
    out = os.path.join(args.out, "budget")
    model = analyze(results, trace_dims, peer_rows, curve, out)
    if not args.no_plots:
        plot = [sys.executable, os.path.join(os.path.dirname(HERE), "plot.py"), os.path.join(out, "results.json"),
                "--format", args.format, "--model", os.path.join(out, "latency_model.json")]
        subprocess.run(plot, check=False)
    print(f"wrote {out}/budget-curve.md, latency_model.json ({len(model['designs'])} designs)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
