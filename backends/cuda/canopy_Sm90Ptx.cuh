/// \file canopy_Sm90Ptx.cuh
/// \brief Thin wrappers over the Hopper (sm_90a) instructions cuda-sm90 uses: wgmma with both
/// operands in shared memory (bf16 and FP8), its fences and commit groups, shared-memory matrix
/// descriptors for the 128- and 64-byte swizzles, the async-proxy fence, the mbarriers of the
/// producer hand-off, clusters and distributed shared memory, and the bulk copies (tensor-map
/// boxes, shared memory to a peer CTA). Included by canopy_VerifyAttentionSm90.cu and the copy-ceiling probe
/// (experiments/lab/canopy_CopyCeiling.cu), both compiled for sm_90a alone (wgmma exists on no
/// other target).
#pragma once

#include "canopy_Sm90Layout.hpp"

#include <cstdint>

namespace canopy::cuda::Impl::sm90
{
// ---------------------------------------------------------------------------------------------
// Shared-memory matrix descriptors over the swizzled layouts of canopy_Sm90Layout.hpp.
// ---------------------------------------------------------------------------------------------
/// The swizzle modes of a descriptor (bits 62-63).
enum class Swizzle : uint64_t
{
  k128B = 1,
  k64B = 2,
};

/// Shared-memory matrix descriptor (128-byte swizzle unless \p mode says otherwise). Offsets are in
/// bytes and stored in 16-byte units. K-major operands (rows contiguous along the reduction): \p sbo
/// = bytes between 8-row groups, \p lbo unused (1). N-major operands (B transposed: rows along the
/// reduction, contiguous along N): \p lbo = bytes between 64-column blocks, \p sbo = bytes between
/// groups of 8 reduction rows.
__device__ __forceinline__ uint64_t smemDescriptor(uint32_t smem_addr, uint32_t lbo, uint32_t sbo,
                                                   Swizzle mode = Swizzle::k128B)
{
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4 ? lbo >> 4 : 1) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (static_cast<uint64_t>(mode) << 62);
}

/// A descriptor moved by \p bytes (a multiple of 16): the start address is its low 14 bits, and no
/// operand here crosses the 256 KB a 14-bit field of 16-byte units spans. The add is a 32-bit one on
/// the low word: with 64-bit adds (and the warpgroup index from threadIdx) the score loop spent 16
/// instructions per wgmma on its descriptors, the consumers' largest issue cost; with this add 10,
/// and with operands from warpUniform 6, all on the uniform datapath (docs/results/cuda-sm90.md,
/// "Uniform descriptors").
__device__ __forceinline__ uint64_t advance(uint64_t desc, uint32_t bytes)
{
  uint32_t const lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

/// \p x, the same in every lane of the warp, through a warp reduction (redux.sync), whose result
/// lands in a uniform register: branches on it are warp-uniform (which setmaxnreg needs) and the
/// wgmma descriptors derived from it are built on the uniform datapath. A shuffle does not do
/// that: with the shared base in a vector register, each score wgmma of cuda-sm90 moved its two
/// descriptors over with four R2UR.
__device__ __forceinline__ uint32_t warpUniform(uint32_t x) { return __reduce_or_sync(0xffffffffu, x); }
__device__ __forceinline__ int warpUniform(int x) { return static_cast<int>(warpUniform(static_cast<uint32_t>(x))); }

/// Orders this warpgroup's register writes before the wgmma that reads or accumulates into them.
__device__ __forceinline__ void wgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Closes the group of wgmma issued since the last commit.
__device__ __forceinline__ void wgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most \p N committed groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wgmmaWait()
{
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving reads or writes of accumulator \p r across a wgmma boundary.
__device__ __forceinline__ void fenceOperand(float &r) { asm volatile("" : "+f"(r)::"memory"); }
template <int N>
__device__ __forceinline__ void fenceOperands(float (&r)[N])
{
#pragma unroll
  for (int i = 0; i < N; ++i)
    fenceOperand(r[i]);
}

/// Makes this thread's generic-proxy shared-memory writes (stores, cp.async results) visible to the
/// async proxy that wgmma reads through; the barrier after it publishes them to the warpgroups.
__device__ __forceinline__ void fenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---------------------------------------------------------------------------------------------
// mbarriers (shared::cta): the hand-off between a producer warpgroup and the compute warpgroups.
// An mbarrier completes a phase when `count` arrivals have happened; waiters name the phase by its
// parity (0, 1, 0, ...), so a barrier guarding stage s of a 2-stage ring at tile j waits for
// parity (j / 2) % 2.
// ---------------------------------------------------------------------------------------------
/// Initialises the mbarrier at shared address \p bar for \p count arrivals per phase; one thread,
/// before a CTA barrier that publishes it.
__device__ __forceinline__ void mbarrierInit(uint32_t bar, int count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/// One arrival (release: this thread's earlier shared-memory writes are visible to the waiters).
__device__ __forceinline__ void mbarrierArrive(uint32_t bar)
{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Waits until the phase of parity \p parity has completed (acquire; at cluster scope with
/// \p CLUSTER, for barriers that other CTAs of the cluster arrive on).
template <bool CLUSTER = false>
__device__ __forceinline__ void mbarrierWait(uint32_t bar, uint32_t parity)
{
  uint32_t done = 0;
  do
  {
    if constexpr (CLUSTER)
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                   "selp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
    else
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
  } while (!done);
}

/// One arrival that also raises the phase's expected transaction bytes by \p bytes: the bulk copies
/// (TMA) that signal this barrier complete them, in any order relative to this arrival.
__device__ __forceinline__ void mbarrierArriveExpectTx(uint32_t bar, uint32_t bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/// One arrival on the mbarrier at \p cluster_bar, a shared::cluster address (mapa) that may lie in
/// another CTA of the cluster; release at cluster scope, so this thread's reads of the stage are
/// ordered before the peer's producer overwrites it.
__device__ __forceinline__ void mbarrierArriveCluster(uint32_t cluster_bar)
{
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}
/// Makes this thread's mbarrier.init visible to the cluster (and to the async proxy: the bulk copies
/// that will complete on it), before the cluster barrier that publishes it.
__device__ __forceinline__ void fenceMbarrierInit() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// ---------------------------------------------------------------------------------------------
// Thread-block clusters: rank, distributed shared memory addresses, the cluster barrier.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t clusterRank()
{
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t clusterSize()
{
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
  return n;
}
/// The shared::cluster address of \p addr (a shared::cta address of this CTA) in CTA \p rank.
__device__ __forceinline__ uint32_t mapShared(uint32_t addr, uint32_t rank)
{
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
/// Every non-exited thread of the cluster arrives (release) and waits (acquire).
__device__ __forceinline__ void clusterSync()
{
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// The bulk tensor copy (TMA) as a row gather: a 2-D tensor map over the pool (576 columns x
// num_slots rows), boxes of one row x 64 columns with the 128-byte swizzle. The swizzle follows the
// destination's shared address (bits 7-9 select the XOR of the 16-byte chunk), so a one-row box
// written at row r of a 1024-byte-aligned block lands exactly as row r of a whole-block copy would.
// A row coordinate past the map (>= num_slots) is zero-filled and still counts its bytes.
// ---------------------------------------------------------------------------------------------
/// Box (\p col, \p row) of the tensor map at generic address \p map into \p dst, completing
/// its bytes on \p bar (same offsets in every destination CTA); \p cta_mask != 0 multicasts it to
/// those CTAs of the cluster (bit i: rank i), 0 copies into this CTA only.
__device__ __forceinline__ void tmaLoad2d(uint32_t dst, void const *map, int col, int row, uint32_t bar,
                                          uint16_t cta_mask)
{
  uint64_t const m = reinterpret_cast<uint64_t>(map);
  if (cta_mask == 0)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(m), "r"(col), "r"(row), "r"(bar)
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3}], [%4], %5;\n"
                 ::"r"(dst), "l"(m), "r"(col), "r"(row), "r"(bar), "h"(cta_mask)
                 : "memory");
}
/// Copies \p bytes (a multiple of 16) of this CTA's shared memory at \p src to \p dst, a
/// shared::cluster address in another CTA of the cluster (mapa), completing them on the mbarrier at
/// \p dst_bar (a shared::cluster address in that CTA). The source is read through the async proxy:
/// what generic writes (stores, cp.async) put there must be fenced for it first (fenceProxyAsync).
__device__ __forceinline__ void bulkCopyToPeer(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t dst_bar)
{
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "r"(src), "r"(bytes), "r"(dst_bar)
               : "memory");
}
/// Arrives on \p bar once every cp.async this thread issued so far has landed (the mbarrier counts
/// it as one of its arrivals): the copies complete without the thread waiting for them.
__device__ __forceinline__ void cpAsyncMbarrierArrive(uint32_t bar)
{
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

/// Sets this warpgroup's registers per thread to \p N (a multiple of 8 in 24..256), growing
/// (\p INC) or shrinking its share of the register file; every warp of the warpgroup executes it.
template <int N, bool INC>
__device__ __forceinline__ void setMaxRegisters()
{
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg range");
  if constexpr (INC)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---------------------------------------------------------------------------------------------
// wgmma m64nNk16, bf16 operands from shared memory, fp32 accumulators in registers. Accumulator i
// of warp w of the warpgroup, lane l: row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) +
// 2 (l % 4) + i % 2 (the mma.sync m16n8 C layout repeated over N / 8 column blocks).
// \p accumulate 0: D = A B (the first k-step of a tile), else D += A B.
// ---------------------------------------------------------------------------------------------
// The accumulator operands of the wgmma wrappers below: N / 2 fp32 registers per thread.
#define CANOPY_WGMMA_N32_REGS "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define CANOPY_WGMMA_N32_ACC "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define CANOPY_WGMMA_N256_REGS \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define CANOPY_WGMMA_N256_ACC \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/// D[64 x 32] (+)= A (64 x 16, shared, K-major) * B (16 x 32, shared; TRANS_B: N-major), bf16 -> fp32.
template <int TRANS_B>
__device__ __forceinline__ void wgmmaM64N32(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" CANOPY_WGMMA_N32_REGS "}, %16, %17, p, 1, 1, 0, %19;\n}\n"
               : CANOPY_WGMMA_N32_ACC
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
}

/// D[64 x 256] (+)= A (64 x 16, shared, K-major) * B (16 x 256, shared; TRANS_B: N-major), bf16 -> fp32.
template <int TRANS_B>
__device__ __forceinline__ void wgmmaM64N256(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate)
{
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" CANOPY_WGMMA_N256_REGS "}, %128, %129, p, 1, 1, 0, %131;\n}\n"
               : CANOPY_WGMMA_N256_ACC
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
}

// ---------------------------------------------------------------------------------------------
// wgmma m64nNk32 on FP8 operands (\p E5M2: e5m2, else e4m3, for A and B alike), both K-major in
// shared memory (8-bit wgmma has no transposed operand), fp32 accumulators in the layout above.
// ---------------------------------------------------------------------------------------------
// One FP8 wgmma per operand type: TYPE is the PTX type of A and B ("e4m3" or "e5m2").
#define CANOPY_WGMMA_FP8_N32(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n32k32.f32." TYPE "." TYPE " {" CANOPY_WGMMA_N32_REGS   \
               "}, %16, %17, p, 1, 1;\n}\n"                                                             \
               : CANOPY_WGMMA_N32_ACC                                                                   \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
#define CANOPY_WGMMA_FP8_N256(TYPE)                                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                           \
               "wgmma.mma_async.sync.aligned.m64n256k32.f32." TYPE "." TYPE " {" CANOPY_WGMMA_N256_REGS \
               "}, %128, %129, p, 1, 1;\n}\n"                                                           \
               : CANOPY_WGMMA_N256_ACC                                                                  \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))

/// D[64 x 32] (+)= A (64 x 32, shared, K-major) * B (32 x 32, shared, K-major), FP8 -> fp32.
template <bool E5M2>
__device__ __forceinline__ void wgmmaM64N32Fp8(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate)
{
  if constexpr (E5M2)
    CANOPY_WGMMA_FP8_N32("e5m2");
  else
    CANOPY_WGMMA_FP8_N32("e4m3");
}

/// D[64 x 256] (+)= A (64 x 32, shared, K-major) * B (32 x 256, shared, K-major), FP8 -> fp32.
template <bool E5M2>
__device__ __forceinline__ void wgmmaM64N256Fp8(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate)
{
  if constexpr (E5M2)
    CANOPY_WGMMA_FP8_N256("e5m2");
  else
    CANOPY_WGMMA_FP8_N256("e4m3");
}
#undef CANOPY_WGMMA_FP8_N32
#undef CANOPY_WGMMA_FP8_N256
#undef CANOPY_WGMMA_N32_REGS
#undef CANOPY_WGMMA_N32_ACC
#undef CANOPY_WGMMA_N256_REGS
#undef CANOPY_WGMMA_N256_ACC
} // namespace canopy::cuda::Impl::sm90
