/// \file canopy_KvQuant.hpp
/// \brief FP8 KV pools: writing one from bf16 values the way the serving stacks do, and reading a
/// row back as the values the products see (docs/design.md §8).
#pragma once

#include "canopy_BatchRef.hpp"
#include "canopy_Problem.hpp"

#include <cstdint>
#include <string>

namespace canopy
{
/// \brief Replaces the bf16 pool by its FP8 form, as the serving stacks write it: fp8-e4m3 and
/// fp8-e5m2 as SGLang does, byte = (x / kv_scale).to(fp8) (round to nearest even, no clamp);
/// fp8-e4m3-blockscaled as DeepSeek V3.2's quantiser does, each 128 latent values scaled by
/// 2^ceil(log2(amax / 448)) (1 for an all-zero block), the rope part kept in bf16. \p kv_scale
/// applies to the one-scale dtypes (finite and > 0, InputError otherwise).
void quantisePool(HostProblem &problem, KvDtype dtype, float kv_scale = 1.0f);

/// \brief The pool row of \p slot as fp64 values [576] (what every FP8 kernel's products see in
/// dequant numerics): bf16 bits, or the FP8 bytes times their scale.
void dequantiseRow(BatchRef const &ref, int64_t slot, double *row);

/// \brief What makes one stored FP8 row unreadable, "" when nothing does: a NaN encoding among
/// the FP8 bytes (e4m3fn 0x7f / 0xff; e5m2 exponent all ones, Inf or NaN), and in the block-scaled
/// layout a block scale that is not finite and > 0 or a bf16 rope value that is NaN or Inf. The
/// text names the first bad column (or scale) and byte offset. \p dtype is an FP8 dtype.
std::string fp8RowProblem(KvDtype dtype, uint8_t const *row);
} // namespace canopy
