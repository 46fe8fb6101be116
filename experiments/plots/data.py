"""Rows of a Canopy results.json (schema 2, docs/experiments.md), read by their fields.

Only named fields are read, never labels, paths or table text: the sweep axes are the fields
batch, heads, tree and prefix (B, H, T, P), the input's flags are ragged, compacted, values and
recorded_values, a trace input is its `trace` field; the KV dtype and numerics (kv_dtype, numerics;
bf16 and dequant where a row has none) are options like mask or nsplit. Rows from a merged peer (e.g. PyTorch) are rows
like any other: a design name, the axes they have and times; missing numeric fields count as 0.
"""
import os
import re

DIMS = ("B", "H", "T", "P")
DIM_FIELDS = {"B": "batch", "H": "heads", "T": "tree", "P": "prefix"}
OPTION_KEYS = ("mask", "nsplit", "workspace", "mode", "l2_flush", "kv_dtype", "numerics")
OPTION_NAMES = {"nsplit": "NSPLIT", "workspace": "workspace", "mode": "mode", "mask": "mask",
                "l2_flush": "L2 flush", "variant": "KV slots", "group": "group", "kv_dtype": "KV",
                "numerics": "numerics"}
# What a row without the field holds: results written before FP8 (and peers' rows) are bf16, dequant.
OPTION_DEFAULTS = {"kv_dtype": "bf16", "numerics": "dequant"}


def dims_of(raw):
    """{'B': 8, 'H': 8, 'T': 65, 'P': 16384} from a row's axis fields; an absent or zero field is left
    out (a peer row may carry no heads)."""
    return {d: int(raw[f]) for d, f in DIM_FIELDS.items() if raw.get(f)}


def variant_of(raw):
    """The input's flags as one value, e.g. 'ragged compacted' ('' for a dense synthetic shape)."""
    flags = [f for f in ("ragged", "compacted") if raw.get(f)]
    if raw.get("values") == "tree-dominant":
        flags.append("tree-dominant")
    if raw.get("recorded_values"):
        flags.append("recorded values")
    return " ".join(flags)


def size_label(n):
    """Prefix lengths as the inputs write them: 4096 -> '4K'."""
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)}M"
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def option_value_label(key, value):
    if key == "nsplit":
        return "auto" if int(value) == 0 else str(value)
    if key == "l2_flush":
        return "flushed" if value else "warm"
    if key == "variant":
        return value or "fragmented"
    return str(value)


def order_key(value):
    """Sorts numbers numerically before strings, None last: (1, 4096, '') < (1, 32768, '')."""
    if value is None:
        return (2, 0, "")
    if isinstance(value, (int, float)):
        return (0, value, "")
    return (1, 0, str(value))


def tuple_key(values):
    return tuple(order_key(v) for v in values)


class Row:
    """One timed row: design, dims (B, H, T, P), variant flags, options and the numbers."""

    def __init__(self, raw):
        self.raw = raw
        self.design = str(raw.get("design", "?"))
        self.trace = str(raw.get("trace") or "")
        self.dims, self.variant = dims_of(raw), variant_of(raw)
        self.group = str(raw.get("group", "all"))
        self.options = {k: raw[k] for k in OPTION_KEYS if k in raw}
        for k, v in OPTION_DEFAULTS.items():
            self.options.setdefault(k, v)
        num = lambda k: float(raw.get(k) or 0.0)  # noqa: E731
        self.median, self.p10, self.p90 = num("median_s"), num("p10_s"), num("p90_s")
        self.total = num("total_median_s") or self.median * max(1, int(raw.get("steps") or 1))
        self.flops, self.bytes, self.kv_bytes = num("flops"), num("bytes_min"), num("kv_bytes")
        self.roofline_s, self.mma_roofline_s = num("roofline_s"), num("mma_roofline_s")
        self.fma_roofline_s = num("fma_roofline_s")
        self.speedup = num("speedup")
        self.tflops = num("tflops") or (self.flops / self.total / 1e12 if self.total > 0 else 0.0)

    def get(self, key):
        """A dim, an option, 'variant', 'group' or 'design'."""
        if key in DIMS:
            return self.dims.get(key)
        if key in ("variant", "group", "design"):
            return getattr(self, key)
        return self.options.get(key)

    def input_key(self):
        """The input's shape without its KV storage: rows of one input in different KV dtypes share it."""
        return (self.trace, tuple(sorted(self.dims.items())), self.variant, self.group)

    def shape_key(self):
        """What identifies the problem (not the design or options): the input and its KV dtype and scale."""
        return self.input_key() + (self.get("kv_dtype"), float(self.raw.get("kv_scale") or 1.0))

    def label(self):
        """A display name for the input: the trace's file name, or its axes; then the KV dtype where it
        is not bf16 (as canopy run labels its inputs)."""
        if self.trace:
            name = os.path.basename(self.trace)
        else:
            name = " ".join(f"{d}={size_label(v) if d == 'P' else v}" for d, v in self.dims.items())
        return name if self.get("kv_dtype") == "bf16" else f"{name} {self.get('kv_dtype')}"


def timed(raw):
    return raw.get("status", "ok") == "ok" and float(raw.get("median_s") or 0) > 0 and \
        int(raw.get("samples", 1) or 0) > 0


class Run:
    """A results.json: its name, baseline, environment and timed rows."""

    def __init__(self, results):
        self.name = str(results.get("experiment") or "experiment")
        self.description = str(results.get("description") or "")
        self.repetitions = results.get("repetitions")
        self.env = {k: str(v) for k, v in (results.get("environment") or {}).items()}
        self.rows = [Row(r) for r in results.get("rows", []) if timed(r)]
        self.baseline = results.get("baseline") or (self.rows[0].design if self.rows else None)

    def values(self, key, rows=None):
        vals = {r.get(key) for r in (self.rows if rows is None else rows)}
        vals.discard(None)
        return sorted(vals, key=order_key)

    def varies(self, key, rows=None):
        return len(self.values(key, rows)) > 1

    def designs(self):
        """Design names in order of first appearance, the baseline first."""
        seen = []
        for r in self.rows:
            if r.design not in seen:
                seen.append(r.design)
        if self.baseline in seen:
            seen.remove(self.baseline)
            seen.insert(0, self.baseline)
        return seen

    def option_axes(self):
        """Options (and input flags, groups) that take more than one value in the run."""
        return [k for k in OPTION_KEYS + ("variant", "group") if self.varies(k)]

    def series_key(self, row, axes):
        return (row.design,) + tuple(row.get(k) for k in axes)

    def series_label(self, key, axes):
        parts = [key[0]] + [f"{OPTION_NAMES[a]} {option_value_label(a, v)}" for a, v in zip(axes, key[1:])]
        return ", ".join(parts)


# --- the run's ceilings ------------------------------------------------------------------------
_PEAK_PATTERNS = {
    "gemm": r"bf16 GEMM ([\d.]+) TFLOP/s",
    "mma": r"mma\.sync bf16 ([\d.]+) TFLOP/s",
    "fma": r"fp32 FMA ([\d.]+) TFLOP/s",
    "copy": r"copy ([\d.]+) TB/s",
}
# The launch floor of a split step: graph replay of an empty split grid with the combine grid behind it.
_LAUNCH_FLOOR_PATTERN = r"launch floor [\d.]+ µs one grid, ([\d.]+) µs with a combine grid"


def launch_floor_us(peaks_text):
    """The split + combine launch floor (µs) in an environment's 'peaks' text, or None where the
    run's build did not measure one."""
    m = re.search(_LAUNCH_FLOOR_PATTERN, peaks_text or "")
    return float(m.group(1)) if m else None


def _derive(rows, bound_attr, known_flops=None, known_bytes=None):
    """The peaks that a bound column, max(F / flop_peak, bytes / bandwidth) per row, pins down.

    Per row F / bound <= flop_peak and bytes / bound <= bandwidth, so the largest of each is a lower
    bound. A row whose bytes / bound is below the bandwidth's lower bound is not memory-bound: its
    F / bound is the FLOP peak exactly (and the other way round). Returns (FLOP/s, B/s), None where
    no row pins the peak down."""
    rates = [(r.flops / b, r.bytes / b) for r in rows
             if (b := getattr(r, bound_attr)) > 0 and r.flops > 0 and r.bytes > 0]
    if not rates:
        return known_flops, known_bytes
    low_f = known_flops or max(f for f, _ in rates)
    low_b = known_bytes or max(b for _, b in rates)
    strict = 1 - 1e-6
    flops = known_flops or next((f for f, b in rates if b < low_b * strict), None)
    bw = known_bytes or next((b for f, b in rates if f < low_f * strict), None)
    return flops, bw


def ceilings(run):
    """{'gemm': TFLOP/s, 'mma': TFLOP/s, 'fma': TFLOP/s, 'copy': TB/s} for the ceilings known; each measured in the run
    (environment 'peaks' text) or pinned down by the rows' bound columns; missing ones are absent."""
    text = run.env.get("peaks", "")
    out = {name: float(m.group(1)) for name, pattern in _PEAK_PATTERNS.items() if (m := re.search(pattern, text))}
    tera = 1e12
    known = lambda name: out[name] * tera if name in out else None  # noqa: E731
    gemm, copy = _derive(run.rows, "roofline_s", known("gemm"), known("copy"))
    mma, _ = _derive(run.rows, "mma_roofline_s", known("mma"), copy)
    fma, _ = _derive(run.rows, "fma_roofline_s", known("fma"), copy)
    for name, value in (("gemm", gemm), ("copy", copy), ("mma", mma), ("fma", fma)):
        if value and name not in out:
            out[name] = value / tera
    return out
