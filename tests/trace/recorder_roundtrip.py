#!/usr/bin/env python3
"""Writes traces with experiments/tools/trace_recorder.py from SGLang-style numpy arrays, plus a JSON
file of what every step must read back as (requests and the full-layout SGLang buffers, built here
independently of the C++ code). The C++ test tstTraceRecorder.cpp reads both and compares.

FP8 traces are recorded from pools shaped as the serving stacks hold them (SGLang's uint8
[slots, 1, 576] with its k_scale, and DeepSeek V3.2's 656-byte rows); their expected output is an
fp64 reference computed here on those original buffers, with FP8 decoding written from the bit
layouts, so agreement with the C++ reference on the read-back trace checks both sides.

usage: recorder_roundtrip.py --recorder DIR --out DIR
"""

import argparse
import json
import os
import sys

import h5py
import numpy as np


def random_tree(rng, size):
    return np.array([-1] + [int(rng.integers(0, i)) for i in range(1, size)], dtype=np.int32)


def full_mask(parents, prefix_len):
    """T x (P+T) bytes: prefix columns 1, then self + ancestors."""
    T = len(parents)
    m = np.zeros((T, prefix_len + T), dtype=np.uint8)
    m[:, :prefix_len] = 1
    for i in range(T):
        k = i
        while k >= 0:
            m[i, prefix_len + k] = 1
            k = parents[k]
    return m


def bf16_bits(rng, shape):
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def make_steps(rng, num_steps, num_slots, padded):
    """Requests that persist across steps; each step: B rows (+1 padded row on odd steps)."""
    free = list(rng.permutation(np.arange(1, num_slots)))
    contexts = {rid: [free.pop() for _ in range(int(rng.integers(0, 30)))] for rid in (11, 12, 13)}
    steps = []
    for s in range(num_steps):
        reqs, rejected = [], []
        for rid, ctx in contexts.items():
            T = int(rng.integers(1, 9))
            parents = random_tree(rng, T)
            tree_slots = [free.pop() for _ in range(T)]
            # accepted: a root path of random length
            path = [0]
            while True:
                kids = [i for i in range(T) if parents[i] == path[-1]]
                if not kids or rng.random() < 0.3:
                    break
                path.append(kids[int(rng.integers(0, len(kids)))])
            reqs.append(dict(id=rid, prefix_slots=list(ctx), parent=parents.tolist(), tree_slots=tree_slots,
                             accepted=len(path)))
            ctx.extend(tree_slots[n] for n in path)
            rejected.extend(tree_slots[n] for n in range(T) if n not in path)
        free[:0] = rejected  # freed after the whole step is verified, reused last
        steps.append(dict(requests=reqs, padded=padded and s % 2 == 1))
    return steps


def sglang_arrays(step):
    """The buffers a Triton-backend verify sees: padded rows have P = T = 0; kv_indices has spare capacity."""
    reqs = step["requests"]
    P = [len(r["prefix_slots"]) for r in reqs]
    T = [len(r["parent"]) for r in reqs]
    if step["padded"]:
        P.append(0)
        T.append(0)
    kv_indptr = np.concatenate([[0], np.cumsum(P)]).astype(np.int32)
    qo_indptr = np.concatenate([[0], np.cumsum(T)]).astype(np.int64)
    kv_indices = np.array(sum((r["prefix_slots"] for r in reqs), []) + [0] * 5, dtype=np.int64)  # + capacity
    out_cache_loc = np.array(sum((r["tree_slots"] for r in reqs), []), dtype=np.int64)
    parents = np.array(sum((r["parent"] for r in reqs), []), dtype=np.int32)
    return kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents


def expected_full(step):
    reqs = step["requests"]
    masks = [full_mask(np.array(r["parent"]), len(r["prefix_slots"])).reshape(-1) for r in reqs]
    sizes = [m.size for m in masks]
    return dict(
        kv_indptr=np.concatenate([[0], np.cumsum([len(r["prefix_slots"]) for r in reqs])]).tolist(),
        kv_indices=sum((r["prefix_slots"] for r in reqs), []),
        qo_indptr=np.concatenate([[0], np.cumsum([len(r["parent"]) for r in reqs])]).tolist(),
        out_cache_loc=sum((r["tree_slots"] for r in reqs), []),
        custom_mask=np.concatenate(masks).tolist() if masks else [],
        mask_indptr=np.concatenate([[0], np.cumsum(sizes)]).tolist())


def fp8_values(kind):
    """The value of every byte, from the bit fields: OCP e4m3fn (no infinity, S.1111.111 NaN) or e5m2."""
    e_bits, m_bits, bias = (4, 3, 7) if kind == "e4m3" else (5, 2, 15)
    out = np.empty(256)
    for b in range(256):
        e, m = (b >> m_bits) & ((1 << e_bits) - 1), b & ((1 << m_bits) - 1)
        if kind == "e4m3" and e == 15 and m == 7:
            v = np.nan
        elif kind == "e5m2" and e == 31:
            v = np.inf if m == 0 else np.nan
        elif e == 0:
            v = m * 2.0 ** (1 - bias - m_bits)
        else:
            v = (1 + m / 2 ** m_bits) * 2.0 ** (e - bias)
        out[b] = -v if b & 0x80 else v
    return out


def bf16_values(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


def to_bf16_bits(x):
    """float64 -> float32 -> bf16 bits, round to nearest even (as the C++ side rounds its reference)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def dequantise(rows, kv_dtype, kv_scale):
    """Pool rows (uint8 [n, row]) as the fp64 values [n, 576] the products see."""
    if kv_dtype in ("fp8-e4m3", "fp8-e5m2"):
        return fp8_values(kv_dtype[4:])[rows] * np.float64(kv_scale)
    latent = fp8_values("e4m3")[rows[:, :512]]
    scales = np.ascontiguousarray(rows[:, 512:528]).view("<f4").astype(np.float64)
    rope = bf16_values(np.ascontiguousarray(rows[:, 528:656]).view("<u2"))
    return np.concatenate([latent * np.repeat(scales, 128, axis=1), rope], axis=1)


def reference_out(step, q, pool_values, sm_scale):
    """fp64 tree-verify attention of one step (docs/design.md section 1): node i of a request sees
    its prefix, itself and its ancestors; K is the 576-wide row, V its first 512 columns."""
    outs = []
    n = 0
    for r in step["requests"]:
        parents = r["parent"]
        for i in range(len(parents)):
            visible = list(r["prefix_slots"])
            k = i
            while k >= 0:
                visible.append(r["tree_slots"][k])
                k = parents[k]
            K = pool_values[np.asarray(visible)]
            qn = bf16_values(q[n])  # [H, 576]
            s = sm_scale * qn @ K.T
            p = np.exp(s - s.max(axis=1, keepdims=True))
            outs.append((p @ K[:, :512]) / p.sum(axis=1, keepdims=True))
            n += 1
    return np.stack(outs)


def sglang_fp8_pool(rng, kv_dtype, num_slots, kv_scale):
    """A pool as the stack holds it. SGLang: (x / k_scale).to(fp8) of values in [-1, 1], so each
    byte is a finite code of magnitude <= 1 / k_scale. V3.2: e4m3 latent codes, power-of-two block
    scales, bf16 rope values."""
    if kv_dtype in ("fp8-e4m3", "fp8-e5m2"):
        table = fp8_values(kv_dtype[4:])
        codes = np.flatnonzero(np.isfinite(table) & (np.abs(table) * kv_scale <= 1.0))
        return rng.choice(codes, size=(num_slots, 1, 576)).astype(np.uint8)
    table = fp8_values("e4m3")
    rows = np.zeros((num_slots, 656), dtype=np.uint8)
    rows[:, :512] = rng.choice(np.flatnonzero(np.isfinite(table)), size=(num_slots, 512))
    scales = (2.0 ** rng.integers(-12, -6, size=(num_slots, 4))).astype("<f4")
    rows[:, 512:528] = scales.view(np.uint8)
    rows[:, 528:656] = bf16_bits(rng, (num_slots, 64)).astype("<u2").view(np.uint8)
    return rows


class FakeTorch:
    """Just enough of torch for the recorder's tensor path (torch itself is not a test dependency):
    tensors that carry a dtype name, reshape, index, view as another dtype, and move to the host."""

    class dtype:
        def __init__(self, name, np_dtype):
            self.name, self.np_dtype = name, np_dtype

        def __str__(self):
            return "torch." + self.name

    uint8 = dtype("uint8", np.uint8)
    int16 = dtype("int16", np.int16)
    float8_e4m3fn = dtype("float8_e4m3fn", np.uint8)  # numpy has no float8: the bytes stand in
    float8_e5m2 = dtype("float8_e5m2", np.uint8)

    class Tensor:
        def __init__(self, a, dtype):
            self.a, self.dtype, self.device = a, dtype, "fake"

        shape = property(lambda self: self.a.shape)
        detach = cpu = lambda self: self
        numpy = lambda self: self.a
        reshape = lambda self, *shape: FakeTorch.Tensor(self.a.reshape(*shape), self.dtype)
        __getitem__ = lambda self, i: FakeTorch.Tensor(self.a[i.a if isinstance(i, FakeTorch.Tensor) else i], self.dtype)
        view = lambda self, dtype: FakeTorch.Tensor(self.a.view(dtype.np_dtype), dtype)

    @staticmethod
    def as_tensor(a, device=None):
        return FakeTorch.Tensor(np.asarray(a), FakeTorch.dtype("int64", np.int64))


def expect_value_error(what, fn, *needles):
    try:
        fn()
    except ValueError as e:
        for n in needles:
            if n not in str(e):
                sys.exit(f"{what}: ValueError lacks {n!r}: {e}")
        return
    sys.exit(f"{what}: no ValueError")


def plain(x):
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [plain(v) for v in x]
    if isinstance(x, np.integer):
        return int(x)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recorder", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.recorder)
    from trace_recorder import TraceRecorder, mask_to_parents

    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(2024)
    num_slots = 400

    # Trace 1: metadata only; the tree given as parents, as a full mask and as a QLEN_ONLY mask.
    steps = make_steps(rng, 6, num_slots, padded=True)
    path = os.path.join(args.out, "recorded.h5")
    with TraceRecorder(path, num_heads=8, num_slots=num_slots, source="recorder test") as rec:
        for s, step in enumerate(steps):
            kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(step)
            ids = [r["id"] for r in step["requests"]] + ([99] if step["padded"] else [])
            acc = [r["accepted"] for r in step["requests"]] + ([1] if step["padded"] else [])
            how = s % 3
            if how == 0:
                rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, request_ids=ids,
                             accepted=acc)
            else:
                layout = "full" if how == 1 else "tree"
                reqs = step["requests"] + ([dict(prefix_slots=[], parent=[])] if step["padded"] else [])
                masks = [full_mask(np.array(r["parent"], dtype=np.int32), len(r["prefix_slots"]) if layout == "full" else 0)
                         for r in reqs]
                mask = np.concatenate([m.reshape(-1) for m in masks])
                if how == 1:
                    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, custom_mask=mask, mask_layout=layout,
                                 request_ids=ids, accepted=acc)
                else:  # accepted lengths known only after verification
                    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, custom_mask=mask, mask_layout=layout,
                                 request_ids=ids)
                    rec.set_accepted(acc)

    # Trace 2: with values (q, out, and the pool rows each step reads).
    vsteps = make_steps(rng, 2, num_slots, padded=False)
    H = 2
    pool = bf16_bits(rng, (num_slots, 576))
    vpath = os.path.join(args.out, "recorded_values.h5")
    q_all, out_all = [], []
    with TraceRecorder(vpath, num_heads=H, num_slots=num_slots, sm_scale=0.1, source="recorder values") as rec:
        for step in vsteps:
            kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(step)
            n = int(qo_indptr[-1])
            q = bf16_bits(rng, (n, H, 576))
            out = bf16_bits(rng, (n, H, 512))
            q_all.append(q)
            out_all.append(out)
            rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, q=q, out=out, kv_pool=pool,
                         request_ids=[r["id"] for r in step["requests"]])
    referenced = sorted({s for st in vsteps for r in st["requests"] for s in r["prefix_slots"] + r["tree_slots"]})

    # The recorder refuses what it cannot record faithfully.
    bad = full_mask(np.array([-1, 0, 1]), 2)
    bad[2, 2 + 0] = 0  # node 2 no longer sees the root: not self + ancestors
    try:
        mask_to_parents(bad.reshape(-1), [0], [2], [3], "full")
        sys.exit("mask_to_parents accepted a mask that is not a tree")
    except ValueError:
        pass
    rec = TraceRecorder(os.path.join(args.out, "never.h5"), num_heads=H, num_slots=num_slots)
    kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(vsteps[0])
    n = int(qo_indptr[-1])
    rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, q=bf16_bits(rng, (n, H, 576)),
                 kv_pool=pool)
    changed = pool.copy()
    changed[int(kv_indices[0])] ^= 1
    try:
        rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents,
                     q=bf16_bits(rng, (n, H, 576)), kv_pool=changed)
        sys.exit("recorder accepted a pool slot that changed between steps")
    except ValueError:
        pass

    # Traces 3-5: FP8 pools recorded as the stacks hold them, in three shapes and scale types:
    # SGLang fp8_e4m3 uint8 [slots, 1, 576] with a float32 k_scale; fp8_e5m2 [slots, 576] with a
    # one-element scale array (as a tensor would come); V3.2 rows [slots, 656] with no scale.
    fp8_traces = []
    for kv_dtype, kv_scale in (("fp8-e4m3", np.float32(0.0371)), ("fp8-e5m2", np.array([0.5], np.float32)),
                               ("fp8-e4m3-blockscaled", None)):
        scale = None if kv_scale is None else float(np.asarray(kv_scale, np.float32).reshape(-1)[0])
        fpool = sglang_fp8_pool(rng, kv_dtype, num_slots, scale)
        if kv_dtype == "fp8-e5m2":
            fpool = fpool.reshape(num_slots, 576)
        values = dequantise(fpool.reshape(num_slots, -1), kv_dtype, scale)
        fsteps = make_steps(rng, 2, num_slots, padded=False)
        name = f"recorded_{kv_dtype.replace('-', '_')}.h5"
        fq_all, fout_all = [], []
        with TraceRecorder(os.path.join(args.out, name), num_heads=H, num_slots=num_slots, sm_scale=0.1,
                           source=f"recorder {kv_dtype}", kv_dtype=kv_dtype, kv_scale=kv_scale) as rec:
            for step in fsteps:
                kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(step)
                q = bf16_bits(rng, (int(qo_indptr[-1]), H, 576))
                out = to_bf16_bits(reference_out(step, q, values, 0.1))
                fq_all.append(q)
                fout_all.append(out)
                rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, q=q, out=out,
                             kv_pool=fpool, request_ids=[r["id"] for r in step["requests"]])
        used = sorted({s for st in fsteps for r in st["requests"] for s in r["prefix_slots"] + r["tree_slots"]})
        scale_bits = None if scale is None else int(np.float32(scale).view(np.uint32))
        fp8_traces.append(dict(
            file=name, num_heads=H, num_slots=num_slots, source=f"recorder {kv_dtype}", sm_scale=0.1,
            kv_dtype=kv_dtype, kv_scale_bits=scale_bits,
            steps=[dict(requests=st["requests"], full=expected_full(st)) for st in fsteps],
            q=np.concatenate(fq_all).reshape(-1).tolist(), out=np.concatenate(fout_all).reshape(-1).tolist(),
            kv_rows={str(s): fpool.reshape(num_slots, -1)[s].tolist() for s in used}))

    # The recorder takes a torch float8 view of the pool (here a stand-in: torch is not needed) and
    # writes the same bytes as from the uint8 pool; a view of the other FP8 type is refused.
    sys.modules["torch"] = FakeTorch
    step = make_steps(rng, 1, num_slots, padded=False)[0]
    kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents = sglang_arrays(step)
    e4m3_pool = sglang_fp8_pool(rng, "fp8-e4m3", num_slots, 0.25)
    n = int(qo_indptr[-1])
    views = {}
    for label, src in (("uint8", e4m3_pool), ("view", FakeTorch.Tensor(e4m3_pool, FakeTorch.float8_e4m3fn))):
        view_path = os.path.join(args.out, f"view_{label}.h5")
        with TraceRecorder(view_path, num_heads=H, num_slots=num_slots, kv_dtype="fp8-e4m3", kv_scale=0.25) as rec:
            rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents,
                         q=bf16_bits(np.random.default_rng(5), (n, H, 576)), kv_pool=src)
        with h5py.File(view_path, "r") as f:
            views[label] = (f["values/kv"][...], f["model"].attrs["kv_scale"], f.attrs["version"])
    if not (np.array_equal(views["uint8"][0], views["view"][0]) and views["view"][1] == np.float32(0.25)
            and views["view"][2] == 2):
        sys.exit("a float8_e4m3fn view of the pool was not recorded as its bytes")
    wrong_view = FakeTorch.Tensor(e4m3_pool, FakeTorch.float8_e5m2)
    rec = TraceRecorder(os.path.join(args.out, "never.h5"), num_heads=H, num_slots=num_slots, kv_dtype="fp8-e4m3",
                        kv_scale=1.0)
    expect_value_error("e5m2 view in an e4m3 recorder", lambda: rec.add_step(
        kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents, q=bf16_bits(rng, (n, H, 576)),
        kv_pool=wrong_view), "kv_pool", "float8_e5m2", "fp8-e4m3")
    del sys.modules["torch"]

    # Bad FP8 input is refused by name, before anything is written.
    def add(rec, pool):
        rec.add_step(kv_indptr, kv_indices, qo_indptr, out_cache_loc, parents=parents,
                     q=bf16_bits(rng, (n, H, 576)), kv_pool=pool)

    def recorder(kv_dtype="fp8-e4m3", kv_scale=1.0):
        return TraceRecorder(os.path.join(args.out, "never.h5"), num_heads=H, num_slots=num_slots,
                             kv_dtype=kv_dtype, kv_scale=kv_scale)

    for bad_scale in (0.0, -1.0, float("nan"), float("inf")):
        expect_value_error(f"scale {bad_scale}", lambda: recorder(kv_scale=bad_scale), "kv_scale", "finite and > 0")
    expect_value_error("no scale", lambda: recorder(kv_scale=None), "kv_scale", "k_scale")
    expect_value_error("scale of a block-scaled pool", lambda: recorder("fp8-e4m3-blockscaled", 1.0), "kv_scale",
                       "block scales")
    expect_value_error("unknown dtype", lambda: recorder("fp8"), "kv_dtype", "'fp8'")
    slot = int(kv_indices[0]) if kv_indptr[-1] > 0 else int(out_cache_loc[0])
    for kv_dtype, byte, needle in (("fp8-e4m3", 0x7F, "NaN"), ("fp8-e4m3", 0xFF, "NaN"),
                                   ("fp8-e5m2", 0x7C, "infinity"), ("fp8-e5m2", 0xFE, "NaN")):
        bad = sglang_fp8_pool(rng, kv_dtype, num_slots, 1.0)
        bad[slot, 0, 7] = byte
        expect_value_error(f"{kv_dtype} byte {byte:#x}", lambda: add(recorder(kv_dtype), bad), "kv_pool",
                           f"slot {slot}", "column 7", needle)
    bad = sglang_fp8_pool(rng, "fp8-e4m3-blockscaled", num_slots, None)
    bad[slot, 512 + 4:512 + 8] = np.array([0.0], "<f4").view(np.uint8)
    expect_value_error("zero block scale", lambda: add(recorder("fp8-e4m3-blockscaled", None), bad),
                       f"slot {slot}", "block scale 1")
    expect_value_error("row width", lambda: add(recorder("fp8-e4m3-blockscaled", None), e4m3_pool), "kv_pool",
                       "576", "656")
    expect_value_error("bf16 recorder, uint8 pool", lambda: add(TraceRecorder(
        os.path.join(args.out, "never.h5"), num_heads=H, num_slots=num_slots), e4m3_pool), "kv_pool", "kv_dtype")
    expect_value_error("bf16 pool in an FP8 recorder", lambda: add(recorder(), e4m3_pool.astype(np.uint16)),
                       "kv_pool", "uint8")
    if os.path.exists(os.path.join(args.out, "never.h5")):
        sys.exit("a refused recording left a file")

    expected = dict(
        traces=[
            dict(file="recorded.h5", num_heads=8, num_slots=num_slots, source="recorder test",
                 steps=[dict(requests=st["requests"], full=expected_full(st)) for st in steps]),
            dict(file="recorded_values.h5", num_heads=H, num_slots=num_slots, source="recorder values",
                 steps=[dict(requests=st["requests"], full=expected_full(st)) for st in vsteps],
                 q=np.concatenate(q_all).reshape(-1).tolist(), out=np.concatenate(out_all).reshape(-1).tolist(),
                 kv_rows={str(s): pool[s].tolist() for s in referenced}),
        ] + fp8_traces)
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(plain(expected), f)
    print(f"wrote {path}, {vpath}, {', '.join(t['file'] for t in fp8_traces)} and expected.json")


if __name__ == "__main__":
    main()
