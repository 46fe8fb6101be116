/// \file canopy_VerifyAttentionSm90Fp8Mma.cu
/// \brief cuda-sm90 in fp8-mma numerics (docs/design.md §8) on fp8-e4m3 and fp8-e5m2 pools: Q and
/// the softmax weights cast to the pool's FP8 type, both products on FP8 wgmma (m64nNk32, twice the
/// bf16 rate). The tile and its schedule are cuda-sm90's (64 rows x 64 keys, two compute
/// warpgroups splitting the keys for the scores and the output columns for P.V, a producer
/// warpgroup, the same mask, softmax and store stages: canopy_Sm90Tile.cuh); what changes is what
/// shared memory holds, because 8-bit wgmma reads both operands K-major only:
/// - Q (cast once per CTA from the bf16 rows beginTile stages) and each K stage keep 576-byte FP8
///   rows in 128-byte-swizzled blocks of 128 columns (the rope's 64 bytes in a fifth, half-used block);
/// - V, the first 512 columns of the stage's rows, is needed as V^T (512 rows of 64 keys, 64-byte
///   swizzle): the producer writes it from the landed K stage with ldmatrix, a 4 x 4 byte transpose
///   in registers and 32-bit stores, while the compute warps run the tile's score wgmma;
/// - P (64 x 64 FP8, 64-byte swizzle) is A of P.V.
/// P's and V^T's columns hold the keys in an order that makes both stores whole words and free of
/// bank conflicts; the maps are canopy_Sm90Layout.hpp's (fp8mma), checked on the host by
/// tests/cuda/tstSm90Layout.cpp against emulated ldmatrix and wgmma reads.
///
/// Model per 64-row x 64-key tile, against cuda-sm90 on bf16: the same 8.9 MFLOP at twice the rate
/// (1,090 cycles at the dense FP8 wgmma rate against 2,180); wgmma operand reads 108 KB for the
/// scores (each warpgroup's 18 m64n32k32 read Q's 36 KB and its keys' 18 KB) + 40 KB for P.V
/// (against 216 + 80); shared-memory writes 36 KB of cp.async, the V^T transpose's 32 KB read and
/// 32 KB written, P 4 KB (against 72 + 8): 252 KB, ~1,970 cycles at 128 B/clk against ~2,900. The
/// softmax and its exchanges (~1,800 of cuda-sm90's ~5,100 cycles a tile on the H200) are the same,
/// so the model's tile is ~1.45x faster where the tiles bind, and the gather from L2 halves (576
/// bytes a key instead of 1,152) where the copies do. Registers: the producer takes 88 (its
/// transpose fully unrolled on 11 per-lane address registers, no spills), the compute warpgroups
/// 208. The transpose is ~14 instructions a piece (ldmatrix, 8 permutes, 4 stores, one XOR), 16
/// pieces a tile per producer warp, issued beside two compute warps on each scheduler.
/// Measured (H100, B = 8, T = 256, P = 16K; docs/results/fp8-mma.md): ~3,890 cycles a tile, ~3,150
/// with the transpose left out (the model's ~3,100), against bf16's ~4,470. The schedule keeps the
/// gather's issue first: transposing before it (the stage's copy latency then waits behind the
/// transpose) was 16-24% slower at T >= 256, and FA3's overlap of the softmax with P.V, with two
/// stages, 19-23%.
#include "canopy_Fp8Convert.cuh"
#include "canopy_Sm90Tile.cuh"
#include "canopy_VerifyAttentionLaunch.cuh"

#include <mutex>
#include <type_traits>

namespace canopy::cuda
{
namespace Impl
{
struct Sm90Fp8MmaConfig : Sm90ProducerConfig
{
  static constexpr bool READS_FP8 = true;
  static constexpr int OP_BLOCKS = (D_QK + 127) / 128;  ///< 128-column swizzled blocks of an FP8 row (5)
  static constexpr int OP_BLOCK_BYTES = fp8mma::OP_BLOCK_BYTES;  ///< 64 rows of one block (8 KB)
  static constexpr int OP_BYTES = OP_BLOCKS * OP_BLOCK_BYTES;             ///< Q or a K stage (40 KB)
  static constexpr int ROW_CHUNKS = D_QK / 16;      ///< 16-byte chunks of a 576-byte FP8 row (36)
  static constexpr int LATENT_CHUNKS = D_V / 16;    ///< of which V (32)
  static constexpr int K32_STEPS = D_QK / 32;       ///< wgmma k-steps of Q.K^T (18)
  static constexpr int PV32_STEPS = N_TILE / 32;    ///< wgmma k-steps of P.V (2)
  static constexpr int VT_ROW_BYTES = N_TILE;       ///< a V^T row: one byte per key of the stage
  static constexpr int VT_BYTES = D_V * VT_ROW_BYTES;  ///< 32 KB
  static constexpr int STAGE_BYTES = OP_BYTES + VT_BYTES;  ///< K rows, then V^T (72 KB)
  static constexpr int P8_BYTES = M_TILE * N_TILE;  ///< P, 64-byte rows
  static constexpr int BAR_BYTES = (3 * KV_STAGES + 1) * 8;
  /// The shared-memory plan. beginTile stages the bf16 Q (ROWS_BYTES) in stage 1, which the
  /// producer first fills after the compute warps have cast it into q8.
  struct Smem
  {
    static constexpr SmemRegion q8{0, OP_BYTES};                      ///< Q in FP8
    static constexpr SmemRegion kv = q8.next(KV_STAGES * STAGE_BYTES);  ///< K rows + V^T, per stage
    static constexpr SmemRegion p8 = kv.next(P8_BYTES);                 ///< P in FP8
    static constexpr SmemRegion xrow = p8.next(XROW_BYTES);
    static constexpr SmemRegion vis = xrow.next(VIS_BYTES);
    static constexpr SmemRegion ring = vis.next(RING_BYTES);
    static constexpr SmemRegion info = ring.next(INFO_BYTES);
    static constexpr SmemRegion bars = info.next(BAR_BYTES);
  };
  static constexpr int SMEM_BYTES = Smem::bars.end();
  static_assert(Smem::q8.offset % 1024 == 0 && Smem::kv.offset % 1024 == 0 && Smem::p8.offset % 1024 == 0 &&
                    OP_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0,
                "wgmma operands must start on swizzle atoms");
  static_assert(STAGE_BYTES >= ROWS_BYTES, "the bf16 Q is staged in stage 1");
  static_assert(SMEM_BYTES <= 227 * 1024, "sm_90 opt-in shared-memory limit per block (227 KB)");
  static_assert(M_TILE == N_TILE && N_TILE == fp8mma::KEYS && D_V == fp8mma::VALUE_BYTES && LATENT_CHUNKS == 32 &&
                    ROW_CHUNKS == 36 && PRODUCER_THREADS == 128 && S_KEYS == 32,
                "the geometry of canopy_Sm90Layout.hpp's fp8mma maps");
};

/// The hand-off's mbarriers: keys[s] (the K rows of stage s landed, PRODUCER_THREADS arrivals),
/// values[s] (its V^T written, PRODUCER_THREADS), empty[s] (the 8 compute warps' P.V of it done),
/// and q_cast (the compute threads have cast Q out of stage 1: THREADS arrivals, each thread after
/// its own reads, which is what compute-sanitizer's racecheck sees as ordering them before the
/// producer's copies into stage 1; one arrival per warp after __syncwarp it reported as races).
struct Fp8MmaBarriers
{
  uint32_t base;
  __device__ __forceinline__ uint32_t keys(int s) const { return base + s * 8; }
  __device__ __forceinline__ uint32_t values(int s) const { return base + 16 + s * 8; }
  __device__ __forceinline__ uint32_t empty(int s) const { return base + 32 + s * 8; }
  __device__ __forceinline__ uint32_t qCast() const { return base + 48; }
};

/// A producer warp's FP8 rows of tile \p j into the K rows of \p stage (ProducerCopies' rows: warp
/// w, rows 16 w .. 16 w + 15; lane l: chunk l of each row, lanes 0-3 also the rope chunks 32-35),
/// rows past the split zero-filled; one commit group.
__device__ __forceinline__ void issueFp8Rows(ProducerCopies const &rows, int j, uint32_t stage, uint32_t slot_l)
{
  using Cfg = Sm90Fp8MmaConfig;
  char const *const pool = reinterpret_cast<char const *>(rows.p.batch.kv_pool_fp8);
  int const live = rows.s1 - rows.s0 - j * Cfg::N_TILE - rows.row0;
  int const lane = rows.lane;
#pragma unroll
  for (int i = 0; i < ProducerCopies::ROWS; ++i)
  {
    int const r = rows.row0 + i;
    uint32_t const slot = __shfl_sync(0xffffffffu, slot_l, i);
    bool const ok = i < live;
    char const *const src = pool + static_cast<uint64_t>(slot) * D_QK;
    cpAsync16(stage + fp8mma::opOffset(r, lane), src + lane * 16, ok);
    if (lane < Cfg::ROW_CHUNKS - Cfg::LATENT_CHUNKS)
      cpAsync16(stage + fp8mma::opOffset(r, Cfg::LATENT_CHUNKS + lane), src + (Cfg::LATENT_CHUNKS + lane) * 16, ok);
  }
  cpAsyncCommit();
}

/// A producer lane's addresses for transposeValues, relative to a stage (canopy_Sm90Layout.hpp,
/// fp8mma): the ldmatrix row base, the 4 store bases of each key half, the permute selectors.
struct TransposeLane
{
  uint32_t load;
  uint32_t store[2][4];
  fp8mma::TransposeSelectors sel;
  __device__ __forceinline__ TransposeLane(int warp, int lane)
      : load(fp8mma::loadBase(warp, lane)), sel(fp8mma::transposeSelectors(lane))
  {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int s = 0; s < 4; ++s)
        store[h][s] = fp8mma::storePiece(Sm90Fp8MmaConfig::OP_BYTES + fp8mma::storeBase(warp, lane, s), h);
  }
};

/// Producer warp \p warp's share of V^T for the landed K rows of \p stage: latent chunks 8 warp ..
/// 8 warp + 7 of both key halves, 16 ldmatrix pieces (the maps: canopy_Sm90Layout.hpp, fp8mma).
/// Every address is a per-lane base plus a constant of the piece (loadPiece, storePiece), so a
/// piece costs its ldmatrix, 8 permutes, 4 stores and one XOR.
__device__ __forceinline__ void transposeValues(uint32_t stage, TransposeLane const &me)
{
  uint32_t const ld = stage + me.load;
#pragma unroll
  for (int i = 0; i < 2 * 8; ++i)
  {
    uint32_t r[4], w[4];
    ldmatrixX4(r, fp8mma::loadPiece(ld, i));
    fp8mma::transpose4x4(r, w, me.sel);
#pragma unroll
    for (int s = 0; s < 4; ++s)
      stShared4(stage + me.store[i & 1][s] + fp8mma::storePieceRows(i), w[s]);
  }
}

/// The producer warpgroup in fp8-mma: for each KV tile j, its rows (issued one tile ahead: tile 0
/// in the prologue) land, keys[j % 2] is signalled, tile j + 1 is issued once its stage is free
/// (empty; for tile 1, once the compute warps have cast Q out of stage 1), and the warpgroup
/// writes tile j's V^T (after keys[j % 2] completes: every producer thread's rows are there) and
/// signals values[j % 2]. The V^T transpose thus overlaps the compute warps' score wgmma.
__device__ __forceinline__ void produceFp8MmaTiles(VerifyParams const &p, TileInfo const volatile *info,
                                                   uint32_t kv_base, Fp8MmaBarriers const bars, int ntiles)
{
  using Cfg = Sm90Fp8MmaConfig;
  ProducerCopies const rows{p, info->P, info->s0, info->s1, info->kv0, info->qo0};
  TransposeLane const lane_addr((static_cast<int>(threadIdx.x) - Cfg::THREADS) >> 5, rows.lane);
  uint32_t slot_l = rows.slotOf(1);
  for (int j = 0; j < ntiles; ++j)
  {
    int const s = j & 1;
    uint32_t const stage = kv_base + s * Cfg::STAGE_BYTES;
    cpAsyncWait<0>();  // this thread's rows of tile j
    sm90::fenceProxyAsync();
    sm90::mbarrierArrive(bars.keys(s));
    if (j + 1 < ntiles)
    {
      int const n = (j + 1) & 1;
      if (j + 1 >= 2)
        sm90::mbarrierWait(bars.empty(n), (((j + 1) >> 1) - 1) & 1);
      else
        sm90::mbarrierWait(bars.qCast(), 0);
      issueFp8Rows(rows, j + 1, kv_base + n * Cfg::STAGE_BYTES, slot_l);
      slot_l = rows.slotOf(j + 2);
    }
    sm90::mbarrierWait(bars.keys(s), (j >> 1) & 1);  // every producer thread's rows of tile j
    transposeValues(stage, lane_addr);
    sm90::fenceProxyAsync();
    sm90::mbarrierArrive(bars.values(s));
  }
}

/// Q's bf16 rows (staged by beginTile at \p staged in cuda-sm90's layout) cast to FP8 into \p q8,
/// by the 256 compute threads: one 16-byte bf16 chunk (8 values) to 8 bytes at a time.
template <KvDtype KV>
__device__ __forceinline__ void castQ(uint32_t staged, uint32_t q8, int tid)
{
  using Cfg = Sm90Fp8MmaConfig;
  constexpr int CHUNKS = Cfg::M_TILE * Cfg::QK_CHUNKS;
  static_assert(CHUNKS % Cfg::THREADS == 0, "whole chunks per thread");
#pragma unroll 6
  for (int i = tid; i < CHUNKS; i += Cfg::THREADS)
  {
    int const r = i / Cfg::QK_CHUNKS, ch = i % Cfg::QK_CHUNKS;
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(staged + Cfg::qStageOffset(r, ch)));
    stShared8(q8 + fp8mma::opOffset(r, ch >> 1) + (ch & 1) * 8, bf16x8ToFp8x8<KV>(v));
  }
}

template <class PartialT, KvDtype KV>
__device__ __forceinline__ void verifyTileSm90Fp8Mma(VerifyParams const &p, int b, int mt, int split)
{
  using Cfg = Sm90Fp8MmaConfig;
  using Smem = Cfg::Smem;
  constexpr bool E5M2 = KV == KvDtype::kFp8E5m2;
  extern __shared__ __align__(1024) unsigned char sm90_smem[];
  Sm90Window<Cfg> const win(sm90_smem);
  float *const xrow = win.xrow;
  TileInfo const volatile *const info = win.info;
  TileSmem const &sm = win.sm;
  uint32_t const q8_base = win.at(Smem::q8);
  uint32_t const kv_base = win.at(Smem::kv);
  uint32_t const p8_base = win.at(Smem::p8);
  Fp8MmaBarriers const bars{win.at(Smem::bars)};
  if (threadIdx.x == 0)
  {
    for (int s = 0; s < Cfg::KV_STAGES; ++s)
    {
      sm90::mbarrierInit(bars.keys(s), Cfg::PRODUCER_THREADS);
      sm90::mbarrierInit(bars.values(s), Cfg::PRODUCER_THREADS);
      sm90::mbarrierInit(bars.empty(s), Cfg::EMPTY_ARRIVALS);
    }
    sm90::mbarrierInit(bars.qCast(), Cfg::THREADS);
  }
  TileSetup st;
  auto first_copies = [&](int P, int s0, int s1, int kv0, int64_t qo0) {
    ProducerCopies const rows{p, P, s0, s1, kv0, qo0};
    issueFp8Rows(rows, 0, kv_base, rows.slotOf(0));
  };
  uint32_t const q_staged = kv_base + Cfg::STAGE_BYTES;
  if (!beginTile<Cfg>(p, b, mt, split, 0, q_staged, sm, st, first_copies))
    return;
  int const warpgroup = sm90::warpUniform(static_cast<int>(threadIdx.x) / 128);
  if (warpgroup >= Cfg::WARPGROUPS)
  {
    sm90::setMaxRegisters<Cfg::FP8_PRODUCER_REGS, false>();
    produceFp8MmaTiles(p, info, kv_base, bars, st.ntiles);
    return;
  }
  sm90::setMaxRegisters<Cfg::FP8_COMPUTE_REGS, true>();

  int const tid = threadIdx.x;
  ComputeLane const me = ComputeLane::of(tid);
  int const wg = me.wg, wrow = me.wrow, lane = me.lane, g = me.g;
  // Stage: Q. The bf16 rows landed in beginTile; once cast, stage 1 is the producer's again.
  castQ<KV>(q_staged, q8_base, tid);
  sm90::fenceProxyAsync();
  sm90::mbarrierArrive(bars.qCast());
  computeBarrier<Cfg>();

  float const kv_scale = p.batch.kv_scale;
  float const scale = p.batch.sm_scale * kv_scale * LOG2E;
  // Descriptors. Scores: A = Q, B = this warpgroup's 32 keys (both K-major, 128-byte swizzle); a
  // k-step of 32 FP8 columns moves 32 bytes in a block, every 4 steps the next block. P.V: A = P,
  // B = V^T rows [256 wg, +256) (K-major over the 64 keys, 64-byte swizzle); a k-step moves 32 bytes.
  uint64_t const q_desc = sm90::smemDescriptor(q8_base, 0, sm90::SWIZZLE_ATOM_BYTES);
  uint64_t const k_desc0 =
      sm90::smemDescriptor(kv_base + wg * Cfg::S_KEYS * sm90::SWIZZLE_ROW_BYTES, 0, sm90::SWIZZLE_ATOM_BYTES);
  uint64_t const p_desc = sm90::smemDescriptor(p8_base, 0, sm90::SWIZZLE64_ATOM_BYTES, sm90::Swizzle::k64B);
  uint64_t const v_desc0 = sm90::smemDescriptor(kv_base + Cfg::OP_BYTES + wg * Cfg::O_COLS * Cfg::VT_ROW_BYTES, 0,
                                                sm90::SWIZZLE64_ATOM_BYTES, sm90::Swizzle::k64B);

  float o[Cfg::O_REGS];
#pragma unroll
  for (int i = 0; i < Cfg::O_REGS; ++i)
    o[i] = 0.f;
  SoftmaxState row[2];
  int const ntiles = st.ntiles;
  bool const moves = windowMoves(info);

  for (int j = 0; j < ntiles; ++j)
  {
    int const s_ = j & 1;
    uint32_t const stage = s_ * Cfg::STAGE_BYTES;
    // Stage: load. The K rows of tile j have landed; V^T follows (waited for before P.V).
    sm90::mbarrierWait(bars.keys(s_), (j >> 1) & 1);
    if (moves)
    {
      computeBarrier<Cfg>();
      advanceVisibility<Cfg>(p, sm, j);
    }

    // Stage: scores, S = Q K^T over this warpgroup's 32 keys, 18 FP8 k-steps.
    float s[Cfg::S_REGS];
    sm90::wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < Cfg::K32_STEPS; ++ks)
    {
      uint32_t const koff = (ks >> 2) * Cfg::OP_BLOCK_BYTES + (ks & 3) * 32;
      sm90::wgmmaM64N32Fp8<E5M2>(s, sm90::advance(q_desc, koff), sm90::advance(k_desc0, stage + koff), ks > 0);
    }
    sm90::wgmmaCommit();
    sm90::wgmmaWait<0>();
    sm90::fenceOperands(s);

    maskAndSoftmax<Cfg>(p, info, sm, xrow, j, me, scale, s, row, o);

    // Stage: exchange. The weights cast to FP8: keys 32 wg + 8 n + 2 t4 + e (n = 0..3) of row
    // wrow + g + 8 h are bytes n of one column word (the key order V^T was written in).
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        stShared4(p8_base + fp8mma::wordOffset(wrow + g + 8 * h, fp8mma::pWord(wg, lane, e)),
                  floatsToFp8x4<KV>(s[h * 2 + e], s[4 + h * 2 + e], s[8 + h * 2 + e], s[12 + h * 2 + e]));
    sm90::fenceProxyAsync();
    namedBarrier(kProbsReady, Cfg::THREADS);

    // Stage: P.V, O[:, 256 wg + ...] += P (64 x 64) V (64 x 256), once V^T is written.
    sm90::mbarrierWait(bars.values(s_), (j >> 1) & 1);
    sm90::fenceOperands(o);
    sm90::wgmmaFence();
#pragma unroll
    for (int kk = 0; kk < Cfg::PV32_STEPS; ++kk)
      sm90::wgmmaM64N256Fp8<E5M2>(o, sm90::advance(p_desc, kk * 32), sm90::advance(v_desc0, stage + kk * 32), 1);
    sm90::wgmmaCommit();
    sm90::wgmmaWait<0>();
    sm90::fenceOperands(o);
    __syncwarp();
    if (lane == 0)
      sm90::mbarrierArrive(bars.empty(s_));
  }
  storeTile<Cfg, PartialT>(p, info, xrow, me, kv_scale, row, o);
}

template <class PartialT, KvDtype KV>
__global__ void __launch_bounds__(ctaThreads<Sm90Fp8MmaConfig>(), 1) sm90Fp8MmaKernel(VerifyParams const p, int m_tiles)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  verifyTileSm90Fp8Mma<PartialT, KV>(p, blockIdx.y, blockIdx.x % m_tiles, blockIdx.x / m_tiles);
#else
  __trap();  // built for sm_90a only; plan() refuses other GPUs before any launch
#endif
}
} // namespace Impl

namespace
{
/// The pool dtypes fp8-mma is defined for (numericsUndefinedFor), each its own kernel.
template <class F>
void forEachFp8MmaDtype(F &&f)
{
  f(std::integral_constant<KvDtype, KvDtype::kFp8E4m3>{});
  f(std::integral_constant<KvDtype, KvDtype::kFp8E5m2>{});
}
} // namespace

cudaError_t prepareSm90Fp8MmaKernel()
{
  static std::once_flag once;
  static cudaError_t status = cudaSuccess;
  std::call_once(once, [] {
    forEachFp8MmaDtype([&](auto kv) {
      if (status == cudaSuccess)
        status = Impl::allowSharedMemory({reinterpret_cast<void const *>(Impl::sm90Fp8MmaKernel<float, kv.value>),
                                          reinterpret_cast<void const *>(Impl::sm90Fp8MmaKernel<__nv_bfloat16, kv.value>)},
                                         Impl::Sm90Fp8MmaConfig::SMEM_BYTES);
    });
  });
  return status;
}

cudaError_t launchVerifySm90Fp8Mma(VerifyParams const &p, cudaStream_t stream)
{
  cudaError_t e = cudaErrorInvalidValue;  // bf16 and block-scaled pools: fp8-mma is not defined for them
  forEachFp8MmaDtype([&](auto kv) {
    if (p.batch.kv_dtype == kv.value)
      e = Impl::launchSplit<Impl::Sm90Fp8MmaConfig>(p, stream, Impl::sm90Fp8MmaKernel<float, kv.value>,
                                                    Impl::sm90Fp8MmaKernel<__nv_bfloat16, kv.value>);
  });
  return e;
}
} // namespace canopy::cuda
