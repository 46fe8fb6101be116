/// \file canopy_Sm90Layout.hpp
/// \brief Where cuda-sm90's wgmma operands sit in shared memory, as plain constexpr functions (no
/// CUDA in them, so that a host test, tests/cuda/tstSm90Layout.cpp, checks them against the
/// hardware's address-bit swizzles and emulated ldmatrix, byte transposes and wgmma reads): the
/// 128-byte and 64-byte swizzles, and fp8-mma's key order and its producer's and compute warps'
/// thread-to-byte maps (canopy_VerifyAttentionSm90Fp8Mma.cu).
#pragma once

#include "canopy_Bf16.hpp"  // CANOPY_HOST_DEVICE_INLINE

#include <cstdint>

namespace canopy::cuda::Impl
{
namespace sm90
{
// The 128-byte swizzle. A tile is stored as blocks of 128-byte rows (64 bf16 or 128 FP8 columns);
// in a block, row r is 128 contiguous bytes at r * 128, and its 16-byte chunk c sits at chunk
// c ^ (r % 8). wgmma reads this layout through a descriptor whose base is 1024-byte aligned (one
// 8-row swizzle atom), and the swizzle spreads the 8 rows of an atom over all 32 banks.
constexpr int SWIZZLE_ROW_BYTES = 128;                     ///< one row of a 128-byte-swizzled block
constexpr int SWIZZLE_ATOM_BYTES = 8 * SWIZZLE_ROW_BYTES;  ///< 8 rows: the unit the swizzle repeats over
/// The 64-byte swizzle: rows of 64 bytes, 16-byte chunk c of row r at chunk c ^ ((r / 2) % 4),
/// repeating every 8 rows (a 512-byte atom).
constexpr int SWIZZLE64_ROW_BYTES = 64;
constexpr int SWIZZLE64_ATOM_BYTES = 8 * SWIZZLE64_ROW_BYTES;

/// Byte offset of row \p r, 16-byte chunk \p c (0..7) inside a 128-byte-swizzled block.
CANOPY_HOST_DEVICE_INLINE constexpr int swizzled(int r, int c) { return r * SWIZZLE_ROW_BYTES + ((c ^ (r & 7)) << 4); }
/// Byte offset of row \p r, 16-byte chunk \p c (0..3) inside a 64-byte-swizzled operand.
CANOPY_HOST_DEVICE_INLINE constexpr int swizzled64(int r, int c)
{
  return r * SWIZZLE64_ROW_BYTES + ((c ^ ((r >> 1) & 3)) << 4);
}
} // namespace sm90

/// fp8-mma's tile geometry (64 keys of 576 FP8 bytes; two compute warpgroups of 32 keys; a
/// producer warpgroup of 4 warps) and the key order of P and V^T. The order of the keys along
/// P.V's reduction is free as long as P's columns and V^T's agree; this one makes both stores whole
/// 32-bit words: key 32 G + 8 m + q (G < 2, m < 4, q < 8) goes to column 32 G + 4 q + m, so the four
/// keys m = 0..3 of one (G, q) are one column word 8 G + q.
namespace fp8mma
{
constexpr int KEYS = 64;        ///< keys of a tile (N_TILE)
constexpr int VALUE_BYTES = 512;  ///< V: the first 512 bytes of a row
constexpr int OP_BLOCK_BYTES = 64 * sm90::SWIZZLE_ROW_BYTES;  ///< 64 rows of one 128-byte-swizzled block

constexpr int LATENT_BLOCKS = VALUE_BYTES / 128;  ///< 128-column blocks of the latent part (4)
constexpr int ROPE_BLOCK_BYTES = 64 * sm90::SWIZZLE64_ROW_BYTES;  ///< the rope's 64 bytes of 64 rows (4 KB)
constexpr int OP_BYTES = LATENT_BLOCKS * OP_BLOCK_BYTES + ROPE_BLOCK_BYTES;  ///< Q or a K stage (36 KB)

/// Byte offset of row \p r, 16-byte chunk \p ch (0..35) of a 576-byte FP8 row in Q or a K stage:
/// the latent part in 128-byte-swizzled blocks of 128 columns, the rope's 64 bytes in a
/// 64-byte-swizzled block after them (a fifth 128-byte block would be half empty: 4 KB more a
/// stage, and three K stages only fit in 36 KB each).
CANOPY_HOST_DEVICE_INLINE constexpr int opOffset(int r, int ch)
{
  return ch < 8 * LATENT_BLOCKS ? (ch >> 3) * OP_BLOCK_BYTES + sm90::swizzled(r, ch & 7)
                                : LATENT_BLOCKS * OP_BLOCK_BYTES + sm90::swizzled64(r, ch - 8 * LATENT_BLOCKS);
}
/// The column of P and V^T that key \p k (0..63) of a tile goes to.
CANOPY_HOST_DEVICE_INLINE constexpr int keyColumn(int k) { return 32 * (k >> 5) + 4 * (k & 7) + ((k >> 3) & 3); }
/// Byte offset of column word \p w (columns 4 w .. 4 w + 3) of row \p r of P or V^T.
CANOPY_HOST_DEVICE_INLINE constexpr int wordOffset(int r, int w) { return sm90::swizzled64(r, w >> 2) + (w & 3) * 4; }

// The producer's V^T transpose (transposeValues): warp w, piece i (0..15) is latent chunk
// 8 w + i / 2 of keys 32 G + (0..31), G = i % 2, read by one ldmatrix.x4 whose matrix m holds keys
// 32 G + 8 m + (0..7); lane l gives the address of key pieceKey(i, l) and receives, from matrix m,
// key 32 G + 8 m + l / 4, bytes 4 (l % 4) .. + 3 of the chunk. After the 4 x 4 byte transpose its
// word e holds those 4 keys of V column 16 c + 4 (l % 4) + e: column word 8 G + l / 4 of V^T row
// 16 c + 4 (l % 4) + e. Store s of the lane writes word storedWord(l, s): lanes with l % 4 >= 2
// take their words in the order s ^ 1, so that each store instruction's 32 lanes cover both
// 64-byte halves of the banks (rows of both parities) and all 32 banks.
CANOPY_HOST_DEVICE_INLINE constexpr int pieceChunk(int warp, int i) { return 8 * warp + (i >> 1); }
CANOPY_HOST_DEVICE_INLINE constexpr int pieceKey(int i, int lane) { return 32 * (i & 1) + 8 * (lane >> 3) + (lane & 7); }
CANOPY_HOST_DEVICE_INLINE constexpr int storedWord(int lane, int s) { return (lane & 2) ? s ^ 1 : s; }
/// The V^T row (V column) of store \p s of \p lane for chunk \p c.
CANOPY_HOST_DEVICE_INLINE constexpr int storeRow(int c, int lane, int s) { return 16 * c + 4 * (lane & 3) + storedWord(lane, s); }
/// The V^T column word of \p lane's stores for piece \p i.
CANOPY_HOST_DEVICE_INLINE constexpr int storeWord(int i, int lane) { return 8 * (i & 1) + (lane >> 2); }

// transposeValues' addresses with the per-lane work hoisted out of the piece loop (the maps above
// define them; tstSm90Layout checks these against them for every warp, piece, lane and store).
// Piece i's ldmatrix address of a lane is loadPiece(loadBase(warp, lane), i): the piece moves the
// key half by 4 KB and XORs the chunk bits with i / 2 (the base's low 7 bits are the lane's chunk
// swizzle, below a 1024-byte-aligned stage, so XOR and add commute with the stage's address). Its
// store s is storePiece(storeBase(warp, lane, s), i): the piece moves 16 V^T rows (1 KB) per chunk
// (storePieceRows) and XORs the 16-byte chunk bit of the key half (i % 2), so the producer keeps
// storePiece(base, i % 2) per lane and adds storePieceRows(i), a constant of the unrolled piece.
CANOPY_HOST_DEVICE_INLINE constexpr uint32_t loadBase(int warp, int lane) { return opOffset(lane, 8 * warp); }
CANOPY_HOST_DEVICE_INLINE constexpr uint32_t loadPiece(uint32_t base, int i) { return (base ^ ((i >> 1) << 4)) + 4096 * (i & 1); }
CANOPY_HOST_DEVICE_INLINE constexpr uint32_t storeBase(int warp, int lane, int s)
{
  return wordOffset(storeRow(8 * warp, lane, s), storeWord(0, lane));
}
CANOPY_HOST_DEVICE_INLINE constexpr uint32_t storePieceRows(int i) { return 1024 * (i >> 1); }
CANOPY_HOST_DEVICE_INLINE constexpr uint32_t storePiece(uint32_t base, int i) { return (base ^ (32 * (i & 1))) + storePieceRows(i); }

/// The compute warps' P store: in the m64n32 accumulator layout, lane l of warpgroup \p wg holds
/// the scores of keys 32 wg + 8 n + 2 (l % 4) + e (n < 4, e < 2) of rows g and g + 8; for one row
/// and one e its four n are column word pWord(wg, l, e).
CANOPY_HOST_DEVICE_INLINE constexpr int pWord(int wg, int lane, int e) { return 8 * wg + 2 * (lane & 3) + e; }
/// The bytes of \p x (0..3) and \p y (4..7) picked by the 4 selector nibbles of \p s, lowest first:
/// PRMT (__byte_perm) on the device, the same by shifts on the host.
CANOPY_HOST_DEVICE_INLINE uint32_t bytePerm(uint32_t x, uint32_t y, uint32_t s)
{
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  uint64_t const xy = (uint64_t{y} << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
#endif
}

/// The last permutes' selectors of \p lane's transpose: words 0/1 (and 2/3) swapped where the lane
/// stores in the order s ^ 1 (storedWord), so that store s takes word s without a select.
struct TransposeSelectors
{
  uint32_t even, odd;
};
CANOPY_HOST_DEVICE_INLINE constexpr TransposeSelectors transposeSelectors(int lane)
{
  return storedWord(lane, 0) ? TransposeSelectors{0x7632, 0x5410} : TransposeSelectors{0x5410, 0x7632};
}
/// Byte k of word \p r[m] to byte m of word \p w[k ^ f] (f = 1 for selectors of a lane that
/// stores in the order s ^ 1, else 0): a 4 x 4 byte transpose in 8 byte permutes.
CANOPY_HOST_DEVICE_INLINE void transpose4x4(uint32_t const (&r)[4], uint32_t (&w)[4],
                                            TransposeSelectors const sel = {0x5410, 0x7632})
{
  uint32_t const a = bytePerm(r[0], r[1], 0x5140), b = bytePerm(r[0], r[1], 0x7362);
  uint32_t const c = bytePerm(r[2], r[3], 0x5140), d = bytePerm(r[2], r[3], 0x7362);
  w[0] = bytePerm(a, c, sel.even);
  w[1] = bytePerm(a, c, sel.odd);
  w[2] = bytePerm(b, d, sel.even);
  w[3] = bytePerm(b, d, sel.odd);
}
} // namespace fp8mma
} // namespace canopy::cuda::Impl
