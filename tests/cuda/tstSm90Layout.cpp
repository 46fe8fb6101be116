/// \file tstSm90Layout.cpp
/// \brief cuda-sm90's shared-memory maps (canopy_Sm90Layout.hpp) on the host, against the hardware's
/// definitions rather than against themselves: the swizzles as the address-bit XORs wgmma applies
/// (128-byte: bits 4-6 ^= bits 7-9; 64-byte: bits 4-5 ^= bits 7-8), and fp8-mma's V^T and P as
/// what wgmma reads from them after an emulated producer (cp.async row placement, ldmatrix.x4 as the
/// PTX manual defines its fragments, the byte transpose, the stores) and emulated compute warps (the
/// m64n32 accumulator layout, the P stores): column k of P and of V^T must hold the same key for
/// every k, each V^T byte must be written once, and the stores must be free of bank conflicts.
#include "canopy_Sm90Layout.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

namespace canopy::test
{
namespace
{
using namespace cuda::Impl;

constexpr int ROW_BYTES = 576;

/// The byte wgmma reads at offset \p a of a 1024-byte-aligned 128-byte-swizzled operand.
int hw128(int a) { return a ^ (((a >> 7) & 7) << 4); }
/// The same for a 512-byte-aligned 64-byte-swizzled operand.
int hw64(int a) { return a ^ (((a >> 7) & 3) << 4); }
/// The 4-byte bank of shared-memory byte offset \p a.
int bank(int a) { return (a / 4) % 32; }

TEST(Sm90Layout, swizzlesAreTheHardwareAddressBitXors)
{
  for (int r = 0; r < 64; ++r)
  {
    for (int c = 0; c < 8; ++c)
      EXPECT_EQ(sm90::swizzled(r, c), hw128(r * 128 + c * 16)) << r << " " << c;
    for (int c = 0; c < 4; ++c)
      EXPECT_EQ(sm90::swizzled64(r, c), hw64(r * 64 + c * 16)) << r << " " << c;
  }
}

/// Q and the K rows: byte kb of row r goes where the score wgmma's k-step kb / 32 reads it (latent:
/// block kb / 128, start advanced by 32 bytes a step inside the block, the 128-byte swizzle on the
/// address; rope: the 64-byte-swizzled block after them, 32 bytes a step), and the row's bytes
/// fill the operand's OP_BYTES exactly.
TEST(Sm90Layout, fp8RowsLieWhereTheScoreWgmmaReadsThem)
{
  std::set<int> used;
  for (int r = 0; r < 64; ++r)
    for (int kb = 0; kb < ROW_BYTES; ++kb)
    {
      int const a = fp8mma::opOffset(r, kb / 16) + kb % 16;
      int const rope0 = fp8mma::LATENT_BLOCKS * fp8mma::OP_BLOCK_BYTES;
      int const want = kb < fp8mma::VALUE_BYTES ? (kb / 128) * fp8mma::OP_BLOCK_BYTES + hw128(r * 128 + kb % 128)
                                                : rope0 + hw64(r * 64 + kb - fp8mma::VALUE_BYTES);
      ASSERT_EQ(a, want) << "row " << r << " byte " << kb;
      used.insert(a);
    }
  EXPECT_EQ(used.size(), static_cast<size_t>(fp8mma::OP_BYTES));
  EXPECT_EQ(*used.rbegin(), fp8mma::OP_BYTES - 1);
}

TEST(Sm90Layout, keyColumnIsAPermutationOfEachHalf)
{
  std::set<int> seen;
  for (int k = 0; k < fp8mma::KEYS; ++k)
  {
    int const c = fp8mma::keyColumn(k);
    EXPECT_EQ(c / 32, k / 32) << "key " << k << " leaves its warpgroup's half";
    EXPECT_TRUE(seen.insert(c).second) << "column " << c << " twice";
  }
  EXPECT_EQ(seen.size(), 64u);
}

/// transposeValues' hoisted addresses and selectors are the maps that define the transpose: piece
/// i of lane l reads key pieceKey(i, l), chunk pieceChunk(warp, i), and its store s writes word
/// storedWord(l, s) of the transpose to V^T row storeRow(c, l, s), column word storeWord(i, l).
TEST(Sm90Layout, hoistedTransposeAddressesAreTheMaps)
{
  std::mt19937 rng(5);
  for (int warp = 0; warp < 4; ++warp)
    for (int i = 0; i < 16; ++i)
      for (int l = 0; l < 32; ++l)
      {
        int const c = fp8mma::pieceChunk(warp, i);
        ASSERT_EQ(fp8mma::loadPiece(fp8mma::loadBase(warp, l), i),
                  static_cast<uint32_t>(fp8mma::opOffset(fp8mma::pieceKey(i, l), c)))
            << "warp " << warp << " piece " << i << " lane " << l;
        uint32_t r[4], plain[4], w[4];
        for (uint32_t &x : r)
          x = static_cast<uint32_t>(rng());
        fp8mma::transpose4x4(r, plain);
        fp8mma::transpose4x4(r, w, fp8mma::transposeSelectors(l));
        for (int s = 0; s < 4; ++s)
        {
          uint32_t const base = fp8mma::storeBase(warp, l, s);
          ASSERT_EQ(fp8mma::storePiece(base, i),
                    static_cast<uint32_t>(fp8mma::wordOffset(fp8mma::storeRow(c, l, s), fp8mma::storeWord(i, l))))
              << "warp " << warp << " piece " << i << " lane " << l << " store " << s;
          // The producer's split of it, on a V^T that starts at a 1024-byte-aligned offset.
          for (uint32_t at : {0u, 40960u, 147456u})
            ASSERT_EQ(fp8mma::storePiece(at + base, i & 1) + fp8mma::storePieceRows(i), at + fp8mma::storePiece(base, i))
                << "warp " << warp << " piece " << i << " lane " << l << " store " << s << " at " << at;
          ASSERT_EQ(w[s], plain[fp8mma::storedWord(l, s)]) << "lane " << l << " store " << s;
        }
      }
}

/// The producer's transposeValues, emulated lane by lane from a K stage filled as issueFp8Rows does:
/// V^T row d, column keyColumn(key) must be V[key][d] as wgmma's B read (K-major, 64-byte swizzle)
/// sees it, every byte written once; every ldmatrix matrix and every store conflict-free.
TEST(Sm90Layout, producerTransposeGivesVTransposedInKeyColumnOrder)
{
  std::mt19937 rng(11);
  std::vector<uint8_t> rows(64 * ROW_BYTES);
  for (uint8_t &b : rows)
    b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> stage(fp8mma::OP_BYTES, 0);
  for (int r = 0; r < 64; ++r)
    for (int ch = 0; ch < ROW_BYTES / 16; ++ch)
      std::memcpy(&stage[static_cast<size_t>(fp8mma::opOffset(r, ch))], &rows[static_cast<size_t>(r * ROW_BYTES + ch * 16)], 16);
  std::vector<uint8_t> vt(fp8mma::VALUE_BYTES * 64, 0);
  std::vector<int> writes(vt.size() / 4, 0);
  auto load32 = [&](int a) {
    uint32_t v;
    std::memcpy(&v, &stage[static_cast<size_t>(a)], 4);
    return v;
  };
  for (int warp = 0; warp < 4; ++warp)
    for (int i = 0; i < 16; ++i)
    {
      int addr[32];
      for (int l = 0; l < 32; ++l)
        addr[l] = static_cast<int>(fp8mma::loadPiece(fp8mma::loadBase(warp, l), i));
      for (int m = 0; m < 4; ++m)  // one matrix: 8 rows of 16 bytes, lanes 8 m .. 8 m + 7
      {
        std::set<int> quads;
        for (int j = 0; j < 8; ++j)
          quads.insert(bank(addr[8 * m + j]) / 4);
        EXPECT_EQ(quads.size(), 8u) << "ldmatrix of warp " << warp << " piece " << i << " matrix " << m << " conflicts";
      }
      int store_addr[4][32];
      for (int l = 0; l < 32; ++l)
      {
        uint32_t r[4], w[4];
        for (int m = 0; m < 4; ++m)  // fragment: row l / 4 of matrix m, bytes 4 (l % 4) .. + 3
          r[m] = load32(addr[8 * m + l / 4] + 4 * (l % 4));
        fp8mma::transpose4x4(r, w, fp8mma::transposeSelectors(l));
        for (int s = 0; s < 4; ++s)
        {
          int const a = static_cast<int>(fp8mma::storePiece(fp8mma::storeBase(warp, l, s), i));
          std::memcpy(&vt[static_cast<size_t>(a)], &w[s], 4);
          ++writes[static_cast<size_t>(a / 4)];
          store_addr[s][l] = a;
        }
      }
      for (int s = 0; s < 4; ++s)
      {
        std::set<int> banks;
        for (int l = 0; l < 32; ++l)
          banks.insert(bank(store_addr[s][l]));
        EXPECT_EQ(banks.size(), 32u) << "V^T store " << s << " of warp " << warp << " piece " << i << " conflicts";
      }
    }
  for (size_t k = 0; k < writes.size(); ++k)
    ASSERT_EQ(writes[k], 1) << "V^T word " << k;
  for (int key = 0; key < 64; ++key)
    for (int d = 0; d < fp8mma::VALUE_BYTES; ++d)
      ASSERT_EQ(vt[static_cast<size_t>(hw64(d * 64 + fp8mma::keyColumn(key)))], rows[static_cast<size_t>(key * ROW_BYTES + d)])
          << "key " << key << " column " << d;
}

/// The compute warps' P stores: lane l of warp w of warpgroup wg holds, in the m64n32 accumulator
/// layout, the weights of rows 16 w + l / 4 (+ 8) and keys 32 wg + 8 n + 2 (l % 4) + e; byte n of
/// column word pWord(wg, l, e) must be where wgmma's A read (K-major, 64-byte swizzle) finds
/// column keyColumn(key); each store instruction at most 2-way conflicted.
TEST(Sm90Layout, probabilitiesLieInKeyColumnOrder)
{
  for (int wg = 0; wg < 2; ++wg)
    for (int warp = 0; warp < 4; ++warp)
      for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 2; ++e)
        {
          int per_bank[32] = {};
          for (int l = 0; l < 32; ++l)
          {
            int const row = 16 * warp + l / 4 + 8 * h;
            int const word = fp8mma::pWord(wg, l, e);
            ++per_bank[bank(fp8mma::wordOffset(row, word))];
            for (int n = 0; n < 4; ++n)
            {
              int const key = 32 * wg + 8 * n + 2 * (l % 4) + e;
              ASSERT_EQ(fp8mma::wordOffset(row, word) + n, hw64(row * 64 + fp8mma::keyColumn(key)))
                  << "row " << row << " key " << key;
            }
          }
          for (int b = 0; b < 32; ++b)
            EXPECT_LE(per_bank[b], 2) << "P store conflicts on bank " << b;
        }
}
} // namespace
} // namespace canopy::test
