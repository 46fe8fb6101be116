/// \file example_CudaDesign.cu
/// \brief example-cuda: the same row math as example-host, one GPU thread per (node, head) row,
/// enqueued on the caller's stream (no sync, no allocation: capture-safe).
#include "example_Designs.hpp"

#include "example_Attention.hpp"

#include "canopy_CudaRuntime.hpp"
#include "canopy_Error.hpp"

#include <cuda_runtime.h>

#include <memory>
#include <string>

namespace example
{
namespace
{
__global__ void attendRows(BatchRef batch)
{
  int64_t const row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row < batch.num_nodes * batch.num_heads)
    attendRow(batch, requestOf(batch, row / batch.num_heads), row);
}

class CudaDesign final : public canopy::Design
{
public:
  std::string name() const override { return "example-cuda"; }
  canopy::MemoryKind memory() const override { return canopy::MemoryKind::kCudaDevice; }
  void plan(canopy::PlanBounds const &bounds, canopy::DesignOptions const &) override
  {
    _max_rows = bounds.max_nodes * bounds.num_heads;  // the grid depends on the bucket only
  }
  void run(canopy::BatchRef const &batch, canopy::ExecContext const &ctx) override
  {
    int const threads = 64;
    auto const blocks = static_cast<unsigned>((_max_rows + threads - 1) / threads);
    if (blocks == 0)
      return;
    attendRows<<<blocks, threads, 0, static_cast<cudaStream_t>(ctx.cuda_stream)>>>(batch);
    canopy::cuda::check(cudaGetLastError(), "example-cuda launch");
  }
  bool captureSafe() const override { return true; }

private:
  int64_t _max_rows = 0;
};
} // namespace

canopy::DesignPtr makeCudaDesign() { return std::make_unique<CudaDesign>(); }
} // namespace example
