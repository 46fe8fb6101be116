/// \file canopy_Reference.hpp
/// \brief fp64 host reference of tree-verify attention (docs/design.md §1), and error statistics.
#pragma once

#include "canopy_BatchRef.hpp"
#include "canopy_KvDtype.hpp"
#include "canopy_Problem.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// \brief out[i][h][:] = softmax(sm_scale * q[i][h] . K_vis^T) . V_vis in fp64, from bf16 inputs.
/// Visibility follows the batch's own mask layout: custom_mask for full/tree, tree_parent for parents.
/// K and V are the pool's values as stored (an FP8 pool dequantised exactly, dequantiseRow); with
/// \p numerics fp8-mma, Q and the softmax weights of P.V are cast to the pool's FP8 type first
/// (docs/design.md §8).
/// \param ref host pointers (ref.out is not touched)
/// \return fp64 [sum T][H][512]
std::vector<double> referenceAttention(BatchRef const &ref, Numerics numerics = Numerics::kDequant);
std::vector<double> referenceAttention(HostProblem const &problem, Numerics numerics = Numerics::kDequant);

/// \brief Deliberately wrong semantics of the reference, for tests that the checker rejects them.
enum class Mutation
{
  kNone,
  kSelfOnly,         ///< a node sees the prefix and itself, no ancestors
  kCausalTree,       ///< a node sees every tree node j <= i (a causal mask over the tree)
  kSiblingsVisible,  ///< a node also sees the other children of its parent
  kNoPrefix,         ///< the prefix is ignored
  kWrongScale,       ///< sm_scale * 2
  kKvScaleWrong,     ///< FP8 pool: its kv_scale doubled
  kKvScaleTwice,     ///< FP8 pool: kv_scale applied twice
  kE5m2AsE4m3,       ///< fp8-e5m2 bytes decoded as e4m3
  kRopeAsFp8,        ///< fp8-e4m3-blockscaled: the bf16 rope bytes decoded as e4m3
};
template <>
struct EnumNames<Mutation>
{
  static constexpr char const *kind = "mutation";
  static constexpr std::array<std::pair<Mutation, char const *>, 10> table{
      {{Mutation::kNone, "correct"},
       {Mutation::kSelfOnly, "self-only"},
       {Mutation::kCausalTree, "causal-tree"},
       {Mutation::kSiblingsVisible, "siblings-visible"},
       {Mutation::kNoPrefix, "no-prefix"},
       {Mutation::kWrongScale, "wrong-scale"},
       {Mutation::kKvScaleWrong, "kv-scale-wrong"},
       {Mutation::kKvScaleTwice, "kv-scale-twice"},
       {Mutation::kE5m2AsE4m3, "e5m2-as-e4m3"},
       {Mutation::kRopeAsFp8, "rope-as-fp8"}}};
};
/// \brief referenceAttention with \p mutation applied (visibility from the batch's tree_parent,
/// which every layout's generated problem carries). The FP8 mutations need a pool of their dtype
/// (InputError otherwise).
std::vector<double> mutatedReference(HostProblem const &problem, Mutation mutation,
                                     Numerics numerics = Numerics::kDequant);

/// \brief BatchRef over a HostProblem's host vectors (out = \p out, may be null).
BatchRef hostRef(HostProblem const &problem, uint16_t *out = nullptr);

/// \brief How far a bf16 output is from the fp64 reference: over the whole output, and per output
/// row (one (node, head) pair, 512 values), where a visibility bug that moves a few rows shows even
/// when the global figure is dominated by correct rows.
struct ErrorStats
{
  double max_abs = 0;     ///< max |out - ref| over finite outputs
  double rel_l2 = 0;      ///< ||out - ref|| / ||ref||
  double worst_row_rel_l2 = 0;  ///< max over rows of ||out_row - ref_row|| / ||ref_row||
  int64_t worst_row = -1;       ///< that row (node * H + head)
  double max_ulps = 0;    ///< max |out - ref| in bf16 ulps of its row's largest |ref| (2^(e-7))
  int64_t num_bad = 0;    ///< NaN/Inf or poison left in the output (unwritten)
  int64_t first_bad = -1; ///< flat index of the first such element
  bool pass = false;      ///< num_bad == 0 and both the global and the per-row error within tolerance
};

/// bf16 output tolerance: bf16 has 8 significant bits (relative rounding 2^-9 = 0.2%); inputs are
/// rounded too and the 512-long sums of P are done in fp32 by the designs. rel_l2 lands near 3e-3
/// for correct kernels; an indexing or masking bug gives O(1e-1) or more.
constexpr double REL_L2_TOLERANCE = 1e-2;
/// Per output row: the same bf16 arithmetic bound on 512 values instead of all of them (a correct
/// row's error is its rounding noise, about the global figure); a wrong visible set moves a row by
/// O(1) of its norm under tree-dominant values.
constexpr double ROW_REL_L2_TOLERANCE = 2e-2;

/// The two bounds of a check: rel-L2 over the output, and over each output row.
struct ErrorBounds
{
  double rel_l2;
  double row_rel_l2;
};
/// bf16 caches, and FP8 caches in dequant numerics: the products see exactly the reference's K/V.
constexpr ErrorBounds BF16_BOUNDS{REL_L2_TOLERANCE, ROW_REL_L2_TOLERANCE};
/// fp8-mma (docs/design.md §8, measured by tstFp8Contract): the reference applies the same Q cast
/// and casts P relative to the final row max; a kernel casts P relative to its running max, so a
/// weight rounds differently where the max moved, by up to 2^-4 (e4m3) or 2^-3 (e5m2) of itself.
/// Measured on an emulated 64-key tile kernel, worst over prefixes 16 to 3000 and both value modes:
/// e4m3 rel-L2 2.1e-2, worst row 3.6e-2; e5m2 4.3e-2 and 7.5e-2. The bounds leave about 2x; a wrong
/// scale or a misread byte moves outputs by 0.7 or more, a wrong visible set by O(1) of a row.
constexpr double FP8_MMA_E4M3_REL_L2_TOLERANCE = 4e-2;
constexpr double FP8_MMA_E4M3_ROW_REL_L2_TOLERANCE = 7e-2;
constexpr double FP8_MMA_E5M2_REL_L2_TOLERANCE = 8e-2;
constexpr double FP8_MMA_E5M2_ROW_REL_L2_TOLERANCE = 1.4e-1;

/// \brief The bounds of a check of a \p dtype cache computed in \p numerics.
ErrorBounds errorBounds(KvDtype dtype, Numerics numerics);

/// \brief The error contract (docs/design.md §4, "Checks"), one rule for every design, subcommand
/// and results row: \p count == ref.size(), no NaN or Inf, rel-L2 <= REL_L2_TOLERANCE over the
/// output and <= ROW_REL_L2_TOLERANCE for every output row.
ErrorStats compareToReference(std::vector<double> const &ref, uint16_t const *out, size_t count);
/// \brief The same rule with the bounds of a mode (errorBounds).
ErrorStats compareToReference(std::vector<double> const &ref, uint16_t const *out, size_t count,
                              ErrorBounds const &bound);
} // namespace canopy
