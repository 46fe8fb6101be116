/// \file benchVerifyCuda.cpp
/// \brief GPU measurement driver of the CUDA designs: designs x (B, T, P) at H heads, each timed as
/// CUDA graph replays with the L2 flushed before every sample (median, p10, p90), with TFLOP/s,
/// GB/s and the fraction of the roofline bound from peaks measured in the same run. Every output is
/// checked (no NaN, cross-design agreement). Its own main, not Google Benchmark's loop: the timing
/// needs one event pair per replay and a flush outside it. `--smoke` runs tiny shapes and exits 0
/// with a SKIP line where there is no GPU. Numbers from an H200 are an sm_90 proxy for sm_120.
#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_Runtime.hpp"

#include <cstdio>

#ifdef CANOPY_HAVE_CUDA_DESIGNS
#include "canopy_BatchStorage.hpp"
#include "canopy_Bf16.hpp"
#include "canopy_CostModel.hpp"
#include "canopy_CudaBatchStorage.hpp"
#include "canopy_CudaDesigns.hpp"
#include "canopy_CudaRuntime.hpp"
#include "canopy_GpuLab.hpp"
#include "canopy_Error.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Problem.hpp"
#include "canopy_Random.hpp"
#include "canopy_Reference.hpp"


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

struct Flags
{
  bool smoke = false;
  std::vector<int> batches{1, 8};
  std::vector<int> trees{17, 33, 65};
  std::vector<int64_t> prefixes{4096, 16384, 65536, 131072};
  int heads = 8;
  std::vector<std::string> designs{"cuda-sm120", "cuda-sm120-bf16p", "cuda-flat"};  // cuda-sm120-w32: by name
  std::vector<std::string> masks{"full"};
  std::vector<std::string> workspaces{"persistent"};
  int nsplit = 0;  // 0: suggestNsplit per shape
  int samples = 30;
  int warmup = 3;
  bool flush = true;
  bool peaks_only = false;  // the peaks, plus the mma.sync feeds over warps per SM, then exit
  std::string out;  // JSON lines, written atomically
};

template <class T>
std::vector<T> parseList(std::string const &s)
{
  std::vector<T> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty())
    {
      if constexpr (std::is_same_v<T, std::string>)
        v.push_back(item);
      else
        v.push_back(static_cast<T>(std::stoll(item)));
    }
  return v;
}

Flags parseFlags(int argc, char **argv)
{
  Flags f;
  for (int i = 1; i < argc; ++i)
  {
    std::string const a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        throw InputError("flag " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--smoke")
      f.smoke = true;
    else if (a == "--batches")
      f.batches = parseList<int>(value());
    else if (a == "--trees")
      f.trees = parseList<int>(value());
    else if (a == "--prefixes")
      f.prefixes = parseList<int64_t>(value());
    else if (a == "--heads")
      f.heads = std::stoi(value());
    else if (a == "--designs")
      f.designs = parseList<std::string>(value());
    else if (a == "--masks")
      f.masks = parseList<std::string>(value());
    else if (a == "--workspaces")
      f.workspaces = parseList<std::string>(value());
    else if (a == "--nsplit")
      f.nsplit = std::stoi(value());
    else if (a == "--samples")
      f.samples = std::stoi(value());
    else if (a == "--warmup")
      f.warmup = std::stoi(value());
    else if (a == "--no-flush")
      f.flush = false;
    else if (a == "--peaks-only")
      f.peaks_only = true;
    else if (a == "--out")
      f.out = value();
    else if (a.rfind("--benchmark_", 0) == 0)
      continue;  // accepted for the ctest smoke line shared with the Google Benchmark drivers
    else
      throw InputError("unknown flag '" + a + "'");
  }
  if (f.smoke)
  {
    f.batches = {1, 2};
    f.trees = {17};
    f.prefixes = {256};
    f.samples = 3;
    f.warmup = 1;
  }
  return f;
}

/// A verify batch of B requests with T-node DDTree-like trees and P prefix tokens each, slots drawn
/// from a pool 1.25x the rows needed, in shuffled runs of ~16 consecutive slots (fragmentation).
BatchMetadata benchMetadata(int B, int T, int64_t P, MaskLayout layout, uint64_t seed, int64_t &num_slots)
{
  int64_t const need = static_cast<int64_t>(B) * (P + T);
  num_slots = need + need / 4 + 1;
  SplitMix64 rng(seed);
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t s = 0; s < num_slots;)
  {
    int64_t const len = std::min<int64_t>(num_slots - s, 1 + static_cast<int64_t>(rng.exponential() * 15.0));
    runs.emplace_back(s, len);
    s += len;
  }
  for (size_t i = runs.size(); i > 1; --i)
    std::swap(runs[i - 1], runs[rng.below(i)]);
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(need));
  for (auto const &[start, len] : runs)
    for (int64_t k = 0; k < len && static_cast<int64_t>(slots.size()) < need; ++k)
      slots.push_back(start + k);
  std::vector<RequestSpec> reqs(B);
  size_t next = 0;
  for (int b = 0; b < B; ++b)
  {
    reqs[b].prefix_slots.assign(slots.begin() + next, slots.begin() + next + P);
    next += P;
    reqs[b].tree_slots.assign(slots.begin() + next, slots.begin() + next + T);
    next += T;
    reqs[b].parent = makeDraftTree(T, seed + 7919ull * (b + 1));
  }
  return buildMetadata(reqs, layout);
}

struct Row
{
  std::string design, path, mask, workspace;
  int B = 0, T = 0, H = 0, nsplit = 1;
  int64_t P = 0;
  Summary t;  // milliseconds
  double tflops = 0, gbs = 0, bound_us = 0, frac = 0, xcheck = 0;
  double mma_bound_us = 0, frac_mma = 0;  ///< the same bound with the mma.sync peak as the FLOP rate
  size_t ws_bytes = 0;
  int64_t bad = 0;
};

DesignPtr makeVariant(std::string const &name)
{
  if (name == "cuda-sm120")
    return cuda::makeSm120Design(false);
  if (name == "cuda-sm120-bf16p")
    return cuda::makeSm120Design(true);
  if (name == "cuda-sm120-w32")
    return cuda::makeSm120WideDesign(false);
  if (name == "cuda-flat")
    return cuda::makeFlatDesign();
  throw InputError("unknown design '" + name + "' (cuda-sm120, cuda-sm120-bf16p, cuda-sm120-w32, cuda-flat)");
}

double relDiff(std::vector<uint16_t> const &a, std::vector<uint16_t> const &b)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
  {
    double const x = bf16ToFloat(a[i]), y = bf16ToFloat(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

int64_t countBad(std::vector<uint16_t> const &v)
{
  return std::count_if(v.begin(), v.end(), [](uint16_t x) { return bf16IsNan(x) || (x & 0x7f80u) == 0x7f80u; });
}

std::string jsonRow(Row const &r, cuda::Peaks const &peaks, std::string const &device)
{
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "{\"design\":\"%s\",\"path\":\"%s\",\"B\":%d,\"T\":%d,\"P\":%lld,\"H\":%d,\"mask\":\"%s\","
                "\"workspace\":\"%s\",\"nsplit\":%d,\"median_us\":%.3f,\"p10_us\":%.3f,\"p90_us\":%.3f,"
                "\"samples\":%d,\"tflops\":%.2f,\"gbs\":%.1f,\"bound_us\":%.3f,\"frac_bound\":%.4f,"
                "\"mma_bound_us\":%.3f,\"frac_mma_bound\":%.4f,"
                "\"xcheck_rel_l2\":%.3e,\"bad\":%lld,\"workspace_bytes\":%zu,\"peak_tflops\":%.1f,"
                "\"peak_mma_tflops\":%.1f,\"peak_mma_ldmatrix_tflops\":%.1f,\"peak_mma_ldmatrix_wide_tflops\":%.1f,"
                "\"peak_copy_tbs\":%.3f,\"device\":\"%s\"}",
                r.design.c_str(), r.path.c_str(), r.B, r.T, static_cast<long long>(r.P), r.H, r.mask.c_str(),
                r.workspace.c_str(), r.nsplit, r.t.median * 1e3, r.t.p10 * 1e3, r.t.p90 * 1e3, static_cast<int>(r.t.n),
                r.tflops, r.gbs, r.bound_us, r.frac, r.mma_bound_us, r.frac_mma, r.xcheck,
                static_cast<long long>(r.bad), r.ws_bytes, peaks.bf16_flops * 1e-12, peaks.mma_sync_flops * 1e-12,
                peaks.mma_ldmatrix_flops * 1e-12, peaks.mma_ldmatrix_wide_flops * 1e-12,
                peaks.copy_bytes_per_s * 1e-12, device.c_str());
  return buf;
}

int runBench(Flags const &f)
{
  std::string why;
  if (!cuda::cudaAvailable(&why))
  {
    std::printf("SKIP: benchVerifyCuda needs a CUDA device (%s)\n", why.c_str());
    return 0;
  }
  cuda::DeviceInfo const dev = cuda::deviceInfo(0);
  cuda::Stream peak_stream;
  cuda::Peaks const peaks = f.smoke ? cuda::measurePeaks(peak_stream.get(), 1024, size_t(64) << 20, true)
                                    : cuda::measurePeaks(peak_stream.get());
  std::printf("device: %s -- %s\npeaks (same run): %s\n", dev.summary().c_str(), dev.targetLabel().c_str(),
              peaks.describe().c_str());
  if (f.peaks_only)
  {
    // Where the mma.sync rate goes with the B-operand feed and the warps per SM (one block per SM).
    std::printf("\n| mma.sync feed | 4 warps/SM | 8 | 12 | 16 | TFLOP/s, median of 5 |\n|---|---:|---:|---:|---:|---|\n");
    std::pair<cuda::MmaFeed, char const *> const feeds[] = {
        {cuda::MmaFeed::kRegisters, "registers (8 chains per warp)"},
        {cuda::MmaFeed::kLdmatrix, "ldmatrix.x4 per 2 mma (16 rows per warp)"},
        {cuda::MmaFeed::kLdmatrixWide, "ldmatrix.x4 per 4 mma (32 rows per warp)"}};
    for (auto const &[feed, label] : feeds)
    {
      std::printf("| %s |", label);
      for (int w : {4, 8, 12, 16})
        std::printf(" %.1f |", cuda::measureMmaSyncFlops(peak_stream.get(), feed, w) * 1e-12);
      std::printf(" |\n");
    }
    return 0;
  }
  std::printf("timing: CUDA graph replay, %s, %d samples after %d warm-up replays, median [p10, p90]\n\n",
              f.flush ? "L2 flushed (2 x L2 memset) before each sample" : "no L2 flush", f.samples, f.warmup);
  cuda::L2Flusher flusher;
  std::vector<Row> rows;
  bool all_ok = true;
  for (std::string const &mask_name : f.masks)
    for (int B : f.batches)
      for (int T : f.trees)
        for (int64_t P : f.prefixes)
        {
          MaskLayout const layout = parseMaskLayout(mask_name, "--masks");
          int64_t num_slots = 0;
          BatchMetadata const meta = benchMetadata(B, T, P, layout, 1000 + B * 131 + T * 7 + P, num_slots);
          ModelShape shape;
          shape.num_heads = f.heads;
          BatchCapacity cap{B, meta.numNodes(), static_cast<int64_t>(meta.kv_indices.size()),
                            static_cast<int64_t>(meta.custom_mask.size()), num_slots, f.heads};
          cuda::CudaBatchStorage storage(cap);
          storage.setMetadata(meta, shape);
          cuda::fillRandomValues(storage, 42 + static_cast<uint64_t>(P) + T);
          PlanBounds bounds;
          bounds.max_batch = B;
          bounds.max_tree = T;
          bounds.max_prefix = P;
          bounds.max_nodes = meta.numNodes();
          bounds.num_heads = f.heads;
          bounds.mask_layout = layout;
          Cost const cost = costOf(meta, f.heads);
          double const bound_s = rooflineSeconds(cost, peaks.bf16_flops, peaks.copy_bytes_per_s);
          double const mma_bound_s = rooflineSeconds(cost, peaks.mma_sync_flops, peaks.copy_bytes_per_s);
          std::vector<uint16_t> first_out;
          for (std::string const &dname : f.designs)
            for (std::string const &ws_name : f.workspaces)
            {
              DesignPtr design = makeVariant(dname);
              DesignOptions opt;
              opt.workspace = parseWorkspaceStrategy(ws_name, "--workspaces");
              opt.nsplit = f.nsplit > 0 ? f.nsplit
                                        : cuda::suggestNsplit(bounds, dev.sm_count, dname == "cuda-sm120-bf16p");
              design->plan(bounds, opt);
              storage.poisonOutput();
              design->run(storage.ref(), storage.context());  // eager warm-up (grow sizes here)
              std::vector<uint16_t> const out = storage.downloadOutput();
              Row r;
              r.design = dname;
              r.path = design->path();
              r.mask = mask_name;
              r.workspace = ws_name;
              r.B = B, r.T = T, r.P = P, r.H = f.heads;
              r.nsplit = dname == "cuda-flat" ? 1 : opt.nsplit;
              r.bad = countBad(out);
              if (first_out.empty())
                first_out = out;
              r.xcheck = relDiff(out, first_out);
              cuda::Graph graph =
                  cuda::Graph::capture(storage.stream(), [&] { design->run(storage.ref(), storage.context()); });
              r.t = cuda::timeGraph(graph, storage.stream(), f.samples, f.warmup, f.flush ? &flusher : nullptr);
              r.ws_bytes = design->workspaceBytes();
              double const sec = r.t.median * 1e-3;
              r.tflops = cost.flops / sec * 1e-12;
              r.gbs = cost.bytes_min / sec * 1e-9;
              r.bound_us = bound_s * 1e6;
              r.frac = bound_s / sec;
              r.mma_bound_us = mma_bound_s * 1e6;
              r.frac_mma = mma_bound_s / sec;
              if (r.bad != 0 || r.xcheck > REL_L2_TOLERANCE)
                all_ok = false;
              rows.push_back(r);
              std::printf("| %-16s | %-5s | %-10s | B=%d T=%2d P=%6lld ns=%2d | %9.1f us [%9.1f, %9.1f] | %6.1f TFLOP/s | "
                          "%6.0f GB/s | bound %8.1f us | %5.1f%% | mma.sync bound %5.1f%% | xchk %.1e | bad %lld |\n",
                          dname.c_str(), mask_name.c_str(), ws_name.c_str(), B, T, static_cast<long long>(P),
                          r.nsplit, r.t.median * 1e3, r.t.p10 * 1e3, r.t.p90 * 1e3, r.tflops, r.gbs,
                          r.bound_us, 100 * r.frac, 100 * r.frac_mma, r.xcheck, static_cast<long long>(r.bad));
              std::fflush(stdout);
            }
        }
  if (!f.out.empty())
  {
    std::string const tmp = f.out + ".tmp";
    {
      std::ofstream os(tmp);
      for (Row const &r : rows)
        os << jsonRow(r, peaks, dev.targetLabel()) << "\n";
      if (!os)
        throw RuntimeFailure("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), f.out.c_str()) != 0)
      throw RuntimeFailure("cannot rename " + tmp + " to " + f.out);
  }
  std::printf("\n%s\n", all_ok ? "all outputs finite and consistent across designs"
                                : "FAILED: NaN/unwritten outputs or designs disagree (see bad / xchk)");
  return all_ok ? 0 : 1;
}
} // namespace

#endif // CANOPY_HAVE_CUDA_DESIGNS

int main(int argc, char **argv)
{
  canopy::RuntimeGuard guard(argc, argv);
#ifndef CANOPY_HAVE_CUDA_DESIGNS
  std::printf("SKIP: benchVerifyCuda: this build has no CUDA designs (CANOPY_ENABLE_CUDA_KERNELS=OFF)\n");
  return 0;
#else
  try
  {
    return runBench(parseFlags(argc, argv));
  }
  catch (canopy::InputError const &e)
  {
    std::fprintf(stderr, "benchVerifyCuda: error: %s\n", e.what());
    return canopy::EXIT_BAD_INPUT;
  }
  catch (std::exception const &e)
  {
    std::fprintf(stderr, "benchVerifyCuda: failure: %s\n", e.what());
    return canopy::EXIT_RUNTIME_FAILURE;
  }
#endif
}
