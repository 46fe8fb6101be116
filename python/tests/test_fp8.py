"""FP8 KV pools through the Python package (docs/design.md §8): the reference design and kokkos-team
on uint8 pools of each FP8 dtype (and torch FP8 tensors where torch is installed), through
verify_attention and Plan, against the numpy fp64 reference on the dequantised pool (conftest.py)
with the check contract; fp8-mma numerics on the reference design against the numpy emulation of
its casts; a wrongly scaled pool failing that contract; and each kind of bad FP8 input raising
ValueError (UnsupportedError for a design that does not serve the pool) with ``out`` untouched."""

import re

import numpy as np
import pytest

import canopy
from canopy.problems import D_QK, ROW_BYTES, empty_out, metadata, quantise_pool, random_problem
from conftest import errors, passes, reference

FP8_DTYPES = ["fp8-e4m3", "fp8-e5m2", "fp8-e4m3-blockscaled"]
MASKS = ["full", "tree", "parents"]
NAMES = [d["name"] for d in canopy.designs()]
DESIGNS = [d for d in ("reference", "kokkos-team") if d in NAMES]
#: A scale that is not a power of two for e5m2; the block-scaled rows carry their own.
SCALES = {"fp8-e4m3": 1.0 / 32, "fp8-e5m2": 0.0371, "fp8-e4m3-blockscaled": None}


def fp8_problem(kv_dtype, seed, **shape):
    """A random batch with its pool stored as ``kv_dtype``: (problem, uint8 pool, dequantised values)."""
    p = random_problem(seed=seed, **shape)
    pool, values = quantise_pool(p["kv_pool"], kv_dtype, SCALES[kv_dtype] or 1.0)
    return p, pool, values


def run(p, pool, kv_dtype, design, out=None, **overrides):
    out = empty_out(p) if out is None else out
    kwargs = dict(metadata(p), mask=p["mask"], sm_scale=p["sm_scale"], design=design, kv_dtype=kv_dtype,
                  kv_scale=SCALES.get(kv_dtype))
    kwargs.update(overrides)
    return canopy.verify_attention(p["q"], pool, out, **kwargs)


def test_quantised_pools_have_the_dtype_rows():
    p, pool, values = fp8_problem("fp8-e4m3-blockscaled", seed=1, batch=2, heads=2, mask="tree")
    assert pool.dtype == np.uint8 and pool.shape == (p["kv_pool"].shape[0], 656)
    assert values.shape == (pool.shape[0], D_QK)
    # The rope part is kept in bf16: its bytes are the bf16 bits of the pool.
    assert np.array_equal(pool[:, 528:].view(np.uint16), p["kv_pool"][:, 512:])
    for kv_dtype in ("fp8-e4m3", "fp8-e5m2"):
        _, pool, _ = fp8_problem(kv_dtype, seed=1, batch=2, heads=2, mask="tree")
        assert pool.shape[1] == ROW_BYTES[kv_dtype] == D_QK


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("kv_dtype", FP8_DTYPES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dominant", [False, True], ids=["random", "tree-dominant"])
def test_fp8_pool_matches_fp64_reference_on_the_dequantised_pool(design, kv_dtype, mask, dominant):
    for seed in range(2):
        p, pool, values = fp8_problem(kv_dtype, seed=200 + 10 * seed + MASKS.index(mask), batch=4, heads=2,
                                      max_prefix=48, max_tree=11, mask=mask, dominant=dominant)
        out = run(p, pool, kv_dtype, design)
        total, worst = errors(out, reference(p, pool=values))
        assert total <= 1e-2 and worst <= 2e-2, (design, kv_dtype, mask, seed, total, worst)


@pytest.mark.parametrize("kv_dtype", FP8_DTYPES)
def test_sglang_pool_shape(kv_dtype):
    p, pool, values = fp8_problem(kv_dtype, seed=31, batch=3, heads=2, mask="full")
    out = run(p, pool.reshape(pool.shape[0], 1, -1), kv_dtype, "reference")
    assert passes(out, reference(p, pool=values))


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("kv_dtype", FP8_DTYPES)
def test_plan_runs_fp8_batches(design, kv_dtype):
    with canopy.Plan(design, heads=2, max_batch=4, max_nodes=44, max_prefix=48, max_tree=11, mask="tree",
                     kv_dtype=kv_dtype) as plan:
        for seed in range(2):
            p, pool, values = fp8_problem(kv_dtype, seed=40 + seed, batch=4, heads=2, max_prefix=48, max_tree=11,
                                          mask="tree")
            out = plan.run(p["q"], pool, empty_out(p), **metadata(p), sm_scale=p["sm_scale"],
                           kv_scale=SCALES[kv_dtype])
            assert passes(out, reference(p, pool=values)), (design, kv_dtype, seed)
        assert plan.describe()["path"].startswith(design)


@pytest.mark.parametrize("kv_dtype", ["fp8-e4m3", "fp8-e5m2"])
def test_fp8_mma_numerics_reach_the_library(kv_dtype):
    """The reference design in fp8-mma matches the numpy emulation of its casts, and differs from its
    dequant output; kokkos-team does not serve fp8-mma and says so."""
    p, pool, values = fp8_problem(kv_dtype, seed=50, batch=3, heads=2, max_prefix=40, max_tree=9, mask="tree")
    fmt = kv_dtype[4:]
    mma = run(p, pool, kv_dtype, "reference", numerics="fp8-mma")
    assert passes(mma, reference(p, pool=values, fp8_mma=fmt))
    dequant = run(p, pool, kv_dtype, "reference")
    assert not np.array_equal(mma, dequant)
    assert errors(mma, reference(p, pool=values))[0] > errors(mma, reference(p, pool=values, fp8_mma=fmt))[0]
    if "kokkos-team" in NAMES:
        out = empty_out(p)
        with pytest.raises(canopy.UnsupportedError, match=r"^kokkos-team: kv dtype " + kv_dtype +
                           r" with numerics fp8-mma: .*fp8-mma products are not implemented"):
            run(p, pool, kv_dtype, "kokkos-team", out=out, numerics="fp8-mma")
        assert np.all(out == 0xFFFF)


@pytest.mark.parametrize("design", DESIGNS)
def test_checks_can_fail(design):
    """The library told twice the scale, or e5m2 bytes told they are e4m3, fails the contract."""
    p, pool, values = fp8_problem("fp8-e4m3", seed=60, batch=3, heads=2, mask="tree", dominant=True)
    assert passes(run(p, pool, "fp8-e4m3", design), reference(p, pool=values))
    assert not passes(run(p, pool, "fp8-e4m3", design, kv_scale=2 * SCALES["fp8-e4m3"]), reference(p, pool=values))
    p, pool, values = fp8_problem("fp8-e5m2", seed=61, batch=3, heads=2, mask="tree")
    assert not passes(run(p, pool, "fp8-e4m3", design, kv_scale=SCALES["fp8-e5m2"]), reference(p, pool=values))


def bad_fp8_inputs():
    """(label, kv_dtype, keyword overrides of run, the message). Each names the buffer or argument."""
    return [
        ("scale 0", "fp8-e4m3", dict(kv_scale=0.0), r"^kv_scale: 0\.0+, must be finite and > 0 for a fp8-e4m3 pool"),
        ("scale nan", "fp8-e5m2", dict(kv_scale=float("nan")), r"^kv_scale: nan, must be finite and > 0"),
        ("scale inf", "fp8-e4m3", dict(kv_scale=float("inf")), r"^kv_scale: inf, must be finite and > 0"),
        ("scale negative", "fp8-e4m3", dict(kv_scale=-0.5), r"^kv_scale: -0\.50+, must be finite and > 0"),
        ("scale beyond float", "fp8-e4m3", dict(kv_scale=1e300), r"^kv_scale: .*must be finite and > 0"),
        ("scale missing", "fp8-e4m3", dict(kv_scale=None), r"^kv_scale: required for a fp8-e4m3 pool"),
        ("scale not a number", "fp8-e4m3", dict(kv_scale="1"), r"^kv_scale: expected a number"),
        ("scale for a block-scaled pool", "fp8-e4m3-blockscaled", dict(kv_scale=1.0),
         r"^kv_scale: a fp8-e4m3-blockscaled pool takes none"),
        ("656-byte rows as fp8-e4m3", "fp8-e4m3-blockscaled", dict(kv_dtype="fp8-e4m3", kv_scale=1.0),
         r"^kv_pool: shape \[\d+, 656\], expected \[slots, 576\] or \[slots, 1, 576\] \(fp8-e4m3 rows of 576 bytes\)"),
        ("576-byte rows as block-scaled", "fp8-e4m3", dict(kv_dtype="fp8-e4m3-blockscaled", kv_scale=None),
         r"^kv_pool: shape \[\d+, 576\], expected \[slots, 656\] or \[slots, 1, 656\]"),
        ("uint8 pool without its dtype", "fp8-e4m3", dict(kv_dtype=None, kv_scale=None),
         r"^kv_pool: dtype uint8, expected bfloat16 .*an FP8 pool needs its kv dtype"),
        ("bf16 pool as fp8", "bf16", dict(kv_dtype="fp8-e5m2", kv_scale=1.0),
         r"^kv_pool: (dtype uint16, expected uint8 or float8_e5m2|shape)"),
        ("unknown kv dtype", "fp8-e4m3", dict(kv_dtype="fp8", kv_scale=None),
         r"^kv_dtype: unknown kv dtype 'fp8' \(expected one of bf16, fp8-e4m3, fp8-e5m2, fp8-e4m3-blockscaled\)"),
        ("unknown numerics", "fp8-e4m3", dict(numerics="fp4"), r"^numerics: unknown numerics 'fp4'"),
        ("fp8-mma on the V3.2 layout", "fp8-e4m3-blockscaled", dict(numerics="fp8-mma"),
         r"^numerics fp8-mma needs kv dtype fp8-e4m3 or fp8-e5m2, not fp8-e4m3-blockscaled"),
    ]


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("label,kv_dtype,overrides,message", bad_fp8_inputs(), ids=[c[0] for c in bad_fp8_inputs()])
def test_bad_fp8_input_raises_value_error_and_leaves_out_untouched(design, label, kv_dtype, overrides, message):
    p = random_problem(seed=70, heads=2, mask="tree", sizes=[(6, 4), (3, 5), (0, 2)])
    pool = p["kv_pool"] if kv_dtype == "bf16" else quantise_pool(p["kv_pool"], kv_dtype, SCALES[kv_dtype] or 1.0)[0]
    out = empty_out(p)
    kwargs = dict(metadata(p), mask="tree", sm_scale=p["sm_scale"], design=design, kv_dtype=kv_dtype,
                  kv_scale=SCALES.get(kv_dtype))
    kwargs.update(overrides)
    with pytest.raises(ValueError, match=message):
        canopy.verify_attention(p["q"], pool, out, **kwargs)
    assert np.all(out == 0xFFFF)


def test_designs_that_do_not_serve_fp8_say_so():
    """Every design but the reference, kokkos-team and cuda-sm90 (test_cuda.py) raises UnsupportedError,
    naming itself and the dtype, at Plan (host designs also through verify_attention), with ``out``
    untouched."""
    others = [d for d in canopy.designs() if d["name"] not in ("reference", "cuda-sm90")
              and not d["name"].startswith("kokkos-team") and d["runnable"]]
    if not others:
        pytest.skip("this build has no design beyond the reference, kokkos-team and cuda-sm90")
    p, pool, _ = fp8_problem("fp8-e4m3", seed=80, batch=2, heads=2, mask="tree")
    for d in others:
        with pytest.raises(canopy.UnsupportedError, match=r"^" + d["name"] + r": kv dtype fp8-e4m3 with numerics "):
            canopy.Plan(d["name"], heads=2, max_batch=2, max_nodes=20, max_prefix=40, mask="tree", kv_dtype="fp8-e4m3")
        if d["memory"] == "host":
            out = empty_out(p)
            with pytest.raises(canopy.UnsupportedError, match=r"^" + d["name"] + r": kv dtype fp8-e4m3"):
                run(p, pool, "fp8-e4m3", d["name"], out=out)
            assert np.all(out == 0xFFFF)


def test_plan_checks_the_pool_against_its_kv_dtype():
    plan = canopy.Plan("reference", heads=2, max_batch=2, max_nodes=20, max_prefix=40, mask="tree",
                       kv_dtype="fp8-e5m2")
    p, pool, _ = fp8_problem("fp8-e4m3-blockscaled", seed=81, batch=2, heads=2, mask="tree")
    out = empty_out(p)
    with pytest.raises(ValueError, match=r"^kv_pool: shape \[\d+, 656\], expected \[slots, 576\]"):
        plan.run(p["q"], pool, out, **metadata(p), sm_scale=p["sm_scale"], kv_scale=1.0)
    with pytest.raises(ValueError, match=r"^kv_scale: required for a fp8-e5m2 pool"):
        plan.run(p["q"], pool[:, :576].copy(), out, **metadata(p), sm_scale=p["sm_scale"])
    with pytest.raises(ValueError, match=r"^kv_pool: dtype uint16, expected uint8 or float8_e5m2"):
        plan.run(p["q"], p["kv_pool"], out, **metadata(p), sm_scale=p["sm_scale"], kv_scale=1.0)
    assert np.all(out == 0xFFFF)
    with pytest.raises(ValueError, match=r"^kv_dtype: unknown kv dtype 'e4m3'"):
        canopy.Plan("reference", heads=2, max_batch=2, max_nodes=20, max_prefix=40, mask="tree", kv_dtype="e4m3")


def test_torch_fp8_tensors():
    """A torch FP8 pool gives its kv dtype, must agree with a kv_dtype given, and reads as its bytes."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no FP8 dtypes")
    for kv_dtype, torch_dtype in (("fp8-e4m3", torch.float8_e4m3fn), ("fp8-e5m2", torch.float8_e5m2)):
        p, pool, values = fp8_problem(kv_dtype, seed=90, batch=3, heads=2, mask="tree")
        t = torch.from_numpy(pool).view(torch_dtype)
        out = run(p, t, None, "reference", kv_scale=SCALES[kv_dtype])  # kv_dtype from the tensor
        assert passes(out, reference(p, pool=values))
        other = "fp8-e5m2" if kv_dtype == "fp8-e4m3" else "fp8-e4m3"
        out = empty_out(p)
        with pytest.raises(ValueError, match=r"^kv_pool: a torch\.float8_\w+ tensor, but kv_dtype is '" + other):
            run(p, t, other, "reference", out=out, kv_scale=1.0)
        assert np.all(out == 0xFFFF)
    p, pool, values = fp8_problem("fp8-e4m3-blockscaled", seed=91, batch=2, heads=2, mask="tree")
    out = run(p, torch.from_numpy(pool).view(torch.float8_e4m3fn), "fp8-e4m3-blockscaled", "reference")
    assert passes(out, reference(p, pool=values))


def test_dlpack_fp8_codes_must_agree_with_kv_dtype():
    """A producer that describes the pool with DLPack's FP8 codes (as recent torch does) is read as its
    bytes when the code is the pool's own format and refused, naming kv_pool, when it is the other."""
    import ctypes
    from canopy import _abi
    p, pool, values = fp8_problem("fp8-e4m3", seed=95, batch=2, heads=2, mask="tree")
    for code, expected in ((_abi.DTYPE_FLOAT8_E4M3FN, None),
                           (_abi.DTYPE_FLOAT8_E5M2, r"^kv_pool: dtype float8_e5m2, expected uint8 or float8_e4m3fn")):
        out = empty_out(p)
        keep = []
        tensors, count = canopy._tensors(dict(metadata(p), q=p["q"], kv_pool=pool, out=out), keep)
        [t for t in tensors if t.name == b"kv_pool"][0].dtype_code = code
        message = ctypes.create_string_buffer(4096)
        status = _abi.lib.canopy_verify_attention(b"reference", b"tree", b"fp8-e4m3", b"dequant", tensors, count,
                                                  p["sm_scale"], SCALES["fp8-e4m3"], None, message, 4096)
        if expected is None:
            assert status == _abi.OK, message.value
            assert passes(out, reference(p, pool=values))
        else:
            assert status == _abi.BAD_INPUT
            assert re.match(expected, message.value.decode()), message.value
            assert np.all(out == 0xFFFF)
