#include "canopy_StepSource.hpp"

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_Generator.hpp"

#ifdef CANOPY_HAVE_TRACE
#include "canopy_TraceReader.hpp"
#endif

#include <algorithm>
#include <filesystem>

namespace canopy
{
namespace
{
class SyntheticSource final : public StepSource
{
public:
  SyntheticSource(GeneratorOptions opt, int steps) : _opt(opt), _steps(steps) {}
  std::string label() const override
  {
    return "B=" + std::to_string(_opt.batch) + " H=" + std::to_string(_opt.num_heads) + " T=" +
           std::to_string(_opt.tree_size) + " P=" + prefixLabel(_opt.prefix_len) + (_opt.ragged ? " ragged" : "") +
           (_opt.pool_slack <= 1.0 && _opt.mean_run >= 1e9 ? " compacted" : "");
  }
  int64_t numSteps() const override { return _steps; }
  BatchMetadata metadata(int64_t s, MaskLayout layout) const override { return problem(s, layout).meta; }
  HostProblem problem(int64_t s, MaskLayout layout) const override
  {
    GeneratorOptions o = _opt;
    o.mask_layout = layout;
    o.seed = _opt.seed + 1000003ull * static_cast<uint64_t>(s);
    return generateProblem(o);
  }

private:
  static std::string prefixLabel(int64_t p)
  {
    return (p >= 1024 && p % 1024 == 0) ? std::to_string(p / 1024) + "K" : std::to_string(p);
  }
  GeneratorOptions _opt;
  int _steps;
};

#ifdef CANOPY_HAVE_TRACE
class TraceSource final : public StepSource
{
public:
  TraceSource(std::string const &path, int64_t max_steps, uint64_t seed)
      : _reader(path), _label(std::filesystem::path(path).filename().string()), _seed(seed)
  {
    _steps = _reader.numSteps();
    if (max_steps > 0)
      _steps = std::min(_steps, max_steps);
  }
  std::string label() const override { return _label; }
  int64_t numSteps() const override { return _steps; }
  BatchMetadata metadata(int64_t s, MaskLayout layout) const override { return _reader.stepMetadata(s, layout); }
  HostProblem problem(int64_t s, MaskLayout layout) const override { return _reader.stepProblem(s, layout, _seed); }
  std::vector<uint16_t> expectedOutput(int64_t s) const override { return _reader.expectedOutput(s); }
  bool recordedValues() const override { return _reader.info().has_values; }

private:
  TraceReader _reader;
  std::string _label;
  uint64_t _seed;
  int64_t _steps = 0;
};
#endif
} // namespace

std::unique_ptr<StepSource> makeTraceSource(std::string const &path, int64_t max_steps, uint64_t seed)
{
#ifdef CANOPY_HAVE_TRACE
  return std::make_unique<TraceSource>(path, max_steps, seed);
#else
  (void)max_steps;
  (void)seed;
  throw InputError("trace '" + path + "': this build has no HDF5 trace support");
#endif
}

std::unique_ptr<StepSource> makeSyntheticSource(int batch, int heads, int tree, int64_t prefix, bool ragged, int steps,
                                                double pool_slack, double mean_run, uint64_t seed)
{
  GeneratorOptions o;
  o.batch = batch;
  o.num_heads = heads;
  o.tree_size = tree;
  o.prefix_len = prefix;
  o.ragged = ragged;
  o.pool_slack = pool_slack;
  o.mean_run = mean_run;
  o.seed = seed;
  return std::make_unique<SyntheticSource>(o, steps);
}

std::vector<std::unique_ptr<StepSource>> makeSources(ExperimentConfig const &c)
{
  std::vector<std::unique_ptr<StepSource>> out;
  for (auto const &path : c.traces)
    out.push_back(makeTraceSource(path, c.max_steps, c.seed));
  for (auto const &sw : c.sweeps)
    for (int b : sw.batch)
      for (int h : sw.heads)
        for (int t : sw.tree)
          for (int64_t p : sw.prefix)
            out.push_back(makeSyntheticSource(b, h, t, p, sw.ragged, sw.steps, sw.pool_slack, sw.mean_run, c.seed));
  return out;
}
} // namespace canopy
