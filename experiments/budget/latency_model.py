"""Verify-latency model for a budget controller: latency(design, B, P, T) and best_budget(...).

A model file (JSON, schema "canopy-latency-model" version 1, documented in docs/experiments.md)
holds, per design, the measured grid of median verify-attention latencies over (B, P, T) and a
fitted roofline-shaped form

    latency = c0 + c1*B*T + c2*B*P + c3*B*T*P + c4*B*T^2 + c5*P + c6*T*P   (seconds; every c >= 0)

fitted by non-negative least squares on relative error (each point weighted by 1/measured). The
terms: launch and fixed cost; per-node work (q read, out written); the KV prefix read; the
score and PV products over the prefix; the tree part of those products (dense T x T); and the
critical path of one request, which does not grow with B while the GPU has room for more requests
(a design that walks a request's prefix on few CTAs: cuda-flat at B = 1 and 8 took the same time
at T <= 128 on the H200, which the B-scaled terms alone fit to within 87% only).

latency() interpolates the measured grid (piecewise-linear in log2 T and log2 P, linear in B) when
the query lies inside it, so it reproduces every measured point exactly, and uses the fitted form
outside the grid; a T above the largest tree a design served is unsupported (ValueError).

Only the standard library is needed, so that a serving process can import this file alone.
"""
import bisect
import itertools
import json
import math

SCHEMA = "canopy-latency-model"
VERSION = 2  # 2: the per-request terms P and T*P (version 1 files have the first five terms only)
TERMS = ("1", "B*T", "B*P", "B*T*P", "B*T^2", "P", "T*P")
FORM = " + ".join("c0" if t == "1" else f"c{i}*{t}" for i, t in enumerate(TERMS))  # for tables and captions


def _term_values(B, P, T):
    return (1.0, B * T, B * P, B * T * P, B * T * T, P, T * P)


def _solve(rows, rhs):
    """Least squares by the normal equations (a handful of terms), None when singular."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    b = [sum(r[i] * y for r, y in zip(rows, rhs)) for i in range(n)]
    for col in range(n):  # Gaussian elimination with partial pivoting
        piv = max(range(col, n), key=lambda k: abs(a[k][col]))
        if abs(a[piv][col]) < 1e-300:
            return None
        a[col], a[piv], b[col], b[piv] = a[piv], a[col], b[piv], b[col]
        for k in range(col + 1, n):
            f = a[k][col] / a[col][col]
            for j in range(col, n):
                a[k][j] -= f * a[col][j]
            b[k] -= f * b[col]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (b[i] - sum(a[i][j] * x[j] for j in range(i + 1, n))) / a[i][i]
    return x


def fit_form(points):
    """points: [(B, P, T, seconds)]. Non-negative least squares on relative error, exactly: every
    subset of the terms is solved unconstrained and the best one with all coefficients >= 0 kept
    (2^7 - 1 subsets). Returns (coefficients by term, max relative error, median relative error)."""
    best = None
    n = len(TERMS)
    for k in range(1, n + 1):
        for subset in itertools.combinations(range(n), k):
            if len(points) < k:
                continue
            # Scale each column to order 1 so the normal equations stay well conditioned.
            cols = [[_term_values(B, P, T)[i] / y for B, P, T, y in points] for i in subset]
            scale = [max(abs(v) for v in c) or 1.0 for c in cols]
            rows = [[cols[j][m] / scale[j] for j in range(k)] for m in range(len(points))]
            x = _solve(rows, [1.0] * len(points))
            if x is None or any(v < 0 for v in x):
                continue
            coef = [0.0] * n
            for j, i in enumerate(subset):
                coef[i] = x[j] / scale[j]
            err = [abs(_eval(coef, B, P, T) / y - 1) for B, P, T, y in points]
            score = sum(e * e for e in err)
            if best is None or score < best[0]:
                best = (score, coef, err)
    if best is None:
        raise ValueError("fit_form: no non-negative fit (need at least one point)")
    _, coef, err = best
    err.sort()
    median = err[len(err) // 2] if len(err) % 2 else 0.5 * (err[len(err) // 2 - 1] + err[len(err) // 2])
    return dict(zip(TERMS, coef)), max(err), median


def _eval(coef, B, P, T):
    return sum(c * v for c, v in zip(coef, _term_values(B, P, T)))


def build_model(points_by_design, source=None, unsupported=None):
    """points_by_design: {design: [(B, P, T, seconds)]} -> the model as a JSON-ready dict."""
    designs = {}
    for name, pts in sorted(points_by_design.items()):
        if not pts:
            continue
        Bs = sorted({p[0] for p in pts})
        Ps = sorted({p[1] for p in pts})
        Ts = sorted({p[2] for p in pts})
        at = {(B, P, T): s for B, P, T, s in pts}
        grid = [[[at.get((B, P, T)) for T in Ts] for P in Ps] for B in Bs]
        coef, max_err, med_err = fit_form(pts)
        designs[name] = {
            "grid": {"B": Bs, "P": Ps, "T": Ts, "median_s": grid},
            "max_tree": max(Ts),
            "fit": {"form": " + ".join(f"c[{t!r}]*{t}" if t != "1" else "c['1']" for t in TERMS),
                    "coefficients": coef, "max_rel_error": max_err, "median_rel_error": med_err,
                    "points": len(pts)},
            "unsupported": sorted((unsupported or {}).get(name, [])),
        }
    return {"schema": SCHEMA, "version": VERSION, "units": {"latency": "s", "B": "requests", "P": "prefix tokens",
                                                           "T": "tree nodes per request"},
            "source": source or {}, "designs": designs}


def validate(model):
    """Raises ValueError naming the first field that breaks the schema."""
    def need(cond, what):
        if not cond:
            raise ValueError(f"latency model: {what}")
    need(isinstance(model, dict) and model.get("schema") == SCHEMA, f"schema must be '{SCHEMA}'")
    need(model.get("version") == VERSION, f"version must be {VERSION} (a version 1 file predates the per-request "
                                          "terms: regenerate it with experiments/budget/budget_study.py)")
    need(isinstance(model.get("designs"), dict) and model["designs"], "designs must be a non-empty object")
    for name, d in model["designs"].items():
        g = d.get("grid", {})
        for axis in ("B", "P", "T"):
            vals = g.get(axis)
            need(isinstance(vals, list) and vals and all(isinstance(v, int) and v > 0 for v in vals)
                 and vals == sorted(set(vals)), f"designs.{name}.grid.{axis} must be increasing positive integers")
        m = g.get("median_s")
        need(isinstance(m, list) and len(m) == len(g["B"]) and all(len(r) == len(g["P"]) for r in m)
             and all(len(c) == len(g["T"]) for r in m for c in r),
             f"designs.{name}.grid.median_s must be [B][P][T]")
        need(all(v is None or (isinstance(v, (int, float)) and v > 0) for r in m for c in r for v in c),
             f"designs.{name}.grid.median_s entries must be > 0 or null")
        f = d.get("fit", {})
        coef = f.get("coefficients", {})
        need(set(coef) == set(TERMS) and all(isinstance(v, (int, float)) and v >= 0 for v in coef.values()),
             f"designs.{name}.fit.coefficients must give every term of {TERMS}, each >= 0")
        for k in ("max_rel_error", "median_rel_error"):
            need(isinstance(f.get(k), (int, float)) and f[k] >= 0, f"designs.{name}.fit.{k} must be >= 0")
        need(isinstance(d.get("max_tree"), int), f"designs.{name}.max_tree must be an integer")
    return model


def _bracket(vals, x, log):
    """(i, j, w): x lies between vals[i] and vals[j] with weight w on vals[j]; None outside."""
    if x < vals[0] or x > vals[-1]:
        return None
    j = bisect.bisect_left(vals, x)
    if vals[j] == x:
        return j, j, 0.0
    i = j - 1
    f = (lambda v: math.log2(v)) if log else (lambda v: float(v))
    return i, j, (f(x) - f(vals[i])) / (f(vals[j]) - f(vals[i]))


class LatencyModel:
    def __init__(self, model):
        self.model = validate(model)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    def designs(self):
        return list(self.model["designs"])

    def _design(self, design):
        d = self.model["designs"].get(design)
        if d is None:
            raise KeyError(f"latency model: no design '{design}' (has {', '.join(self.designs())})")
        return d

    def fitted(self, design, B, P, T):
        """The fitted form alone (seconds)."""
        c = self._design(design)["fit"]["coefficients"]
        return _eval([c[t] for t in TERMS], B, P, T)

    def interpolated(self, design, B, P, T):
        """Piecewise-linear over the measured grid (seconds), None outside it or next to an
        unmeasured point."""
        g = self._design(design)["grid"]
        bb, pp, tt = _bracket(g["B"], B, False), _bracket(g["P"], P, True), _bracket(g["T"], T, True)
        if bb is None or pp is None or tt is None:
            return None
        total = 0.0
        for ib, wb in ((bb[0], 1 - bb[2]), (bb[1], bb[2])):
            for ip, wp in ((pp[0], 1 - pp[2]), (pp[1], pp[2])):
                for it, wt in ((tt[0], 1 - tt[2]), (tt[1], tt[2])):
                    w = wb * wp * wt
                    if w == 0:
                        continue
                    v = g["median_s"][ib][ip][it]
                    if v is None:
                        return None
                    total += w * v
        return total

    def latency(self, design, B, P, T):
        """Verify-attention latency in seconds for B requests of P prefix tokens and T tree nodes."""
        d = self._design(design)
        if T > d["max_tree"]:
            raise ValueError(f"latency model: {design} was measured up to T = {d['max_tree']} nodes; T = {T} "
                             "is unsupported")
        v = self.interpolated(design, B, P, T)
        return v if v is not None else self.fitted(design, B, P, T)

    def best_budget(self, design, B, P, acceptance, draft_s=0.0, other_s=0.0, layers=1):
        """The tree size T that maximises generated tokens per second,

            rate(T) = B * tau(T) / (draft_s(T) + other_s + layers * latency(design, B, P, T)),

        where tau(T) is the expected accepted length per request and step (bonus token included)
        with a tree of T nodes, `acceptance` = {T: tau}; draft_s is a number or a function of T
        (drafter and tree building), other_s the rest of the verify step (everything but the
        attention), layers the attention layers per verify step. Trees the design cannot serve are
        left out. Returns (T, rate, [(T, tau, verify_s, rate)])."""
        table = []
        for T, tau in sorted(acceptance.items()):
            try:
                verify = self.latency(design, B, P, T)
            except ValueError:
                continue
            draft = draft_s(T) if callable(draft_s) else draft_s
            step = draft + other_s + layers * verify
            table.append((T, tau, verify, B * tau / step))
        if not table:
            raise ValueError(f"best_budget: no tree size of the acceptance curve is served by {design}")
        best = max(table, key=lambda r: r[3])
        return best[0], best[3], table


def load(path):
    return LatencyModel.load(path)
