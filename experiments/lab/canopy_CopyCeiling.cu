/// \file canopy_CopyCeiling.cu
/// \brief The copy ceiling of a verify tile on Hopper: how fast all SMs can fill shared memory with
/// KV tiles gathered from an L2-resident pool, per copy mechanism, cluster size and bytes in flight,
/// with nothing else running. The producer side is cuda-sm90's (a 128-thread producer warpgroup, the
/// 128-byte-swizzled stage layout wgmma reads, full/empty mbarriers per stage); one consumer warp per
/// CTA only waits for each stage, reads a word of it and frees it. Compiled for sm_90a alone.
#include "canopy_CopyCeiling.hpp"

#include "canopy_Sm90Ptx.cuh"
#include "canopy_VerifyAttentionKernel.cuh"

#include <cuda.h>

#include <mutex>

namespace canopy::cuda
{
namespace
{
namespace sm90 = Impl::sm90;
constexpr int PRODUCERS = 128;
constexpr int THREADS = PRODUCERS + 32;  ///< warp 0 consumes, warps 1-4 produce
constexpr int ROW_CHUNKS = D_QK * 2 / 16; ///< 16-byte chunks of a 576-wide bf16 token row (72)
constexpr int ROW_BOXES = D_QK / 64;      ///< 64-column swizzled blocks of a row (9)

/// The pool row of row \p r of tile \p j of cluster \p c: a counter hash, uniform over the pool.
__device__ __forceinline__ uint32_t gatherRow(uint32_t c, uint32_t j, uint32_t r, uint32_t rows)
{
  uint64_t x = (static_cast<uint64_t>(c) << 40) ^ (static_cast<uint64_t>(j) << 8) ^ r;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x % rows);
}

template <CopyMechanism MECH, int STAGES, int KEYS>
__global__ void __launch_bounds__(THREADS, 1)
    copyCeilingKernel(__grid_constant__ CUtensorMap const rows_map, __grid_constant__ CUtensorMap const tile_map,
                      uint16_t const *pool, uint32_t pool_rows, int tiles, float *sink)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BLOCK = KEYS * sm90::SWIZZLE_ROW_BYTES;  ///< one 64-column block of a stage
  constexpr int STAGE = ROW_BOXES * BLOCK;
  extern __shared__ __align__(1024) unsigned char smem[];
  uint32_t const base = Impl::smemAddr(smem);
  uint32_t const bars = base + STAGES * STAGE;  // full[s] at 16 s, empty[s] at 16 s + 8, half[s] at 16 STAGES + 8 s
  auto full = [&](int s) { return bars + 16 * s; };
  auto empty = [&](int s) { return bars + 16 * s + 8; };
  auto half = [&](int s) { return bars + 16 * STAGES + 8 * s; };
  uint32_t const csize = sm90::clusterSize(), rank = sm90::clusterRank();
  uint32_t const cid = blockIdx.x / csize;
  int const tid = threadIdx.x;
  if (tid == 0)
  {
    for (int s = 0; s < STAGES; ++s)
    {
      sm90::mbarrierInit(full(s), MECH == CopyMechanism::kCpAsync ? PRODUCERS : 1);
      sm90::mbarrierInit(empty(s), static_cast<int>(csize));  // each CTA's consumer warp
      sm90::mbarrierInit(half(s), PRODUCERS);                 // kCpAsyncForward: this CTA's share landed
    }
    sm90::fenceMbarrierInit();
  }
  sm90::clusterSync();
  if (tid >= 32)
  {
    int const t = tid - 32;
    // cp.async: warp w copies rows [w KEYS / 4, +KEYS / 4), lane l chunks l, l + 32 and l + 64 (< 72),
    // as cuda-sm90's producer does. TMA rows: this CTA's share of the rows, one thread per row.
    int const share = KEYS / static_cast<int>(csize);
    for (int j = 0; j < tiles; ++j)
    {
      int const s = j % STAGES;
      uint32_t const stage = base + s * STAGE;
      if (j >= STAGES)
        sm90::mbarrierWait<true>(empty(s), ((j / STAGES) - 1) & 1);
      if constexpr (MECH == CopyMechanism::kCpAsync)
      {
        constexpr int ROWS = KEYS / 4;  // per producer warp
        int const lane = t & 31, r0 = (t >> 5) * ROWS;
        uint32_t const row_l = gatherRow(cid, j, r0 + (lane % ROWS), pool_rows);  // a row per lane, by shuffle
#pragma unroll 4
        for (int i = 0; i < ROWS; ++i)
        {
          uint16_t const *src = pool + static_cast<uint64_t>(__shfl_sync(0xffffffffu, row_l, i)) * D_QK;
#pragma unroll
          for (int ch = lane; ch < ROW_CHUNKS; ch += 32)
            Impl::cpAsync16(stage + (ch >> 3) * BLOCK + sm90::swizzled(r0 + i, ch & 7), src + ch * 8, true);
        }
        sm90::cpAsyncMbarrierArrive(full(s));
      }
      else if constexpr (MECH == CopyMechanism::kCpAsyncForward)
      {
        // This CTA's share (rows rank x share ...), share / 4 rows per warp; landed, fenced for the
        // async proxy, counted on half[s]; then thread 0 sends it to every other CTA.
        int const rows = share / 4, lane = t & 31, r0 = static_cast<int>(rank) * share + (t >> 5) * rows;
        uint32_t const row_l = gatherRow(cid, j, r0 + (lane % rows), pool_rows);
        for (int i = 0; i < rows; ++i)
        {
          uint16_t const *src = pool + static_cast<uint64_t>(__shfl_sync(0xffffffffu, row_l, i)) * D_QK;
#pragma unroll
          for (int ch = lane; ch < ROW_CHUNKS; ch += 32)
            Impl::cpAsync16(stage + (ch >> 3) * BLOCK + sm90::swizzled(r0 + i, ch & 7), src + ch * 8, true);
        }
        Impl::cpAsyncCommit();
        Impl::cpAsyncWait<0>();
        sm90::fenceProxyAsync();
        sm90::mbarrierArrive(half(s));
        if (t == 0)
        {
          sm90::mbarrierWait(half(s), (j / STAGES) & 1);
          uint32_t const piece = share * sm90::SWIZZLE_ROW_BYTES, off = rank * piece;
          for (uint32_t c = 0; c < csize; ++c)
            if (c != rank)
              for (int b = 0; b < ROW_BOXES; ++b)
                sm90::bulkCopyToPeer(sm90::mapShared(stage + b * BLOCK + off, c), stage + b * BLOCK + off, piece,
                                     sm90::mapShared(full(s), c));
          sm90::mbarrierArriveExpectTx(full(s), (csize - 1) * ROW_BOXES * piece);
        }
      }
      else
      {
        uint16_t const mask = csize > 1 ? static_cast<uint16_t>((1u << csize) - 1u) : 0;
        if (t == 0)
          sm90::mbarrierArriveExpectTx(full(s), STAGE);
        if constexpr (MECH == CopyMechanism::kTmaRows)
        {
          if (t < share)
          {
            int const r = static_cast<int>(rank) * share + t;
            int const row = static_cast<int>(gatherRow(cid, j, r, pool_rows));
            for (int c = 0; c < ROW_BOXES; ++c)
              sm90::tmaLoad2d(stage + c * BLOCK + r * sm90::SWIZZLE_ROW_BYTES, &rows_map, c * 64, row, full(s), mask);
          }
        }
        else if (t == 0)
        {
          // Contiguous rows (a page of KEYS tokens), each CTA its share of the columns' blocks.
          int const page = static_cast<int>(gatherRow(cid, j, 0, pool_rows / KEYS)) * KEYS;
          for (int c = static_cast<int>(rank); c < ROW_BOXES; c += static_cast<int>(csize))
            sm90::tmaLoad2d(stage + c * BLOCK, &tile_map, c * 64, page, full(s), mask);
        }
      }
    }
    return;
  }
  // The consumer warp: waits for each stage, reads a word of each row's first block, frees the
  // stage in every CTA whose producer writes it.
  float acc = 0.f;
  for (int j = 0; j < tiles; ++j)
  {
    int const s = j % STAGES;
    sm90::mbarrierWait(full(s), (j / STAGES) & 1);
    uint32_t word;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(word) : "r"(base + s * STAGE + (tid % KEYS) * 128));
    acc += __uint_as_float(word & 0x3f800000u);
    __syncwarp();
    if (tid == 0)
      for (uint32_t c = 0; c < csize; ++c)
        sm90::mbarrierArriveCluster(sm90::mapShared(empty(s), c));
  }
  sink[blockIdx.x * 32 + tid] = acc;
  sm90::clusterSync();  // no CTA leaves while a peer may still arrive on its barriers
#else
  __trap();
#endif
}

template <CopyMechanism MECH, int STAGES, int KEYS>
cudaError_t launchOne(CopyProbe const &probe, CUtensorMap const &rows_map, CUtensorMap const &tile_map,
                      uint16_t const *pool, uint32_t pool_rows, int tiles, float *sink, cudaStream_t stream, int *ctas)
{
  auto kernel = copyCeilingKernel<MECH, STAGES, KEYS>;
  size_t const smem = copyProbeSharedBytes(probe);
  // The attribute and the resident-cluster count are asked once per kernel (and cluster size), not
  // per launch: the timed launches enqueue only the kernel (one device per process, as canopy peaks).
  static std::once_flag prepared;
  static cudaError_t prepare_error = cudaSuccess;
  static int resident_clusters[5] = {};  // by cluster size 1..4; 0 = not asked yet
  std::call_once(prepared, [&] {
    prepare_error =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  });
  if (prepare_error != cudaSuccess)
    return prepare_error;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(probe.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // As many whole clusters as are resident at once (one CTA per SM: the stages fill shared memory).
  int &clusters = resident_clusters[probe.cluster];
  if (clusters == 0)
  {
    cfg.gridDim = dim3(static_cast<unsigned>(probe.cluster));
    cudaError_t const e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
    if (e != cudaSuccess)
      return e;
    if (clusters < 1)
      return cudaErrorInvalidConfiguration;
  }
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * probe.cluster));
  *ctas = clusters * probe.cluster;
  return cudaLaunchKernelEx(&cfg, kernel, rows_map, tile_map, pool, pool_rows, tiles, sink);
}
/// The probes built: stages x keys per stage (bytes in flight) per mechanism.
struct ProbeKernel
{
  CopyMechanism mechanism;
  int stages, keys;
  cudaError_t (*launch)(CopyProbe const &, CUtensorMap const &, CUtensorMap const &, uint16_t const *, uint32_t, int,
                        float *, cudaStream_t, int *);
};
ProbeKernel const PROBE_KERNELS[] = {
    {CopyMechanism::kCpAsync, 2, 64, launchOne<CopyMechanism::kCpAsync, 2, 64>},
    {CopyMechanism::kCpAsync, 3, 64, launchOne<CopyMechanism::kCpAsync, 3, 64>},
    {CopyMechanism::kCpAsync, 4, 32, launchOne<CopyMechanism::kCpAsync, 4, 32>},
    {CopyMechanism::kTmaRows, 2, 64, launchOne<CopyMechanism::kTmaRows, 2, 64>},
    {CopyMechanism::kTmaRows, 3, 64, launchOne<CopyMechanism::kTmaRows, 3, 64>},
    {CopyMechanism::kTmaRows, 4, 32, launchOne<CopyMechanism::kTmaRows, 4, 32>},
    {CopyMechanism::kTmaTile, 2, 64, launchOne<CopyMechanism::kTmaTile, 2, 64>},
    {CopyMechanism::kCpAsyncForward, 2, 64, launchOne<CopyMechanism::kCpAsyncForward, 2, 64>},
};
} // namespace

size_t copyProbeSharedBytes(CopyProbe const &probe)
{
  return static_cast<size_t>(probe.stages) * probe.keys * D_QK * 2 + 24 * static_cast<size_t>(probe.stages);
}

cudaError_t launchCopyProbe(CopyProbe const &probe, uint16_t const *pool, uint32_t pool_rows, int tiles, float *sink,
                            cudaStream_t stream, int *ctas)
{
  CUtensorMap rows_map, tile_map;
  cudaError_t e = encodeBf16RowMap(rows_map, pool, pool_rows, D_QK, D_QK * 2, 1, 64);
  if (e == cudaSuccess)
    e = encodeBf16RowMap(tile_map, pool, pool_rows, D_QK, D_QK * 2, static_cast<uint32_t>(probe.keys), 64);
  if (e != cudaSuccess)
    return e;
  if (probe.cluster < 1 || probe.cluster > 4 || (probe.cluster > 1 && probe.mechanism == CopyMechanism::kCpAsync) ||
      (probe.mechanism == CopyMechanism::kCpAsyncForward && probe.cluster != 2 && probe.cluster != 4))
    return cudaErrorInvalidValue;
  for (ProbeKernel const &k : PROBE_KERNELS)
    if (k.mechanism == probe.mechanism && k.stages == probe.stages && k.keys == probe.keys)
      return k.launch(probe, rows_map, tile_map, pool, pool_rows, tiles, sink, stream, ctas);
  return cudaErrorInvalidValue;
}
} // namespace canopy::cuda
