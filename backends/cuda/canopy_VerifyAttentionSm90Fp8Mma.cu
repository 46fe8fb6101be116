/// \file canopy_VerifyAttentionSm90Fp8Mma.cu
/// \brief cuda-sm90 in fp8-mma numerics (docs/design.md §8) on fp8-e4m3 and fp8-e5m2 pools: Q and
/// the softmax weights cast to the pool's FP8 type, both products on FP8 wgmma (m64nNk32, twice the
/// bf16 rate). The tile and its schedule are cuda-sm90's (64 rows x 64 keys, two compute
/// warpgroups splitting the keys for the scores and the output columns for P.V, a producer
/// warpgroup, the same mask, softmax and store stages: canopy_Sm90Tile.cuh); what changes is what
/// shared memory holds, because 8-bit wgmma reads both operands K-major only:
/// - Q (cast once per CTA from the bf16 rows beginTile stages) and each of three K stages keep
///   576-byte FP8 rows: the latent part in 128-byte-swizzled blocks of 128 columns, the rope's 64
///   bytes in a 64-byte-swizzled block (36 KB an operand);
/// - V, the first 512 columns of a tile's rows, is needed as V^T (512 rows of 64 keys, 64-byte
///   swizzle) in one of two buffers of its own: the producer writes it from the landed K stage with
///   ldmatrix, a 4 x 4 byte transpose in registers and 32-bit stores, as soon as the rows have
///   landed and the buffer's previous P.V is done; the gather runs two tiles ahead;
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
/// Measured (H100, B = 8, T = 256, P = 16K; docs/results/fp8-mma.md): with two stages of K + V^T
/// a tile took ~3,890 cycles, ~3,150 with the transpose left out (the model's ~3,100), against
/// bf16's ~4,470; the transpose and the next gather's issue waited on each other. Three K stages
/// and V^T buffers of their own (Q 36 + 3 x 36 + 2 x 32 + P 4 KB) were 2-10% faster than two at 11
/// of 12 budget-study shapes (2% slower at B = 1, T = 16, P = 16K: five tiles a CTA, where the
/// deeper prologue does not pay): ~3,540 cycles a tile, 1.21-1.34x the bf16 step at T >= 256 and
/// P >= 16K, same run.
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
  static constexpr int OP_BLOCK_BYTES = fp8mma::OP_BLOCK_BYTES;  ///< 64 rows of one 128-column block (8 KB)
  static constexpr int ROPE_AT = fp8mma::LATENT_BLOCKS * OP_BLOCK_BYTES;  ///< the rope block in Q or a K stage
  static constexpr int OP_BYTES = fp8mma::OP_BYTES;  ///< Q or a K stage (36 KB)
  static constexpr int ROW_CHUNKS = D_QK / 16;      ///< 16-byte chunks of a 576-byte FP8 row (36)
  static constexpr int LATENT_CHUNKS = D_V / 16;    ///< of which V (32)
  static constexpr int K32_STEPS = D_QK / 32;       ///< wgmma k-steps of Q.K^T (18)
  static constexpr int LATENT_STEPS = D_V / 32;     ///< of which in the 128-byte-swizzled blocks (16)
  static constexpr int PV32_STEPS = N_TILE / 32;    ///< wgmma k-steps of P.V (2)
  static constexpr int VT_ROW_BYTES = N_TILE;       ///< a V^T row: one byte per key of the tile
  static constexpr int VT_BYTES = D_V * VT_ROW_BYTES;  ///< 32 KB
  /// Three K stages: the gather runs two tiles ahead of the scores, so that a stage's rows have
  /// landed long before they are needed, and the transpose of a tile starts as soon as they have.
  /// V^T has buffers of its own (two, taking turns): a K stage is free once its tile's scores are
  /// done and its V^T written, a V^T buffer once its tile's P.V is done.
  static constexpr int K_STAGES = 3;
  static constexpr int VT_BUFFERS = 2;
  static constexpr int P8_BYTES = M_TILE * N_TILE;  ///< P, 64-byte rows
  static constexpr int BAR_BYTES = (2 * K_STAGES + 2 * VT_BUFFERS + 1) * 8;
  /// The shared-memory plan. beginTile stages the bf16 Q (ROWS_BYTES) from K stage 2 on (over
  /// the V^T buffers), which the producer first fills after the compute warps have cast it into q8.
  struct Smem
  {
    static constexpr SmemRegion q8{0, OP_BYTES};                     ///< Q in FP8
    static constexpr SmemRegion k = q8.next(K_STAGES * OP_BYTES);      ///< the K stages' FP8 rows
    static constexpr SmemRegion vt = k.next(VT_BUFFERS * VT_BYTES);    ///< V^T of a tile, per buffer
    static constexpr SmemRegion p8 = vt.next(P8_BYTES);                ///< P in FP8
    static constexpr SmemRegion xrow = p8.next(XROW_BYTES);
    static constexpr SmemRegion vis = xrow.next(VIS_BYTES);
    static constexpr SmemRegion ring = vis.next(RING_BYTES);
    static constexpr SmemRegion info = ring.next(INFO_BYTES);
    static constexpr SmemRegion bars = info.next(BAR_BYTES);
  };
  static constexpr int SMEM_BYTES = Smem::bars.end();
  static constexpr int Q_STAGED_AT = Smem::k.offset + 2 * OP_BYTES;  ///< the bf16 Q beginTile stages
  static_assert(Smem::q8.offset % 1024 == 0 && Smem::k.offset % 1024 == 0 && Smem::vt.offset % 1024 == 0 &&
                    Smem::p8.offset % 1024 == 0 && OP_BYTES % 1024 == 0 && VT_BYTES % 1024 == 0 &&
                    ROPE_AT % sm90::SWIZZLE64_ATOM_BYTES == 0,
                "wgmma operands must start on swizzle atoms");
  static_assert(Q_STAGED_AT + ROWS_BYTES <= Smem::vt.end(), "the bf16 Q is staged over K stage 2 and the V^T buffers");
  static_assert(SMEM_BYTES <= 227 * 1024, "sm_90 opt-in shared-memory limit per block (227 KB)");
  static_assert(M_TILE == N_TILE && N_TILE == fp8mma::KEYS && D_V == fp8mma::VALUE_BYTES && LATENT_CHUNKS == 32 &&
                    ROW_CHUNKS == 36 && PRODUCER_THREADS == 128 && S_KEYS == 32,
                "the geometry of canopy_Sm90Layout.hpp's fp8mma maps");
};

/// The hand-off's mbarriers: keys[s] (the rows of K stage s landed, PRODUCER_THREADS arrivals),
/// kFree[s] (the 8 compute warps' scores of K stage s done), values[v] (V^T buffer v written,
/// PRODUCER_THREADS), vFree[v] (the 8 compute warps' P.V of it done), and q_cast (the compute
/// threads have cast Q out of where beginTile staged it: THREADS arrivals, each thread after its
/// own reads, which is what compute-sanitizer's racecheck sees as ordering them before the
/// producer's writes there; one arrival per warp after __syncwarp it reported as races).
struct Fp8MmaBarriers
{
  using Cfg = Sm90Fp8MmaConfig;
  uint32_t base;
  __device__ __forceinline__ uint32_t keys(int s) const { return base + s * 8; }
  __device__ __forceinline__ uint32_t kFree(int s) const { return base + (Cfg::K_STAGES + s) * 8; }
  __device__ __forceinline__ uint32_t values(int v) const { return base + (2 * Cfg::K_STAGES + v) * 8; }
  __device__ __forceinline__ uint32_t vFree(int v) const { return base + (2 * Cfg::K_STAGES + Cfg::VT_BUFFERS + v) * 8; }
  __device__ __forceinline__ uint32_t qCast() const { return base + (2 * Cfg::K_STAGES + 2 * Cfg::VT_BUFFERS) * 8; }
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

/// A producer lane's addresses for transposeValues, relative to a K stage (the ldmatrix row base)
/// and to a V^T buffer (the 4 store bases of each key half), and its permute selectors
/// (canopy_Sm90Layout.hpp, fp8mma).
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
        store[h][s] = fp8mma::storePiece(fp8mma::storeBase(warp, lane, s), h);
  }
};

/// Producer warp \p warp's share of V^T, into \p vt, for the landed K rows of \p stage: latent chunks 8 warp ..
/// 8 warp + 7 of both key halves, 16 ldmatrix pieces (the maps: canopy_Sm90Layout.hpp, fp8mma).
/// Every address is a per-lane base plus a constant of the piece (loadPiece, storePiece), so a
/// piece costs its ldmatrix, 8 permutes, 4 stores and one XOR.
__device__ __forceinline__ void transposeValues(uint32_t stage, uint32_t vt, TransposeLane const &me)
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
      stShared4(vt + me.store[i & 1][s] + fp8mma::storePieceRows(i), w[s]);
  }
}

/// The producer warpgroup in fp8-mma. Tiles 0 and 1 are issued in the prologue (K stages 0, 1);
/// for each tile j: its rows land (tile j + 1's may still be in flight), keys[j % 3] is signalled;
/// tile j + 2 is issued into the K stage tile j - 1 used, once that tile's scores and V^T are done
/// (for tile 2, once the compute warps have cast Q out of where it was staged); then, once every
/// producer thread's rows of tile j are there and the P.V of tile j - 2 has freed V^T buffer
/// j % 2, the warpgroup writes tile j's V^T and signals values[j % 2]. One cp.async group per
/// tile (an empty one past the last), so that waiting for all but the newest is waiting for tile j.
__device__ __forceinline__ void produceFp8MmaTiles(VerifyParams const &p, TileInfo const volatile *info,
                                                   uint32_t k_base, uint32_t vt_base, Fp8MmaBarriers const bars,
                                                   int ntiles)
{
  using Cfg = Sm90Fp8MmaConfig;
  ProducerCopies const rows{p, info->P, info->s0, info->s1, info->kv0, info->qo0};
  TransposeLane const lane_addr((static_cast<int>(threadIdx.x) - Cfg::THREADS) >> 5, rows.lane);
  uint32_t slot_l = rows.slotOf(2);
  int ks = 0;  // j % K_STAGES
  for (int j = 0; j < ntiles; ++j)
  {
    uint32_t const stage = k_base + ks * Cfg::OP_BYTES;
    cpAsyncWait<1>();  // this thread's rows of tile j
    sm90::fenceProxyAsync();
    sm90::mbarrierArrive(bars.keys(ks));
    if (j == 0)
      sm90::mbarrierWait(bars.qCast(), 0);  // K stage 2 and the V^T buffers held the bf16 Q
    int const next = ks == 0 ? 2 : ks - 1;  // (j + 2) % 3: the stage of tile j - 1
    if (j + 2 < ntiles)
    {
      if (j >= 1)
      {
        // Tile j - 1's rows are read by its scores (compute warps) and its transpose (every
        // producer warp: this one is done with it, the others signal values[(j - 1) % 2]).
        sm90::mbarrierWait(bars.kFree(next), ((j - 1) / Cfg::K_STAGES) & 1);
        sm90::mbarrierWait(bars.values((j - 1) & 1), ((j - 1) >> 1) & 1);
      }
      issueFp8Rows(rows, j + 2, k_base + next * Cfg::OP_BYTES, slot_l);
      slot_l = rows.slotOf(j + 3);
    }
    else
      cpAsyncCommit();
    sm90::mbarrierWait(bars.keys(ks), (j / Cfg::K_STAGES) & 1);  // every producer thread's rows of tile j
    if (j >= 2)
      sm90::mbarrierWait(bars.vFree(j & 1), ((j - 2) >> 1) & 1);
    transposeValues(stage, vt_base + (j & 1) * Cfg::VT_BYTES, lane_addr);
    sm90::fenceProxyAsync();
    sm90::mbarrierArrive(bars.values(j & 1));
    ks = ks == Cfg::K_STAGES - 1 ? 0 : ks + 1;
  }
  cpAsyncWait<0>();  // the groups issued past the last tile (zero rows, or none) land before the thread exits
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
  uint32_t const k_base = win.at(Smem::k);
  uint32_t const vt_base = win.at(Smem::vt);
  uint32_t const p8_base = win.at(Smem::p8);
  Fp8MmaBarriers const bars{win.at(Smem::bars)};
  if (threadIdx.x == 0)
  {
    for (int s = 0; s < Cfg::K_STAGES; ++s)
    {
      sm90::mbarrierInit(bars.keys(s), Cfg::PRODUCER_THREADS);
      sm90::mbarrierInit(bars.kFree(s), Cfg::EMPTY_ARRIVALS);
    }
    for (int v = 0; v < Cfg::VT_BUFFERS; ++v)
    {
      sm90::mbarrierInit(bars.values(v), Cfg::PRODUCER_THREADS);
      sm90::mbarrierInit(bars.vFree(v), Cfg::EMPTY_ARRIVALS);
    }
    sm90::mbarrierInit(bars.qCast(), Cfg::THREADS);
  }
  TileSetup st;
  auto first_copies = [&](int P, int s0, int s1, int kv0, int64_t qo0) {
    ProducerCopies const rows{p, P, s0, s1, kv0, qo0};
    issueFp8Rows(rows, 0, k_base, rows.slotOf(0));
    issueFp8Rows(rows, 1, k_base + Cfg::OP_BYTES, rows.slotOf(1));
  };
  uint32_t const q_staged = win.at(SmemRegion{Cfg::Q_STAGED_AT, Cfg::ROWS_BYTES});
  if (!beginTile<Cfg>(p, b, mt, split, 0, q_staged, sm, st, first_copies))
    return;
  int const warpgroup = sm90::warpUniform(static_cast<int>(threadIdx.x) / 128);
  if (warpgroup >= Cfg::WARPGROUPS)
  {
    sm90::setMaxRegisters<Cfg::FP8_PRODUCER_REGS, false>();
    produceFp8MmaTiles(p, info, k_base, vt_base, bars, st.ntiles);
    return;
  }
  sm90::setMaxRegisters<Cfg::FP8_COMPUTE_REGS, true>();

  int const tid = threadIdx.x;
  ComputeLane const me = ComputeLane::of(tid);
  int const wg = me.wg, wrow = me.wrow, lane = me.lane, g = me.g;
  // Stage: Q. The bf16 rows landed in beginTile; once cast, where they were is the producer's again.
  castQ<KV>(q_staged, q8_base, tid);
  sm90::fenceProxyAsync();
  sm90::mbarrierArrive(bars.qCast());
  computeBarrier<Cfg>();

  float const kv_scale = p.batch.kv_scale;
  float const scale = p.batch.sm_scale * kv_scale * LOG2E;
  // Descriptors. Scores: A = Q, B = this warpgroup's 32 keys (both K-major); the latent k-steps of
  // 32 FP8 columns move 32 bytes in a 128-byte-swizzled block, every 4 steps the next block; the
  // two rope k-steps read the 64-byte-swizzled block after them. P.V: A = P, B = V^T rows
  // [256 wg, +256) (K-major over the 64 keys, 64-byte swizzle); a k-step moves 32 bytes.
  uint64_t const q_desc = sm90::smemDescriptor(q8_base, 0, sm90::SWIZZLE_ATOM_BYTES);
  uint64_t const k_desc0 =
      sm90::smemDescriptor(k_base + wg * Cfg::S_KEYS * sm90::SWIZZLE_ROW_BYTES, 0, sm90::SWIZZLE_ATOM_BYTES);
  uint64_t const q_rope_desc =
      sm90::smemDescriptor(q8_base + Cfg::ROPE_AT, 0, sm90::SWIZZLE64_ATOM_BYTES, sm90::Swizzle::k64B);
  uint64_t const k_rope_desc0 =
      sm90::smemDescriptor(k_base + Cfg::ROPE_AT + wg * Cfg::S_KEYS * sm90::SWIZZLE64_ROW_BYTES, 0,
                           sm90::SWIZZLE64_ATOM_BYTES, sm90::Swizzle::k64B);
  uint64_t const p_desc = sm90::smemDescriptor(p8_base, 0, sm90::SWIZZLE64_ATOM_BYTES, sm90::Swizzle::k64B);
  uint64_t const v_desc0 = sm90::smemDescriptor(vt_base + wg * Cfg::O_COLS * Cfg::VT_ROW_BYTES, 0,
                                                sm90::SWIZZLE64_ATOM_BYTES, sm90::Swizzle::k64B);

  float o[Cfg::O_REGS];
#pragma unroll
  for (int i = 0; i < Cfg::O_REGS; ++i)
    o[i] = 0.f;
  SoftmaxState row[2];
  int const ntiles = st.ntiles;
  bool const moves = windowMoves(info);

  int ks_ = 0;  // j % K_STAGES
  for (int j = 0; j < ntiles; ++j)
  {
    uint32_t const stage = ks_ * Cfg::OP_BYTES;
    uint32_t const vt = (j & 1) * Cfg::VT_BYTES;
    // Stage: load. The K rows of tile j have landed; V^T follows (waited for before P.V).
    sm90::mbarrierWait(bars.keys(ks_), (j / Cfg::K_STAGES) & 1);
    if (moves)
    {
      computeBarrier<Cfg>();
      advanceVisibility<Cfg>(p, sm, j);
    }

    // Stage: scores, S = Q K^T over this warpgroup's 32 keys, 18 FP8 k-steps (16 latent, 2 rope).
    float s[Cfg::S_REGS];
    sm90::wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < Cfg::LATENT_STEPS; ++ks)
    {
      uint32_t const koff = (ks >> 2) * Cfg::OP_BLOCK_BYTES + (ks & 3) * 32;
      sm90::wgmmaM64N32Fp8<E5M2>(s, sm90::advance(q_desc, koff), sm90::advance(k_desc0, stage + koff), ks > 0);
    }
#pragma unroll
    for (int ks = Cfg::LATENT_STEPS; ks < Cfg::K32_STEPS; ++ks)
    {
      uint32_t const koff = (ks - Cfg::LATENT_STEPS) * 32;
      sm90::wgmmaM64N32Fp8<E5M2>(s, sm90::advance(q_rope_desc, koff), sm90::advance(k_rope_desc0, stage + koff), 1);
    }
    sm90::wgmmaCommit();
    sm90::wgmmaWait<0>();
    sm90::fenceOperands(s);
    __syncwarp();
    if (lane == 0)
      sm90::mbarrierArrive(bars.kFree(ks_));  // the scores' wgmma have read K stage ks_

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
    sm90::mbarrierWait(bars.values(j & 1), (j >> 1) & 1);
    sm90::fenceOperands(o);
    sm90::wgmmaFence();
#pragma unroll
    for (int kk = 0; kk < Cfg::PV32_STEPS; ++kk)
      sm90::wgmmaM64N256Fp8<E5M2>(o, sm90::advance(p_desc, kk * 32), sm90::advance(v_desc0, vt + kk * 32), 1);
    sm90::wgmmaCommit();
    sm90::wgmmaWait<0>();
    sm90::fenceOperands(o);
    __syncwarp();
    if (lane == 0)
      sm90::mbarrierArrive(bars.vFree(j & 1));
    ks_ = ks_ == Cfg::K_STAGES - 1 ? 0 : ks_ + 1;
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
