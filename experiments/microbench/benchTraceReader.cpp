/// \file benchTraceReader.cpp
/// \brief Trace reading throughput in request rows per second (metadata only, no /values): opening a
/// file (HDF5 read + decompression + full validation, isolated or in-process), validation alone, and
/// the per-step accessors a replay loop calls. The trace is simulated in setup (never timed) with the
/// simulator's defaults (B = 8, P ~ lognormal median 1024, T = 33). Rates are per wall-clock second
/// (the isolated open spends most of its time in the child process). `--smoke`: a tiny trace (ctest).
/// Measured (shared 2-core machine; 2000 steps, 16000 rows, 32.6M prefix tokens, 2.5 MB file): open
/// 1.64-1.70 s isolated, 1.00-1.25 s in-process (10-16k rows/s: zlib and the page faults of 270 MB of
/// columns); stepView 470-690M rows/s; stepMetadata(parents) into a reused BatchMetadata 0.88-0.93M
/// rows/s, bound by copying P = 2037 slots per row (memory bandwidth).
#include "canopy_Config.hpp"
#include "canopy_TraceReader.hpp"
#include "canopy_TraceSimulator.hpp"
#include "canopy_TraceWriter.hpp"

#include "canopy_Runtime.hpp"
#include "canopy_BenchArgs.hpp"

#include <benchmark/benchmark.h>

#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace
{
using namespace canopy;

struct Fixture
{
  std::string path;
  int64_t rows = 0, prefix_tokens = 0, nodes = 0;
  std::unique_ptr<TraceReader> reader;
};

Fixture &fixture()
{
  static Fixture f;
  return f;
}

void setCounters(benchmark::State &state, Fixture const &f, double rows_per_iteration, double tokens_per_iteration)
{
  state.counters["requests_per_s"] = benchmark::Counter(rows_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["prefix_tokens_per_s"] =
      benchmark::Counter(tokens_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["rows"] = static_cast<double>(f.rows);
}

void BM_open(benchmark::State &state, bool isolate)
{
  Fixture const &f = fixture();
  TraceReadOptions options;
  options.isolate = isolate;
  for (auto _ : state)
  {
    TraceReader r(f.path, options);
    benchmark::DoNotOptimize(r.numSteps());
  }
  setCounters(state, f, static_cast<double>(f.rows), static_cast<double>(f.prefix_tokens));
}

void BM_validate(benchmark::State &state)
{
  Fixture const &f = fixture();
  for (auto _ : state)
    validateTraceColumns(f.reader->columns());
  setCounters(state, f, static_cast<double>(f.rows), static_cast<double>(f.prefix_tokens));
}

void BM_stepView(benchmark::State &state)
{
  Fixture const &f = fixture();
  TraceStepView view;
  for (auto _ : state)
    for (int64_t s = 0; s < f.reader->numSteps(); ++s)
    {
      f.reader->stepView(s, view);
      benchmark::DoNotOptimize(view.kv_indices);
    }
  setCounters(state, f, static_cast<double>(f.rows), static_cast<double>(f.prefix_tokens));
}

void BM_stepMetadata(benchmark::State &state, MaskLayout layout)
{
  Fixture const &f = fixture();
  for (auto _ : state)
    for (int64_t s = 0; s < f.reader->numSteps(); ++s)
    {
      BatchMetadata m = f.reader->stepMetadata(s, layout);
      benchmark::DoNotOptimize(m.kv_indices.data());
    }
  setCounters(state, f, static_cast<double>(f.rows), static_cast<double>(f.prefix_tokens));
}
void BM_stepMetadataReused(benchmark::State &state, MaskLayout layout)
{
  Fixture const &f = fixture();
  BatchMetadata m;
  for (auto _ : state)
    for (int64_t s = 0; s < f.reader->numSteps(); ++s)
    {
      f.reader->stepMetadata(s, layout, m);
      benchmark::DoNotOptimize(m.kv_indices.data());
    }
  setCounters(state, f, static_cast<double>(f.rows), static_cast<double>(f.prefix_tokens));
}
} // namespace

int main(int argc, char **argv)
{
  auto args = canopy::bench::stripSmokeFlag(argc, argv);
  bool const smoke = args.smoke;
  RuntimeGuard guard(args.argc, args.argv.data());
  benchmark::Initialize(&args.argc, args.argv.data());
  if (benchmark::ReportUnrecognizedArguments(args.argc, args.argv.data()))
    return 2;

  SimulatorConfig config;
  config.seed = 1;
  config.steps = smoke ? 20 : 2000;
  config.warmup_steps = smoke ? 0 : 200;
  Fixture &f = fixture();
  f.path = (std::filesystem::temp_directory_path() / ("canopy_benchTraceReader_" + std::to_string(getpid()) + ".h5")).string();
  {
    TraceColumns const c = simulateTrace(config);
    writeTraceColumns(f.path, c);
    f.rows = c.numRows();
    f.prefix_tokens = static_cast<int64_t>(c.kv_indices.size());
    f.nodes = c.numNodes();
  }
  f.reader = std::make_unique<TraceReader>(f.path);
  benchmark::AddCustomContext("canopy_version", CANOPY_VERSION);
  benchmark::AddCustomContext("trace", "simulator defaults, " + std::to_string(config.steps) + " steps, " +
                                           std::to_string(f.rows) + " rows, " + std::to_string(f.prefix_tokens) +
                                           " prefix tokens, " + std::to_string(f.nodes) + " nodes, " +
                                           std::to_string(std::filesystem::file_size(f.path)) + " bytes");

  auto unit = benchmark::kMillisecond;
  benchmark::RegisterBenchmark("BM_open/isolated", BM_open, true)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_open/in_process", BM_open, false)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_validate", BM_validate)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_stepView", BM_stepView)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_stepMetadata/parents", BM_stepMetadata, MaskLayout::kParents)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_stepMetadataReused/parents", BM_stepMetadataReused, MaskLayout::kParents)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_stepMetadata/tree", BM_stepMetadata, MaskLayout::kTree)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_stepMetadataReused/tree", BM_stepMetadataReused, MaskLayout::kTree)->Unit(unit)->UseRealTime();
  benchmark::RegisterBenchmark("BM_stepMetadata/full", BM_stepMetadata, MaskLayout::kFull)->Unit(unit)->UseRealTime();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  f.reader.reset();
  std::filesystem::remove(f.path);
  return 0;
}
