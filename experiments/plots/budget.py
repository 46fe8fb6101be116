"""<name>_model: the latency model against the measured budget curve, one panel per (B, P).

Markers are the measured medians, solid lines the model's latency() (the grid interpolation inside
the measured grid), dashed lines its fitted form alone; the caption gives each design's fit error.
"""
import math
import os
import sys

import numpy as np

from . import data, style


def model_figure(run, model):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "budget"))
    import latency_model
    lm = latency_model.LatencyModel(model)
    designs = [d for d in run.designs() if d in lm.designs()]
    if not designs:
        return None, "no design of the results is in the model"
    keys = sorted({(r.get("B"), r.get("P")) for r in run.rows if r.get("B") and r.get("P") and r.get("T")})
    if not keys:
        return None, "the rows carry no B, P, T"
    ncols = min(len(keys), 3)
    nrows = math.ceil(len(keys) / ncols)
    width = style.ONE_COLUMN_IN if ncols == 1 else style.TWO_COLUMN_IN
    fig, axes, legend_ax = style.figure(nrows, ncols, width, 1.75 if ncols > 1 else 2.2,
                                        legend_rows=math.ceil(len(designs) / 4), sharex=True, sharey=True)
    handles = {}
    ts_all = run.values("T")
    for idx, (B, P) in enumerate(keys):
        ax = axes[idx // ncols][idx % ncols]
        for d in designs:
            pts = sorted((r.get("T"), r.median) for r in run.rows
                         if r.design == d and r.get("B") == B and r.get("P") == P and r.get("T"))
            if not pts:
                continue
            colour = style.design_colour(d)
            h = ax.plot([p[0] for p in pts], [p[1] * 1e6 for p in pts], linestyle="none", marker=style.design_marker(d),
                        color=colour, markerfacecolor="none", markersize=4.5)[0]
            handles.setdefault(d, h)
            tmax = min(max(ts_all), model["designs"][d]["max_tree"])
            ts = np.unique(np.round(np.geomspace(min(ts_all), tmax, 48)).astype(int))
            ax.plot(ts, [lm.latency(d, B, P, int(t)) * 1e6 for t in ts], color=colour, linewidth=1.0)
            ax.plot(ts, [lm.fitted(d, B, P, int(t)) * 1e6 for t in ts], color=colour, linewidth=0.8, linestyle="--")
        ax.set_title(f"B={B}, P={data.size_label(P)}")
        if idx + ncols >= len(keys):
            ax.tick_params(labelbottom=True)
    for idx in range(len(keys), nrows * ncols):
        axes[idx // ncols][idx % ncols].axis("off")
    ax0 = axes[0][0]
    style.log_axis(ax0, "x", ticks=ts_all, labels=[str(t) for t in ts_all])
    style.log_axis(ax0, "y", values=[r.median * 1e6 for r in run.rows])
    style.panel_labels(fig, axes, "tree size T (nodes per request)", "verify latency (µs)")
    style.legend_strip(legend_ax, list(handles.values()), list(handles), min(len(handles), 4))
    fits = "; ".join(f"{d}: max {100 * model['designs'][d]['fit']['max_rel_error']:.1f}%, median "
                     f"{100 * model['designs'][d]['fit']['median_rel_error']:.1f}%" for d in designs)
    notes = ["What latency does the model give a budget controller? Markers: measured medians; solid: the "
             "model (grid interpolation); dashed: its fitted form " +
             " + ".join("c0" if t == "1" else f"c{i} {t.replace('*', '')}" for i, t in enumerate(latency_model.TERMS)) +
             f", relative error {fits}."]
    return (fig, style.env_caption(run, width, extra=notes), f"{run.name}_model"), None
