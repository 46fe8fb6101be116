/// \file canopy_Reference.hpp
/// \brief fp64 host reference of tree-verify attention (docs/design.md §1), and error statistics.
#pragma once

#include "canopy_BatchRef.hpp"
#include "canopy_Problem.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// \brief out[i][h][:] = softmax(sm_scale * q[i][h] . K_vis^T) . V_vis in fp64, from bf16 inputs.
/// Visibility follows the batch's own mask layout: custom_mask for full/tree, tree_parent for parents.
/// \param ref host pointers (ref.out is not touched)
/// \return fp64 [sum T][H][512]
std::vector<double> referenceAttention(BatchRef const &ref);
std::vector<double> referenceAttention(HostProblem const &problem);

/// \brief Deliberately wrong semantics of the reference, for tests that the checker rejects them.
enum class Mutation
{
  kNone,
  kSelfOnly,         ///< a node sees the prefix and itself, no ancestors
  kCausalTree,       ///< a node sees every tree node j <= i (a causal mask over the tree)
  kSiblingsVisible,  ///< a node also sees the other children of its parent
  kNoPrefix,         ///< the prefix is ignored
  kWrongScale,       ///< sm_scale * 2
};
template <>
struct EnumNames<Mutation>
{
  static constexpr char const *kind = "mutation";
  static constexpr std::array<std::pair<Mutation, char const *>, 6> table{
      {{Mutation::kNone, "correct"},
       {Mutation::kSelfOnly, "self-only"},
       {Mutation::kCausalTree, "causal-tree"},
       {Mutation::kSiblingsVisible, "siblings-visible"},
       {Mutation::kNoPrefix, "no-prefix"},
       {Mutation::kWrongScale, "wrong-scale"}}};
};
/// \brief referenceAttention with \p mutation applied (visibility from the batch's tree_parent,
/// which every layout's generated problem carries).
std::vector<double> mutatedReference(HostProblem const &problem, Mutation mutation);

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

/// \brief The error contract (docs/design.md §4, "Checks"), one rule for every design, subcommand
/// and results row: \p count == ref.size(), no NaN or Inf, rel-L2 <= REL_L2_TOLERANCE over the
/// output and <= ROW_REL_L2_TOLERANCE for every output row.
ErrorStats compareToReference(std::vector<double> const &ref, uint16_t const *out, size_t count);
} // namespace canopy
