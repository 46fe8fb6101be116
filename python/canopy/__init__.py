"""Canopy from Python: every design of the build on framework arrays, on the caller's stream.

    import canopy
    canopy.load("libmy_design.so")        # a design plugin's designs join the others
    canopy.designs()                      # [{"name", "memory", "runnable", "reason", "experimental", "origin"}]
    canopy.verify_attention(q, kv_pool, out, kv_indptr=..., kv_indices=..., qo_indptr=...,
                            out_cache_loc=..., custom_mask=..., mask_indptr=..., mask="tree",
                            sm_scale=..., design="reference")
    plan = canopy.Plan("cuda-sm120", heads=8, max_batch=8, max_nodes=512, max_prefix=32768, mask="tree")
    plan.run(q, kv_pool, out, ..., stream=torch.cuda.current_stream().cuda_stream)  # capturable

Buffers are any objects with ``__dlpack__``, ``__cuda_array_interface__`` or ``__array_interface__``
(numpy on the host; torch or cupy on CUDA); bf16 as torch.bfloat16 or uint16 arrays of bf16 bits.
Bad input raises ValueError with the library's message, naming the buffer; ``out`` is then untouched.
docs/python.md is the full reference.
"""
from __future__ import annotations

import ctypes
import numbers
import sys

from . import _abi

__all__ = ["designs", "load", "verify_attention", "Plan", "UnsupportedError", "BUFFER_NAMES"]

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
                     mask_indptr=None, tree_parent=None, mask="tree", sm_scale, design="reference", stream=None):
    """Tree-verify attention of one batch with ``design``; writes ``out`` in place and returns it.

    Reads and validates the metadata first (for a CUDA design that waits for ``stream``), then plans
    the design for exactly this batch and runs it: for repeated or captured runs use :class:`Plan`.
    Raises ValueError (naming the buffer and first bad index) on bad input, with ``out`` untouched.
    """
    keep = []
    tensors, count = _tensors(locals(), keep)
    message = ctypes.create_string_buffer(_MESSAGE_BYTES)
    status = _abi.lib.canopy_verify_attention(design.encode(), mask.encode(), tensors, count, float(sm_scale),
                                              _stream_handle(stream, q), message, _MESSAGE_BYTES)
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
                 max_tree=None, device=0):
        self.design = design
        self.mask = mask
        self._handle = ctypes.c_void_p()
        params = _abi.PlanParams(design.encode(), _int("heads", heads, 32), _int("max_batch", max_batch, 32),
                                 _int("max_tree", max_tree or 0, 32), _int("max_nodes", max_nodes, 64),
                                 _int("max_prefix", max_prefix, 64), mask.encode(), workspace.encode(),
                                 _int("nsplit", nsplit, 32), _int("device", device, 32))
        message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        _raise_for(_abi.lib.canopy_plan_create(ctypes.byref(params), ctypes.byref(self._handle), message,
                                               _MESSAGE_BYTES), message)

    def run(self, q, kv_pool, out, *, kv_indptr, kv_indices, qo_indptr, out_cache_loc, custom_mask=None,
            mask_indptr=None, tree_parent=None, sm_scale, stream=None, validate=False):
        """Enqueues the attention of one batch (within the plan's bounds) and returns ``out``."""
        keep = []
        tensors, count = _tensors(locals(), keep)
        message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        flags = _abi.RUN_VALIDATE_VALUES if validate else 0
        status = _abi.lib.canopy_plan_run(self._handle, tensors, count, float(sm_scale), _stream_handle(stream, q),
                                          flags, message, _MESSAGE_BYTES)
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
