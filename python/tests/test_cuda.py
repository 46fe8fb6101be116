"""The Python package on the CUDA designs with PyTorch tensors: eager, and captured in
torch.cuda.graph with new metadata and values between replays. Each output passes the check contract
against the fp64 numpy reference and the library's own fp64 reference design (what `canopy check`
compares with), and a replay gives the bits an eager run gives. Skipped without torch or a GPU."""
import numpy as np
import pytest

import canopy
from canopy.problems import D_V, empty_out, from_bf16_bits, metadata, quantise_pool, random_problem
from conftest import errors, passes, reference

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)
CUDA_DESIGNS = [d["name"] for d in canopy.designs() if d["memory"] == "cuda" and d["runnable"]]
if not CUDA_DESIGNS:
    pytest.skip("no runnable CUDA design in this build: " +
                "; ".join(d["name"] + ": " + d["reason"] for d in canopy.designs() if d["memory"] == "cuda"),
                allow_module_level=True)

HEADS = 8
SIZES = [(700, 17), (0, 9), (130, 33), (64, 0)]  # P, T per request; one empty prefix, one padded row


def on_gpu(p, bf16):
    """The problem's buffers as torch CUDA tensors (bf16 as torch.bfloat16 or as torch.uint16 bf16 bits)."""
    t = {}
    for name in list(metadata(p)) + ["q", "kv_pool"]:
        a = p[name]
        if a is None:
            t[name] = None
        elif a.dtype == np.uint16:
            bits = torch.from_numpy(a.view(np.int16)).cuda().view(torch.uint16)
            t[name] = bits.view(torch.bfloat16) if bf16 else bits
        else:
            t[name] = torch.from_numpy(a).cuda()
    return t


def out_bits(out):
    return out.view(torch.int16).cpu().numpy().view(np.uint16)


def library_reference(p):
    return canopy.verify_attention(p["q"], p["kv_pool"], empty_out(p), **metadata(p), mask=p["mask"],
                                   sm_scale=p["sm_scale"], design="reference")


@pytest.mark.parametrize("design", CUDA_DESIGNS)
@pytest.mark.parametrize("mask", ["full", "tree", "parents"])
@pytest.mark.parametrize("bf16", [True, False], ids=["bfloat16", "uint16-bits"])
def test_eager_matches_references(design, mask, bf16):
    p = random_problem(seed=21, heads=HEADS, mask=mask, sizes=SIZES, dominant=True)
    t = on_gpu(p, bf16)
    out = torch.full((p["q"].shape[0], HEADS, D_V), float("nan"), device="cuda", dtype=torch.bfloat16)
    if not bf16:
        out = out.view(torch.uint16)
    try:
        got = canopy.verify_attention(t.pop("q"), t.pop("kv_pool"), out, **t, mask=mask, sm_scale=p["sm_scale"],
                                      design=design)
    except canopy.UnsupportedError as e:
        pytest.skip(f"{design}: {e}")
    assert got is out
    torch.cuda.synchronize()
    bits = out_bits(out)
    assert passes(bits, reference(p))
    ref_bits = library_reference(p)
    assert passes(bits, from_bf16_bits(ref_bits))


@pytest.mark.parametrize("design", CUDA_DESIGNS)
@pytest.mark.parametrize("mask", ["full", "tree", "parents"])
def test_graph_replays_with_new_metadata_and_values(design, mask):
    # Same batch size and node count (what a graph bucket fixes), different trees, prefixes and values.
    sizes = [SIZES, [(300, 20), (12, 6), (5, 33), (0, 0)], [(0, 1), (650, 40), (33, 18), (9, 0)]]
    problems = [random_problem(seed=30 + s, heads=HEADS, mask=mask, sizes=z, slots=2000, dominant=True)
                for s, z in enumerate(sizes)]
    nodes = problems[0]["q"].shape[0]
    try:
        plan = canopy.Plan(design, heads=HEADS, max_batch=4, max_nodes=nodes, max_prefix=700, max_tree=40, mask=mask)
    except canopy.UnsupportedError as e:
        pytest.skip(f"{design}: {e}")
    # Static buffers, as a graph runner holds them: metadata copied in before each replay. The 1-D
    # buffers are as long as the longest step needs ("buffers may hold more" than a step uses).
    steps = [on_gpu(p, bf16=True) for p in problems]
    static = {}
    for k, v in steps[0].items():
        if v is not None:
            longest = max(s[k].numel() for s in steps)
            static[k] = torch.zeros((longest,) if v.dim() == 1 else v.shape, dtype=v.dtype, device="cuda")
    out = torch.zeros((nodes, HEADS, D_V), dtype=torch.bfloat16, device="cuda")

    def load(step):
        for k, v in step.items():
            if v is not None:
                static[k][:v.shape[0]].copy_(v)
        out.fill_(float("nan"))

    def run(sm_scale):
        b = dict(static)
        return plan.run(b.pop("q"), b.pop("kv_pool"), out, **b, sm_scale=sm_scale,
                        stream=torch.cuda.current_stream().cuda_stream)

    load(steps[0])
    run(problems[0]["sm_scale"])  # eager warm-up
    torch.cuda.synchronize()
    eager = out_bits(out)
    assert passes(eager, reference(problems[0])), (design, mask)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(problems[0]["sm_scale"])
    for p, step in zip(problems, steps):
        load(step)
        graph.replay()
        torch.cuda.synchronize()
        bits = out_bits(out)
        assert passes(bits, reference(p)), (design, mask)
        if p is problems[0]:
            assert np.array_equal(bits, eager)
    assert plan.describe()["capture_safe"]


@pytest.mark.parametrize("kv_dtype,kv_scale", [("fp8-e4m3", 1.0 / 32), ("fp8-e5m2", 0.0371),
                                               ("fp8-e4m3-blockscaled", None)])
@pytest.mark.parametrize("as_torch_fp8", [False, True], ids=["uint8", "torch-float8"])
def test_cuda_sm90_reads_fp8_pools(kv_dtype, kv_scale, as_torch_fp8):
    """cuda-sm90 on an FP8 pool in device memory (SGLang's uint8 rows, or their torch float8 view;
    V3.2's 656-byte rows), dequant numerics, against the fp64 reference on the dequantised pool."""
    if "cuda-sm90" not in CUDA_DESIGNS:
        pytest.skip("cuda-sm90 runs on sm_90 GPUs only")
    if as_torch_fp8 and kv_dtype == "fp8-e4m3-blockscaled":
        pytest.skip("a block-scaled row is bytes of several types: uint8 only")
    p = random_problem(seed=41, heads=HEADS, mask="tree", sizes=SIZES, dominant=True)
    pool, values = quantise_pool(p["kv_pool"], kv_dtype, kv_scale or 1.0)
    t = on_gpu(p, bf16=True)
    t.pop("kv_pool")
    device_pool = torch.from_numpy(pool).cuda()
    if as_torch_fp8:
        device_pool = device_pool.view(torch.float8_e4m3fn if kv_dtype == "fp8-e4m3" else torch.float8_e5m2)
    out = torch.full((p["q"].shape[0], HEADS, D_V), float("nan"), device="cuda", dtype=torch.bfloat16)
    canopy.verify_attention(t.pop("q"), device_pool, out, **t, mask="tree", sm_scale=p["sm_scale"],
                            design="cuda-sm90", kv_dtype=kv_dtype, kv_scale=kv_scale)
    torch.cuda.synchronize()
    assert passes(out_bits(out), reference(p, pool=values)), kv_dtype


# The fp8-mma error contract (docs/design.md §8, errorBounds): rel-L2 overall / worst row.
FP8_MMA_BOUNDS = {"fp8-e4m3": (4e-2, 7e-2), "fp8-e5m2": (8e-2, 1.4e-1)}


@pytest.mark.parametrize("kv_dtype,kv_scale", [("fp8-e4m3", 1.0 / 32), ("fp8-e5m2", 0.0371)])
def test_cuda_sm90_fp8_mma(kv_dtype, kv_scale):
    """cuda-sm90 in fp8-mma numerics (Q and P cast to the pool's type, FP8 wgmma) on an SGLang pool
    in device memory, against the numpy reference of those numerics within their bounds; the
    same output is not the dequant one."""
    if "cuda-sm90" not in CUDA_DESIGNS:
        pytest.skip("cuda-sm90 runs on sm_90 GPUs only")
    p = random_problem(seed=43, heads=HEADS, mask="tree", sizes=SIZES, dominant=False)
    pool, values = quantise_pool(p["kv_pool"], kv_dtype, kv_scale)
    t = on_gpu(p, bf16=True)
    t.pop("kv_pool")
    device_pool = torch.from_numpy(pool).cuda()
    outs = {}
    for numerics in ("fp8-mma", "dequant"):
        out = torch.full((p["q"].shape[0], HEADS, D_V), float("nan"), device="cuda", dtype=torch.bfloat16)
        canopy.verify_attention(t["q"], device_pool, out, **{k: v for k, v in t.items() if k != "q"}, mask="tree",
                                sm_scale=p["sm_scale"], design="cuda-sm90", kv_dtype=kv_dtype, kv_scale=kv_scale,
                                numerics=numerics)
        torch.cuda.synchronize()
        outs[numerics] = out_bits(out)
    total, worst = errors(outs["fp8-mma"], reference(p, pool=values, fp8_mma=kv_dtype[4:]))
    bound_total, bound_row = FP8_MMA_BOUNDS[kv_dtype]
    assert total <= bound_total and worst <= bound_row, (kv_dtype, total, worst)
    assert not np.array_equal(outs["fp8-mma"], outs["dequant"])
