#include "canopy_KvQuant.hpp"

#include "canopy_Bf16.hpp"
#include "canopy_Error.hpp"
#include "canopy_Fp8.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace canopy
{
namespace
{
/// V3.2's block scale: 2^ceil(log2(amax / 448)), computed on the float quotient as torch does; an
/// all-zero block (log2 of 0) gets 1 instead of the quantiser's 0, whose division would give NaN.
float blockScale(float amax)
{
  float const ratio = amax / FP8_E4M3_MAX;
  if (!(ratio > 0))
    return 1.0f;
  int e = 0;
  float const m = std::frexp(ratio, &e);  // ratio = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
}
} // namespace

void quantisePool(HostProblem &problem, KvDtype dtype, float kv_scale)
{
  if (problem.kv_dtype != KvDtype::kBf16)
    throw InputError("kv_pool: already " + toString(problem.kv_dtype) + ", quantise a bf16 pool");
  if (dtype == KvDtype::kBf16)
    return;
  if (!(std::isfinite(kv_scale) && kv_scale > 0))
    throw InputError("kv_scale: must be finite and > 0, got " + std::to_string(kv_scale));
  int const row_bytes = kvRowBytes(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(problem.num_slots) * row_bytes);
  for (int64_t slot = 0; slot < problem.num_slots; ++slot)
  {
    uint16_t const *x = problem.kv_pool.data() + slot * D_QK;
    uint8_t *row = bytes.data() + slot * row_bytes;
    if (dtype != KvDtype::kFp8E4m3BlockScaled)
    {
      Fp8Format const fmt = fp8FormatOf(dtype);
      for (int d = 0; d < D_QK; ++d)
        row[d] = floatToFp8(bf16ToFloat(x[d]) / kv_scale, fmt);
      continue;
    }
    for (int blk = 0; blk < KV_BLOCKS; ++blk)
    {
      float amax = 0;
      for (int d = blk * KV_BLOCK; d < (blk + 1) * KV_BLOCK; ++d)
        amax = std::max(amax, std::abs(bf16ToFloat(x[d])));
      float const scale = blockScale(amax);
      std::memcpy(row + KV_BLOCKSCALED_SCALES_AT + 4 * blk, &scale, 4);
      for (int d = blk * KV_BLOCK; d < (blk + 1) * KV_BLOCK; ++d)
        row[d] = floatToFp8(bf16ToFloat(x[d]) / scale, FP8_E4M3);
    }
    std::memcpy(row + KV_BLOCKSCALED_ROPE_AT, x + D_LATENT, 2 * D_ROPE);
  }
  problem.kv_pool_fp8 = std::move(bytes);
  problem.kv_pool.clear();
  problem.kv_dtype = dtype;
  problem.kv_scale = dtype == KvDtype::kFp8E4m3BlockScaled ? 1.0f : kv_scale;
}

void dequantiseRow(BatchRef const &r, int64_t slot, double *row)
{
  if (r.kv_dtype == KvDtype::kBf16)
  {
    for (int d = 0; d < D_QK; ++d)
      row[d] = bf16ToFloat(r.kv_pool[slot * D_QK + d]);
    return;
  }
  uint8_t const *bytes = r.kv_pool_fp8 + slot * kvRowBytes(r.kv_dtype);
  Fp8Format const fmt = fp8FormatOf(r.kv_dtype);
  if (r.kv_dtype != KvDtype::kFp8E4m3BlockScaled)
  {
    for (int d = 0; d < D_QK; ++d)
      row[d] = static_cast<double>(fp8ToFloat(bytes[d], fmt)) * r.kv_scale;
    return;
  }
  for (int blk = 0; blk < KV_BLOCKS; ++blk)
  {
    float scale;
    std::memcpy(&scale, bytes + KV_BLOCKSCALED_SCALES_AT + 4 * blk, 4);
    for (int d = blk * KV_BLOCK; d < (blk + 1) * KV_BLOCK; ++d)
      row[d] = static_cast<double>(fp8ToFloat(bytes[d], fmt)) * scale;
  }
  for (int d = 0; d < D_ROPE; ++d)
  {
    uint16_t bits;
    std::memcpy(&bits, bytes + KV_BLOCKSCALED_ROPE_AT + 2 * d, 2);
    row[D_LATENT + d] = bf16ToFloat(bits);
  }
}

std::string fp8RowProblem(KvDtype dtype, uint8_t const *row)
{
  auto hex = [](uint8_t byte) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "0x%02x", byte);
    return std::string(buf);
  };
  Fp8Format const fmt = fp8FormatOf(dtype);
  char const *const fmt_name = fmt.has_inf ? "e5m2" : "e4m3fn";
  int const fp8_bytes = dtype == KvDtype::kFp8E4m3BlockScaled ? D_LATENT : D_QK;
  for (int d = 0; d < fp8_bytes; ++d)
  {
    // e5m2's infinities are refused too: (x / k_scale).to(fp8) gives them only on overflow.
    uint8_t const abs = row[d] & 0x7fu;
    bool const bad = fmt.has_inf ? abs >= 0x7cu : abs == 0x7fu;
    if (bad)
      return "column " + std::to_string(d) + " (byte " + std::to_string(d) + ") is " + hex(row[d]) + ", " +
             (fp8IsNan(row[d], fmt) ? "a NaN encoding" : "infinity") + " in " + fmt_name;
  }
  if (dtype != KvDtype::kFp8E4m3BlockScaled)
    return "";
  for (int blk = 0; blk < KV_BLOCKS; ++blk)
  {
    float scale;
    std::memcpy(&scale, row + KV_BLOCKSCALED_SCALES_AT + 4 * blk, 4);
    if (!(std::isfinite(scale) && scale > 0))
      return "block scale " + std::to_string(blk) + " (bytes " + std::to_string(KV_BLOCKSCALED_SCALES_AT + 4 * blk) +
             ".." + std::to_string(KV_BLOCKSCALED_SCALES_AT + 4 * blk + 3) + ") is " + std::to_string(scale) +
             ", must be finite and > 0";
  }
  for (int d = 0; d < D_ROPE; ++d)
  {
    uint16_t bits;
    std::memcpy(&bits, row + KV_BLOCKSCALED_ROPE_AT + 2 * d, 2);
    if ((bits & 0x7f80u) == 0x7f80u)
      return "column " + std::to_string(D_LATENT + d) + " (rope value " + std::to_string(d) + ", bytes " +
             std::to_string(KV_BLOCKSCALED_ROPE_AT + 2 * d) + ".." + std::to_string(KV_BLOCKSCALED_ROPE_AT + 2 * d + 1) +
             ") is bf16 " + ((bits & 0x7fu) ? "NaN" : "Inf");
  }
  return "";
}
} // namespace canopy
