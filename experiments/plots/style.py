"""Paper conventions shared by every figure: one- and two-column sizes, a colour-blind-safe palette
with a fixed colour and marker per design name, log axes where values span decades, the environment
caption, and saving in every requested format."""
import io
import os
import textwrap
import zlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

ONE_COLUMN_IN = 3.5
TWO_COLUMN_IN = 7.0
PNG_DPI = 200

# Okabe-Ito colours for the designs the project knows; the same name gets the same colour in
# every figure of every run.
DESIGN_COLOURS = {
    "cuda-sm120": "#0072B2",            # blue
    "cuda-sm120-w32": "#56B4E9",        # sky blue
    "cuda-flat": "#D55E00",             # vermillion
    "kokkos-team": "#009E73",           # bluish green
    "kokkos-team-portable": "#E69F00",  # orange
    "kokkos-kk": "#CC79A7",             # reddish purple
    "reference": "#000000",             # black
}
PEER_COLOUR = "#777777"  # grey: peers such as PyTorch ("torch-*")
# Paul Tol's muted palette (colour-blind safe) for any other name, chosen by a stable hash.
FALLBACK_COLOURS = ("#332288", "#117733", "#44AA99", "#999933", "#882255", "#AA4499", "#661100", "#6699CC")
DESIGN_MARKERS = {"cuda-sm120": "o", "cuda-sm120-w32": "s", "cuda-flat": "^", "kokkos-team": "D",
                  "kokkos-team-portable": "v", "kokkos-kk": "P", "reference": "X"}
FALLBACK_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "///", "...", "xxx", "\\\\\\", "++", "oo", "--")


def _hash(name):
    return zlib.crc32(name.encode("utf-8"))


def design_colour(name):
    if name in DESIGN_COLOURS:
        return DESIGN_COLOURS[name]
    if name.startswith("torch"):
        return PEER_COLOUR
    return FALLBACK_COLOURS[_hash(name) % len(FALLBACK_COLOURS)]


def design_marker(name):
    return DESIGN_MARKERS.get(name) or FALLBACK_MARKERS[(_hash(name) // 7) % len(FALLBACK_MARKERS)]


def apply_rc():
    plt.rcParams.update({
        "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
        "legend.fontsize": 7, "lines.linewidth": 1.3, "lines.markersize": 4, "axes.grid": True,
        "grid.alpha": 0.3, "grid.linewidth": 0.5, "axes.spines.top": False, "axes.spines.right": False,
        "savefig.dpi": PNG_DPI, "pdf.fonttype": 42, "ps.fonttype": 42,
    })


def spans_decades(values, ratio=10.0):
    vals = [v for v in values if v and v > 0]
    return bool(vals) and max(vals) / min(vals) >= ratio


def time_unit(seconds):
    """(scale, unit) so the values read in µs, or in ms from 10 ms up."""
    top = max(seconds) if seconds else 0
    return (1e3, "ms") if top >= 1e-2 else (1e6, "µs")


def _plain_number(v, _pos=None):
    return f"{v:g}"


def log_axis(ax, which, values=None, ticks=None, labels=None):
    """A log axis labelled with plain numbers: at 1-2-5 steps, or decades when `values` span more
    than three; `ticks` puts the ticks at the data values instead (e.g. P)."""
    set_scale = ax.set_xscale if which == "x" else ax.set_yscale
    axis = ax.xaxis if which == "x" else ax.yaxis
    set_scale("log")
    if ticks is not None:
        axis.set_ticks(ticks)
        axis.set_ticklabels(labels if labels is not None else [_plain_number(t) for t in ticks])
        axis.set_minor_formatter(NullFormatter())
    else:
        lo, hi = (min(values), max(values)) if values else (1, 1)
        subs = (1.0, 2.0, 5.0) if hi / max(lo, 1e-300) < 1e3 else (1.0,)
        axis.set_major_locator(LogLocator(base=10, subs=subs))
        axis.set_major_formatter(FuncFormatter(_plain_number))
        axis.set_minor_formatter(NullFormatter())


def env_caption(run, width_in, extra=()):
    """'NVIDIA H200 — an H200 (sm_90) proxy for the sm_120 design target; git 62ef037; designs.toml,
    2026-11-29' plus `extra` sentences, wrapped to the figure width."""
    env = run.env
    device = env.get("device", "")
    head, _, proxy = device.partition(" — ")
    hardware = env.get("gpu") or head.replace("GPU: ", "").replace("host: ", "host ") or "unknown device"
    parts = [hardware]
    label = next((v for k, v in sorted(env.items()) if "proxy" in k or k == "target_label"), "") or proxy
    if label and not hardware.startswith(label.strip()):  # on the target itself the label is its name
        parts[0] += f" — {label}"
    git = env.get("git", "")
    if git:
        parts.append(f"git {git}")
    where = ", ".join(x for x in (os.path.basename(env.get("config", "")), env.get("date", "")[:10]) if x)
    if where:
        parts.append(where)
    text = "; ".join(parts) + "."
    if extra:
        text += " " + " ".join(extra)
    chars = int(width_in * 72 / (6.5 * 0.52))
    return "\n".join(textwrap.wrap(text, chars))


def figure(nrows, ncols, width_in, panel_h_in, legend_rows=0, sharex=False, sharey=False):
    """A figure with an optional legend strip above the panels; returns (fig, axes 2-D, legend axes)."""
    apply_rc()
    legend_h = 0.18 * legend_rows + (0.08 if legend_rows else 0)
    height = panel_h_in * nrows + legend_h + 0.1
    fig = plt.figure(figsize=(width_in, height), constrained_layout=True)
    ratios = ([legend_h] if legend_rows else []) + [panel_h_in] * nrows
    grid = fig.add_gridspec(len(ratios), ncols, height_ratios=ratios)
    first = 1 if legend_rows else 0
    axes = [[None] * ncols for _ in range(nrows)]
    for i in range(nrows):
        for j in range(ncols):
            share_x = axes[0][0] if sharex and (i or j) else None
            share_y = axes[0][0] if sharey and (i or j) else None
            axes[i][j] = fig.add_subplot(grid[first + i, j], sharex=share_x, sharey=share_y)
    legend_ax = None
    if legend_rows:
        legend_ax = fig.add_subplot(grid[0, :])
        legend_ax.axis("off")
    return fig, axes, legend_ax


def panel_labels(fig, axes, x_label, y_label):
    """Axis labels once for a grid of panels that share their axes."""
    if len(axes) == 1 and len(axes[0]) == 1:
        axes[0][0].set_xlabel(x_label)
        axes[0][0].set_ylabel(y_label)
    else:
        fig.supxlabel(x_label, fontsize=8)
        fig.supylabel(y_label, fontsize=8)


def legend_strip(legend_ax, handles, labels, ncol):
    legend_ax.legend(handles, labels, loc="center", ncol=max(1, ncol), frameon=False, handlelength=2.2,
                     columnspacing=1.2, borderaxespad=0)


def save(fig, out_dir, stem, formats, caption):
    """Writes `stem`.{png,pdf,...} with the caption under the panels; returns the paths."""
    if caption:
        fig.text(0.0, 0.0, caption, ha="left", va="top", fontsize=6.5, color="#333333",
                 transform=fig.transFigure)
    os.makedirs(out_dir, exist_ok=True)
    fig.canvas.draw()  # lay the panels out once, then keep that layout for every format
    fig.set_layout_engine("none")
    paths = []
    for fmt in formats:
        path = os.path.join(out_dir, f"{stem}.{fmt}")
        if fmt == "png":
            _save_png(fig, path)
        else:
            fig.savefig(path, bbox_inches="tight", pad_inches=0.03)
        paths.append(path)
    plt.close(fig)
    return paths


def _save_png(fig, path):
    """A 256-colour PNG (a third of the size; figures have few colours) when Pillow is there."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PNG_DPI, bbox_inches="tight", pad_inches=0.03)
    try:
        from PIL import Image
        image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    except (ImportError, AttributeError, OSError):
        with open(path, "wb") as f:
            f.write(buf.getvalue())
