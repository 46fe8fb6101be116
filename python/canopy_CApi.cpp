/// \file canopy_CApi.cpp
/// \brief The C ABI of canopy_c.h over the design registry: caller-owned tensors -> checked BatchRef
/// -> Design::run. Every check happens before anything runs, so a rejected call writes nothing; the
/// metadata values go through validateMetadata, the validator of `canopy check` and the trace reader.
#include "canopy_c.h"

#include "canopy_BatchRef.hpp"
#include "canopy_BatchStorage.hpp"
#include "canopy_Config.hpp"
#include "canopy_Design.hpp"
#include "canopy_Error.hpp"
#include "canopy_PluginLoader.hpp"
#include "canopy_Problem.hpp"
#include "canopy_Registry.hpp"
#include "canopy_Runtime.hpp"

#ifdef CANOPY_HAVE_CUDA_DESIGNS
#include "canopy_CudaRuntime.hpp"
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#define CANOPY_C_EXPORT extern "C" __attribute__((visibility("default")))

struct canopy_plan
{
  canopy::DesignPtr design;
  canopy::PlanBounds bounds;
  bool host = true;  ///< buffers in host memory (else CUDA device memory)
  int device = 0;    ///< CUDA device of the buffers and workspace
};

namespace canopy
{
namespace
{
/// Kokkos stays initialised for the life of the process: plans may outlive any scope the library
/// could tie finalize to (Python frees objects in no fixed order at exit), and a View freed after
/// Kokkos::finalize aborts.
void ensureRuntime()
{
  static RuntimeGuard *const guard = new RuntimeGuard();
  (void)guard;
}

bool designMemoryIsHost(Design const &d)
{
  switch (d.memory())
  {
  case MemoryKind::kHost: return true;
  case MemoryKind::kKokkos: return kokkosMemoryIsHost();
  case MemoryKind::kCudaDevice: return false;
  }
  return true;
}

void copyMessage(std::string const &text, char *out, size_t len)
{
  if (!out || len == 0)
    return;
  size_t const n = std::min(text.size(), len - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

/// Exceptions end here: each maps to its status, with its message.
template <class F>
int guarded(char *message, size_t len, F &&f)
{
  try
  {
    f();
    copyMessage("", message, len);
    return CANOPY_OK;
  }
  catch (Unsupported const &e)
  {
    copyMessage(e.what(), message, len);
    return CANOPY_UNSUPPORTED;
  }
  catch (InputError const &e)
  {
    copyMessage(e.what(), message, len);
    return CANOPY_BAD_INPUT;
  }
  catch (std::exception const &e)
  {
    copyMessage(e.what(), message, len);
    return CANOPY_RUNTIME_FAILURE;
  }
  catch (...)
  {
    copyMessage("unknown failure", message, len);
    return CANOPY_RUNTIME_FAILURE;
  }
}

template <class T>
struct TensorSlot
{
  using element = std::remove_const_t<T>;
  canopy_tensor const *t = nullptr;
};
using Slots = BatchBuffers<TensorSlot>;

std::string join(std::vector<int64_t> const &v)
{
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string dtypeName(canopy_tensor const &t)
{
  char const *base = "?";
  switch (t.dtype_code)
  {
  case CANOPY_DTYPE_INT: base = "int"; break;
  case CANOPY_DTYPE_UINT: base = "uint"; break;
  case CANOPY_DTYPE_FLOAT: base = "float"; break;
  case CANOPY_DTYPE_BFLOAT: base = "bfloat"; break;
  case CANOPY_DTYPE_BOOL: return "bool";
  case CANOPY_DTYPE_FLOAT8_E4M3FN: return "float8_e4m3fn";
  case CANOPY_DTYPE_FLOAT8_E5M2: return "float8_e5m2";
  }
  std::string s = base + std::to_string(t.dtype_bits);
  return t.dtype_lanes == 1 ? s : s + "x" + std::to_string(t.dtype_lanes);
}

/// The element types the batch buffers accept; \p expected says how a message spells them.
template <class T>
bool dtypeFits(canopy_tensor const &t, std::string &expected)
{
  auto is = [&](int code, int bits) { return t.dtype_code == code && t.dtype_bits == bits && t.dtype_lanes == 1; };
  if constexpr (std::is_same_v<T, int32_t>)
  {
    expected = "int32";
    return is(CANOPY_DTYPE_INT, 32);
  }
  else if constexpr (std::is_same_v<T, int64_t>)
  {
    expected = "int64";
    return is(CANOPY_DTYPE_INT, 64);
  }
  else if constexpr (std::is_same_v<T, uint8_t>)
  {
    expected = "uint8 (or bool)";
    return is(CANOPY_DTYPE_UINT, 8) || is(CANOPY_DTYPE_BOOL, 8);
  }
  else
  {
    static_assert(std::is_same_v<T, uint16_t>, "bf16 buffers are the only others");
    expected = "bfloat16 (or uint16 holding bf16 bits)";
    return is(CANOPY_DTYPE_BFLOAT, 16) || is(CANOPY_DTYPE_UINT, 16);
  }
}

/// An FP8 pool's bytes: uint8, or the DLPack FP8 code of the pool's own format (a float8_e4m3fn
/// pool may be fp8-e4m3 or the V3.2 layout, whose latent bytes are e4m3).
bool fp8PoolDtypeFits(canopy_tensor const &t, KvDtype dtype, std::string &expected)
{
  bool const e5m2 = dtype == KvDtype::kFp8E5m2;
  expected = std::string("uint8 or ") + (e5m2 ? "float8_e5m2" : "float8_e4m3fn") + " (a " + toString(dtype) + " pool)";
  int const own = e5m2 ? CANOPY_DTYPE_FLOAT8_E5M2 : CANOPY_DTYPE_FLOAT8_E4M3FN;
  return t.dtype_bits == 8 && t.dtype_lanes == 1 && (t.dtype_code == CANOPY_DTYPE_UINT || t.dtype_code == own);
}

int64_t elementsOf(canopy_tensor const &t)
{
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d)
    n *= t.shape[d];
  return n;
}

/// The CUDA device holding \p p, or -1 when it is no CUDA allocation (or the build has no CUDA).
int pointerDevice(void const *p)
{
#ifdef CANOPY_HAVE_CUDA_DESIGNS
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) == cudaSuccess &&
      (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged))
    return a.device;
  (void)cudaGetLastError();  // a failed query must not surface as the next launch's error
#else
  (void)p;
#endif
  return -1;
}

/// Looks each tensor up by its batch name; unknown and repeated names are errors.
Slots collect(canopy_tensor const *tensors, int count)
{
  if (count < 0 || (count > 0 && !tensors))
    throw InputError("tensors: " + std::to_string(count) + " tensors at a null address");
  Slots slots;
  for (int i = 0; i < count; ++i)
  {
    std::string const name = tensors[i].name ? tensors[i].name : "";
    bool known = false;
    std::string names;
    forEachBuffer(
        [&](char const *n, BufferExtent, auto &slot) {
          names += (names.empty() ? "" : ", ") + std::string(n);
          if (name != n)
            return;
          if (slot.t)
            throw InputError(name + ": given twice");
          slot.t = &tensors[i];
          known = true;
        },
        slots);
    if (!known)
      throw InputError("'" + name + "' is not a buffer of the batch (expected one of " + names + ")");
  }
  return slots;
}

/// What one run sees of its buffers before reading any value: the checks of every descriptor.
struct Shape
{
  int64_t rows = 0;      ///< B + 1
  int64_t nodes = 0;     ///< rows of q and out
  int heads = 0;
  int64_t slots = 0;     ///< rows of kv_pool
};

/// Checks each present tensor's memory, dtype, rank, contiguity and alignment, and the batch's
/// cross-buffer sizes; fills the pointers of \p ref. \p host: the design reads host memory.
/// \p kv_dtype: the pool's storage; an FP8 pool is bytes, [slots, kvRowBytes] or [slots, 1, kvRowBytes].
Shape checkDescriptors(Slots const &s, MaskLayout layout, bool host, int device, KvDtype kv_dtype, BatchRef &ref)
{
  bool const fp8 = kv_dtype != KvDtype::kBf16;
  int64_t const row = fp8 ? kvRowBytes(kv_dtype) : D_QK;  // pool row width in elements
  bool const needs_mask = layout != MaskLayout::kParents;
  Shape shape;
  forEachBuffer(
      [&](char const *name, BufferExtent extent, auto const &slot, auto &ptr) {
        using T = typename std::decay_t<decltype(slot)>::element;
        std::string const who = name;
        bool const optional = extent == BufferExtent::kMaskBytes || who == "mask_indptr" || who == "tree_parent";
        bool const required = !optional || (who == "tree_parent" ? !needs_mask : needs_mask);
        if (!slot.t)
        {
          if (required)
            throw InputError(who + ": missing; mask layout '" + toString(layout) + "' reads it");
          ptr = nullptr;
          return;
        }
        canopy_tensor const &t = *slot.t;
        bool const on_host = t.device_type == CANOPY_DEVICE_CPU || t.device_type == CANOPY_DEVICE_CUDA_HOST;
        bool const on_cuda = t.device_type == CANOPY_DEVICE_CUDA || t.device_type == CANOPY_DEVICE_CUDA_MANAGED;
        if (host && !on_host)
          throw InputError(who + ": in " + (on_cuda ? "CUDA device" : "device type " + std::to_string(t.device_type)) +
                           " memory; this design reads host memory");
        if (!host && !on_cuda)
          throw InputError(who + ": in " + (on_host ? "host" : "device type " + std::to_string(t.device_type)) +
                           " memory; this design reads CUDA device memory");
        // A producer that does not say which device (the CUDA array interface) leaves -1: ask the runtime.
        int const on_device = t.device_id >= 0 ? t.device_id : pointerDevice(t.data);
        if (!host && on_device != device)
          throw InputError(who + ": on CUDA device " + std::to_string(on_device) + ", the plan is on device " +
                           std::to_string(device));
        bool const fp8_pool = fp8 && extent == BufferExtent::kPool;
        std::string expected;
        if (fp8_pool ? !fp8PoolDtypeFits(t, kv_dtype, expected) : !dtypeFits<T>(t, expected))
          throw InputError(who + ": dtype " + dtypeName(t) + ", expected " + expected +
                           (extent == BufferExtent::kPool && !fp8 && t.dtype_bits == 8
                                ? "; an FP8 pool needs its kv dtype (fp8-e4m3, fp8-e5m2 or fp8-e4m3-blockscaled)"
                                : ""));
        // Rank: metadata 1-D; q [nodes][heads][576]; out [nodes][heads][512]; kv_pool [slots][576]
        // or SGLang's MLA pool [slots][1][576].
        std::vector<int64_t> const dims(t.shape, t.shape + std::max(0, std::min(t.ndim, CANOPY_MAX_DIMS)));
        std::string form;
        bool rank_ok = false;
        switch (extent)
        {
        case BufferExtent::kQueries:
          form = "[nodes, heads, " + std::to_string(D_QK) + "]";
          rank_ok = t.ndim == 3 && dims[2] == D_QK;
          break;
        case BufferExtent::kOutputs:
          form = "[nodes, heads, " + std::to_string(D_V) + "]";
          rank_ok = t.ndim == 3 && dims[2] == D_V;
          break;
        case BufferExtent::kPool:
          form = "[slots, " + std::to_string(row) + "] or [slots, 1, " + std::to_string(row) + "]" +
                 (fp8 ? " (" + toString(kv_dtype) + " rows of " + std::to_string(row) + " bytes)" : "");
          rank_ok = (t.ndim == 2 && dims[1] == row) || (t.ndim == 3 && dims[1] == 1 && dims[2] == row);
          break;
        default: form = "1-D"; rank_ok = t.ndim == 1;
        }
        if (!rank_ok)
          throw InputError(who + ": shape " + join(dims) + ", expected " + form);
        for (int d = 0; d < t.ndim; ++d)
          if (dims[d] < 0)
            throw InputError(who + ": dimension " + std::to_string(d) + " is " + std::to_string(dims[d]));
        // The designs index raw pointers: row-major contiguous only (strides of extent-1 dims are free).
        int64_t want = 1;
        for (int d = t.ndim - 1; d >= 0; --d)
        {
          if (dims[d] != 1 && t.strides[d] != want)
          {
            std::vector<int64_t> const strides(t.strides, t.strides + t.ndim);
            throw InputError(who + ": strides " + join(strides) + " (elements) are not row-major contiguous for shape " +
                             join(dims) + "; pass a contiguous buffer");
          }
          want *= dims[d];
        }
        int64_t const n = elementsOf(t);
        // The tile kernels load q, K/V and out rows in 16-byte pieces.
        size_t const align = extent == BufferExtent::kQueries || extent == BufferExtent::kOutputs ||
                                     extent == BufferExtent::kPool
                                 ? 16
                                 : sizeof(T);
        if (n > 0 && !t.data)
          throw InputError(who + ": null data with " + std::to_string(n) + " elements");
        if (reinterpret_cast<uintptr_t>(t.data) % align != 0)
          throw InputError(who + ": address not aligned to " + std::to_string(align) + " bytes");
        if (std::is_same_v<T, uint16_t> && extent == BufferExtent::kOutputs && t.readonly)
          throw InputError(who + ": read-only; it is written in place");
        // An empty buffer is never read; a dummy keeps designs that test pointers for presence going.
        alignas(16) static unsigned char empty[16];
        ptr = static_cast<std::remove_reference_t<decltype(ptr)>>(n > 0 ? t.data : static_cast<void *>(empty));
        switch (extent)
        {
        case BufferExtent::kQueries:
          shape.nodes = dims[0];
          shape.heads = static_cast<int>(dims[1]);
          break;
        case BufferExtent::kPool: shape.slots = dims[0]; break;
        default: break;
        }
      },
      s, ref);
  // Cross-buffer sizes (values are not read here).
  auto len = [](canopy_tensor const *t) { return t ? t->shape[0] : int64_t{0}; };
  shape.rows = len(s.qo_indptr.t);
  if (shape.rows < 1)
    throw InputError("qo_indptr: empty (needs at least the leading 0)");
  if (len(s.kv_indptr.t) != shape.rows)
    throw InputError("kv_indptr: " + std::to_string(len(s.kv_indptr.t)) + " entries, qo_indptr has " +
                     std::to_string(shape.rows) + " (both B+1)");
  if (s.mask_indptr.t && len(s.mask_indptr.t) != shape.rows)
    throw InputError("mask_indptr: " + std::to_string(len(s.mask_indptr.t)) + " entries, qo_indptr has " +
                     std::to_string(shape.rows) + " (both B+1)");
  canopy_tensor const &out = *s.out.t;
  if (out.shape[0] != shape.nodes || out.shape[1] != shape.heads)
    throw InputError("out: shape " + join({out.shape[0], out.shape[1], out.shape[2]}) + ", q has " +
                     std::to_string(shape.nodes) + " rows of " + std::to_string(shape.heads) + " heads");
  for (auto const *t : {s.out_cache_loc.t, s.tree_parent.t})
    if (t && t->shape[0] < shape.nodes)
      throw InputError(std::string(t->name) + ": " + std::to_string(t->shape[0]) + " entries, fewer than the " +
                       std::to_string(shape.nodes) + " rows of q");
  if (fp8)
  {
    // The pool's bytes go to kv_pool_fp8; kv_pool stays null, as BatchRef defines an FP8 batch.
    ref.kv_pool_fp8 = reinterpret_cast<uint8_t const *>(ref.kv_pool);
    ref.kv_pool = nullptr;
  }
  ref.kv_dtype = kv_dtype;
  ref.batch_size = static_cast<int>(shape.rows - 1);
  ref.num_heads = shape.heads;
  ref.num_nodes = shape.nodes;
  ref.num_slots = shape.slots;
  ref.mask_layout = layout;
  return shape;
}

/// Copies the first \p count elements of a buffer to the host (from CUDA memory: ordered on \p stream,
/// then waited for).
template <class T>
std::vector<T> readValues(canopy_tensor const *t, int64_t count, void *stream)
{
  std::vector<T> v(static_cast<size_t>(std::max<int64_t>(count, 0)));
  if (v.empty())
    return v;
  if (t->device_type == CANOPY_DEVICE_CPU || t->device_type == CANOPY_DEVICE_CUDA_HOST)
  {
    std::memcpy(v.data(), t->data, v.size() * sizeof(T));
    return v;
  }
#ifdef CANOPY_HAVE_CUDA_DESIGNS
  cudaStream_t const s = static_cast<cudaStream_t>(stream);
  cuda::check(cudaMemcpyAsync(v.data(), t->data, v.size() * sizeof(T), cudaMemcpyDeviceToHost, s),
              "reading the metadata");
  cuda::check(cudaStreamSynchronize(s), "reading the metadata");
  return v;
#else
  (void)stream;
  throw InputError(std::string(t->name) + ": in device memory, which this build cannot read");
#endif
}

/// A buffer's used prefix: \p last (an offset array's last entry) clamped to what the buffer holds,
/// so that an entry past the end reaches validateMetadata as a length mismatch, never as a read.
int64_t usedLength(canopy_tensor const *t, int64_t last)
{
  return t ? std::clamp<int64_t>(last, 0, t->shape[0]) : 0;
}

/// Reads the metadata and validates it with the library's rules; returns it (sizes as used).
BatchMetadata readMetadata(Slots const &s, Shape const &shape, MaskLayout layout, void *stream)
{
  BatchMetadata m;
  m.mask_layout = layout;
  m.qo_indptr = readValues<int64_t>(s.qo_indptr.t, shape.rows, stream);
  m.kv_indptr = readValues<int32_t>(s.kv_indptr.t, shape.rows, stream);
  m.mask_indptr = s.mask_indptr.t ? readValues<int64_t>(s.mask_indptr.t, shape.rows, stream)
                                  : std::vector<int64_t>(static_cast<size_t>(shape.rows), 0);
  int64_t const nodes = usedLength(s.out_cache_loc.t, m.qo_indptr.back());
  m.out_cache_loc = readValues<int64_t>(s.out_cache_loc.t, nodes, stream);
  m.kv_indices = readValues<int64_t>(s.kv_indices.t, usedLength(s.kv_indices.t, m.kv_indptr.back()), stream);
  if (s.custom_mask.t)
    m.custom_mask = readValues<uint8_t>(s.custom_mask.t, usedLength(s.custom_mask.t, m.mask_indptr.back()), stream);
  if (s.tree_parent.t)
    m.tree_parent = readValues<int32_t>(s.tree_parent.t, nodes, stream);
  else
  {
    // The mask layouts read no parents: a chain per request stands in, so validateMetadata checks the rest.
    m.tree_parent.assign(static_cast<size_t>(nodes), -1);
    for (int b = 0; b + 1 < static_cast<int>(m.qo_indptr.size()); ++b)
      for (int64_t i = std::max<int64_t>(m.qo_indptr[b], 0) + 1; i < std::min(m.qo_indptr[b + 1], nodes); ++i)
        m.tree_parent[i] = static_cast<int32_t>(i - 1 - m.qo_indptr[b]);
  }
  validateMetadata(m, shape.slots);
  if (m.numNodes() > shape.nodes)
    throw InputError("qo_indptr: last entry " + std::to_string(m.numNodes()) + " exceeds the " +
                     std::to_string(shape.nodes) + " rows of q");
  return m;
}

/// The per-request bounds a plan cannot check without the values.
void checkWithinPlan(BatchMetadata const &m, PlanBounds const &b)
{
  for (int r = 0; r < m.batchSize(); ++r)
  {
    if (m.treeSize(r) > b.max_tree)
      throw InputError("qo_indptr: request " + std::to_string(r) + " has " + std::to_string(m.treeSize(r)) +
                       " nodes, the plan's max_tree is " + std::to_string(b.max_tree));
    if (m.prefixLen(r) > b.max_prefix)
      throw InputError("kv_indptr: request " + std::to_string(r) + " has " + std::to_string(m.prefixLen(r)) +
                       " prefix tokens, the plan's max_prefix is " + std::to_string(b.max_prefix));
  }
}

void checkScale(double sm_scale)
{
  if (!std::isfinite(sm_scale) || sm_scale <= 0.0)
    throw InputError("sm_scale: " + std::to_string(sm_scale) + ", must be finite and > 0");
}

/// The scale of a one-scale FP8 pool (finite and > 0 as a float); 1 for pools that carry none.
float kvScaleFor(KvDtype dtype, double kv_scale)
{
  if (dtype != KvDtype::kFp8E4m3 && dtype != KvDtype::kFp8E5m2)
    return 1.0f;
  float const f = static_cast<float>(kv_scale);
  if (!std::isfinite(f) || !(f > 0.0f))
    throw InputError("kv_scale: " + std::to_string(kv_scale) + ", must be finite and > 0 for a " + toString(dtype) +
                     " pool");
  return f;
}

/// A kv dtype or numerics name of the ABI: NULL or "" is the default.
KvDtype kvDtypeArg(char const *name)
{
  return name && *name ? parseKvDtype(name, "kv_dtype") : KvDtype::kBf16;
}
Numerics numericsArg(char const *name)
{
  return name && *name ? parseNumerics(name, "numerics") : Numerics::kDequant;
}

void selectDevice(canopy_plan const &plan)
{
#ifdef CANOPY_HAVE_CUDA_DESIGNS
  if (!plan.host)
    cuda::check(cudaSetDevice(plan.device), "selecting the plan's CUDA device");
#else
  (void)plan;
#endif
}

/// Checks, then runs: the part of canopy_plan_run behind the ABI. \p validated: readMetadata already ran.
void runPlan(canopy_plan &plan, Slots const &s, double sm_scale, double kv_scale, void *stream, bool validate_values)
{
  if (!plan.design)
    throw InputError("plan: destroyed or never created");
  checkScale(sm_scale);
  float const pool_scale = kvScaleFor(plan.bounds.kv_dtype, kv_scale);
  BatchRef ref;
  Shape const shape = checkDescriptors(s, plan.bounds.mask_layout, plan.host, plan.device, plan.bounds.kv_dtype, ref);
  ref.sm_scale = static_cast<float>(sm_scale);
  ref.kv_scale = pool_scale;
  PlanBounds const &b = plan.bounds;
  if (shape.heads != b.num_heads)
    throw InputError("q: " + std::to_string(shape.heads) + " heads, the plan has " + std::to_string(b.num_heads));
  if (ref.batch_size > b.max_batch)
    throw InputError("qo_indptr: " + std::to_string(shape.rows) + " entries (a batch of " +
                     std::to_string(ref.batch_size) + "), the plan's max_batch is " + std::to_string(b.max_batch));
  if (shape.nodes > b.max_nodes)
    throw InputError("q: " + std::to_string(shape.nodes) + " rows, the plan's max_nodes is " +
                     std::to_string(b.max_nodes));
  selectDevice(plan);
  if (plan.host || validate_values)
  {
    BatchMetadata const m = readMetadata(s, shape, b.mask_layout, stream);
    checkWithinPlan(m, b);
    ref.num_nodes = m.numNodes();
  }
  plan.design->run(ref, ExecContext{stream});
  // Host designs return with the output written (Kokkos host spaces may run asynchronously).
  if (plan.host)
    fenceAll("canopy_c::run");
}

canopy_plan *createPlan(std::string const &design, PlanBounds const &bounds, DesignOptions const &options, int device)
{
  ensureRuntime();
  auto plan = std::make_unique<canopy_plan>();
  plan->design = makeDesign(design);
  plan->host = designMemoryIsHost(*plan->design);
  plan->device = device;
  std::string why;
  if (!memoryAvailable(plan->host ? MemoryKind::kHost : MemoryKind::kCudaDevice, &why))
    throw Unsupported("design '" + design + "' cannot run here: " + why);
  if (bounds.num_heads < 1 || bounds.max_batch < 0 || bounds.max_nodes < 0 || bounds.max_prefix < 0 ||
      bounds.max_tree < 0)
    throw InputError("plan: heads must be >= 1 and max_batch, max_tree, max_nodes, max_prefix >= 0");
  plan->bounds = bounds;
  selectDevice(*plan);
  plan->design->plan(bounds, options);
  return plan.release();
}
} // namespace
} // namespace canopy

using namespace canopy;

CANOPY_C_EXPORT int canopy_abi_version(void) { return CANOPY_C_ABI_VERSION; }

CANOPY_C_EXPORT int canopy_designs(canopy_design_info *infos, int capacity)
{
  int count = 0;
  guarded(nullptr, 0, [&] {
    ensureRuntime();
    for (std::string const &name : designNames(/*include_experimental=*/true))
    {
      if (infos && count < capacity)
      {
        canopy_design_info &info = infos[count];
        DesignPtr const d = makeDesign(name);
        bool const host = designMemoryIsHost(*d);
        std::string why;
        info.runnable = memoryAvailable(host ? MemoryKind::kHost : MemoryKind::kCudaDevice, &why);
        info.experimental = designIsExperimental(name);
        copyMessage(name, info.name, sizeof(info.name));
        copyMessage(host ? "host" : "cuda", info.memory, sizeof(info.memory));
        copyMessage(info.runnable ? "" : why, info.reason, sizeof(info.reason));
      }
      ++count;
    }
  });
  return count;
}

CANOPY_C_EXPORT int canopy_load_plugin(char const *path, char *message, size_t message_len)
{
  return guarded(message, message_len, [&] { loadPlugin(path ? path : ""); });
}

CANOPY_C_EXPORT int canopy_design_origin(char const *name, char *origin, size_t origin_len)
{
  std::string const n = name ? name : "";
  if (!designExists(n))
    return CANOPY_BAD_INPUT;
  copyMessage(designOrigin(n), origin, origin_len);
  return CANOPY_OK;
}

CANOPY_C_EXPORT int canopy_buffer_names(char const **names, int capacity)
{
  int count = 0;
  forEachBuffer(
      [&](char const *name, BufferExtent, auto const &) {
        if (names && count < capacity)
          names[count] = name;
        ++count;
      },
      BatchRef{});
  return count;
}

CANOPY_C_EXPORT int canopy_plan_create(canopy_plan_params const *p, canopy_plan **plan, char *message,
                                       size_t message_len)
{
  return guarded(message, message_len, [&] {
    if (!p || !plan || !p->design)
      throw InputError("plan: null parameters");
    *plan = nullptr;
    PlanBounds b;
    b.num_heads = p->heads;
    b.max_batch = p->max_batch;
    b.max_nodes = p->max_nodes;
    b.max_tree = p->max_tree > 0 ? p->max_tree : static_cast<int>(std::min<int64_t>(p->max_nodes, INT32_MAX));
    b.max_prefix = p->max_prefix;
    b.mask_layout = parseMaskLayout(p->mask ? p->mask : "", "mask");
    b.kv_dtype = kvDtypeArg(p->kv_dtype);
    DesignOptions o;
    o.numerics = numericsArg(p->numerics);
    o.nsplit = p->nsplit;
    o.workspace = parseWorkspaceStrategy(p->workspace ? p->workspace : "", "workspace");
    *plan = createPlan(p->design, b, o, p->device);
  });
}

CANOPY_C_EXPORT int canopy_plan_run(canopy_plan *plan, canopy_tensor const *tensors, int num_tensors, double sm_scale,
                                    double kv_scale, void *stream, int flags, char *message, size_t message_len)
{
  return guarded(message, message_len, [&] {
    if (!plan)
      throw InputError("plan: null");
    runPlan(*plan, collect(tensors, num_tensors), sm_scale, kv_scale, stream, flags & CANOPY_RUN_VALIDATE_VALUES);
  });
}

CANOPY_C_EXPORT int canopy_plan_describe(canopy_plan const *plan, char *path, size_t path_len, int32_t *splits,
                                         int64_t *workspace_bytes, int32_t *capture_safe)
{
  return guarded(nullptr, 0, [&] {
    if (!plan || !plan->design)
      throw InputError("plan: null");
    copyMessage(plan->design->path(), path, path_len);
    if (splits)
      *splits = plan->design->splits();
    if (workspace_bytes)
      *workspace_bytes = static_cast<int64_t>(plan->design->workspaceBytes());
    if (capture_safe)
      *capture_safe = plan->design->captureSafe();
  });
}

CANOPY_C_EXPORT void canopy_plan_destroy(canopy_plan *plan)
{
  guarded(nullptr, 0, [&] {
    if (plan)
      canopy::selectDevice(*plan);  // the workspace is freed on the device it lives on
    delete plan;
  });
}

CANOPY_C_EXPORT int canopy_verify_attention(char const *design, char const *mask, char const *kv_dtype,
                                            char const *numerics, canopy_tensor const *tensors, int num_tensors,
                                            double sm_scale, double kv_scale, void *stream, char *message,
                                            size_t message_len)
{
  return guarded(message, message_len, [&] {
    ensureRuntime();
    std::string const name = design ? design : "";
    MaskLayout const layout = parseMaskLayout(mask ? mask : "", "mask");
    KvDtype const dtype = kvDtypeArg(kv_dtype);
    DesignOptions options;
    options.numerics = numericsArg(numerics);
    checkScale(sm_scale);
    kvScaleFor(dtype, kv_scale);
    Slots const s = collect(tensors, num_tensors);
    DesignPtr probe = makeDesign(name);
    bool const host = designMemoryIsHost(*probe);
    int device = 0;
    if (s.q.t && !host)
      device = s.q.t->device_id >= 0 ? s.q.t->device_id : std::max(0, pointerDevice(s.q.t->data));
    // Plan for exactly this batch: its shape first, then the values (which the plan bounds need).
    BatchRef ref;
    Shape const shape = checkDescriptors(s, layout, host, device, dtype, ref);
    canopy_plan bare;
    bare.host = host;
    bare.device = device;
    selectDevice(bare);
    BatchMetadata const m = readMetadata(s, shape, layout, stream);
    PlanBounds b;
    b.max_batch = m.batchSize();
    b.max_tree = static_cast<int>(m.maxTreeSize());
    b.max_prefix = m.maxPrefixLen();
    b.max_nodes = shape.nodes;
    b.num_heads = shape.heads;
    b.mask_layout = layout;
    b.kv_dtype = dtype;
    std::unique_ptr<canopy_plan> plan(createPlan(name, b, options, device));
    runPlan(*plan, s, sm_scale, kv_scale, stream, /*validate_values=*/false);
  });
}
