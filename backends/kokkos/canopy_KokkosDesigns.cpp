/// \file canopy_KokkosDesigns.cpp
/// \brief The portable designs `kokkos-team` and `kokkos-kk` on Kokkos' default execution space:
/// plan sizes the split workspace from the bounds, run wraps the batch's raw pointers in unmanaged
/// Views and enqueues split + combine.
#include "canopy_Registry.hpp"
#include "canopy_VerifyAttention_spec.hpp"

#include <Kokkos_Core.hpp>

#include <memory>
#include <string>

namespace canopy
{
namespace
{
using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;

/// nsplit 0 = auto, from the bounds and the space only: enough splits that every execution unit
/// has a team (the combine pass is small next to a prefix walk). On one host core splits only add
/// work (measured 5-20% at 16, docs/results/kokkos-host.md), so auto is 1 there.
inline int autoNsplit(PlanBounds const &bounds, int nsplit)
{
  if (nsplit != 0)
    return nsplit;  // planVerify rejects a negative one
  int const units = ExecSpace().concurrency();
  int const requests = std::max(1, bounds.max_batch);
  return std::max(1, std::min(64, (units + requests - 1) / requests));
}

template <class Flavor>
class KokkosDesign final : public Design
{
public:
  std::string name() const override { return Flavor::name(); }
  MemoryKind memory() const override { return MemoryKind::kKokkos; }

  void plan(PlanBounds const &bounds, DesignOptions const &options) override
  {
    if (options.strict && !verifyFlavorCompiled<ExecSpace, Flavor>())
      throw InputError(name() + ": not compiled for " + std::string(ExecSpace::name()) +
                       " in this build (strict mode forbids the fallback to " + TeamTiles::name() + ")");
    _plan = Impl::planVerify<ExecSpace>(bounds, autoNsplit(bounds, options.nsplit), options.strict);
    _bounds = bounds;
    _strategy = options.workspace;
    _ws = VerifyWorkspace<MemSpace>();
    // Persistent: sized once for the bucket. Grow starts empty and grows in run (eager warm-up);
    // per-call allocates inside run.
    if (_strategy == WorkspaceStrategy::kPersistent)
      _ws = makeVerifyWorkspace<MemSpace>(_plan, _plan.max_nodes);
    _planned = true;
    _path = name();
  }

  void run(BatchRef const &batch, ExecContext const &) override
  {
    if (!_planned)
      throw InputError(name() + ": run() before plan()");
    checkWithinPlan(batch);
    VerifyArgs<MemSpace> const args = wrapBatchRef<MemSpace>(batch, _bounds);
    ExecSpace const space;
    if (_strategy == WorkspaceStrategy::kPerCall)
    {
      VerifyWorkspace<MemSpace> const ws = makeVerifyWorkspace<MemSpace>(_plan, batch.num_nodes);
      record(verifyAttention<ExecSpace, Flavor>(space, args, ws, _plan));
      return;
    }
    if (_strategy == WorkspaceStrategy::kGrow && !_ws.fits(_plan.numPartials(), batch.num_nodes, _plan.num_heads))
      _ws = makeVerifyWorkspace<MemSpace>(_plan, std::max<int64_t>(batch.num_nodes, 2 * _ws.node_capacity));
    record(verifyAttention<ExecSpace, Flavor>(space, args, _ws, _plan));
  }

  std::string path() const override { return _path; }
  size_t workspaceBytes() const override { return _ws.bytes(); }

private:
  /// Host-side sizes only (no device reads): the grid was planned for these bounds.
  void checkWithinPlan(BatchRef const &batch) const
  {
    if (batch.batch_size > _plan.max_batch)
      throw InputError(name() + ": batch of " + std::to_string(batch.batch_size) + " rows exceeds the planned " +
                       std::to_string(_plan.max_batch));
    if (batch.num_heads != _plan.num_heads)
      throw InputError(name() + ": batch has " + std::to_string(batch.num_heads) + " heads, planned for " +
                       std::to_string(_plan.num_heads));
    if (batch.num_nodes > _plan.max_nodes)
      throw InputError(name() + ": batch has " + std::to_string(batch.num_nodes) + " tree nodes, planned for " +
                       std::to_string(_plan.max_nodes));
  }

  void record(VerifyPath const &p) { _path = p.path; }

  VerifyPlan _plan;
  PlanBounds _bounds;
  WorkspaceStrategy _strategy = WorkspaceStrategy::kPersistent;
  VerifyWorkspace<MemSpace> _ws;
  bool _planned = false;
  std::string _path;
};
} // namespace

void registerKokkosDesigns()
{
  registerDesign("kokkos-team",
                 "portable Kokkos TeamPolicy over (request, head group, KV split): heads x nodes in the tile rows, "
                 "Q and KV tiles in team scratch, fp32 online softmax, split partials + combine",
                 [] { return std::make_unique<KokkosDesign<TeamTiles>>(); });
#ifdef CANOPY_HAVE_KOKKOSKERNELS
  registerDesign("kokkos-kk", "as kokkos-team, with the tile products by Kokkos Kernels' batched TeamGemm",
                 [] { return std::make_unique<KokkosDesign<BatchedGemmTiles>>(); });
#endif
}
} // namespace canopy
