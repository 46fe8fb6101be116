#!/usr/bin/python3
"""The budget study in one command: DDTree traces for each (B, T, P) of a grid, `canopy run`, the
PyTorch reference where a GPU and torch are present, then the verify-latency curve (table, figures)
and the latency model a budget controller loads (latency_model.py).

    experiments/budget/budget_study.py --config experiments/configs/budget-study.toml \\
        --canopy build/full/experiments/canopy --out out/budget-study [--peer auto|torch|none] \\
        [--profile math500 --batch 1,8 --tree 16,32,...,1024 --prefix 4096,16384,65536]

The grid is given by the flags (defaults: the study above); the config holds everything else of the
run (experiment, designs, options) and no [inputs]: the study writes the trace list into
OUT/run-config.toml and runs that. A missing trace is synthesized first with `canopy trace synth`
(drafter profile, budget T - 1 so the tree has T nodes, B requests at a fixed prompt of P tokens,
STEPS steps, a pool that starts fragmented in runs of 16 slots). Writes into OUT: traces/, run/
(canopy run's results), synth/ (the traces' statistics), and budget/: results.json (canopy and peer
rows; their batch, heads, tree and prefix fields are the grid point: prefix is the prompt P),
budget-curve.md and .csv, latency_model.json, acceptance.json, and the figures (plot.py).
`--tables-from DIR` writes the curve, the model and the figures again from DIR's results.json and
acceptance.json alone (no run).
Exit codes: those of canopy run (0 ok, 1 a design failed its check, 2 bad input, 3 runtime).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import latency_model  # noqa: E402
from plots.data import size_label  # noqa: E402

STEPS = 3          # verify steps per trace: the row's median is over STEPS trees per request
INITIAL_RUN = 16   # fragmented pool: shuffled runs of 16 slots (as the synthetic sweeps' mean_run)
HEADS = 8
PEER = "torch-gather-bmm"
GRID = {"profile": "math500", "batch": "1,8", "tree": "16,32,64,128,256,512,1024", "prefix": "4096,16384,65536"}


def trace_name(profile, B, T, P):
    """The file the study writes for one grid point (a name for people; the study never reads it back)."""
    return f"ddtree_{profile}_B{B}_T{T}_P{size_label(P)}.h5"


def grid_point(B, T, P):
    """The axis fields of a grid point, as the study's rows carry them: a row stands for its grid
    point (P the prompt, T nodes in every request), not for its trace's small spread over the steps,
    so canopy's rows and the peer's (which times exactly that shape) are the same input."""
    return {"batch": B, "heads": HEADS, "tree": T, "prefix": P, "ragged": False}


def shape_of(row):
    return row["batch"], row["tree"], row["prefix"]


def template_text(template):
    """The config's text; raises ValueError when it has its own [inputs] (the study owns the inputs)."""
    with open(template, "rb") as f:
        if "inputs" in tomllib.load(f):
            raise ValueError(f"{template}: has [inputs]; the study writes the trace list itself (--batch, --tree, "
                             "--prefix, --profile)")
    with open(template, encoding="utf-8") as f:
        return f.read()


def write_run_config(text, traces, path):
    """The config canopy runs: the template's text and an [inputs] table listing the traces."""
    listed = "".join(f"  {json.dumps(t)},\n" for t in traces)  # a JSON string is a TOML basic string
    text += f'\n# Written by budget_study.py: one trace per grid point.\n[inputs]\ngroup_by = "trace"\ntraces = [\n{listed}]\n'
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


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
            rows.append({"design": PEER, **grid_point(B, T, P), "status": "ok" if r["finite"] else "FAILED",
                         "note": r["device"], "steps": 1, "samples": samples,
                         "median_s": r["median_us"] * 1e-6, "p10_s": r["p10_us"] * 1e-6, "p90_s": r["p90_us"] * 1e-6,
                         "mode": "graph", "l2_flush": True})
        except Exception as e:  # noqa: BLE001 (out of memory at the largest shapes is a result too)
            rows.append({"design": PEER, **grid_point(B, T, P), "status": "unsupported",
                         "note": str(e).splitlines()[0][:200]})
        torch.cuda.empty_cache()
    return rows


def analyze(results, grid_of_trace, peer_rows, acceptance, out):
    """Gives canopy's trace rows their grid point (by their `trace` field), adds the peer's rows and
    writes results.json, the curve and the model into out."""
    rows = []
    for r in results["rows"]:
        point = grid_of_trace.get(r.get("trace"))
        if point is not None:
            rows.append(dict(r, **grid_point(*point)))
    merged = dict(results, rows=rows + peer_rows, experiment=results.get("experiment", "budget-study"))
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "results.json"), merged)
    write_json(os.path.join(out, "acceptance.json"), {str(k): v for k, v in sorted(acceptance.items())})
    return write_tables(merged, acceptance, out)


def write_tables(results, acceptance, out):
    """The latency model and the curve from the rows' grid fields; returns the model."""
    points, unsupported = {}, {}
    for r in results["rows"]:
        B, T, P = shape_of(r)
        if r.get("status") == "ok" and float(r.get("median_s") or 0) > 0:
            points.setdefault(r["design"], []).append((B, P, T, float(r["median_s"])))
        else:
            unsupported.setdefault(r["design"], []).append(f"B={B} T={T} P={size_label(P)}: {r.get('status')}")
    env = results.get("environment", {})
    source = {"experiment": results.get("experiment"), "device": env.get("device", ""), "git": env.get("git", ""),
              "config": env.get("config", ""), "date": env.get("date", ""), "heads": HEADS,
              "label": "H200 (sm_90) proxy for the sm_120 target" if "H200" in env.get("device", "") else ""}
    model = latency_model.build_model(points, source, unsupported)
    write_json(os.path.join(out, "latency_model.json"), model)
    write_curve(results["rows"], model, acceptance, out)
    return model


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def write_curve(rows, model, acceptance, out):
    designs = list(dict.fromkeys(r["design"] for r in rows))
    shapes = sorted({(B, P, T) for B, T, P in (shape_of(r) for r in rows)})
    cell = {(r["design"], shape_of(r)): r for r in rows}
    lines = ["| B | P | T | " + " | ".join(f"{d} µs" for d in designs) + " |",
             "|---:|---:|---:|" + "---:|" * len(designs)]
    csv = ["B,P,T," + ",".join(designs)]
    for B, P, T in shapes:
        key = (B, T, P)
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


def ints(text):
    return [int(x) for x in text.split(",") if x]


def plot(out, fmt):
    cmd = [sys.executable, os.path.join(os.path.dirname(HERE), "plot.py"), os.path.join(out, "results.json"),
           "--format", fmt, "--model", os.path.join(out, "latency_model.json")]
    subprocess.run(cmd, check=False)


def tables_from(folder, out, args):
    """The curve, the model and the figures again from a study's budget/ folder."""
    with open(os.path.join(folder, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    with open(os.path.join(folder, "acceptance.json"), encoding="utf-8") as f:
        acceptance = {int(t): v for t, v in json.load(f).items()}
    os.makedirs(out, exist_ok=True)
    if os.path.abspath(out) != os.path.abspath(folder):
        write_json(os.path.join(out, "results.json"), results)
    model = write_tables(results, acceptance, out)
    if not args.no_plots:
        plot(out, args.format)
    print(f"wrote {out}/budget-curve.md, latency_model.json ({len(model['designs'])} designs)")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="experiments/configs/budget-study.toml",
                    help="canopy run config without [inputs] (experiment, designs, options)")
    ap.add_argument("--canopy", default="build/full/experiments/canopy")
    ap.add_argument("--out", default="out/budget-study")
    ap.add_argument("--profile", default=GRID["profile"], help="drafter profile of canopy trace synth")
    ap.add_argument("--batch", default=GRID["batch"], help="requests per step, comma-separated")
    ap.add_argument("--tree", default=GRID["tree"], help="tree nodes per request (DDTree budget + 1), comma-separated")
    ap.add_argument("--prefix", default=GRID["prefix"], help="prompt tokens per request, comma-separated")
    ap.add_argument("--peer", choices=("auto", "torch", "none"), default="auto",
                    help="PyTorch reference: auto = when torch sees a CUDA device")
    ap.add_argument("--peer-samples", type=int, default=30)
    ap.add_argument("--format", default="png,pdf", help="figure formats for plot.py")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--tables-from", metavar="DIR",
                    help="no run: write the curve, model and figures into --out from DIR/results.json and "
                         "DIR/acceptance.json (a study's budget/ folder)")
    ap.add_argument("--shards", type=int, default=1,
                    help="run the config as N shards one after the other (canopy run --shard K/N into shards/shard-K, "
                         "then canopy merge); a shard whose results exist is not run again, so a study cut short "
                         "resumes where it stopped")
    args = ap.parse_args(argv)
    if args.tables_from:
        return tables_from(args.tables_from, args.out, args)
    if args.shards < 1:
        print(f"budget_study: --shards must be at least 1, got {args.shards}", file=sys.stderr)
        return 2
    try:
        grid = [(B, T, P) for B in ints(args.batch) for P in ints(args.prefix) for T in ints(args.tree)]
    except ValueError as e:
        print(f"budget_study: --batch, --tree and --prefix take comma-separated integers ({e})", file=sys.stderr)
        return 2
    if not grid or min(min(g) for g in grid) < 1:
        print("budget_study: the grid is empty or has a value below 1", file=sys.stderr)
        return 2
    trace_dir, synth_dir = os.path.join(args.out, "traces"), os.path.join(args.out, "synth")
    grid_of_trace, acceptance = {}, {}
    try:
        template = template_text(args.config)
        os.makedirs(synth_dir, exist_ok=True)
        for B, T, P in grid:
            name = trace_name(args.profile, B, T, P)
            path = os.path.join(trace_dir, name)
            summary = os.path.join(synth_dir, name[:-3] + ".json")
            if not os.path.exists(path) or not os.path.exists(summary):
                synth(args.canopy, path, args.profile, B, T, P, summary)
            with open(summary, encoding="utf-8") as f:
                acceptance.setdefault(T, []).append(json.load(f)["mean_accepted"])
            grid_of_trace[path] = (B, T, P)
        config = os.path.join(args.out, "run-config.toml")
        write_run_config(template, list(grid_of_trace), config)
    except (ValueError, OSError, tomllib.TOMLDecodeError) as e:
        print(f"budget_study: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        return e.returncode
    run_dir = os.path.join(args.out, "run")
    rc = run_canopy(args.canopy, config, run_dir, args.shards)
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
    model = analyze(results, grid_of_trace, peer_rows, curve, out)
    if not args.no_plots:
        plot(out, args.format)
    print(f"wrote {out}/budget-curve.md, latency_model.json ({len(model['designs'])} designs)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
