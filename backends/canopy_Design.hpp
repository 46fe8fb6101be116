/// \file canopy_Design.hpp
/// \brief The one interface every verify-attention design implements: plan (host work, workspace
/// sizing) then run (enqueue only; capture-safe).
#pragma once

#include "canopy_BatchRef.hpp"
#include "canopy_Error.hpp"
#include "canopy_KvDtype.hpp"
#include "canopy_Types.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace canopy
{
/// Where a design wants its batch buffers and workspace.
enum class MemoryKind
{
  kHost,       ///< host memory (Kokkos host spaces, the reference)
  kKokkos,     ///< Kokkos::DefaultExecutionSpace::memory_space (host on Debian's Serial Kokkos)
  kCudaDevice  ///< cudaMalloc'd device memory, reached without Kokkos CUDA
};

/// How the workspace (split partials) is provided (docs/design.md §2).
enum class WorkspaceStrategy
{
  kPersistent,  ///< sized once for the largest bucket in plan()
  kPerCall,     ///< allocated inside run (stream-ordered on CUDA: a graph memory node under capture)
  kGrow         ///< grows during eager warm-up, fixed before capture
};
template <>
struct EnumNames<WorkspaceStrategy>
{
  static constexpr char const *kind = "workspace strategy";
  static constexpr std::array<std::pair<WorkspaceStrategy, char const *>, 3> table{
      {{WorkspaceStrategy::kPersistent, "persistent"}, {WorkspaceStrategy::kPerCall, "per-call"}, {WorkspaceStrategy::kGrow, "grow"}}};
};
inline WorkspaceStrategy parseWorkspaceStrategy(std::string const &name, std::string const &what = "workspace")
{
  return parseEnum<WorkspaceStrategy>(name, what);
}

/// \brief Upper bounds a design is planned for: one graph bucket. Grid sizes derive from these only.
struct PlanBounds
{
  int max_batch = 1;
  int max_tree = 1;          ///< max T_b
  int64_t max_prefix = 0;    ///< max P_b
  int64_t max_nodes = 1;     ///< max sum T
  int num_heads = 8;
  MaskLayout mask_layout = MaskLayout::kFull;
  KvDtype kv_dtype = KvDtype::kBf16;  ///< the pool's storage (docs/design.md §8)
};

/// \brief Knobs shared by designs; a design ignores what does not apply to it.
struct DesignOptions
{
  int nsplit = 16;           ///< prefix splits per request (split-K; a separate tree partial not counted, see
                             ///< docs/experiments.md); 0 = the design chooses from the plan bounds
  WorkspaceStrategy workspace = WorkspaceStrategy::kPersistent;
  bool strict = false;       ///< a fallback to another path is an error instead of a recorded fact
  Numerics numerics = Numerics::kDequant;  ///< the products' input types (docs/design.md §8)
};

/// \brief Where run() may enqueue: a CUDA stream (as void*, so core stays CUDA-free) for CUDA designs.
struct ExecContext
{
  void *cuda_stream = nullptr;
};

class Design
{
public:
  virtual ~Design() = default;
  virtual std::string name() const = 0;
  virtual MemoryKind memory() const = 0;
  /// \brief Host work: validates that the design serves these bounds (InputError otherwise),
  /// sizes and (for persistent) allocates the workspace. May allocate; never called under capture.
  virtual void plan(PlanBounds const &bounds, DesignOptions const &options) = 0;
  /// \brief Enqueues the attention for \p batch (within the planned bounds). No host sync, no
  /// allocation (except kPerCall on CUDA), no copy or conversion of the metadata buffers.
  virtual void run(BatchRef const &batch, ExecContext const &ctx) = 0;
  /// \brief The kernel path the last run took (e.g. "cuda-sm120/mma", "kokkos-team"); a fallback
  /// shows here, so result rows can say what actually ran.
  virtual std::string path() const { return name(); }
  /// \brief Prefix splits the planned run uses (split-K over the prefix; a design's separate tree
  /// partial is not counted); 0 for a design without split-K. docs/experiments.md, "nsplit".
  virtual int splits() const { return 0; }
  /// \brief The kernel paths run() can take, as path() spells them ("<...>" marks a variable part),
  /// for `canopy designs`.
  virtual std::string kernelPaths() const { return name(); }
  /// \brief Bytes of workspace currently held.
  virtual size_t workspaceBytes() const { return 0; }
  /// \brief Whether run() may be captured into a CUDA graph.
  virtual bool captureSafe() const { return false; }
  /// \brief "" when run() serves a \p kv_dtype pool computed in \p numerics, else why not
  /// (docs/design.md §8): what a design does not serve is reported unsupported, never run another way.
  virtual std::string whyNotServed(KvDtype kv_dtype, Numerics numerics) const
  {
    return kv_dtype == KvDtype::kBf16 && numerics == Numerics::kDequant ? "" : "reads bf16 KV pools only";
  }
};

/// \brief What every plan() does first: InputError when \p options' numerics is undefined for the
/// bounds' KV dtype, Unsupported (naming the design, dtype and numerics) when \p design does not serve them.
inline void requireServed(Design const &design, PlanBounds const &bounds, DesignOptions const &options)
{
  if (std::string const why = numericsUndefinedFor(bounds.kv_dtype, options.numerics); !why.empty())
    throw InputError(why);
  if (std::string const why = design.whyNotServed(bounds.kv_dtype, options.numerics); !why.empty())
    throw Unsupported(design.name() + ": kv dtype " + toString(bounds.kv_dtype) + " with numerics " +
                      toString(options.numerics) + ": " + why);
}

using DesignPtr = std::unique_ptr<Design>;
} // namespace canopy
