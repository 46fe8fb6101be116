"""The figures of a run, each chosen from what varies in it and each answering one question:

    <name>_prefix    time per verify step vs prefix length P, one line per design, a panel per (B, T)
    <name>_tree      time per verify step vs tree size T (the budget curve), a panel per (B, P)
    <name>_roofline  achieved TFLOP/s vs arithmetic intensity, with the run's measured ceilings
    <name>_speedup   speedup against the run's baseline over (T, P), a heat map per design and B
    <name>_options   an option sweep (NSPLIT, workspace, graph vs eager, mask, KV slots) per shape
    <name>_kv_dtype  FP8 KV cache against bf16: each FP8 row's speed-up over its bf16 row, per shape
                     (and <name>_kv_dtype.md, the same pairs as a table: kv_dtype.table)

A figure whose axis does not vary is skipped with the reason; none of them needs more than one row
except the line figures (an axis with >= 3 values) and the heat map (a baseline and another design).
"""
import math
import os

import matplotlib.colors as mcolors
import matplotlib.patches as mpatches
import numpy as np

from . import data, kv_dtype, style

MIN_LINE_POINTS = 3


def _panel_grid(run, panel_dims):
    """Panels for the dims that vary besides the x axis: (keys, nrows, ncols)."""
    values = [run.values(d) for d in panel_dims]
    keys = [()]
    for vals in values:
        keys = [k + (v,) for k in keys for v in vals]
    present = {tuple(r.get(d) for d in panel_dims) for r in run.rows}
    keys = [k for k in keys if k in present]
    if len(values) == 2 and len(keys) == len(values[0]) * len(values[1]) and len(values[1]) <= 4:
        return keys, len(values[0]), len(values[1])
    ncols = min(len(keys), 3)
    return keys, math.ceil(len(keys) / ncols), ncols


def _dim_label(dim, value):
    return f"{dim}={data.size_label(value) if dim == 'P' else value}"


def _caption_timing(run):
    reps = run.repetitions
    return f"Median time per verify step{f' over {reps} repetitions per step' if reps else ''}; " \
           "bars: p10-p90."


def _line_figure(run, x_dim, kind, x_label, question):
    xs = run.values(x_dim)
    if len(xs) < MIN_LINE_POINTS:
        return None, f"{x_dim} takes {len(xs)} value(s), a line needs {MIN_LINE_POINTS}"
    panel_dims = [d for d in data.DIMS if d != x_dim and run.varies(d)]
    keys, nrows, ncols = _panel_grid(run, panel_dims)
    option_axes = run.option_axes()
    series = sorted({run.series_key(r, option_axes) for r in run.rows},
                    key=lambda k: (run.designs().index(k[0]),) + data.tuple_key(k[1:]))
    option_combos = sorted({k[1:] for k in series}, key=data.tuple_key)
    width = style.ONE_COLUMN_IN if ncols == 1 else style.TWO_COLUMN_IN
    legend_cols = min(len(series), 4 if width > 4 else 2)
    fig, axes, legend_ax = style.figure(nrows, ncols, width, 1.75 if ncols > 1 else 2.2,
                                        legend_rows=math.ceil(len(series) / legend_cols), sharex=True, sharey=True)
    scale, unit = style.time_unit([r.p90 for r in run.rows])
    handles, points = {}, {}
    for idx, key in enumerate(keys):
        ax = axes[idx // ncols][idx % ncols]
        rows = [r for r in run.rows if tuple(r.get(d) for d in panel_dims) == key and r.get(x_dim) is not None]
        for s in series:
            pts = sorted(((r.get(x_dim), r) for r in rows if run.series_key(r, option_axes) == s), key=lambda p: p[0])
            if not pts:
                continue
            x = [p[0] for p in pts]
            y = np.array([p[1].median for p in pts]) * scale
            lo = y - np.array([p[1].p10 for p in pts]) * scale
            hi = np.array([p[1].p90 for p in pts]) * scale - y
            style_idx = option_combos.index(s[1:])
            # hollow markers: a design that matches another (same times) still shows its own marker
            h = ax.errorbar(x, y, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], color=style.design_colour(s[0]),
                            marker=style.design_marker(s[0]), linestyle=style.LINESTYLES[style_idx % 4],
                            capsize=0, elinewidth=0.8, markersize=4.5, markerfacecolor="none",
                            markeredgewidth=1.0)
            handles.setdefault(s, h)
            points.setdefault(s, {}).update({(key, p[0]): p[1].median for p in pts})
        if panel_dims:
            ax.set_title(", ".join(_dim_label(d, v) for d, v in zip(panel_dims, key)))
        if idx + ncols >= len(keys):
            ax.tick_params(labelbottom=True)
    for idx in range(len(keys), nrows * ncols):
        axes[idx // ncols][idx % ncols].axis("off")
    ax0 = axes[0][0]
    labels = [data.size_label(x) if x_dim == "P" else str(x) for x in xs]
    if style.spans_decades(xs, 4):
        style.log_axis(ax0, "x", ticks=xs, labels=labels)
    else:
        ax0.set_xticks(xs)
        ax0.set_xticklabels(labels)
    times = [r.median * scale for r in run.rows]
    if style.spans_decades(times):
        style.log_axis(ax0, "y", values=times)
    style.panel_labels(fig, axes, x_label, f"time per verify step ({unit})")
    style.legend_strip(legend_ax, list(handles.values()), [run.series_label(s, option_axes) for s in handles],
                       legend_cols)
    notes = [question, _caption_timing(run)] + _coinciding(points, run, option_axes)
    caption = style.env_caption(run, width, extra=notes)
    return (fig, caption, f"{run.name}_{kind}"), None


def _coinciding(points, run, option_axes, within=0.03):
    """'kokkos-team lies on cuda-sm120 (within 0.9%).' for series hidden under another one."""
    notes, keys = [], list(points)
    for i, a in enumerate(keys):
        for b in keys[:i]:
            common = set(points[a]) & set(points[b])
            if not common:
                continue
            worst = max(abs(points[a][k] / points[b][k] - 1) for k in common)
            if worst <= within:
                notes.append(f"{run.series_label(a, option_axes)} lies on {run.series_label(b, option_axes)} "
                             f"(within {100 * worst:.1f}%).")
    return notes


def prefix_figure(run):
    return _line_figure(run, "P", "prefix", "prefix length P (tokens)",
                        "How does the step time grow with the context (prefix) length?")


def tree_figure(run):
    return _line_figure(run, "T", "tree", "tree size T (nodes per request)",
                        "What does a larger draft-tree budget cost per verify step?")


def roofline_figure(run):
    rows = [r for r in run.rows if r.flops > 0 and r.bytes > 0 and r.tflops > 0]
    if not rows:
        return None, "no row has flops, bytes_min and a time"
    peaks = data.ceilings(run)
    designs = [d for d in run.designs() if any(r.design == d for r in rows)]
    width = style.ONE_COLUMN_IN if len(designs) <= 4 else style.TWO_COLUMN_IN
    legend_cols = min(len(designs), 2 if width < 4 else 4)
    fig, axes, legend_ax = style.figure(1, 1, width, 2.5, legend_rows=math.ceil(len(designs) / legend_cols))
    ax = axes[0][0]
    ai = np.array([r.flops / r.bytes for r in rows])
    lo_x, hi_x = ai.min() / 2, ai.max() * 2
    if "copy" in peaks and "gemm" in peaks:
        ridge = peaks["gemm"] / peaks["copy"]
        lo_x, hi_x = min(lo_x, ridge / 3), max(hi_x, ridge * 2)
    xs = np.geomspace(lo_x, hi_x, 200)
    drawn, missing = [], []
    # The fp32 FMA ceiling (CUDA cores: the portable Kokkos kernels' bound) only exists in runs
    # that measured it; its absence is not worth a note.
    ceiling_specs = (("gemm", "bf16 GEMM peak", "-"), ("mma", "mma.sync peak", "--"), ("fma", "fp32 FMA peak", ":"))
    for key, name, ls in ceiling_specs:
        if key not in peaks:
            if key != "fma":
                missing.append(name)
            continue
        ys = np.full_like(xs, peaks[key])
        if "copy" in peaks:
            ys = np.minimum(ys, peaks["copy"] * xs)
        ax.plot(xs, ys, color="#444444", linestyle=ls, linewidth=0.9, zorder=1)
        above = key == "gemm"
        ax.annotate(f"{name} {peaks[key]:.0f} TFLOP/s", (xs[-1], peaks[key]), xytext=(-2, 2 if above else -2),
                    textcoords="offset points", ha="right", va="bottom" if above else "top", fontsize=6.5,
                    color="#444444")
        drawn.append(f"{name} {peaks[key]:.1f} TFLOP/s")
    if "copy" in peaks:
        x_mid = math.sqrt(lo_x * min(hi_x, peaks.get("gemm", hi_x) / peaks["copy"]))
        ax.annotate(f"copy {peaks['copy']:.2f} TB/s", (x_mid, peaks["copy"] * x_mid), xytext=(4, -4),
                    textcoords="offset points", ha="left", va="top", fontsize=6.5, color="#444444")
        if "gemm" not in peaks and "mma" not in peaks:
            ax.plot(xs, peaks["copy"] * xs, color="#444444", linewidth=0.9, zorder=1)
        drawn.append(f"copy bandwidth {peaks['copy']:.2f} TB/s")
    else:
        missing.append("copy bandwidth")
    handles = []
    for d in designs:
        pts = [(r.flops / r.bytes, r.tflops) for r in rows if r.design == d]
        handles.append(ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=16, facecolors="none",
                                  edgecolors=style.design_colour(d), marker=style.design_marker(d), linewidths=0.9,
                                  zorder=3))  # hollow: coinciding designs stay visible
    style.log_axis(ax, "x")
    style.log_axis(ax, "y")
    ax.set_xlim(lo_x, hi_x)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, minimum traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    style.legend_strip(legend_ax, handles, designs, legend_cols)
    notes = ["How close does each row come to what the device can do?"]
    notes.append(f"Ceilings measured in this run: {', '.join(drawn)}." if drawn else "")
    if missing:
        notes.append(f"Not drawn (not in results.json): {', '.join(missing)}.")
    notes.append("One point per row (flops / bytes_min, tflops).")
    caption = style.env_caption(run, width, extra=[n for n in notes if n])
    return (fig, caption, f"{run.name}_roofline"), None


def _speedup_text(s):
    """'13.9', '1.004', or '1/48' for a design 48x slower than the baseline."""
    if 0.9 <= s < 1.1:
        return f"{s:.3f}"
    if s < 1:
        return f"1/{1 / s:.1f}" if 1 / s < 10 else f"1/{1 / s:.0f}"
    return f"{s:.1f}" if s < 100 else f"{s:.0f}"


def speedup_figure(run):
    base = run.baseline
    others = [d for d in run.designs() if d != base]
    if base not in run.designs() or not others:
        return None, "needs the baseline and at least one other design"
    ts, ps = run.values("T"), run.values("P")
    if not ts or not ps or len(ts) * len(ps) < 2:
        return None, "T x P is a single cell (or the inputs carry no T and P)"
    option_axes = run.option_axes()
    extra_dims = [d for d in ("B", "H") if run.varies(d)]
    base_time = {}
    for r in run.rows:
        if r.design == base:
            base_time[(r.shape_key(), run.series_key(r, option_axes)[1:])] = r.total
    cells = {}
    for r in run.rows:
        b = base_time.get((r.shape_key(), run.series_key(r, option_axes)[1:]))
        if r.design != base and b and r.total > 0 and r.get("T") is not None and r.get("P") is not None:
            panel = (r.design,) + tuple(r.get(a) for a in option_axes)
            cells.setdefault(panel, {}).setdefault(tuple(r.get(d) for d in extra_dims), {})[
                (r.get("T"), r.get("P"))] = b / r.total
    if not cells:
        return None, "no row shares an input and options with a baseline row"
    panels = sorted(cells, key=lambda k: (others.index(k[0]),) + data.tuple_key(k[1:]))
    return _speedup_maps(run, cells, panels, lambda panel: run.series_label(panel, option_axes), extra_dims,
                         f"speedup vs {base} (×)",
                         (f"How much faster than {base} is each design at each shape?",
                          f"Speedup = {base}'s summed per-step median time / the design's; > 1 (blue) is faster, "
                          f"1/x (red) is x times slower."), f"{run.name}_speedup")


def _speedup_maps(run, cells, panels, panel_title, extra_dims, bar_label, notes, stem):
    """Heat maps of ratios over (T, P): a row of panels per panel key, a column per value of the
    extra dims; cells[panel][extra dims][(T, P)] = ratio (> 1 blue, < 1 red, on a log scale)."""
    ts, ps = run.values("T"), run.values("P")
    cols = sorted({c for p in panels for c in cells[p]}, key=data.tuple_key)
    nrows, ncols = len(panels), len(cols)
    width = style.ONE_COLUMN_IN if ncols == 1 and len(ps) <= 4 else style.TWO_COLUMN_IN
    fig, axes, _ = style.figure(nrows, ncols, width, max(0.95, 0.45 + 0.24 * len(ts)))
    values = [s for p in panels for c in cells[p].values() for s in c.values()]
    span = 1.05 * max(abs(math.log10(s)) for s in values) or 0.05
    norm = mcolors.LogNorm(vmin=10 ** -span, vmax=10 ** span)
    cmap = "RdBu"
    image = None
    for i, panel in enumerate(panels):
        for j, col in enumerate(cols):
            ax = axes[i][j]
            ax.grid(False)
            grid = np.full((len(ts), len(ps)), np.nan)
            for (t, p), s in cells[panel].get(col, {}).items():
                grid[ts.index(t), ps.index(p)] = s
            image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto", origin="lower")
            for (ti, pi), s in np.ndenumerate(grid):
                if not np.isnan(s):
                    dark = abs(math.log10(s)) > 0.6 * span
                    ax.text(pi, ti, _speedup_text(s), ha="center", va="center", fontsize=6.5,
                            color="white" if dark else "black")
            ax.set_xticks(range(len(ps)))
            ax.set_xticklabels([data.size_label(p) for p in ps])
            ax.set_yticks(range(len(ts)))
            ax.set_yticklabels([str(t) for t in ts])
            ax.tick_params(length=0)
            for side in ax.spines.values():
                side.set_visible(False)
            title = panel_title(panel)
            if extra_dims:
                title += " — " + ", ".join(_dim_label(d, v) for d, v in zip(extra_dims, col))
            ax.set_title(title, fontsize=7.5)
            if i == nrows - 1:
                ax.set_xlabel("prefix length P (tokens)")
            if j == 0:
                ax.set_ylabel("tree size T")
    bar = fig.colorbar(image, ax=[a for row in axes for a in row], shrink=0.9, pad=0.02, aspect=25)
    bar.set_label(bar_label)
    bar.ax.yaxis.set_major_locator(style.LogLocator(base=10, subs=(1.0, 2.0, 5.0) if span < 1.5 else (1.0,)))
    bar.ax.yaxis.set_major_formatter(style.FuncFormatter(lambda v, _p: f"{v:g}"))
    bar.ax.yaxis.set_minor_formatter(style.NullFormatter())
    caption = style.env_caption(run, width, extra=notes)
    return (fig, caption, stem), None


def kv_dtype_figure(run):
    """FP8 against bf16: each FP8 row's speed-up over the bf16 row of the same design, shape and
    options (kv_dtype.pairs), a heat map over (T, P) per design, FP8 dtype and numerics."""
    pairs = kv_dtype.pairs(run)
    if not pairs:
        return None, "no FP8 row has a bf16 row of the same design, shape and options beside it"
    extra_dims = [d for d in ("B", "H") if run.varies(d)]
    cells = {}
    for p in pairs:
        panel = (p.design, p.kv_dtype, p.numerics) + p.options
        cells.setdefault(panel, {}).setdefault(tuple(p.fp8.get(d) for d in extra_dims), {})[
            (p.fp8.get("T"), p.fp8.get("P"))] = p.speedup
    designs = run.designs()
    panels = sorted(cells, key=lambda k: (designs.index(k[0]),) + data.tuple_key(k[1:]))
    axes = kv_dtype.other_option_axes(run)

    def title(panel):
        parts = [f"{panel[0]}: {panel[1]}"] + ([panel[2]] if panel[2] != "dequant" else [])
        parts += [f"{data.OPTION_NAMES[a]} {data.option_value_label(a, v)}" for a, v in zip(axes, panel[3:])]
        return ", ".join(parts)

    return _speedup_maps(run, cells, panels, title, extra_dims, "speed-up of FP8 over bf16 (×)",
                         ("How much faster is each design's verify step with an FP8 KV cache than with bf16?",
                          "Speed-up = the bf16 row's summed per-step median time / the FP8 row's (same design, "
                          "shape and options, same run); > 1 (blue) is faster. FP8 rows of the PyTorch peer "
                          "dequantise the rows they gather inside their time."), f"{run.name}_kv_dtype")


def options_figure(run):
    option_axes = run.option_axes()
    if not option_axes:
        return None, "no option (nsplit, workspace, mode, mask, l2_flush, KV slots) varies"
    shape_dims = [d for d in data.DIMS if run.varies(d)]

    def shape_of(r):
        return tuple(r.get(d) for d in shape_dims) if shape_dims else (r.label(),)

    shapes = sorted({shape_of(r) for r in run.rows}, key=data.tuple_key)
    combos = sorted({tuple(r.get(a) for a in option_axes) for r in run.rows}, key=data.tuple_key)
    designs = run.designs()
    n_bars = len(combos)
    width = style.TWO_COLUMN_IN if len(shapes) * n_bars > 8 else style.ONE_COLUMN_IN
    legend_cols = min(n_bars, 4 if width > 4 else 2)
    fig, axes, legend_ax = style.figure(len(designs), 1, width, 1.9, legend_rows=math.ceil(n_bars / legend_cols),
                                        sharex=True)
    scale, unit = style.time_unit([r.p90 for r in run.rows])
    bar_w = 0.8 / n_bars
    shades = np.linspace(0.0, 0.65, n_bars) if n_bars > 1 else [0.0]
    for i, design in enumerate(designs):
        ax = axes[i][0]
        colour = np.array(mcolors.to_rgb(style.design_colour(design)))
        rows = [r for r in run.rows if r.design == design]
        bars = {}  # (shape index, option index) -> (x, time)
        for c, combo in enumerate(combos):
            pts = [(shapes.index(shape_of(r)), r) for r in rows if tuple(r.get(a) for a in option_axes) == combo]
            if not pts:
                continue
            x = np.array([p[0] for p in pts]) - 0.4 + bar_w * (c + 0.5)
            y = np.array([p[1].median for p in pts]) * scale
            err = [np.maximum(y - np.array([p[1].p10 for p in pts]) * scale, 0),
                   np.maximum(np.array([p[1].p90 for p in pts]) * scale - y, 0)]
            face = colour + (1 - colour) * shades[c]
            ax.bar(x, y, width=bar_w, color=face, edgecolor="#222222", linewidth=0.4,
                   hatch=style.HATCHES[c % len(style.HATCHES)], yerr=err, error_kw={"elinewidth": 0.6})
            bars.update({(p[0], c): (xi, yi) for p, xi, yi in zip(pts, x, y)})
        _mark_fastest(ax, bars, n_bars)
        times = [r.median * scale for r in rows]
        if style.spans_decades(times):
            style.log_axis(ax, "y", values=times)
        ax.set_ylabel(f"time per step ({unit})")
        ax.set_title(design, color=style.design_colour(design), fontsize=8)
        ax.grid(axis="x", visible=False)
        ax.tick_params(axis="x", labelbottom=i == len(designs) - 1)
    last = axes[-1][0]
    last.set_xticks(range(len(shapes)))
    last.set_xticklabels(["\n".join(_shape_label(shape_dims, s)) for s in shapes], fontsize=6.5)
    last.set_xlim(-0.5, len(shapes) - 0.5)
    grey = np.array(mcolors.to_rgb("#606060"))
    handles = [mpatches.Patch(facecolor=grey + (1 - grey) * shades[c], edgecolor="#222222", linewidth=0.4,
                              hatch=style.HATCHES[c % len(style.HATCHES)]) for c in range(n_bars)]
    labels = [", ".join(f"{data.OPTION_NAMES[a]} {data.option_value_label(a, v)}" for a, v in zip(option_axes, combo))
              for combo in combos]
    style.legend_strip(legend_ax, handles, labels, legend_cols)
    names = " and ".join(data.OPTION_NAMES[a] for a in option_axes)
    marks = "★; +x%: slower by" if n_bars <= 3 else "★"
    caption = style.env_caption(run, width, extra=(f"Which {names} setting is fastest at each shape ({marks})?",
                                                   _caption_timing(run)))
    return (fig, caption, f"{run.name}_options"), None


def _mark_fastest(ax, bars, n_bars):
    """A star over the fastest option at each shape; with up to three options, the others' extra time."""
    for shape in {k[0] for k in bars}:
        group = {c: v for (s, c), v in bars.items() if s == shape}
        best = min(group, key=lambda c: group[c][1])
        for c, (x, y) in group.items():
            text = "★" if c == best else (f"+{100 * (y / group[best][1] - 1):.0f}%" if n_bars <= 3 else "")
            if text:
                ax.annotate(text, (x, y), xytext=(0, 1.5), textcoords="offset points", ha="center", va="bottom",
                            fontsize=6 if c != best else 7, color="#222222")


def _shape_label(shape_dims, shape):
    if not shape_dims:
        return [str(shape[0])]
    parts = [_dim_label(d, v) for d, v in zip(shape_dims, shape)]
    return [" ".join(parts[i:i + 2]) for i in range(0, len(parts), 2)]


FIGURES = (("prefix", prefix_figure), ("tree", tree_figure), ("roofline", roofline_figure),
           ("speedup", speedup_figure), ("options", options_figure), ("kv_dtype", kv_dtype_figure))


def render_all(results, out_dir, formats, model=None):
    """Every figure the results support (and, given a latency model, the model against the rows);
    returns (paths written, [(figure, reason skipped)])."""
    run = data.Run(results)
    if not run.rows:
        return [], [("all", "no timed rows in the results")]
    written, skipped = [], []
    figures = FIGURES
    if model is not None:
        from . import budget
        figures = FIGURES + (("model", lambda r: budget.model_figure(r, model)),)
    for kind, make in figures:
        made, reason = make(run)
        if made is None:
            skipped.append((kind, reason))
            continue
        fig, caption, stem = made
        written += style.save(fig, out_dir, stem, formats, caption)
    table = kv_dtype.table(run, results.get("rows", []))
    if table:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{run.name}_kv_dtype.md")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(table)
        os.replace(path + ".tmp", path)
        written.append(path)
    return written, skipped
