/// \file canopy_PeaksCommand.cpp
/// \brief `canopy peaks [--warps 4,8,12,16] [--quick] [--out peaks.json]`: the ceilings the roofline
/// uses, measured on this GPU with the probes `canopy run` measures its roofline with (cuBLAS bf16
/// GEMM, device copy, mma.sync, fp32 FMA) and the launch floor of a small step (empty grids shaped
/// as a split design's kernels, graph replay), the mma.sync rate per operand feed over warps per SM
/// (where an sm_120-instruction-set kernel's inner loop tops out), and on sm_90 the copy ceilings:
/// how fast every SM can fill shared memory with gathered KV tiles, per copy mechanism. Lab side: built only with
/// the GPU lab.
#include "canopy_Commands.hpp"
#include "canopy_Error.hpp"
#include "canopy_GpuLab.hpp"
#include "canopy_Results.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace canopy::cli
{
namespace
{
struct PeaksFlags
{
  std::vector<int> warps{4, 8, 12, 16};
  bool quick = false;
  std::string out;
  bool out_given = false;  ///< --out named, even as '' (refused)
};

struct Feed
{
  cuda::MmaFeed feed;
  char const *name;
  char const *label;
};
Feed const FEEDS[] = {{cuda::MmaFeed::kRegisters, "registers", "registers (8 chains per warp)"},
                      {cuda::MmaFeed::kLdmatrix, "ldmatrix", "ldmatrix.x4 per 2 mma (16 rows per warp)"},
                      {cuda::MmaFeed::kLdmatrixWide, "ldmatrix-wide", "ldmatrix.x4 per 4 mma (32 rows per warp)"}};

int runPeaks(PeaksFlags const &f)
{
  if (f.out_given)
    requireFolderOf(f.out, "--out");  // bad input wins over a missing GPU, and no measurement is lost at the end
  std::string why;
  if (!cuda::cudaAvailable(&why))
    throw GpuUnavailable("canopy peaks needs a GPU this host lacks (" + why + ")");
  cuda::DeviceInfo const dev = cuda::deviceInfo(cuda::currentDevice());
  cuda::Stream stream;
  // --quick (the smoke test): a small GEMM and copy and short mma runs; the numbers mean little.
  cuda::Peaks const p = f.quick ? cuda::measurePeaks(stream.get(), 1024, size_t(64) << 20, true)
                                : cuda::measurePeaks(stream.get());
  double const mma_seconds = f.quick ? 2e-4 : 5e-3;
  std::printf("device: %s -- %s\npeaks: %s\n\n", dev.summary().c_str(), dev.targetLabel().c_str(),
              p.describe().c_str());

  nlohmann::json j;
  j["device"] = dev.targetLabel();
  j["device_summary"] = dev.summary();
  j["quick"] = f.quick;
  j["peaks"] = {{"bf16_gemm_tflops", p.bf16_flops * 1e-12},
                {"gemm_n", p.gemm_n},
                {"copy_tbs", p.copy_bytes_per_s * 1e-12},
                {"copy_bytes", p.copy_bytes},
                {"mma_sync_tflops", p.mma_sync_flops * 1e-12},
                {"mma_sync_warps_per_sm", p.mma_sync_warps_per_sm},
                {"mma_ldmatrix_tflops", p.mma_ldmatrix_flops * 1e-12},
                {"mma_ldmatrix_wide_tflops", p.mma_ldmatrix_wide_flops * 1e-12},
                {"fp32_fma_tflops", p.fp32_fma_flops * 1e-12},
                {"launch_floor_us", {{"split", p.launch_floor.split_us},
                                     {"split_combine", p.launch_floor.split_combine_us},
                                     {"blocks", p.launch_floor.blocks},
                                     {"split_threads", cuda::LaunchFloor::SPLIT_THREADS},
                                     {"combine_threads", cuda::LaunchFloor::COMBINE_THREADS},
                                     {"smem_bytes", p.launch_floor.smem_bytes},
                                     {"samples", p.launch_floor.samples}}}};
  j["mma_sync_feeds"] = nlohmann::json::array();

  // One block per SM, so warps per SM is exact; each cell is the median of 5 timed launches.
  std::printf("| mma.sync feed |");
  for (int w : f.warps)
    std::printf(" %d warps/SM |", w);
  std::printf(" TFLOP/s, median of 5 |\n|---|");
  for (size_t i = 0; i < f.warps.size(); ++i)
    std::printf("---:|");
  std::printf("---|\n");
  for (Feed const &feed : FEEDS)
  {
    nlohmann::json row{{"feed", feed.name}, {"label", feed.label}, {"tflops_by_warps_per_sm", nlohmann::json::object()}};
    std::printf("| %s |", feed.label);
    for (int w : f.warps)
    {
      double const tflops = cuda::measureMmaSyncFlops(stream.get(), feed.feed, w, mma_seconds) * 1e-12;
      row["tflops_by_warps_per_sm"][std::to_string(w)] = tflops;
      std::printf(" %.1f |", tflops);
    }
    std::printf(" |\n");
    std::fflush(stdout);
    j["mma_sync_feeds"].push_back(row);
  }
  // Copy ceilings (sm_90 GPUs): shared-memory fill rates per mechanism, and the FLOP rate each
  // leaves a 64-row verify tile (121 FLOP per byte landed).
  j["copy_ceilings"] = nlohmann::json::array();
  if (!p.copy_ceilings.empty())
  {
    std::printf("\n| copy mechanism (L2-resident pool, %d CTAs) | in flight KB/CTA | TB/s into shared memory | TB/s from L2 | "
                "TFLOP/s at 64 rows |\n|---|---:|---:|---:|---:|\n",
                p.copy_ceilings.front().ctas);
    for (cuda::CopyCeiling const &c : p.copy_ceilings)
    {
      double const kb = c.probe.stages * c.probe.keys * 1152.0 / 1024;
      std::printf("| %s | %.0f | %.2f | %.2f | %.0f |\n", c.label().c_str(), kb, c.smem_bytes_per_s * 1e-12,
                  c.l2_bytes_per_s * 1e-12, c.tileFlops() * 1e-12);
      j["copy_ceilings"].push_back({{"label", c.label()},
                                    {"mechanism", static_cast<int>(c.probe.mechanism)},
                                    {"cluster", c.probe.cluster},
                                    {"stages", c.probe.stages},
                                    {"rows_per_stage", c.probe.keys},
                                    {"ctas", c.ctas},
                                    {"smem_tbs", c.smem_bytes_per_s * 1e-12},
                                    {"l2_tbs", c.l2_bytes_per_s * 1e-12},
                                    {"tile_tflops", c.tileFlops() * 1e-12}});
    }
  }
  if (!f.out.empty())
  {
    writeFileAtomically(f.out, j.dump(2) + "\n");
    std::printf("\nwrote %s\n", f.out.c_str());
  }
  return 0;
}
} // namespace

void addPeaksCommand(CLI::App &app, Action &action)
{
  auto flags = std::make_shared<PeaksFlags>();
  CLI::App *cmd = app.add_subcommand(
      "peaks", "Measure this GPU's ceilings (bf16 GEMM, copy, mma.sync, fp32 FMA, launch floor, shared-memory fill per copy mechanism on sm_90) and mma.sync per operand feed over warps per SM");
  cmd->add_option("--warps", flags->warps, "warps per SM for the mma.sync feed table (one block per SM)")
      ->delimiter(',')
      ->check(CLI::Range(1, 32));
  cmd->add_flag("--quick", flags->quick, "small, short probes (smoke test; the numbers mean little)");
  cmd->add_option("--out", flags->out, "also write the numbers as JSON to this file");
  cmd->callback([flags, cmd, &action] {
    flags->out_given = cmd->get_option("--out")->count() > 0;
    action = [flags] { return runPeaks(*flags); };
  });
}
} // namespace canopy::cli
