#include "canopy_BatchStorage.hpp"

#include "canopy_Batch.hpp"

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_Reference.hpp"

#include <cmath>

#ifdef CANOPY_HAVE_CUDA_DESIGNS
#include "canopy_CudaRuntime.hpp"
#endif

namespace canopy
{
namespace
{
template <class MemorySpace>
class KokkosBatchStorage final : public BatchStorage
{
public:
  explicit KokkosBatchStorage(BatchCapacity const &cap) : _batch(cap) {}
  BatchCapacity const &capacity() const override { return _batch.capacity(); }
  void uploadQueries(std::vector<uint16_t> const &q) override { _batch.uploadQueries(q); }
  void uploadPool(std::vector<uint16_t> const &pool) override
  {
    _batch.uploadPool(pool);
    _fp8_state = {};
  }
  void uploadFp8Pool(std::vector<uint8_t> const &pool, KvDtype dtype, float scale) override
  {
    checkFp8Pool(pool, dtype, scale, capacity().num_slots);
    size_t const bytes = static_cast<size_t>(capacity().num_slots) * kvRowBytes(dtype);
    if (_fp8.extent(0) != bytes)
      _fp8 = Kokkos::View<uint8_t *, MemorySpace>("kv_pool_fp8", bytes);
    Kokkos::View<uint8_t const *, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(pool.data(), pool.size());
    Kokkos::deep_copy(Kokkos::subview(_fp8, std::make_pair(size_t{0}, pool.size())), h);
    _fp8_state = {dtype, scale};
  }
  void poisonOutput() override { _batch.poisonOutput(); }
  std::vector<uint16_t> downloadOutput() override
  {
    Kokkos::fence();
    return _batch.downloadOutput();
  }
  BatchRef ref() const override { return withPool(_batch.ref(), _fp8_state, _fp8.data()); }
  void sync() override { Kokkos::fence(); }

protected:
  void storeMetadata(BatchMetadata const &meta, ModelShape const &shape) override { _batch.setMetadata(meta, shape); }

private:
  VerifyBatch<MemorySpace> _batch;
  Kokkos::View<uint8_t *, MemorySpace> _fp8;
  Fp8PoolState _fp8_state;
};
} // namespace

bool memoryAvailable(MemoryKind kind, std::string *why)
{
  if (kind != MemoryKind::kCudaDevice)
    return true;
#ifdef CANOPY_HAVE_CUDA_DESIGNS
  return cuda::cudaAvailable(why);
#else
  if (why)
    *why = "this build has no CUDA designs";
  return false;
#endif
}

std::unique_ptr<BatchStorage> makeBatchStorage(MemoryKind kind, BatchCapacity const &capacity)
{
  switch (kind)
  {
  case MemoryKind::kHost: return std::make_unique<KokkosBatchStorage<Kokkos::HostSpace>>(capacity);
  case MemoryKind::kKokkos:
    return std::make_unique<KokkosBatchStorage<Kokkos::DefaultExecutionSpace::memory_space>>(capacity);
  case MemoryKind::kCudaDevice:
#ifdef CANOPY_HAVE_CUDA_DESIGNS
    return makeCudaBatchStorage(capacity);
#else
    throw InputError("CUDA device memory is not available: this build has no CUDA designs");
#endif
  }
  throw InputError("unknown memory kind");
}

void BatchStorage::checkFp8Pool(std::vector<uint8_t> const &pool, KvDtype dtype, float scale, int64_t num_slots)
{
  size_t const row = static_cast<size_t>(kvRowBytes(dtype));
  if (dtype == KvDtype::kBf16 || pool.size() % row != 0 || pool.size() / row > static_cast<size_t>(num_slots))
    throw InputError("kv_pool: " + std::to_string(pool.size()) + " bytes are not whole " + toString(dtype) + " rows (" +
                     std::to_string(row) + " bytes each) for at most " + std::to_string(num_slots) + " slots");
  if (!(std::isfinite(scale) && scale > 0))
    throw InputError("kv_scale: must be finite and > 0, got " + std::to_string(scale));
}

PlanBounds boundsOf(HostProblem const &problem)
{
  PlanBounds b;
  b.max_batch = problem.meta.batchSize();
  b.max_tree = static_cast<int>(problem.meta.maxTreeSize());
  b.max_prefix = problem.meta.maxPrefixLen();
  b.max_nodes = problem.meta.numNodes();
  b.num_heads = problem.shape.num_heads;
  b.mask_layout = problem.meta.mask_layout;
  b.kv_dtype = problem.kv_dtype;
  return b;
}

CheckResult checkDesign(Design &design, HostProblem const &problem, DesignOptions const &options,
                        std::vector<double> const &reference)
{
  PlanBounds const bounds = boundsOf(problem);
  requireServed(design, bounds, options);  // also for a design whose plan() forgets to
  design.plan(bounds, options);
  auto storage = makeBatchStorage(design.memory(), BatchCapacity::of(problem));
  storage->upload(problem);
  storage->poisonOutput();
  storage->sync();
  design.run(storage->ref(), storage->context());
  std::vector<uint16_t> const out = storage->downloadOutput();
  CheckResult r;
  r.design = design.name();
  r.path = design.path();
  r.error = compareToReference(reference, out.data(), out.size(), errorBounds(problem.kv_dtype, options.numerics));
  return r;
}
} // namespace canopy
