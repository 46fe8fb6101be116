/// \file canopy_BatchStorage.hpp
/// \brief Owned batch buffers in the memory a design asks for (host, Kokkos space, CUDA device),
/// behind one interface so checks and the replay engine need not know where memory lives.
#pragma once

#include "canopy_BatchCapacity.hpp"
#include "canopy_Design.hpp"
#include "canopy_Error.hpp"
#include "canopy_Reference.hpp"

#include <memory>
#include <vector>

namespace canopy
{
class BatchStorage
{
public:
  virtual ~BatchStorage() = default;
  /// \brief Metadata into the static buffers (what a graph runner copies before each replay), after
  /// validateMetadata against the pool: the library's entry point checks with the same rules and
  /// messages as the trace reader (canopy_Rules.hpp). InputError names the buffer and first bad index.
  void setMetadata(BatchMetadata const &meta, ModelShape const &shape)
  {
    validateMetadata(meta, capacity().num_slots);
    storeMetadata(meta, shape);
  }
  virtual BatchCapacity const &capacity() const = 0;
  /// \brief q rows of the current step (after setMetadata).
  virtual void uploadQueries(std::vector<uint16_t> const &q) = 0;
  /// \brief The KV pool ([num_slots][576] bf16 bits), once when every step shares it.
  virtual void uploadPool(std::vector<uint16_t> const &kv_pool) = 0;
  /// \brief An FP8 pool ([num_slots][kvRowBytes(dtype)] bytes) and its scale; ref() then points at it
  /// and kv_pool is null. Memory that holds no FP8 pool says so (Unsupported).
  virtual void uploadFp8Pool(std::vector<uint8_t> const &, KvDtype dtype, float)
  {
    throw Unsupported("kv_pool: this memory holds bf16 pools only, not " + toString(dtype));
  }
  /// \brief InputError unless \p pool is whole rows of \p dtype for at most \p num_slots slots and
  /// \p scale is finite and > 0 (what every uploadFp8Pool checks first).
  static void checkFp8Pool(std::vector<uint8_t> const &pool, KvDtype dtype, float scale, int64_t num_slots);
  /// \brief \p problem's KV pool in its storage: uploadPool or uploadFp8Pool.
  void uploadPoolOf(HostProblem const &problem)
  {
    if (problem.kv_dtype == KvDtype::kBf16)
      uploadPool(problem.kv_pool);
    else
      uploadFp8Pool(problem.kv_pool_fp8, problem.kv_dtype, problem.kv_scale);
  }
  /// \brief Metadata, q and the KV pool.
  void upload(HostProblem const &problem)
  {
    setMetadata(problem.meta, problem.shape);
    uploadQueries(problem.q);
    uploadPoolOf(problem);
  }
  virtual void poisonOutput() = 0;
  /// \brief Waits for all work enqueued on the storage's stream/space, then copies the used output rows.
  virtual std::vector<uint16_t> downloadOutput() = 0;
  virtual BatchRef ref() const = 0;
  virtual ExecContext context() const { return {}; }
  /// \brief Waits for work enqueued on context().
  virtual void sync() {}

protected:
  /// \brief What the last pool upload left, beside the bytes a storage holds: an FP8 pool's dtype
  /// and scale (bf16 after uploadPool).
  struct Fp8PoolState
  {
    KvDtype dtype = KvDtype::kBf16;
    float scale = 1.f;
  };
  /// \brief \p r pointing at the FP8 pool \p bytes when \p pool holds one (kv_pool null, its dtype
  /// and scale), else \p r as it is: the end of every ref().
  static BatchRef withPool(BatchRef r, Fp8PoolState const &pool, uint8_t const *bytes)
  {
    if (pool.dtype != KvDtype::kBf16)
    {
      r.kv_pool = nullptr;
      r.kv_dtype = pool.dtype;
      r.kv_pool_fp8 = bytes;
      r.kv_scale = pool.scale;
    }
    return r;
  }
  /// \brief Copies valid metadata into the buffers (checked against the capacity there).
  virtual void storeMetadata(BatchMetadata const &meta, ModelShape const &shape) = 0;
};

/// \brief Whether memory of \p kind can be used on this machine (a CUDA build on a host without a
/// GPU says no, with the reason in \p why).
bool memoryAvailable(MemoryKind kind, std::string *why = nullptr);

/// \brief Storage for \p kind; throws InputError when that memory is not available in this build.
std::unique_ptr<BatchStorage> makeBatchStorage(MemoryKind kind, BatchCapacity const &capacity);

#ifdef CANOPY_HAVE_CUDA_DESIGNS
/// Provided by backends/cuda (device buffers owned by a small RAII type; no Kokkos CUDA needed).
std::unique_ptr<BatchStorage> makeCudaBatchStorage(BatchCapacity const &capacity);
#endif

/// \brief Plan bounds that exactly fit one problem.
PlanBounds boundsOf(HostProblem const &problem);

/// \brief Outcome of running one design on one problem against the fp64 reference.
struct CheckResult
{
  std::string design, path;
  ErrorStats error;
};

/// \brief plan + upload + poison + run + download + compare. \p reference is the fp64 output of
/// referenceAttention(problem, options.numerics); the bounds are errorBounds(the problem's KV dtype,
/// options.numerics). A design that does not serve that dtype and numerics throws Unsupported.
CheckResult checkDesign(Design &design, HostProblem const &problem, DesignOptions const &options,
                        std::vector<double> const &reference);
} // namespace canopy
