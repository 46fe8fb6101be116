/// \file canopy_VerifyAttentionCuda.hpp
/// \brief The boundary between host code and the hand-written CUDA kernels: a POD params struct
/// (raw device pointers, strides, lengths, mask layout, NSPLIT) and launchers that enqueue on a
/// caller's stream and return cudaError_t. No Kokkos, no exceptions; plain g++ can include it.
#pragma once

#include "canopy_BatchRef.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace canopy::cuda
{
/// Largest tree (T_b) the kernels serve; the one place this limit lives (plan() reports a larger
/// bound as Unsupported, naming the design and this number). Shared memory does not grow with it:
/// a CTA keeps the visibility of a window of tree keys for its own nodes (a fixed budget per
/// kernel config, see TileConfig::VIS_BYTES) and rebuilds the window when its KV loop moves past it.
/// What grows with T is the parents layout's ancestor walk (O(depth) per node and window) and the
/// grid (ceil(T * H / 64) row tiles per split).
constexpr int MAX_TREE = 1024;
/// KV splits a launch may use (lse of one row for all splits is read by each combine thread).
constexpr int MAX_NSPLIT = 256;

/// Split workspace layout: the O partials, [row][split][D_V] fp32 (or bf16 with partial_bf16), then
/// the lse array, [row][split] fp32, at the next PARTIAL_LSE_ALIGN-byte boundary.
constexpr size_t PARTIAL_LSE_ALIGN = 256;
constexpr size_t partialRowBytes(bool partial_bf16) { return static_cast<size_t>(D_V) * (partial_bf16 ? 2 : 4); }

/// The cuda-sm120 tile the host's split heuristic (suggestNsplit) counts in: (node, head) rows per
/// CTA and keys per KV tile. The kernel's TileConfig static_asserts that it has these sizes.
constexpr int SM120_M_TILE = 64;
constexpr int SM120_N_TILE = 32;
/// The cuda-sm90 tile (64 rows, 64 keys per K/V stage), likewise.
constexpr int SM90_M_TILE = 64;
constexpr int SM90_N_TILE = 64;

/// \brief Everything a verify launch needs: the batch (device pointers to the native SGLang-layout
/// buffers, docs/design.md §1), row strides, grid bounds and the split workspace. The kernels read
/// the buffers in place, every launch, so a CUDA graph replays against whatever they hold at replay
/// time. Row (node, head) of q is at batch.q + (node*H + head) * q_row_stride; slot s of the pool at
/// batch.kv_pool + s * kv_row_stride (576 used); row (node, head) of out at
/// batch.out + (node*H + head) * out_row_stride.
struct VerifyParams
{
  BatchRef batch;

  /// Strides in elements; multiples of 8 (16-byte rows for cp.async).
  int64_t q_row_stride = 576;
  int64_t kv_row_stride = 576;
  int64_t out_row_stride = 512;

  /// Grid bounds (the graph bucket): grids derive from these only, never from device values.
  int max_batch = 0;    ///< >= batch.batch_size
  int max_tree = 0;     ///< >= every T_b (precondition: a larger tree is not covered by the grid)
  int64_t max_nodes = 0;  ///< >= sum T

  int nsplit = 1;       ///< prefix splits per request, the tree keys in the last (no tree partial); 1 = direct to `out`

  /// Split partials (nsplit > 1): O normalised by its own softmax sum, [row][split][D_V], and
  /// lse in log2 units, [row][split]. Rows >= partial_rows are not written and come out NaN.
  void *partial_o = nullptr;
  float *partial_lse = nullptr;
  int64_t partial_rows = 0;
  bool partial_bf16 = false;  ///< bf16 partials (half the bytes) instead of fp32
};

/// \brief Bytes of split workspace for \p rows (node, head) rows: O partials + lse.
size_t verifyWorkspaceBytes(int64_t rows, int nsplit, bool partial_bf16);

/// \brief Dynamic shared memory per block of each kernel; both are <= SMEM_LIMIT on every GPU.
size_t sm120SharedBytes();
size_t sm120WideSharedBytes();
size_t flatSharedBytes();
/// The sm_120 per-block opt-in limit (99 KB), enforced on every GPU, the H200 included.
constexpr size_t SMEM_LIMIT = 99 * 1024;

/// \brief Raises the kernels' dynamic shared-memory limit (cudaFuncSetAttribute); idempotent, not
/// capture-safe: call it once before any launch, outside capture (plan() does).
cudaError_t prepareVerifyKernels();

/// \brief Checks \p p for values the kernels cannot serve (null buffers, strides, nsplit, heads,
/// max_tree > MAX_TREE, missing workspace). Returns nullptr when fine, else a message.
char const *verifyParamsProblem(VerifyParams const &p);

/// \brief cuda-sm120: split-K flash-decode with heads x tree nodes folded into the MMA M dimension
/// (64-row tiles), mma.sync m16n8k16 bf16 / fp32, ldmatrix, 2-stage cp.async, <= 99 KB shared
/// memory; then the combine kernel when nsplit > 1. Enqueue only.
cudaError_t launchVerifySm120(VerifyParams const &p, cudaStream_t stream);

/// \brief cuda-sm120-w32: the same split-K design with 32 rows per warp (2 row groups x 4 warps
/// that split the Q.K^T dims and the P.V columns): one ldmatrix.x4 feeds 4 mma instead of 2, at the
/// price of a partial-score exchange over 4 warps and a softmax step per 16 keys. Same params and
/// workspace as cuda-sm120. Enqueue only.
cudaError_t launchVerifySm120Wide(VerifyParams const &p, cudaStream_t stream);

/// \brief cuda-sm90: the same split-K design for Hopper (sm_90a cubin only): Q, K/V and P in
/// 128-byte-swizzled shared memory feeding wgmma, two compute warpgroups per 64-row tile (each scores
/// half of a 64-key tile and accumulates half of the output columns) and a producer warpgroup that
/// issues the 2-stage cp.async copies, handed over by mbarriers; up to 227 KB of shared memory; the
/// same params, workspace and combine as cuda-sm120. Enqueue only; callers check the device is
/// sm_90 first (the kernel traps elsewhere).
cudaError_t launchVerifySm90(VerifyParams const &p, cudaStream_t stream);
/// \brief cuda-sm90 in fp8-mma numerics on an fp8-e4m3 or fp8-e5m2 pool: Q and the softmax weights
/// cast to the pool's type, both products on FP8 wgmma (V transposed in shared memory by the
/// producer); the same grid, params, workspace and combine. Other dtypes: cudaErrorInvalidValue.
cudaError_t launchVerifySm90Fp8Mma(VerifyParams const &p, cudaStream_t stream);
/// \brief cuda-sm90-sync: the cuda-sm90 tile without the producer: the two warpgroups issue the
/// copies themselves, one CTA barrier per tile (same shared memory, params, workspace and combine).
cudaError_t launchVerifySm90Sync(VerifyParams const &p, cudaStream_t stream);
/// \brief cuda-sm90-c2: the cuda-sm90 tile in clusters of \p cluster CTAs (1 or 2) over
/// consecutive row tiles of one split; in a pair whose two row tiles have work, each CTA gathers
/// half of every KV tile with cp.async and forwards it to the other through distributed shared
/// memory (same params, workspace and combine). Enqueue only; sm_90 only.
cudaError_t launchVerifySm90Pairs(VerifyParams const &p, cudaStream_t stream, int cluster);
/// \brief The cluster size cuda-sm90-c2 launches for a bucket: 2 when a request can have two row
/// tiles (max_tree x num_heads > 64), else 1 (nothing to share).
int sm90ClusterFor(int max_tree, int num_heads);
/// \brief Dynamic shared memory per block of the cuda-sm90 kernel (above the sm_120 limit).
size_t sm90SharedBytes();
/// \brief Raises the cuda-sm90 kernels' shared-memory limit (fp8-mma's too); idempotent, outside capture, sm_90 only.
cudaError_t prepareSm90Kernel();
/// \brief The same for the fp8-mma kernels alone (prepareSm90Kernel calls it).
cudaError_t prepareSm90Fp8MmaKernel();

/// \brief cuda-flat: SGLang Triton extend-kernel structure: one block per (request, head, 32-node
/// query tile), whole prefix walked serially, K and V tiles loaded separately. nsplit is ignored.
cudaError_t launchVerifyFlat(VerifyParams const &p, cudaStream_t stream);

} // namespace canopy::cuda
