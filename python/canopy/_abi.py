"""ctypes view of libcanopy_c.so (canopy_c.h) and of the array protocols that describe a buffer.

Kept free of any framework: a buffer is described from ``__dlpack__`` (torch, cupy, numpy, jax),
``__cuda_array_interface__`` (cupy, numba, torch) or ``__array_interface__`` (numpy), and the
library checks the description; this module only reads what the producer reports.
"""
from __future__ import annotations

import ctypes
import os

MAX_DIMS = 4
ABI_VERSION = 2

# canopy_status
OK, BAD_INPUT, UNSUPPORTED, RUNTIME_FAILURE = 0, 1, 2, 3
# canopy_device_type (DLPack's DLDeviceType)
DEVICE_CPU, DEVICE_CUDA = 1, 2
# canopy_dtype_code (DLPack's DLDataTypeCode)
DTYPE_INT, DTYPE_UINT, DTYPE_FLOAT, DTYPE_BFLOAT, DTYPE_BOOL = 0, 1, 2, 4, 6
DTYPE_FLOAT8_E4M3FN, DTYPE_FLOAT8_E5M2 = 10, 12  # DLPack 1.1
RUN_VALIDATE_VALUES = 1


class Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("dtype_code", ctypes.c_uint8),
        ("dtype_bits", ctypes.c_uint8),
        ("dtype_lanes", ctypes.c_uint16),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
        ("readonly", ctypes.c_int32),
    ]


class DesignInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 64),
        ("memory", ctypes.c_char * 8),
        ("runnable", ctypes.c_int32),
        ("experimental", ctypes.c_int32),
        ("reason", ctypes.c_char * 512),
    ]


class PlanParams(ctypes.Structure):
    _fields_ = [
        ("design", ctypes.c_char_p),
        ("heads", ctypes.c_int32),
        ("max_batch", ctypes.c_int32),
        ("max_tree", ctypes.c_int32),
        ("max_nodes", ctypes.c_int64),
        ("max_prefix", ctypes.c_int64),
        ("mask", ctypes.c_char_p),
        ("workspace", ctypes.c_char_p),
        ("nsplit", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("kv_dtype", ctypes.c_char_p),
        ("numerics", ctypes.c_char_p),
    ]


def _load():
    path = os.environ.get("CANOPY_LIBRARY") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "libcanopy_c.so")
    lib = ctypes.CDLL(path)
    msg = ctypes.c_char_p
    lib.canopy_abi_version.restype = ctypes.c_int
    lib.canopy_designs.argtypes = [ctypes.POINTER(DesignInfo), ctypes.c_int]
    lib.canopy_buffer_names.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]
    lib.canopy_plan_create.argtypes = [ctypes.POINTER(PlanParams), ctypes.POINTER(ctypes.c_void_p), msg, ctypes.c_size_t]
    lib.canopy_plan_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_int, ctypes.c_double,
                                    ctypes.c_double, ctypes.c_void_p, ctypes.c_int, msg, ctypes.c_size_t]
    lib.canopy_plan_describe.argtypes = [ctypes.c_void_p, msg, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int32),
                                         ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32)]
    lib.canopy_load_plugin.argtypes = [ctypes.c_char_p, msg, ctypes.c_size_t]
    lib.canopy_design_origin.argtypes = [ctypes.c_char_p, msg, ctypes.c_size_t]
    lib.canopy_plan_destroy.argtypes = [ctypes.c_void_p]
    lib.canopy_plan_destroy.restype = None
    lib.canopy_verify_attention.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                            ctypes.POINTER(Tensor), ctypes.c_int, ctypes.c_double, ctypes.c_double,
                                            ctypes.c_void_p, msg, ctypes.c_size_t]
    version = lib.canopy_abi_version()
    if version != ABI_VERSION:
        raise ImportError(f"{path}: C ABI version {version}, this package speaks {ABI_VERSION}")
    return lib


lib = _load()


def buffer_names():
    count = lib.canopy_buffer_names(None, 0)
    names = (ctypes.c_char_p * count)()
    lib.canopy_buffer_names(names, count)
    return [n.decode() for n in names]


# --- Array protocols -> Tensor -------------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# typestr kind -> dtype code (the array interfaces' spelling)
_KINDS = {"i": DTYPE_INT, "u": DTYPE_UINT, "f": DTYPE_FLOAT, "b": DTYPE_BOOL}


def _compact_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return list(reversed(strides))


def _fill(t, data, device_type, device_id, code, bits, shape, strides, readonly):
    if len(shape) > MAX_DIMS:
        raise ValueError(f"{t.name.decode()}: {len(shape)} dimensions, at most {MAX_DIMS}")
    t.data = data or None
    t.device_type, t.device_id = device_type, device_id
    t.dtype_code, t.dtype_bits, t.dtype_lanes = code, bits, 1
    t.ndim = len(shape)
    for d, (extent, stride) in enumerate(zip(shape, strides)):
        t.shape[d], t.strides[d] = extent, stride
    t.readonly = 1 if readonly else 0


def _from_dlpack(t, obj, keep):
    capsule = obj.__dlpack__()
    # The capsule keeps the producer's tensor alive; its own destructor releases it (we never rename
    # it "used_dltensor": we only borrow the memory for the duration of the call).
    keep.append(capsule)
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    dl = managed.dl_tensor
    shape = [dl.shape[d] for d in range(dl.ndim)]
    strides = [dl.strides[d] for d in range(dl.ndim)] if dl.strides else _compact_strides(shape)
    data = (dl.data or 0) + dl.byte_offset
    if dl.dtype.lanes != 1:
        raise ValueError(f"{t.name.decode()}: {dl.dtype.lanes}-lane vector elements")
    _fill(t, data, dl.device.device_type, dl.device.device_id, dl.dtype.code, dl.dtype.bits, shape, strides, False)


def _from_interface(t, iface, device_type, device_id):
    name = t.name.decode()
    typestr = iface["typestr"]
    if typestr[0] == ">" or typestr[1] not in _KINDS:
        raise ValueError(f"{name}: element type '{typestr}' is not an integer, float or bool in native byte order")
    itemsize = int(typestr[2:])
    shape = [int(x) for x in iface["shape"]]
    strides = iface.get("strides")
    if strides is None:
        strides = _compact_strides(shape)
    else:
        if any(s % itemsize for s in strides):
            raise ValueError(f"{name}: strides {tuple(strides)} (bytes) are not multiples of the {itemsize}-byte element")
        strides = [s // itemsize for s in strides]
    data = iface.get("data")
    if not isinstance(data, tuple):
        raise ValueError(f"{name}: the array interface gives no data pointer")
    _fill(t, data[0], device_type, device_id, _KINDS[typestr[1]], 8 * itemsize, shape, strides, data[1])


def describe(name, obj, keep):
    """A Tensor for ``obj`` named ``name``; ``keep`` collects what must live until the call returns."""
    t = Tensor()
    t.name = name.encode()
    keep.append(t.name)
    failures = []
    if hasattr(obj, "__dlpack__"):
        try:
            _from_dlpack(t, obj, keep)
            return t
        except Exception as e:  # e.g. numpy refuses read-only arrays, torch tensors that need grad
            failures.append(f"__dlpack__: {e}")
    for attr, device_type in (("__cuda_array_interface__", DEVICE_CUDA), ("__array_interface__", DEVICE_CPU)):
        try:
            iface = getattr(obj, attr)
        except Exception as e:  # torch raises TypeError for bfloat16, AttributeError off its device
            if hasattr(type(obj), attr):
                failures.append(f"{attr}: {e}")
            continue
        # The CUDA array interface does not say which device: -1 lets the library ask the runtime.
        _from_interface(t, iface, device_type, -1 if device_type == DEVICE_CUDA else 0)
        return t
    why = "; ".join(failures) if failures else "it exposes none of __dlpack__, __cuda_array_interface__, __array_interface__"
    raise ValueError(f"{name}: not a readable array ({type(obj).__name__}): {why}")
