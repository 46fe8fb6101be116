"""Canopy from Python: every design of the build on framework arrays, on the caller's stream.

    import canopy
    canopy.load("libmy_design.so")        # a design plugin's designs join the others
    canopy.designs()                      # [{"name", "memory", "runnable", "reason", "experimental", "origin"}]
    canopy.verify_attention(q, kv_pool, out, kv_indptr=..., kv_indices=..., qo_indptr=...,
                            out_cache_loc=..., custom_mask=..., mask_indptr=..., mask="tree",
                            sm_scale=..., design="reference")
    canopy.verify_attention(q, fp8_pool, out, ..., kv_dtype="fp8-e4m3", kv_scale=k_scale)  # FP8 KV
    plan = canopy.Plan("cuda-sm120", heads=8, max_batch=8, max_nodes=512, max_prefix=32768, mask="tree")
    plan.run(q, kv_pool, out, ..., stream=torch.cuda.current_stream().cuda_stream)  # capturable

Buffers are any objects with ``__dlpack__``, ``__cuda_array_interface__`` or ``__array_interface__``
(numpy on the host; torch or cupy on CUDA); bf16 as torch.bfloat16 or uint16 arrays of bf16 bits.
An FP8 pool (docs/design.md §8) is a torch.float8_e4m3fn / float8_e5m2 tensor or a uint8 array, with
``kv_dtype`` ("fp8-e4m3", "fp8-e5m2", "fp8-e4m3-blockscaled": uint8 [slots, 656]), ``kv_scale`` for
the one-scale dtypes and ``numerics`` ("dequant" or "fp8-mma").
Bad input raises ValueError with the library's message, naming the buffer; ``out`` is then untouched.
docs/python.md is the full reference.
"""
from __future__ import annotations

import ctypes
import numbers
import sys

from . import _abi

__all__ = ["designs", "load", "verify_attention", "Plan", "UnsupportedError", "BUFFER_NAMES", "KV_DTYPES"]

#: The batch's buffer names, in the library's order (core/canopy_BatchRef.hpp).
BUFFER_NAMES = tuple(_abi.buffer_names())

_MESSAGE_BYTES = 4096


class UnsupportedError(ValueError):
    """The design cannot serve these bounds or this machine (the reason is the message)."""


def _raise_for(status, message):
    text = message.value.decode(errors="replace")
    if status == _abi.BAD_INPUT:
        raise ValueError(text)
    if status == _abi.UNSUPPORTED:
        raise UnsupportedError(text)
    if status != _abi.OK:
        raise RuntimeError(text)


def designs():
    """Every design of this build and of the loaded plugins: name, memory ("host" or "cuda"), runnable
    here and why not, and origin (the plugin library it came from, "" when built in)."""
    count = _abi.lib.canopy_designs(None, 0)
    infos = (_abi.DesignInfo * count)()
    _abi.lib.canopy_designs(infos, count)
    return [
        {
            "name": i.name.decode(),
            "memory": i.memory.decode(),
            "runnable": bool(i.runnable),
            "reason": i.reason.decode(),
            "experimental": bool(i.experimental),
            "origin": _origin(i.name),
        }
        for i in infos
    ]


def _origin(name):
    origin = ctypes.create_string_buffer(_MESSAGE_BYTES)
    _abi.lib.canopy_design_origin(name, origin, _MESSAGE_BYTES)
    return origin.value.decode(errors="replace")


def load(path):
    """Loads a design plugin (a shared library built against the installed Canopy, see
    examples/out-of-tree-design): its designs then run like the built-in ones. Raises ValueError,
    naming the file, for a library that does not load, is no Canopy plugin, was built against another
    plugin ABI version or registers a design name that exists already. Loading it again does nothing."""
    message = ctypes.create_string_buffer(_MESSAGE_BYTES)
    _raise_for(_abi.lib.canopy_load_plugin(str(path).encode(), message, _MESSAGE_BYTES), message)


def _tensors(arguments, keep):
    """The Tensor array of the buffers among ``arguments`` (a call's locals; None = absent), in the
    library's order: the signatures spell the buffers out, the library's list picks them up."""
    buffers = {name: arguments.get(name) for name in BUFFER_NAMES}
    given = [_abi.describe(name, buffers[name], keep) for name in BUFFER_NAMES if buffers.get(name) is not None]
    return (_abi.Tensor * len(given))(*given), len(given)


#: The KV pool storages (docs/design.md §8) and those that take a ``kv_scale``.
KV_DTYPES = ("bf16", "fp8-e4m3", "fp8-e5m2", "fp8-e4m3-blockscaled")
_SCALED = ("fp8-e4m3", "fp8-e5m2")
#: The kv dtypes a torch FP8 tensor's bytes may be.
_TORCH_FP8 = {"float8_e4m3fn": ("fp8-e4m3", "fp8-e4m3-blockscaled"), "float8_e5m2": ("fp8-e5m2",)}


def _kv_pool(kv_pool, kv_dtype, kv_scale):
    """(the pool as the library reads it, its kv dtype, the scale passed to the library). A torch FP8
    tensor gives its kv dtype when ``kv_dtype`` is None, must agree with it otherwise, and goes to the
    library as its bytes (a uint8 view: DLPack producers differ on FP8). ``kv_scale`` is required for
    the one-scale dtypes and refused for the others; its value is the library's to check."""
    torch = sys.modules.get("torch")
    fp8 = None
    if torch is not None and isinstance(kv_pool, torch.Tensor):
        fp8 = _TORCH_FP8.get(str(kv_pool.dtype).replace("torch.", ""))
    if kv_dtype is None:
        kv_dtype = fp8[0] if fp8 else "bf16"
    if not isinstance(kv_dtype, str):
        raise ValueError(f"kv_dtype: expected a string (one of {', '.join(KV_DTYPES)}), got {kv_dtype!r}")
    if fp8:
        if kv_dtype not in fp8:
            raise ValueError(f"kv_pool: a {kv_pool.dtype} tensor, but kv_dtype is '{kv_dtype}' (expected "
                             f"{' or '.join(fp8)})")
        kv_pool = kv_pool.view(torch.uint8)
    if kv_dtype not in KV_DTYPES:
        return kv_pool, kv_dtype, 1.0  # the library names the unknown dtype
    if kv_dtype in _SCALED:
        if kv_scale is None:
            raise ValueError(f"kv_scale: required for a {kv_dtype} pool (its per-tensor scale, SGLang's k_scale: "
                             "1.0 when the checkpoint has none)")
    elif kv_scale is not None:
        raise ValueError(f"kv_scale: a {kv_dtype} pool takes none (only fp8-e4m3 and fp8-e5m2 pools have one scale)")
    if kv_scale is None:
        return kv_pool, kv_dtype, 1.0
    if isinstance(kv_scale, bool) or not isinstance(kv_scale, numbers.Real):
        raise ValueError(f"kv_scale: expected a number, got {kv_scale!r}")
    return kv_pool, kv_dtype, float(kv_scale)


def _stream_handle(stream, q):
    """A cudaStream_t as an int: the argument (an int, or an object with .cuda_stream or .ptr), else the
    current stream of the framework that made q (torch, cupy), else the legacy default stream (0)."""
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(q, torch.Tensor) and q.is_cuda:
        return torch.cuda.current_stream(q.device).cuda_stream
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(q, cupy.ndarray):
        return cupy.cuda.get_current_stream().ptr
    return 0


def verify_attention(q, kv_pool, out, *, kv_indptr, kv_indices, qo_indptr, out_cache_loc, custom_mask=None,
                     mask_indptr=None, tree_parent=None, mask="tree", sm_scale, design="reference", stream=None,
                     kv_dtype=None, kv_scale=None, numerics="dequant"):
    """Tree-verify attention of one batch with ``design``; writes ``out`` in place and returns it.

    Reads and validates the metadata first (for a CUDA design that waits for ``stream``), then plans
    the design for exactly this batch and runs it: for repeated or captured runs use :class:`Plan`.
    ``kv_dtype`` (default: bf16, or a torch FP8 pool's own), ``kv_scale`` and ``numerics``: FP8 pools.
    Raises ValueError (naming the buffer and first bad index) on bad input, with ``out`` untouched;
    UnsupportedError when the design does not serve the pool's dtype in ``numerics``.
    """
    kv_pool, kv_dtype, kv_scale = _kv_pool(kv_pool, kv_dtype, kv_scale)
    keep = []
    tensors, count = _tensors(locals(), keep)
    message = ctypes.create_string_buffer(_MESSAGE_BYTES)
    status = _abi.lib.canopy_verify_attention(design.encode(), mask.encode(), kv_dtype.encode(), str(numerics).encode(),
                                              tensors, count, float(sm_scale), kv_scale, _stream_handle(stream, q),
                                              message, _MESSAGE_BYTES)
    _raise_for(status, message)
    return out


def _int(name, value, bits):
    """``value`` as a signed integer of ``bits`` bits, or ValueError naming ``name``: a ctypes field
    would silently keep the low bits (heads=2**32 + 2 became 2)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    value = int(value)
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise ValueError(f"{name}: {value} does not fit in a signed {bits}-bit integer")
    return value


class Plan:
    """One design planned for a graph bucket: plan once (allocations happen here), run many times.

    ``run`` enqueues on ``stream`` with no host sync and no allocation (workspace "persistent"), so
    it can be captured in ``torch.cuda.graph`` and replayed with new buffer contents. It checks every
    buffer's memory, dtype, shape, strides and sizes against the plan; the metadata *values* are
    checked only when ``validate=True`` (always for host designs), because reading them from device
    memory waits for the stream.
    """

    def __init__(self, design, *, heads, max_batch, max_nodes, max_prefix, mask, workspace="persistent", nsplit=0,
                 max_tree=None, device=0, kv_dtype="bf16", numerics="dequant"):
        self.design = design
        self.mask = mask
        self.kv_dtype = kv_dtype
        self.numerics = numerics
        self._handle = ctypes.c_void_p()
        if not isinstance(kv_dtype, str):
            raise ValueError(f"kv_dtype: expected a string (one of {', '.join(KV_DTYPES)}), got {kv_dtype!r}")
        params = _abi.PlanParams(design.encode(), _int("heads", heads, 32), _int("max_batch", max_batch, 32),
                                 _int("max_tree", max_tree or 0, 32), _int("max_nodes", max_nodes, 64),
                                 _int("max_prefix", max_prefix, 64), mask.encode(), workspace.encode(),
                                 _int("nsplit", nsplit, 32), _int("device", device, 32), kv_dtype.encode(),
                                 str(numerics).encode())
        message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        _raise_for(_abi.lib.canopy_plan_create(ctypes.byref(params), ctypes.byref(self._handle), message,
                                               _MESSAGE_BYTES), message)

    def run(self, q, kv_pool, out, *, kv_indptr, kv_indices, qo_indptr, out_cache_loc, custom_mask=None,
            mask_indptr=None, tree_parent=None, sm_scale, stream=None, validate=False, kv_scale=None):
        """Enqueues the attention of one batch (within the plan's bounds) and returns ``out``. The pool is
        of the plan's ``kv_dtype``; ``kv_scale`` is required for fp8-e4m3 and fp8-e5m2 pools."""
        kv_pool, _, kv_scale = _kv_pool(kv_pool, self.kv_dtype, kv_scale)
        keep = []
        tensors, count = _tensors(locals(), keep)
        message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        flags = _abi.RUN_VALIDATE_VALUES if validate else 0
        status = _abi.lib.canopy_plan_run(self._handle, tensors, count, float(sm_scale), kv_scale,
                                          _stream_handle(stream, q), flags, message, _MESSAGE_BYTES)
        _raise_for(status, message)
        return out

    def describe(self):
        """The kernel path of the last run, the prefix splits, workspace bytes, and capture safety."""
        path = ctypes.create_string_buffer(256)
        splits, workspace, capture_safe = ctypes.c_int32(), ctypes.c_int64(), ctypes.c_int32()
        _abi.lib.canopy_plan_describe(self._handle, path, 256, ctypes.byref(splits), ctypes.byref(workspace),
                                      ctypes.byref(capture_safe))
        return {"path": path.value.decode(), "splits": splits.value, "workspace_bytes": workspace.value,
                "capture_safe": bool(capture_safe.value)}

    def close(self):
        """Frees the plan's workspace now (else when the object is collected)."""
        handle, self._handle = self._handle, ctypes.c_void_p()
        if handle:
            _abi.lib.canopy_plan_destroy(handle)

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
