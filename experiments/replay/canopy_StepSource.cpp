#include "canopy_StepSource.hpp"

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_Bf16.hpp"
#include "canopy_Generator.hpp"
#include "canopy_MemoryEstimate.hpp"
#include "canopy_Random.hpp"

#ifdef CANOPY_HAVE_TRACE
#include "canopy_TraceReader.hpp"
#endif

#include <algorithm>
#include <climits>
#include <cstdint>
#include <filesystem>

namespace canopy
{
namespace
{
class SyntheticSource final : public StepSource
{
public:
  SyntheticSource(GeneratorOptions opt, int steps) : _opt(opt), _steps(steps) {}
  InputAxes axes() const override
  {
    InputAxes a;
    a.batch = _opt.batch;
    a.heads = _opt.num_heads;
    a.tree = _opt.tree_size;
    a.prefix = _opt.prefix_len;
    a.ragged = _opt.ragged;
    a.compacted = _opt.pool_slack <= 1.0 && _opt.mean_run >= 1e9;
    a.values = _opt.values;
    return a;
  }
  int64_t numSteps() const override { return _steps; }
  StepShape shape(int64_t s, MaskLayout layout) const override
  {
    HostProblem p = make(s, layout, false);
    return {std::move(p.meta), p.num_slots, p.shape.num_heads, _opt.kv_dtype};
  }
  HostProblem problem(int64_t s, MaskLayout layout) const override { return make(s, layout, true); }
  double hostBytes() const override
  {
    return problemHostBytes(_opt.batch, _opt.num_heads, _opt.tree_size, static_cast<double>(_opt.prefix_len),
                            _opt.pool_slack);
  }

private:
  HostProblem make(int64_t s, MaskLayout layout, bool values) const
  {
    GeneratorOptions o = _opt;
    o.mask_layout = layout;
    o.seed = _opt.seed + 1000003ull * static_cast<uint64_t>(s);
    o.with_values = values;
    return generateProblem(o);
  }
  GeneratorOptions _opt;
  int _steps;
};

#ifdef CANOPY_HAVE_TRACE
class TraceSource final : public StepSource
{
public:
  TraceSource(std::string const &path, int64_t max_steps, uint64_t seed)
      : _reader(path), _path(path), _seed(seed)
  {
    _steps = _reader.numSteps();
    if (max_steps > 0)
      _steps = std::min(_steps, max_steps);
    if (_steps == 0)
      throw InputError(path + ": the trace has 0 steps: nothing to check");
  }
  InputAxes axes() const override
  {
    if (!_axes.trace.empty())
      return _axes;
    InputAxes &a = _axes;  // every step's metadata is read once
    a.trace = _path;
    a.heads = _reader.info().shape.num_heads;
    a.recorded_values = recordedValues();
    int64_t min_tree = INT64_MAX, min_prefix = INT64_MAX;
    for (int64_t s = 0; s < _steps; ++s)
    {
      BatchMetadata const m = _reader.stepMetadata(s, MaskLayout::kParents);
      a.batch = std::max(a.batch, m.batchSize());
      for (int b = 0; b < m.batchSize(); ++b)
      {
        min_tree = std::min(min_tree, m.treeSize(b));
        min_prefix = std::min(min_prefix, m.prefixLen(b));
      }
      a.tree = std::max<int>(a.tree, static_cast<int>(m.maxTreeSize()));
      a.prefix = std::max(a.prefix, m.maxPrefixLen());
    }
    a.ragged = min_tree < a.tree || min_prefix < a.prefix;
    return a;
  }
  int64_t numSteps() const override { return _steps; }
  StepShape shape(int64_t s, MaskLayout layout) const override
  {
    if (!recordedValues())
      seededPool();  // sizes _pool_slots
    return {_reader.stepMetadata(s, layout), recordedValues() ? _reader.info().num_slots : _pool_slots,
            _reader.info().shape.num_heads, _reader.info().kv_dtype};
  }
  HostProblem problem(int64_t s, MaskLayout layout) const override
  {
    if (recordedValues())
      return _reader.stepProblem(s, layout, _seed);
    HostProblem p = seededStep(s, layout);
    if (fp8())
    {
      p.kv_dtype = _reader.info().kv_dtype;
      p.kv_scale = _reader.info().kv_scale;
      p.kv_pool_fp8 = _pool_fp8;
    }
    else
      p.kv_pool = *seededPool();
    return p;
  }
  std::vector<uint16_t> const *sharedPool() const override
  {
    // The shared pool is a bf16 one; an FP8 trace's seeded pool travels with each step's problem.
    return recordedValues() || fp8() ? nullptr : seededPool();
  }
  HostProblem stepWithoutPool(int64_t s, MaskLayout layout) const override
  {
    if (recordedValues() || fp8())
      return problem(s, layout);
    return seededStep(s, layout);
  }
  std::vector<uint16_t> expectedOutput(int64_t s) const override { return _reader.expectedOutput(s); }
  bool recordedValues() const override { return _reader.info().has_values; }
  double hostBytes() const override
  {
    // The pool at its stored width (an FP8 pool's bytes, not bf16's): the recorded one, or the
    // seeded one over the slots the steps use (a trace may name any slot below num_slots); then
    // the largest step's own buffers.
    double step = 0;
    int const heads = _reader.info().shape.num_heads;
    for (int64_t s = 0; s < _steps; ++s)
    {
      BatchMetadata const m = _reader.stepMetadata(s, MaskLayout::kParents);
      double const nodes = static_cast<double>(m.numNodes()), prefix = static_cast<double>(m.kv_indices.size());
      double mask = 0;  // the full layout's, the largest
      for (int b = 0; b < m.batchSize(); ++b)
        mask += static_cast<double>(m.treeSize(b)) * static_cast<double>(m.prefixLen(b) + m.treeSize(b));
      step = std::max(step, nodes * heads * (D_QK * 2 + D_V * (8 + 2)) + (prefix + nodes) * 8 + mask);
    }
    double const slots = static_cast<double>(recordedValues() ? _reader.info().num_slots : slotsUsed());
    return slots * kvRowBytes(_reader.info().kv_dtype) + step;
  }

private:
  bool fp8() const { return _reader.info().kv_dtype != KvDtype::kBf16; }

  /// Seeded values for the slots the trace uses (a recorded pool may be far larger than its
  /// highest slot); generated once, so steps cost only their queries. An FP8 trace's pool is
  /// quantised once from them, as the trace says its pool is stored, and only those bytes are kept.
  std::vector<uint16_t> const *seededPool() const
  {
    if (_pool.empty() && _pool_fp8.empty())
    {
      _pool_slots = std::max<int64_t>(slotsUsed(), 1);
      HostProblem seeded;
      seeded.num_slots = _pool_slots;
      seeded.kv_pool.resize(static_cast<size_t>(_pool_slots) * D_QK);
      SplitMix64 rng(_seed ^ 0x6a09e667f3bcc909ull);
      for (auto &x : seeded.kv_pool)
        x = floatToBf16(rng.uniformSigned());
      quantiseSeededPool(seeded, _reader.info(), _path);
      _pool = std::move(seeded.kv_pool);
      _pool_fp8 = std::move(seeded.kv_pool_fp8);
    }
    return &_pool;
  }

  /// Metadata and seeded queries of step \p s, no pool.
  HostProblem seededStep(int64_t s, MaskLayout layout) const
  {
    seededPool();
    HostProblem p;
    p.shape = _reader.info().shape;
    p.meta = _reader.stepMetadata(s, layout);
    p.num_slots = _pool_slots;
    p.q.resize(static_cast<size_t>(p.meta.numNodes()) * p.shape.num_heads * D_QK);
    SplitMix64 rng(_seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(s + 1));
    for (auto &x : p.q)
      x = floatToBf16(rng.uniformSigned());
    return p;
  }

  /// One past the highest slot a step uses.
  int64_t slotsUsed() const
  {
    int64_t used = 0;
    for (int64_t s = 0; s < _steps; ++s)
    {
      BatchMetadata const m = _reader.stepMetadata(s, MaskLayout::kParents);
      for (int64_t x : m.kv_indices)
        used = std::max(used, x + 1);
      for (int64_t x : m.out_cache_loc)
        used = std::max(used, x + 1);
    }
    return used;
  }

  TraceReader _reader;
  std::string _path;
  mutable InputAxes _axes;
  uint64_t _seed;
  int64_t _steps = 0;
  mutable std::vector<uint16_t> _pool;     ///< seeded bf16 pool (empty for an FP8 trace)
  mutable std::vector<uint8_t> _pool_fp8;  ///< seeded pool as an FP8 trace stores it
  mutable int64_t _pool_slots = 0;
};
#endif
} // namespace

std::string inputLabel(InputAxes const &a)
{
  if (!a.trace.empty())
    return std::filesystem::path(a.trace).filename().string();
  auto const p = a.prefix >= 1024 && a.prefix % 1024 == 0 ? std::to_string(a.prefix / 1024) + "K" : std::to_string(a.prefix);
  return "B=" + std::to_string(a.batch) + " H=" + std::to_string(a.heads) + " T=" + std::to_string(a.tree) + " P=" + p +
         (a.ragged ? " ragged" : "") + (a.compacted ? " compacted" : "") +
         (a.values == ValueMode::kTreeDominant ? " tree-dominant" : "");
}

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

std::unique_ptr<StepSource> makeSyntheticSource(GeneratorOptions const &shape, int steps)
{
  return std::make_unique<SyntheticSource>(shape, steps);
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
          {
            GeneratorOptions o;
            o.batch = b;
            o.num_heads = h;
            o.tree_size = t;
            o.prefix_len = p;
            o.ragged = sw.ragged;
            o.pool_slack = sw.pool_slack;
            o.mean_run = sw.mean_run;
            o.values = sw.values;
            o.seed = c.seed;
            out.push_back(makeSyntheticSource(o, sw.steps));
          }
  return out;
}
} // namespace canopy
