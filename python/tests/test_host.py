"""The Python package on the host designs: every host design through verify_attention and Plan on
random batches of every mask layout against an fp64 numpy reference, and each kind of bad input
rejected with the library's message (naming the buffer) and the output untouched."""

import numpy as np
import pytest

import canopy
from canopy.problems import empty_out, metadata, random_problem
from conftest import errors, passes, reference

HOST_DESIGNS = [d["name"] for d in canopy.designs() if d["memory"] == "host" and d["runnable"]]
MASKS = ["full", "tree", "parents"]


def run(p, design, out=None, **overrides):
    out = empty_out(p) if out is None else out
    kwargs = dict(metadata(p), mask=p["mask"], sm_scale=p["sm_scale"], design=design)
    kwargs.update(overrides)
    return canopy.verify_attention(p["q"], p["kv_pool"], out, **kwargs)


def test_designs_lists_the_build():
    ds = canopy.designs()
    names = [d["name"] for d in ds]
    assert "reference" in names and "kokkos-team" in names
    for d in ds:
        assert d["memory"] in ("host", "cuda")
        assert isinstance(d["runnable"], bool)
        assert (d["reason"] == "") == d["runnable"], d
    assert all(d["runnable"] for d in ds if d["memory"] == "host")


@pytest.mark.parametrize("design", HOST_DESIGNS)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dominant", [False, True], ids=["random", "tree-dominant"])
def test_host_design_matches_fp64_reference(design, mask, dominant):
    for seed in range(3):
        p = random_problem(seed=100 * seed + MASKS.index(mask), batch=4, heads=2, max_prefix=48, max_tree=11,
                           mask=mask, dominant=dominant)
        out = run(p, design)
        total, worst = errors(out, reference(p))
        assert total <= 1e-2 and worst <= 2e-2, (design, mask, seed, total, worst)


@pytest.mark.parametrize("mask", MASKS)
def test_checks_can_fail(mask):
    """A reference that drops the parent edge (node sees only itself) must fail the same contract."""
    p = random_problem(seed=7, batch=3, heads=2, max_prefix=30, max_tree=8, mask=mask, dominant=True,
                       sizes=[(20, 6), (0, 5), (9, 7)])
    out = run(p, "reference")
    assert passes(out, reference(p))
    assert not passes(out, reference(p, sees=lambda parents, i: [i]))
    assert not passes(out, reference(p, sees=lambda parents, i: list(range(i + 1))))  # causal, not the tree


def test_empty_requests_and_zero_prefix():
    p = random_problem(seed=3, heads=2, mask="tree", sizes=[(0, 4), (12, 0), (0, 0), (5, 3)])
    out = run(p, "reference")
    assert passes(out, reference(p))


def test_tree_layouts_need_no_tree_parent():
    p = random_problem(seed=5, batch=3, heads=2, mask="tree")
    out = run(p, "reference", tree_parent=None)
    assert passes(out, reference(p))


def test_torch_style_bool_mask_and_sglang_pool_shape():
    p = random_problem(seed=6, batch=3, heads=2, mask="full")
    out = run(p, "reference", custom_mask=p["custom_mask"].astype(bool))
    assert passes(out, reference(p))
    out = canopy.verify_attention(p["q"], p["kv_pool"].reshape(-1, 1, 576), empty_out(p), **metadata(p),
                                  mask="full", sm_scale=p["sm_scale"])
    assert passes(out, reference(p))


def test_returns_out_in_place():
    p = random_problem(seed=8, batch=2, heads=2, mask="parents")
    out = empty_out(p)
    assert run(p, "reference", out=out) is out


@pytest.mark.parametrize("design", HOST_DESIGNS)
def test_plan_runs_many_batches(design):
    with canopy.Plan(design, heads=2, max_batch=4, max_nodes=44, max_prefix=48, max_tree=11, mask="tree") as plan:
        for seed in range(3):
            p = random_problem(seed=seed, batch=4, heads=2, max_prefix=48, max_tree=11, mask="tree")
            out = plan.run(p["q"], p["kv_pool"], empty_out(p), **metadata(p), sm_scale=p["sm_scale"])
            assert passes(out, reference(p)), (design, seed)
        assert plan.describe()["path"]


def test_plan_rejects_batches_beyond_its_bounds():
    plan = canopy.Plan("reference", heads=2, max_batch=2, max_nodes=20, max_prefix=10, max_tree=4, mask="tree")
    cases = [
        (dict(sizes=[(1, 1)] * 3), r"^qo_indptr: 4 entries \(a batch of 3\), the plan's max_batch is 2"),
        (dict(sizes=[(1, 5)]), r"^qo_indptr: request 0 has 5 nodes, the plan's max_tree is 4"),
        (dict(sizes=[(11, 1)]), r"^kv_indptr: request 0 has 11 prefix tokens, the plan's max_prefix is 10"),
    ]
    for spec, message in cases:
        p = random_problem(seed=1, heads=2, mask="tree", **spec)
        out = empty_out(p)
        with pytest.raises(ValueError, match=message):
            plan.run(p["q"], p["kv_pool"], out, **metadata(p), sm_scale=p["sm_scale"])
        assert np.all(out == 0xFFFF)
    p = random_problem(seed=1, heads=3, mask="tree", sizes=[(1, 1)])
    with pytest.raises(ValueError, match=r"^q: 3 heads, the plan has 2"):
        plan.run(p["q"], p["kv_pool"], empty_out(p), **metadata(p), sm_scale=p["sm_scale"])


class FakeCudaArray:
    """Claims CUDA memory through the CUDA array interface (never dereferenced: it must be refused)."""

    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                                         "strides": None, "version": 3}


def bad_inputs():
    """(label, mask, how to spoil the batch, the message the library must give). Each names the buffer."""
    def setitem(name, index, value):
        def spoil(b):
            b[name] = b[name].copy()
            b[name][index] = value
        return spoil

    def replace(name, make):
        def spoil(b):
            b[name] = make(b[name])
        return spoil

    return [
        ("slot out of range", "tree", setitem("kv_indices", 3, 10_000),
         r"^kv_indices: index 3 holds slot 10000, outside the pool \[0, \d+\)$"),
        ("negative tree slot", "tree", setitem("out_cache_loc", 2, -1), r"^out_cache_loc: index 2 holds slot -1"),
        ("offsets decrease", "tree", setitem("qo_indptr", 2, 0), r"^qo_indptr: index 2 holds 0, less than index 1"),
        ("offset past the buffer", "tree", setitem("kv_indptr", 4, 10_000),
         r"^kv_indptr: last entry 10000 does not match the buffer length"),
        ("mask too short", "tree", setitem("mask_indptr", 3, 1), r"^mask_indptr"),
        ("bad parent", "parents", setitem("tree_parent", 2, 5), r"^tree_parent of request 0"),
        ("missing mask", "tree", replace("custom_mask", lambda a: None),
         r"^custom_mask: missing; mask layout 'tree' reads it"),
        ("missing parents", "parents", replace("tree_parent", lambda a: None), r"^tree_parent: missing"),
        ("wrong index dtype", "tree", replace("kv_indptr", lambda a: a.astype(np.int64)),
         r"^kv_indptr: dtype int64, expected int32$"),
        ("wrong value dtype", "tree", replace("q", lambda a: a.astype(np.float32)),
         r"^q: dtype float32, expected bfloat16"),
        ("wrong width", "tree", replace("q", lambda a: np.ascontiguousarray(a[:, :, :575])),
         r"^q: shape \[\d+, 2, 575\], expected \[nodes, heads, 576\]"),
        ("wrong rank", "tree", replace("kv_indices", lambda a: a.reshape(1, -1)), r"^kv_indices: shape \[1, \d+\], expected 1-D"),
        ("non-contiguous", "tree", replace("out", lambda a: np.empty((a.shape[0], 4, 512), np.uint16)[:, ::2]),
         r"^out: strides \[2048, 1024, 1\] \(elements\) are not row-major contiguous"),
        ("read-only out", "tree", replace("out", lambda a: np.lib.stride_tricks.as_strided(a, writeable=False)),
         r"^out: read-only"),
        ("out rows differ", "tree", replace("out", lambda a: np.full((a.shape[0] + 1,) + a.shape[1:], 0xFFFF, np.uint16)),
         r"^out: shape \[\d+, 2, 512\], q has \d+ rows of 2 heads"),
        ("indptr lengths differ", "tree", replace("kv_indptr", lambda a: a[:-1].copy()),
         r"^kv_indptr: 4 entries, qo_indptr has 5 \(both B\+1\)"),
        ("device memory for a host design", "tree", replace("kv_indices", FakeCudaArray),
         r"^kv_indices: in CUDA device memory; this design reads host memory"),
        ("not an array", "tree", replace("qo_indptr", lambda a: a.tolist()), r"^qo_indptr: not a readable array"),
    ]


@pytest.mark.parametrize("design", HOST_DESIGNS)
@pytest.mark.parametrize("label,mask,spoil,message", bad_inputs(), ids=[c[0] for c in bad_inputs()])
def test_bad_input_raises_value_error_and_leaves_out_untouched(design, label, mask, spoil, message):
    p = random_problem(seed=11, heads=2, mask=mask, sizes=[(6, 4), (3, 5), (0, 2), (8, 3)])
    b = dict(metadata(p), q=p["q"], kv_pool=p["kv_pool"], out=empty_out(p))
    spoil(b)
    out = b["out"]
    before = np.array(out, copy=True)
    with pytest.raises(ValueError, match=message):
        canopy.verify_attention(b.pop("q"), b.pop("kv_pool"), b.pop("out"), **b, mask=mask, sm_scale=p["sm_scale"],
                                design=design)
    assert np.array_equal(np.asarray(out), before)


def test_bad_arguments():
    p = random_problem(seed=12, batch=2, heads=2, mask="tree")
    out = empty_out(p)
    with pytest.raises(ValueError, match=r"^design 'nope' is not compiled into this build \(available: reference"):
        run(p, "nope", out=out)
    with pytest.raises(ValueError, match=r"^mask: unknown mask layout 'causal' \(expected one of full, tree, parents\)"):
        run(p, "reference", out=out, mask="causal")
    with pytest.raises(ValueError, match=r"^sm_scale: nan, must be finite and > 0"):
        run(p, "reference", out=out, sm_scale=float("nan"))
    with pytest.raises(ValueError, match=r"^workspace: unknown workspace strategy 'big'"):
        canopy.Plan("reference", heads=2, max_batch=1, max_nodes=1, max_prefix=1, mask="tree", workspace="big")
    assert np.all(out == 0xFFFF)


@pytest.mark.parametrize("field, value, message", [
    ("heads", 2**32 + 2, r"^heads: 4294967298 does not fit in a signed 32-bit integer"),
    ("max_batch", -2**31 - 1, r"^max_batch: -2147483649 does not fit in a signed 32-bit integer"),
    ("max_prefix", 2**64, r"^max_prefix: 18446744073709551616 does not fit in a signed 64-bit integer"),
    ("max_nodes", 2.5, r"^max_nodes: expected an integer, got 2.5"),
    ("nsplit", True, r"^nsplit: expected an integer, got True"),
])
def test_plan_integers_are_checked_as_given(field, value, message):
    args = dict(heads=2, max_batch=1, max_nodes=1, max_prefix=1, mask="tree")
    args[field] = value
    with pytest.raises(ValueError, match=message):
        canopy.Plan("reference", **args)


def test_cuda_designs_refuse_host_arrays():
    cuda = [d["name"] for d in canopy.designs() if d["memory"] == "cuda"]
    if not cuda:
        pytest.skip("this build has no CUDA designs")
    p = random_problem(seed=13, batch=2, heads=2, mask="tree")
    out = empty_out(p)
    for design in cuda:
        with pytest.raises(ValueError, match=r"^(kv_indptr|kv_indices|qo_indptr|out_cache_loc|custom_mask|"
                                             r"mask_indptr|tree_parent|q|kv_pool|out): in host memory; "
                                             r"this design reads CUDA device memory"):
            run(p, design, out=out)
    assert np.all(out == 0xFFFF)
