/// \file canopy_CudaDesigns.cpp
/// \brief cuda-sm120, cuda-sm120-w32, cuda-sm90 and cuda-flat: plan checks the shape and sizes the workspace per strategy,
/// run only enqueues (capture-safe in global mode). There is no fallback path: a shape the kernels
/// cannot serve is an InputError in plan, so `strict` changes nothing here.
#include "canopy_CudaDesigns.hpp"

#include "canopy_CudaParams.hpp"
#include "canopy_CudaRuntime.hpp"
#include "canopy_Registry.hpp"
#include "canopy_VerifyAttentionCuda.hpp"

#include <algorithm>
#include <string>

namespace canopy
{
namespace cuda
{
namespace
{
/// What tells the CUDA designs apart: the kernel they launch and its facts.
struct CudaKernel
{
  char const *name;      ///< registry name
  char const *launcher;  ///< named in launch errors
  cudaError_t (*launch)(VerifyParams const &, cudaStream_t);
  size_t (*sharedBytes)();
  cudaError_t (*prepare)();  ///< raises the kernel's shared-memory limit (plan, outside capture)
  bool splits;       ///< split-K with partials (NSPLIT); cuda-flat walks the whole prefix in one block
  SplitTile tile;    ///< what suggestNsplit counts in (split designs)
  int arch = 0;      ///< the one compute capability (major * 10 + minor) its cubin serves; 0 = any
  char const *mma = "mma";  ///< the MMA instruction family, first word of the path ("mma", "wgmma")
  /// CTAs that share each gathered KV tile: 0 none, 2 pairs where the bucket has two row tiles
  /// (path "-c2", else "-c1").
  int cluster = 0;
  /// Reads FP8 pools (fp8-e4m3, fp8-e5m2, fp8-e4m3-blockscaled) in dequant numerics: the producer
  /// converts them to the bf16 tile its wgmma reads.
  bool fp8_dequant = false;
  /// The kernel of fp8-mma numerics (FP8 products on one-scale FP8 pools); null: not served.
  cudaError_t (*launch_fp8_mma)(VerifyParams const &, cudaStream_t) = nullptr;
};
CudaKernel const SM120{"cuda-sm120", "launchVerifySm120", launchVerifySm120, sm120SharedBytes, prepareVerifyKernels,
                       true, SM120_SPLIT_TILE};
CudaKernel const SM120_WIDE{"cuda-sm120-w32", "launchVerifySm120Wide", launchVerifySm120Wide, sm120WideSharedBytes,
                            prepareVerifyKernels, true, SM120_SPLIT_TILE};
CudaKernel const SM90{"cuda-sm90", "launchVerifySm90", launchVerifySm90, sm90SharedBytes, prepareSm90Kernel, true,
                      SM90_SPLIT_TILE, 90, "wgmma", 0, true, launchVerifySm90Fp8Mma};
CudaKernel const SM90_SYNC{"cuda-sm90-sync", "launchVerifySm90Sync", launchVerifySm90Sync, sm90SharedBytes,
                           prepareSm90Kernel, true, SM90_SPLIT_TILE, 90, "wgmma"};
CudaKernel const SM90_C2{"cuda-sm90-c2", "launchVerifySm90Pairs",
                         [](VerifyParams const &p, cudaStream_t s) {
                           return launchVerifySm90Pairs(p, s, sm90ClusterFor(p.max_tree, p.batch.num_heads));
                         },
                         sm90SharedBytes, prepareSm90Kernel, true, SM90_SPLIT_TILE, 90, "wgmma", 2};
CudaKernel const FLAT{"cuda-flat", "launchVerifyFlat", launchVerifyFlat, flatSharedBytes, prepareVerifyKernels, false,
                      SM120_SPLIT_TILE};

class CudaVerifyDesign final : public Design
{
public:
  CudaVerifyDesign(CudaKernel const &kernel, bool partial_bf16)
      : _kernel(kernel), _bf16(kernel.splits && partial_bf16)
  {
  }

  /// The registry's name: a kernel with bf16 split partials is its own design (cuda-sm120-bf16p).
  std::string name() const override { return _bf16 ? std::string(_kernel.name) + "-bf16p" : _kernel.name; }
  MemoryKind memory() const override { return MemoryKind::kCudaDevice; }
  std::string whyNotServed(KvDtype kv_dtype, Numerics numerics) const override
  {
    if (kv_dtype == KvDtype::kBf16 && numerics == Numerics::kDequant)
      return "";
    if (!_kernel.fp8_dequant)
      return "reads bf16 KV pools only";
    if (numerics == Numerics::kFp8Mma && !_kernel.launch_fp8_mma)
      return "computes FP8 pools in dequant numerics only";
    return "";
  }
  bool captureSafe() const override { return true; }
  std::string path() const override { return _path.empty() ? name() : _path; }
  int splits() const override { return _planned && _kernel.splits ? _nsplit : 0; }
  std::string kernelPaths() const override
  {
    if (!_kernel.splits)
      return name() + "/mma-flat/<layout>";
    std::string const mma =
        std::string(_kernel.mma) + (_kernel.cluster == 2 ? "-c<C>" : "") + (_kernel.fp8_dequant ? "[-<fp8 kv dtype>]" : "") +
        (_kernel.launch_fp8_mma ? "[-fp8-mma]" : "");
    return name() + "/" + mma + "-split<N>-" + (_bf16 ? "bf16" : "f32") + "/<layout> (split-K + combine), " + name() +
           "/" + mma + "-direct/<layout> (NSPLIT 1)";
  }

  size_t workspaceBytes() const override
  {
    return _options.workspace == WorkspaceStrategy::kPerCall ? boundsWorkspaceBytes() : _ws.bytes();
  }

  void plan(PlanBounds const &bounds, DesignOptions const &options) override
  {
    requireServed(*this, bounds, options);
    std::string const who = name() + ": ";
    std::string why;
    if (!cudaAvailable(&why))
      throw InputError(who + "no usable CUDA device (" + why + ")");
    if (bounds.num_heads < 1 || bounds.max_batch < 0 || bounds.max_tree < 0 || bounds.max_nodes < 0 ||
        bounds.max_prefix < 0)
      throw InputError(who + "plan bounds must be non-negative with at least one head");
    if (bounds.max_tree > MAX_TREE)
      throw Unsupported(who + "max tree size " + std::to_string(bounds.max_tree) + " exceeds the " +
                       std::to_string(MAX_TREE) + " nodes the kernels serve (cuda::MAX_TREE)");
    if (bounds.max_batch > 65535)
      throw Unsupported(who + "max batch " + std::to_string(bounds.max_batch) + " exceeds 65535 (grid y)");
    if (bounds.max_prefix + bounds.max_tree > (int64_t{1} << 30))
      throw Unsupported(who + "prefix + tree length " + std::to_string(bounds.max_prefix + bounds.max_tree) +
                       " exceeds 2^30 (32-bit request-local positions)");
    if (_kernel.splits && (options.nsplit < 0 || options.nsplit > MAX_NSPLIT))
      throw Unsupported(who + "nsplit " + std::to_string(options.nsplit) + " outside [1, " +
                       std::to_string(MAX_NSPLIT) + "] (0 = auto)");
    DeviceInfo const dev = deviceInfo(currentDevice());
    if (_kernel.arch != 0 && dev.cc_major * 10 + dev.cc_minor != _kernel.arch)
      throw Unsupported(who + "its cubin is built for sm_" + std::to_string(_kernel.arch) + "a only (wgmma); " +
                        dev.name + " is sm_" + std::to_string(dev.cc_major) + std::to_string(dev.cc_minor));
    size_t const smem = _kernel.sharedBytes();
    if (dev.smem_per_block_optin < smem)
      throw Unsupported(who + "needs " + std::to_string(smem) + " bytes of shared memory per block, " + dev.name +
                       " offers " + std::to_string(dev.smem_per_block_optin));
    check(_kernel.prepare(), "cudaFuncSetAttribute (verify kernels)");
    _bounds = bounds;
    _options = options;
    // nsplit 0 = auto: chosen from the plan bounds and the SM count only, so it is capture-safe.
    _nsplit = !_kernel.splits ? 1 : options.nsplit > 0 ? options.nsplit : suggestNsplit(bounds, dev.sm_count, _bf16, _kernel.tile);
    _planned = true;
    // An FP8 pool names its dtype (its kernel converts the rows on the way into shared memory, or
    // with fp8-mma multiplies them as they are).
    std::string const mma = _kernel.mma + clusterTag(bounds) +
                            (bounds.kv_dtype == KvDtype::kBf16 ? "" : "-" + toString(bounds.kv_dtype)) +
                            (options.numerics == Numerics::kFp8Mma ? "-fp8-mma" : "");
    _path = name() + "/" +
            (!_kernel.splits ? mma + "-flat"
             : _nsplit == 1  ? mma + "-direct"
                             : mma + "-split" + std::to_string(_nsplit) + (_bf16 ? "-bf16" : "-f32")) +
            "/" + toString(bounds.mask_layout);
    switch (options.workspace)
    {
    case WorkspaceStrategy::kPersistent: _ws.resize(boundsWorkspaceBytes()); break;
    case WorkspaceStrategy::kPerCall: _ws.resize(0); break;
    case WorkspaceStrategy::kGrow: break;  // keeps what earlier eager runs grew to
    }
  }

  void run(BatchRef const &batch, ExecContext const &ctx) override
  {
    std::string const who = name() + ": ";
    if (!_planned)
      throw InputError(who + "run before plan");
    if (batch.batch_size > _bounds.max_batch || batch.num_nodes > _bounds.max_nodes ||
        batch.num_heads != _bounds.num_heads)
      throw InputError(who + "batch (B=" + std::to_string(batch.batch_size) + ", sum T=" +
                       std::to_string(batch.num_nodes) + ", H=" + std::to_string(batch.num_heads) +
                       ") outside the plan bounds (B<=" + std::to_string(_bounds.max_batch) + ", sum T<=" +
                       std::to_string(_bounds.max_nodes) + ", H=" + std::to_string(_bounds.num_heads) + ")");
    if (batch.kv_dtype != _bounds.kv_dtype)
      throw InputError(who + "batch kv dtype '" + toString(batch.kv_dtype) + "' differs from the planned '" +
                       toString(_bounds.kv_dtype) + "'");
    if (batch.mask_layout != _bounds.mask_layout)
      throw InputError(who + "batch mask layout '" + toString(batch.mask_layout) + "' differs from the planned '" +
                       toString(_bounds.mask_layout) + "'");
    cudaStream_t const stream = static_cast<cudaStream_t>(ctx.cuda_stream);
    VerifyParams p = makeVerifyParams(batch, _bounds, _nsplit);
    int64_t const bound_rows = _bounds.max_nodes * _bounds.num_heads;
    void *per_call = nullptr;
    if (_nsplit > 1)
    {
      switch (_options.workspace)
      {
      case WorkspaceStrategy::kPersistent: bindWorkspace(p, _ws.data(), bound_rows, _bf16); break;
      case WorkspaceStrategy::kGrow:
      {
        int64_t const rows = batch.num_nodes * batch.num_heads;
        size_t const need = verifyWorkspaceBytes(rows, _nsplit, _bf16);
        if (_ws.bytes() < need)
        {
          if (isCapturing(stream))
            throw RuntimeFailure(who + "grow workspace holds " + std::to_string(_ws.bytes()) + " bytes, this batch needs " +
                                 std::to_string(need) + ": warm up eagerly with the bucket's largest batch before capture");
          _ws.resize(need);  // cudaFree/cudaMalloc synchronise: eager runs only
        }
        bindWorkspace(p, _ws.data(), workspaceRows(_ws.bytes()), _bf16);
        break;
      }
      case WorkspaceStrategy::kPerCall:
        // Stream-ordered: under capture this becomes a graph memory-alloc node (and a free node below).
        check(cudaMallocAsync(&per_call, boundsWorkspaceBytes(), stream), "cudaMallocAsync (per-call workspace)");
        bindWorkspace(p, per_call, bound_rows, _bf16);
        break;
      }
    }
    if (char const *problem = verifyParamsProblem(p))
      throw InputError(who + problem);
    cudaError_t const e = (_options.numerics == Numerics::kFp8Mma ? _kernel.launch_fp8_mma : _kernel.launch)(p, stream);
    if (per_call)
      check(cudaFreeAsync(per_call, stream), "cudaFreeAsync (per-call workspace)");
    check(e, _kernel.launcher);
  }

private:
  /// The cluster in the path: "-c2" / "-c1" for the cluster size the bucket gets.
  std::string clusterTag(PlanBounds const &bounds) const
  {
    return _kernel.cluster == 2 ? "-c" + std::to_string(sm90ClusterFor(bounds.max_tree, bounds.num_heads)) : "";
  }
  size_t boundsWorkspaceBytes() const
  {
    return _nsplit > 1 ? verifyWorkspaceBytes(_bounds.max_nodes * _bounds.num_heads, _nsplit, _bf16) : 0;
  }
  /// Rows a workspace of \p bytes holds (inverse of verifyWorkspaceBytes, rounding down). O rows
  /// are multiples of 1 KB, so the lse array needs no alignment padding and the 256-byte slack of
  /// verifyWorkspaceBytes is never a row (subtracting it lost the last row: seen on the H200).
  int64_t workspaceRows(size_t bytes) const
  {
    size_t const per_row = static_cast<size_t>(_nsplit) * (partialRowBytes(_bf16) + sizeof(float));
    return static_cast<int64_t>(bytes / per_row);
  }

  CudaKernel const &_kernel;
  bool _bf16;
  bool _planned = false;
  int _nsplit = 1;
  PlanBounds _bounds;
  DesignOptions _options;
  DeviceBuffer<uint8_t> _ws;
  std::string _path;
};
} // namespace

int suggestNsplit(PlanBounds const &b, int sm_count, bool partial_bf16, SplitTile const &tile)
{
  // Units: one KV tile of one CTA (tile.seconds). A CTA also pays ~2 tiles to start (Q load, first
  // KV tile in flight). Each split adds its partials to the combine pass: rows x 2 KB (fp32)
  // written and read at ~3 TB/s.
  constexpr double START_TILES = 2.0, PARTIAL_BW = 3e12;
  double const TILE_S = tile.seconds;
  int const M_TILE = tile.rows, N_TILE = tile.keys;
  int64_t const m_tiles = (static_cast<int64_t>(b.max_tree) * b.num_heads + M_TILE - 1) / M_TILE;
  int64_t const ctas_per_split = std::max<int64_t>(1, static_cast<int64_t>(b.max_batch) * m_tiles);
  int64_t const len = std::max<int64_t>(1, b.max_prefix + b.max_tree);
  double const rows = static_cast<double>(b.max_batch) * b.max_tree * b.num_heads;
  double const split_cost = rows * static_cast<double>(partialRowBytes(partial_bf16)) * 2 / PARTIAL_BW / TILE_S;
  int best = 1;
  double best_cost = 1e300;
  int const max_ns = static_cast<int>(std::min<int64_t>(64, (len + N_TILE - 1) / N_TILE));
  for (int ns = 1; ns <= std::max(1, max_ns); ++ns)
  {
    int64_t const waves = (ctas_per_split * ns + std::max(1, sm_count) - 1) / std::max(1, sm_count);
    int64_t const tiles = ((len + ns - 1) / ns + N_TILE - 1) / N_TILE;
    double const cost = static_cast<double>(waves) * (static_cast<double>(tiles) + START_TILES) +
                        (ns > 1 ? 1.0 + ns * split_cost : 0.0);
    if (cost < best_cost - 1e-9)
      best = ns, best_cost = cost;
  }
  return best;
}

SpecialisedTile specialisedTile()
{
  int device = 0, major = 0, minor = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  CudaKernel const &k = major * 10 + minor == SM90.arch ? SM90 : SM120;
  return {k.name, k.launch, k.prepare, k.tile};
}

DesignPtr makeSm120Design(bool partial_bf16)
{
  return std::make_unique<CudaVerifyDesign>(SM120, partial_bf16);
}
DesignPtr makeSm120WideDesign(bool partial_bf16)
{
  return std::make_unique<CudaVerifyDesign>(SM120_WIDE, partial_bf16);
}
DesignPtr makeSm90Design(bool partial_bf16)
{
  return std::make_unique<CudaVerifyDesign>(SM90, partial_bf16);
}
DesignPtr makeSm90SyncDesign(bool partial_bf16)
{
  return std::make_unique<CudaVerifyDesign>(SM90_SYNC, partial_bf16);
}
DesignPtr makeSm90PairDesign()
{
  return std::make_unique<CudaVerifyDesign>(SM90_C2, false);
}
DesignPtr makeFlatDesign() { return std::make_unique<CudaVerifyDesign>(FLAT, false); }
} // namespace cuda

void registerCudaDesigns()
{
  registerDesign("cuda-sm120",
                 "hand-written CUDA split-K flash-decode: heads x nodes folded into 64-row mma.sync tiles, "
                 "cp.async 2-stage, <= 99 KB smem (sm_120 limits; H200 numbers are an sm_90 proxy)",
                 [] { return cuda::makeSm120Design(false); });
  registerDesign("cuda-sm120-bf16p",
                 "cuda-sm120 with bf16 split partials (experimental: half the workspace; 0.5-16% slower at B=1 on the "
                 "H200, docs/results/cuda-h200.md; kept to measure again where memory is scarcer)",
                 [] { return cuda::makeSm120Design(/*partial_bf16=*/true); }, /*experimental=*/true);
  registerDesign("cuda-sm120-w32",
                 "cuda-sm120 with 32 rows per warp: one ldmatrix.x4 feeds 4 mma instead of 2, paid for with a "
                 "4-warp score exchange and a softmax step per 16 keys (experimental: 5-9% slower than cuda-sm120 "
                 "on the H200, docs/results/cuda-h200.md; kept to compare on other GPUs)",
                 [] { return cuda::makeSm120WideDesign(false); }, /*experimental=*/true);
  registerDesign("cuda-sm90",
                 "hand-written CUDA split-K verify for Hopper (sm_90a): heads x nodes folded into 64-row wgmma tiles "
                 "with Q, K/V and P in swizzled shared memory, two warpgroups splitting the keys of the scores and "
                 "the columns of the output, a producer warpgroup issuing the cp.async 2-stage copies (mbarrier "
                 "hand-off); unsupported on other GPUs",
                 [] { return cuda::makeSm90Design(false); });
  registerDesign("cuda-sm90-sync",
                 "cuda-sm90 without the producer warpgroup: the two compute warpgroups issue the copies between "
                 "their score wgmma, one CTA barrier per tile (experimental: 1.12-1.31x slower on the H200, "
                 "docs/results/cuda-sm90.md; kept for the ablation)",
                 [] { return cuda::makeSm90SyncDesign(false); }, /*experimental=*/true);
  registerDesign("cuda-sm90-c2",
                 "cuda-sm90 in clusters of two CTAs over consecutive row tiles of a split: each gathers half of "
                 "every KV tile with cp.async and forwards it to the other through distributed shared memory, so a "
                 "KV tile leaves L2 once per pair (experimental: 0.49-0.87x cuda-sm90 on an H100, docs/results/cuda-sm90.md, "
                 "\"Cluster sharing\"; kept as the starting point of pair schemes that share more than the copy)",
                 [] { return cuda::makeSm90PairDesign(); }, /*experimental=*/true);
  registerDesign("cuda-flat",
                 "CUDA baseline with SGLang's Triton extend-kernel structure: block per (request, head, "
                 "32-node tile), whole prefix serially, K and V loaded separately",
                 [] { return cuda::makeFlatDesign(); });
}
} // namespace canopy
