/// \file benchVerifyKokkos.cpp
/// \brief Google Benchmark of the fp64 reference, kokkos-team and kokkos-kk over verify shapes:
/// manual time with fences around run(), FLOP/s and bytes/s from the cost model, and a summary of
/// speedups against the reference measured in the same run. `--smoke`: tiny shapes only (ctest).
#include "canopy_BatchStorage.hpp"
#include "canopy_Config.hpp"
#include "canopy_CostModel.hpp"
#include "canopy_Generator.hpp"
#include "canopy_KokkosCompat.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Registry.hpp"

#include <Kokkos_Core.hpp>
#include "canopy_BenchArgs.hpp"
#include "canopy_Environment.hpp"

#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace
{
using namespace canopy;
using Clock = std::chrono::steady_clock;

struct Shape
{
  int batch, heads, tree;
  int64_t prefix;
  MaskLayout mask;

  std::string key() const
  {
    return "B:" + std::to_string(batch) + "/H:" + std::to_string(heads) + "/T:" + std::to_string(tree) +
           "/P:" + std::to_string(prefix) + "/mask:" + toString(mask);
  }
};

struct Spec
{
  std::string design;
  Shape shape;
  int nsplit;
};

HostProblem makeProblem(Shape const &s)
{
  GeneratorOptions g;
  g.batch = s.batch;
  g.num_heads = s.heads;
  g.tree_size = s.tree;
  g.prefix_len = s.prefix;
  g.mask_layout = s.mask;
  g.seed = 20240917;
  return generateProblem(g);
}

/// One problem and its fp64 output per shape, shared by the designs (the reference output costs
/// as much as one reference run).
struct Fixture
{
  HostProblem problem;
  std::vector<double> reference;
};
Fixture const &fixture(Shape const &s)
{
  static std::map<std::string, std::unique_ptr<Fixture>> cache;
  auto &f = cache[s.key()];
  if (!f)
  {
    f = std::make_unique<Fixture>();
    f->problem = makeProblem(s);
    f->reference = referenceAttention(f->problem);
  }
  return *f;
}

void BM_verify(benchmark::State &state, Spec const &spec)
{
  Fixture const &fx = fixture(spec.shape);
  DesignPtr design = makeDesign(spec.design);
  DesignOptions options;
  options.nsplit = spec.nsplit;
  design->plan(boundsOf(fx.problem), options);
  auto storage = makeBatchStorage(design->memory(), BatchCapacity::of(fx.problem));
  storage->upload(fx.problem);
  storage->poisonOutput();
  storage->sync();
  // One untimed run that must match the reference: a wrong kernel never reports a speed.
  design->run(storage->ref(), storage->context());
  std::vector<uint16_t> const out = storage->downloadOutput();
  ErrorStats const err = compareToReference(fx.reference, out.data(), out.size());
  if (!err.pass)
  {
    state.SkipWithError(("output does not match the reference: rel L2 " + std::to_string(err.rel_l2) + ", " +
                         std::to_string(err.num_bad) + " bad elements")
                            .c_str());
    return;
  }
  for (auto _ : state)
  {
    storage->sync();
    auto const t0 = Clock::now();
    design->run(storage->ref(), storage->context());
    storage->sync();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Cost const cost = costOf(fx.problem.meta, fx.problem.shape.num_heads);
  state.counters["FLOP/s"] = benchmark::Counter(cost.flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/s"] = benchmark::Counter(cost.bytes_min, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["rel_l2"] = err.rel_l2;
  state.SetLabel(design->path());
}

#if defined(__GNUC__) && defined(__x86_64__)
/// The core's fp32 FMA throughput: 12 independent chains of 8-lane FMAs (more than FMA latency x
/// FMA pipes, so the loop is throughput-bound), in named variables so that they stay in registers.
/// This is the peak the kernels are rated against; it needs AVX2 + FMA, as the designs are built with.
__attribute__((target("avx2,fma"), noinline)) double fmaPeakProbe(int64_t iterations)
{
  typedef float v8 __attribute__((vector_size(32)));
  v8 const b = v8{} + 0.9999999f, c = v8{} + 1e-7f;
  v8 a0 = v8{} + 1.f, a1 = a0 + 1e-7f, a2 = a1 + 1e-7f, a3 = a2 + 1e-7f, a4 = a3 + 1e-7f, a5 = a4 + 1e-7f;
  v8 a6 = a5 + 1e-7f, a7 = a6 + 1e-7f, a8 = a7 + 1e-7f, a9 = a8 + 1e-7f, a10 = a9 + 1e-7f, a11 = a10 + 1e-7f;
  for (int64_t k = 0; k < iterations; ++k)
  {
    a0 = a0 * b + c, a1 = a1 * b + c, a2 = a2 * b + c, a3 = a3 * b + c, a4 = a4 * b + c, a5 = a5 * b + c;
    a6 = a6 * b + c, a7 = a7 * b + c, a8 = a8 * b + c, a9 = a9 * b + c, a10 = a10 * b + c, a11 = a11 * b + c;
    // One opaque use per iteration: the compiler can neither drop nor fold the chains.
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8),
                     "+x"(a9), "+x"(a10), "+x"(a11));
  }
  v8 const sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
  return sum[0];
}

void BM_fmaPeak(benchmark::State &state)
{
  int64_t iterations = 1 << 20;
  for (auto _ : state)
  {
    benchmark::DoNotOptimize(iterations);  // an opaque count: the call cannot be hoisted
    benchmark::DoNotOptimize(fmaPeakProbe(iterations));
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(static_cast<double>(iterations) * 12 * 8 * 2, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

std::string kokkosConfiguration()
{
  std::ostringstream os;
  Kokkos::print_configuration(os, false);
  std::string s = os.str(), out;
  for (char ch : s)
    out += ch == '\n' ? std::string("; ") : std::string(1, ch);
  return out;
}

/// Console output plus, at the end, each design's time against the reference at the same shape.
class SummaryReporter : public benchmark::ConsoleReporter
{
public:
  void ReportRuns(std::vector<Run> const &runs) override
  {
    // With --benchmark_repetitions the median aggregate replaces the single repetitions.
    for (auto const &r : runs)
    {
      bool const median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      bool const single = r.run_type == Run::RT_Iteration && !_has_median.count(r.run_name.function_name);
      if (!(median || single) || r.iterations <= 0 || !(r.real_accumulated_time > 0))
        continue;
      _seconds[r.run_name.function_name] = r.real_accumulated_time / static_cast<double>(r.iterations);
      auto const flops = r.counters.find("FLOP/s");
      if (flops != r.counters.end())
        _flops[r.run_name.function_name] = flops->second.value;
      if (median)
        _has_median.insert(r.run_name.function_name);
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void printSummary(std::vector<Spec> const &specs) const
  {
    auto const peak = _flops.find("BM_fmaPeak");
    double const peak_flops = peak == _flops.end() ? 0 : peak->second;
    std::printf("\nTime per run, speedup over the fp64 reference (same shape, same run) and GFLOP/s against\n"
                "the core's fp32 FMA peak measured by BM_fmaPeak (%.1f GFLOP/s):\n",
                peak_flops * 1e-9);
    std::printf("| %-46s | %-11s | %6s | %10s | %8s | %8s | %6s |\n", "shape", "design", "nsplit", "ms", "x ref",
                "GFLOP/s", "% peak");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(48, '-').c_str(), std::string(13, '-').c_str(),
                std::string(8, '-').c_str(), std::string(12, '-').c_str(), std::string(10, '-').c_str(),
                std::string(10, '-').c_str(), std::string(8, '-').c_str());
    for (auto const &s : specs)
    {
      auto it = _seconds.find(name(s));
      if (it == _seconds.end())
        continue;
      auto ref = _seconds.find(name({"reference", s.shape, 1}));
      double const x = ref == _seconds.end() ? 0 : ref->second / it->second;
      double const flops = _flops.count(name(s)) ? _flops.at(name(s)) : 0;
      std::printf("| %-46s | %-11s | %6d | %10.3f | %8.1f | %8.2f | %6.1f |\n", s.shape.key().c_str(),
                  s.design.c_str(), s.nsplit, it->second * 1e3, x, flops * 1e-9,
                  peak_flops > 0 ? 100 * flops / peak_flops : 0);
    }
  }

  static std::string name(Spec const &s)
  {
    return "BM_verify/" + s.design + "/" + s.shape.key() +
           (s.design == "reference" ? "" : "/nsplit:" + std::to_string(s.nsplit));
  }

private:
  std::map<std::string, double> _seconds, _flops;
  std::set<std::string> _has_median;
};

std::vector<Spec> makeSpecs(bool smoke)
{
  std::vector<std::string> designs;
  for (auto const &n : designNames())
    if (n == "reference" || n.rfind("kokkos-", 0) == 0)
      designs.push_back(n);
  std::vector<Shape> shapes;
  std::vector<int> nsplits;
  if (smoke)
  {
    shapes = {{2, 2, 5, 40, MaskLayout::kFull}, {1, 2, 9, 0, MaskLayout::kParents}};
    nsplits = {4};
  }
  else
  {
    shapes = {{1, 8, 33, 4096, MaskLayout::kFull},    {1, 8, 33, 4096, MaskLayout::kParents},
              {1, 8, 33, 1024, MaskLayout::kFull},    {4, 8, 33, 1024, MaskLayout::kTree},
              {1, 8, 65, 2048, MaskLayout::kParents}, {1, 16, 17, 2048, MaskLayout::kFull}};
    nsplits = {1, 16};
  }
  std::vector<Spec> specs;
  for (auto const &shape : shapes)
    for (auto const &d : designs)
      if (d == "reference")
        specs.push_back({d, shape, 1});
      else
        for (int ns : nsplits)
          specs.push_back({d, shape, ns});
  return specs;
}
} // namespace

int main(int argc, char **argv)
{
  auto args = canopy::bench::stripSmokeFlag(argc, argv);
  bool const smoke = args.smoke;
  Kokkos::ScopeGuard guard(args.argc, args.argv.data());
  benchmark::Initialize(&args.argc, args.argv.data());
  if (benchmark::ReportUnrecognizedArguments(args.argc, args.argv.data()))
    return 2;

  benchmark::AddCustomContext("git", canopy::gitDescribe());
  benchmark::AddCustomContext("canopy_version", CANOPY_VERSION);
  benchmark::AddCustomContext("kokkos_version", Compat::kokkosVersion());
  benchmark::AddCustomContext("kokkos_origin", CANOPY_KOKKOS_ORIGIN);
  benchmark::AddCustomContext("kokkos_default_space", Kokkos::DefaultExecutionSpace::name());
  benchmark::AddCustomContext("kokkos_configuration", kokkosConfiguration());

  std::vector<Spec> const specs = makeSpecs(smoke);
#if defined(__GNUC__) && defined(__x86_64__)
  benchmark::RegisterBenchmark("BM_fmaPeak", BM_fmaPeak)->Unit(benchmark::kMillisecond);
#endif
  for (auto const &s : specs)
  {
    auto *b = benchmark::RegisterBenchmark(SummaryReporter::name(s).c_str(), BM_verify, s);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    // The reference takes about a second at the large shapes: a few runs are enough for a ratio.
    if (s.design == "reference" && !smoke)
      b->Iterations(2);
  }
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.printSummary(specs);
  benchmark::Shutdown();
  return 0;
}
