/// \file canopy_KokkosDesigns.cpp
/// \brief The portable designs `kokkos-team` and `kokkos-kk` on Kokkos' default execution space:
/// plan sizes the split workspace from the bounds, run wraps the batch's raw pointers in unmanaged
/// Views and enqueues split + combine on an instance of the space made from the run's context (on
/// Kokkos::Cuda: the caller's stream, so the replay engine captures them like the CUDA designs).
/// With a CUDA Kokkos and the CUDA designs in the build, `kokkos-team` reaches the cuda-sm120 tile
/// kernel through the Kokkos::Cuda specialisation; `kokkos-team-portable` forces the TeamPolicy
/// kernel on the same space, so both run side by side. On a device space the portable kernel takes
/// the sgemm tiles at 3 teams per SM (8 x 8 register blocks: 1.05-1.61x the streamed tiles on the
/// H200 at every portability shape, with up to 3.8x their workspace; kokkos4.md);
/// `kokkos-team-portable-streamed` runs it in the streamed tiles (the lean workspace) and
/// `kokkos-team-portable-sgemm` in the sgemm tiles at 4 teams per SM.
#include "canopy_Error.hpp"
#include "canopy_Registry.hpp"
#include "canopy_VerifyAttention_spec.hpp"
#ifdef CANOPY_HAVE_CUDA_DESIGNS
#include "canopy_CudaDesigns.hpp"
#include "canopy_CudaRuntime.hpp"
#include "canopy_VerifyAttention_cuda_spec.hpp"
#endif

#include <Kokkos_Core.hpp>

#include <memory>
#include <optional>
#include <string>
#include <type_traits>

namespace canopy
{
namespace
{
using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;

/// Whether the default space runs on CUDA device memory that the CUDA storage (cudaMalloc) and
/// the CUDA executor (streams, graphs) can serve.
#if defined(KOKKOS_ENABLE_CUDA) && defined(CANOPY_HAVE_CUDA_DESIGNS)
constexpr bool ON_CUDA = std::is_same<ExecSpace, Kokkos::Cuda>::value;
#else
constexpr bool ON_CUDA = false;
#endif
/// Whether the default space is a device (GPU tile shapes: sgemm at 3 teams per SM by default, the
/// others on request).
constexpr bool DEVICE_SPACE = Impl::IS_DEVICE_MEMORY<MemSpace>;

/// Which kernel a Kokkos design runs: the dispatch (a specialisation where one serves), the
/// portable kernel in the space's tiles, or the portable kernel in other device tiles.
enum class KokkosMode
{
  kAuto,
  kPortable,
  kPortableSgemm,    ///< devices: the sgemm tiles, 4 teams per SM (Impl::SgemmTiles)
  kPortableStreamed  ///< devices: the streamed tiles (Impl::StreamedTiles), the lean workspace
};

/// The execution-space instance a run enqueues on. On Kokkos::Cuda it is made once per stream of
/// the run's context (making one allocates, so never inside a captured run: the eager warm-up
/// before capture makes it); elsewhere the default instance.
class SpaceForContext
{
public:
  ExecSpace const &get(ExecContext const &ctx)
  {
#if defined(KOKKOS_ENABLE_CUDA)
    if constexpr (ON_CUDA)
    {
      if (ctx.cuda_stream && (!_space || _stream != ctx.cuda_stream))
      {
        _space.emplace(static_cast<cudaStream_t>(ctx.cuda_stream));
        _stream = ctx.cuda_stream;
      }
    }
#endif
    if (!_space)
      _space.emplace();
    return *_space;
  }

private:
  std::optional<ExecSpace> _space;
  void *_stream = nullptr;
};

template <class Flavor>
class KokkosDesign final : public Design
{
public:
  /// kPortable: the TeamPolicy kernel even where a specialisation serves (Algo::Portable);
  /// kPortableSgemm, kPortableStreamed: that kernel in other device tiles than the space's own.
  explicit KokkosDesign(KokkosMode mode = KokkosMode::kAuto)
      : _algo(mode == KokkosMode::kAuto ? Algo::Auto : Algo::Portable), _mode(mode)
  {
  }

  std::string name() const override
  {
    switch (_mode)
    {
    case KokkosMode::kPortableSgemm:
      return std::string(Flavor::name()) + "-portable-sgemm";
    case KokkosMode::kPortableStreamed:
      return std::string(Flavor::name()) + "-portable-streamed";
    case KokkosMode::kPortable:
      return std::string(Flavor::name()) + "-portable";
    default:
      return Flavor::name();
    }
  }
  /// On a CUDA Kokkos: device memory served by the CUDA storage, so that the replay engine runs
  /// these designs on its streams and graphs like the CUDA designs.
  MemoryKind memory() const override { return ON_CUDA ? MemoryKind::kCudaDevice : MemoryKind::kKokkos; }
  /// Per-call workspace allocates a View inside run (not stream-ordered): not capturable.
  bool captureSafe() const override { return ON_CUDA && _strategy != WorkspaceStrategy::kPerCall; }

  /// kokkos-team (every tile shape) dequantises FP8 pools in its KV tile load and multiplies in
  /// fp32, i.e. dequant numerics; kokkos-kk's batched GEMM tiles read bf16 pools only.
  std::string whyNotServed(KvDtype kv_dtype, Numerics numerics) const override
  {
    if (kv_dtype == KvDtype::kBf16 && numerics == Numerics::kDequant)
      return "";
    if (!std::is_same<Flavor, TeamTiles>::value)
      return "reads bf16 KV pools only";
    if (numerics != Numerics::kDequant)
      return "dequantises FP8 in its tile load and multiplies in fp32 (numerics dequant only); fp8-mma products "
             "are not implemented";
    return "";
  }

  void plan(PlanBounds const &bounds, DesignOptions const &options) override
  {
    requireServed(*this, bounds, options);
    // The Kokkos::Cuda specialisation (the hand-written tile kernel) reads bf16 pools only: an FP8
    // bucket runs the portable kernel, the path that serves it (not a fallback).
    _run_algo = bounds.kv_dtype == KvDtype::kBf16 ? _algo : Algo::Portable;
    if (options.strict && !verifyFlavorCompiled<ExecSpace, Flavor>())
      throw InputError(name() + ": not compiled for " + std::string(ExecSpace::name()) +
                       " in this build (strict mode forbids the fallback to " + TeamTiles::name() + ")");
    if (otherDeviceTiles())
      _plan = withOtherDeviceTiles(
          [&](auto tiles) { return planDeviceTiles<decltype(tiles)>(bounds, options.nsplit, options.strict); });
    else
      _plan = planVerifyFor<ExecSpace, Flavor>(bounds, nsplitFor(bounds, options.nsplit), options.strict, _run_algo);
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

  void run(BatchRef const &batch, ExecContext const &ctx) override
  {
    if (!_planned)
      throw InputError(name() + ": run() before plan()");
    checkWithinPlan(batch);
    VerifyArgs<MemSpace> const args = makeVerifyArgs<MemSpace>(batch, _bounds);
    ExecSpace const &space = _space.get(ctx);
    if (_strategy == WorkspaceStrategy::kPerCall)
    {
      VerifyWorkspace<MemSpace> const ws = makeVerifyWorkspace<MemSpace>(_plan, batch.num_nodes);
      record(enqueue(space, args, ws));
    }
    else
    {
      if (_strategy == WorkspaceStrategy::kGrow && !_ws.fits(_plan.numPartials(), batch.num_nodes, _plan.num_heads))
        _ws = makeVerifyWorkspace<MemSpace>(_plan, std::max<int64_t>(batch.num_nodes, 2 * _ws.node_capacity));
      record(enqueue(space, args, _ws));
    }
    checkLaunches();
  }

  std::string path() const override { return _path; }
  int splits() const override { return _planned ? _plan.nsplit : 0; }
  std::string kernelPaths() const override
  {
    if (otherDeviceTiles())
      return std::string(Flavor::name()) + " (" + ExecSpace::name() + " TeamPolicy, " + tilesName() + ")";
    std::string paths = std::string(Flavor::name()) + " (" + ExecSpace::name() + " TeamPolicy)";
    if (verify_spec_avail<ExecSpace, Flavor>::value && ON_CUDA && _algo == Algo::Auto)
      paths = std::string(Flavor::name()) + "[cuda-sm90] (Kokkos::Cuda specialisation, sm_90), " + Flavor::name() +
              "[cuda-sm120] (elsewhere), " + paths +
              " where the specialisation does not serve the shape";
    else if (!verifyFlavorCompiled<ExecSpace, Flavor>())
      paths = std::string(TeamTiles::name()) + " (fallback: " + Flavor::name() + " not compiled for " + ExecSpace::name() + ")";
    return paths;
  }
  size_t workspaceBytes() const override { return _ws.bytes(); }

private:
  /// Host-side sizes only (no device reads): the grid was planned for these bounds, and the path
  /// for the pool's kv dtype.
  void checkWithinPlan(BatchRef const &batch) const
  {
    if (batch.kv_dtype != _bounds.kv_dtype)
      throw InputError(name() + ": batch has a " + toString(batch.kv_dtype) + " KV pool, planned for " +
                       toString(_bounds.kv_dtype));
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

  /// A kernel that fails to launch on Kokkos::Cuda leaves no other trace: Kokkos 4.6 checks its
  /// launches only in builds with KOKKOS_ENABLE_DEBUG_BOUNDS_CHECK, and the outputs keep whatever
  /// they held. Seen with 12 compute-sanitizer processes filling an H200's memory: the Kokkos
  /// edge-case tests got finite, all-zero outputs (rel_l2 1.0; docs/results/kokkos4.md). So the
  /// run asks CUDA for its last error after enqueueing, and a failure is a RuntimeFailure.
  void checkLaunches() const
  {
#if defined(KOKKOS_ENABLE_CUDA)
    if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda>)
      if (cudaError_t const e = cudaGetLastError(); e != cudaSuccess)
        throw RuntimeFailure(name() + ": a CUDA error is pending after its kernels were enqueued on Kokkos::Cuda (" +
                             cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")");
#endif
  }

  bool otherDeviceTiles() const { return _mode == KokkosMode::kPortableSgemm || _mode == KokkosMode::kPortableStreamed; }

  std::string tilesName() const
  {
    return _mode == KokkosMode::kPortableSgemm ? "sgemm tiles, 4 teams per SM" : "streamed tiles";
  }

  /// Calls \p f with the tiles of an otherDeviceTiles() mode: the one dispatch that plan and
  /// enqueue share, so a design's plan and its launches always use the same tiles.
  template <class F>
  decltype(auto) withOtherDeviceTiles(F &&f) const
  {
    if (_mode == KokkosMode::kPortableSgemm)
      return f(Impl::SgemmTiles{});
    return f(Impl::StreamedTiles{});
  }

  /// The plan of device tiles other than the space's own (devices only: those designs are
  /// registered nowhere else).
  template <class Tiles>
  VerifyPlan planDeviceTiles(PlanBounds const &bounds, int nsplit, bool strict) const
  {
    if constexpr (DEVICE_SPACE)
    {
      int const n = nsplit != 0 ? nsplit : Impl::autoNsplitHere<ExecSpace, Tiles>(bounds);
      return Impl::planVerify<ExecSpace, Tiles>(bounds, n, strict);
    }
    else
      throw InputError(name() + ": " + tilesName() + " are a device shape; " + ExecSpace::name() + " is a host space");
  }

  VerifyPath enqueue(ExecSpace const &space, VerifyArgs<MemSpace> const &args, VerifyWorkspace<MemSpace> const &ws) const
  {
    if constexpr (DEVICE_SPACE)
    {
      if (otherDeviceTiles())
      {
        withOtherDeviceTiles([&](auto tiles) {
          Impl::verifyAttentionTeams<ExecSpace, Impl::TeamTileProducts, decltype(tiles)>(space, args, ws, _plan);
        });
        return {std::string(TeamTiles::name()) + " (" + tilesName() + ")", false};
      }
    }
    return verifyAttention<ExecSpace, Flavor>(space, args, ws, _plan, _run_algo);
  }

  /// Whether runs take the Kokkos::Cuda specialisation (the hand-written tile kernel of the device's
  /// architecture: cuda-sm90 on sm_90, cuda-sm120 elsewhere).
  bool specialised() const { return _run_algo == Algo::Auto && verify_spec_avail<ExecSpace, Flavor>::value && ON_CUDA; }

  /// nsplit 0 = auto: the specialised path splits as its tile kernel's design does (from the bounds and the SM
  /// count), and prepares its kernels here, outside any capture; the portable paths leave 0 to
  /// planVerifyFor (Impl::autoNsplit for their tiles).
  int nsplitFor(PlanBounds const &bounds, int nsplit) const
  {
#ifdef CANOPY_HAVE_CUDA_SPECIALISATION
    if (specialised())
    {
      cuda::SpecialisedTile const k = cuda::specialisedTile();
      cuda::check(k.prepare(), "cudaFuncSetAttribute (verify kernels)");
      if (nsplit == 0)
        return cuda::suggestNsplit(bounds, cuda::deviceInfo(cuda::currentDevice()).sm_count, false, k.tile);
    }
#endif
    return nsplit;
  }

  Algo _algo = Algo::Auto;
  Algo _run_algo = Algo::Auto;  ///< _algo, or Portable for an FP8 bucket (set in plan)
  KokkosMode _mode = KokkosMode::kAuto;
  SpaceForContext _space;

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
  if (verify_spec_avail<ExecSpace, TeamTiles>::value)
    registerDesign("kokkos-team-portable",
                   "kokkos-team forced to its portable TeamPolicy kernel where a specialisation would serve the space "
                   "(the parity and portability-tax baseline)",
                   [] { return std::make_unique<KokkosDesign<TeamTiles>>(KokkosMode::kPortable); });
  if constexpr (DEVICE_SPACE)
    registerDesign("kokkos-team-portable-sgemm",
                   "the portable TeamPolicy kernel in the sgemm tiles at 4 teams per SM (128 registers, spills) "
                   "instead of 3; experimental: 0.84-0.98x the default's speed on the H200 (kokkos4.md)",
                   [] { return std::make_unique<KokkosDesign<TeamTiles>>(KokkosMode::kPortableSgemm); },
                   /*experimental=*/true);
  if constexpr (DEVICE_SPACE)
    registerDesign("kokkos-team-portable-streamed",
                   "the portable TeamPolicy kernel in the streamed tiles (32 rows, 2 x 4 score blocks, 256-thread "
                   "teams) instead of the sgemm tiles: 0.62-0.95x their speed on the H200, with 0.26-1.0x their "
                   "workspace",
                   [] { return std::make_unique<KokkosDesign<TeamTiles>>(KokkosMode::kPortableStreamed); },
                   /*experimental=*/true);
#ifdef CANOPY_HAVE_KOKKOSKERNELS
  registerDesign("kokkos-kk", "as kokkos-team, with the tile products by Kokkos Kernels' batched TeamGemm",
                 [] { return std::make_unique<KokkosDesign<BatchedGemmTiles>>(); });
  registerDesign("kokkos-kk-unblocked",
                 "kokkos-kk with TeamGemm's unblocked algorithm (experimental: the Kokkos Kernels variant study)",
                 [] { return std::make_unique<KokkosDesign<BatchedGemmTilesOf<KkGemm::kTeamUnblocked>>>(); },
                 /*experimental=*/true);
  registerDesign("kokkos-kk-teamvector",
                 "kokkos-kk with TeamVectorGemm (team threads x vector lanes; experimental: the Kokkos Kernels "
                 "variant study)",
                 [] { return std::make_unique<KokkosDesign<BatchedGemmTilesOf<KkGemm::kTeamVector>>>(); },
                 /*experimental=*/true);
#endif
}
} // namespace canopy
