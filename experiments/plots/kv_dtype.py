"""FP8 KV caches against bf16, from a run's rows: each FP8 row beside the bf16 row of the same design,
shape and options (the same run), its speed-up over it, as a Markdown table (`table`) and, through
figures.kv_dtype_figure, heat maps. Rows of a merged peer (experiments/peers/peer_merge.py
--results-out) pair up the same way. No matplotlib here: scripts can build the table alone."""
from . import data

BF16 = "bf16"


class Pair:
    """An FP8 row and the bf16 row it is compared with."""

    def __init__(self, bf16, fp8, options):
        self.bf16, self.fp8, self.options = bf16, fp8, options
        self.design = fp8.design
        self.kv_dtype = fp8.get("kv_dtype")
        self.numerics = fp8.get("numerics")
        self.speedup = bf16.total / fp8.total


def other_option_axes(run):
    """The options that vary in the run besides the KV dtype and the numerics (a pair shares them)."""
    return [k for k in run.option_axes() if k not in ("kv_dtype", "numerics")]


def pairs(run):
    """Every timed FP8 row with a timed bf16 row of the same design, input and other options, in
    design order, then shape, then dtype and numerics."""
    axes = other_option_axes(run)
    key = lambda r: (r.design, r.input_key(), tuple(r.get(a) for a in axes))  # noqa: E731
    base = {key(r): r for r in run.rows if r.get("kv_dtype") == BF16 and r.total > 0}
    out = [Pair(base[key(r)], r, key(r)[2]) for r in run.rows
           if r.get("kv_dtype") != BF16 and r.total > 0 and key(r) in base]
    designs = run.designs()
    dims = lambda r: tuple(r.get(d) for d in data.DIMS)  # noqa: E731
    out.sort(key=lambda p: (designs.index(p.design),) + data.tuple_key(
        (p.fp8.trace,) + dims(p.fp8) + (p.fp8.variant,) + p.options + (p.kv_dtype, p.numerics)))
    return out


def _us(seconds):
    return f"{seconds * 1e6:.1f}"


def table(run, raw_rows=()):
    """Markdown: per design, shape and options, the bf16 time, each FP8 dtype's (and numerics') time
    and its speed-up over bf16; "" when the run has no such pair. \\p raw_rows (results.json's rows,
    timed or not) adds a note for each FP8 row that did not run (unsupported, FAILED, skipped)."""
    found = pairs(run)
    if not found:
        return ""
    axes = other_option_axes(run)
    series = sorted({(p.kv_dtype, p.numerics) for p in found}, key=data.tuple_key)
    dims = [d for d in data.DIMS if any(p.fp8.get(d) is not None for p in found)]
    traces = any(p.fp8.trace for p in found)
    variants = any(p.fp8.variant for p in found)
    head = ["design"] + (["input"] if traces else []) + dims + (["inputs"] if variants else []) + \
        [data.OPTION_NAMES[a] for a in axes] + ["bf16 µs"]
    for dtype, numerics in series:
        name = dtype if numerics == "dequant" else f"{dtype} {numerics}"
        head += [f"{name} µs", f"{name} × bf16"]
    rows = {}
    for p in found:
        r = p.fp8
        ident = (p.design, r.trace, tuple(r.get(d) for d in dims), r.variant, p.options)
        rows.setdefault(ident, {"bf16": p.bf16, "fp8": {}})["fp8"][(p.kv_dtype, p.numerics)] = p
    lines = [f"**{run.name}: the verify step with an FP8 KV cache against bf16.** Median time per verify step "
             f"(µs); × bf16 = the bf16 row's summed per-step median time / the FP8 row's, same design, shape and "
             f"options, same run (> 1: FP8 is faster).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (design, trace, shape, variant, options), cell in rows.items():
        cells = [design] + ([trace.rsplit("/", 1)[-1] or "-"] if traces else [])
        cells += [data.size_label(v) if d == "P" and v is not None else str(v if v is not None else "-")
                  for d, v in zip(dims, shape)]
        cells += [variant or "-"] if variants else []
        cells += [data.option_value_label(a, v) for a, v in zip(axes, options)]
        cells.append(_us(cell["bf16"].median))
        for s in series:
            p = cell["fp8"].get(s)
            cells += [_us(p.fp8.median), f"{p.speedup:.2f}x"] if p else ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for raw in raw_rows:
        if raw.get("kv_dtype", BF16) != BF16 and raw.get("status", "ok") != "ok":
            note = f"{raw.get('design')} {raw.get('kv_dtype')}: {raw.get('status')}" + \
                   (f" ({raw['note']})" if raw.get("note") else "")
            if note not in notes:
                notes.append(note)
    peers = sorted({p.design for p in found if p.design.startswith("torch-")})
    if peers:
        notes.append(f"{', '.join(peers)}: an FP8 row dequantises the rows it gathers to bf16 inside its time.")
    device = run.env.get("device", "")
    if device:
        notes.append(f"Measured on: {device}; git {run.env.get('git', '?')}.")
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
