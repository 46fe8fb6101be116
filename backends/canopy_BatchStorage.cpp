#include "canopy_BatchStorage.hpp"

#include "canopy_Batch.hpp"

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_Reference.hpp"

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
  void uploadPool(std::vector<uint16_t> const &pool) override { _batch.uploadPool(pool); }
  void poisonOutput() override { _batch.poisonOutput(); }
  std::vector<uint16_t> downloadOutput() override
  {
    Kokkos::fence();
    return _batch.downloadOutput();
  }
  BatchRef ref() const override { return _batch.ref(); }
  void sync() override { Kokkos::fence(); }

protected:
  void storeMetadata(BatchMetadata const &meta, ModelShape const &shape) override { _batch.setMetadata(meta, shape); }

private:
  VerifyBatch<MemorySpace> _batch;
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

PlanBounds boundsOf(HostProblem const &problem)
{
  PlanBounds b;
  b.max_batch = problem.meta.batchSize();
  b.max_tree = static_cast<int>(problem.meta.maxTreeSize());
  b.max_prefix = problem.meta.maxPrefixLen();
  b.max_nodes = problem.meta.numNodes();
  b.num_heads = problem.shape.num_heads;
  b.mask_layout = problem.meta.mask_layout;
  return b;
}

CheckResult checkDesign(Design &design, HostProblem const &problem, DesignOptions const &options,
                        std::vector<double> const &reference)
{
  design.plan(boundsOf(problem), options);
  auto storage = makeBatchStorage(design.memory(), BatchCapacity::of(problem));
  storage->upload(problem);
  storage->poisonOutput();
  storage->sync();
  design.run(storage->ref(), storage->context());
  std::vector<uint16_t> const out = storage->downloadOutput();
  CheckResult r;
  r.design = design.name();
  r.path = design.path();
  r.error = compareToReference(reference, out.data(), out.size());
  return r;
}
} // namespace canopy
