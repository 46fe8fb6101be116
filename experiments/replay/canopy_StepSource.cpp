#include "canopy_StepSource.hpp"

#include "canopy_Config.hpp"
#include "canopy_Error.hpp"
#include "canopy_Bf16.hpp"
#include "canopy_Generator.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_MemoryEstimate.hpp"
#include "canopy_Random.hpp"

#ifdef CANOPY_HAVE_TRACE
#include "canopy_TraceReader.hpp"
#endif

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>

namespace canopy
{
namespace
{
/// The scale a pool of \p dtype carries: the asked one for the one-scale dtypes, 1 otherwise (bf16
/// has none, the block-scaled layout holds its own per row).
float poolScale(KvDtype dtype, float asked)
{
  return dtype == KvDtype::kFp8E4m3 || dtype == KvDtype::kFp8E5m2 ? asked : 1.0f;
}

/// Host bytes of an FP8 copy of a pool of \p slots rows (held beside the bf16 one while quantising).
double fp8PoolBytes(KvDtype dtype, double slots) { return dtype == KvDtype::kBf16 ? 0 : slots * kvRowBytes(dtype); }

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
    a.kv_dtype = _opt.kv_dtype;
    a.kv_scale = poolScale(_opt.kv_dtype, _opt.kv_scale);
    return a;
  }
  int64_t numSteps() const override { return _steps; }
  StepShape shape(int64_t s, MaskLayout layout) const override
  {
    HostProblem p = make(s, layout, false);
    return {std::move(p.meta), p.num_slots, p.shape.num_heads};
  }
  HostProblem problem(int64_t s, MaskLayout layout) const override { return make(s, layout, true); }
  double hostBytes() const override
  {
    double const slots = _opt.batch * (static_cast<double>(_opt.prefix_len) + _opt.tree_size) * _opt.pool_slack;
    return problemHostBytes(_opt.batch, _opt.num_heads, _opt.tree_size, static_cast<double>(_opt.prefix_len),
                            _opt.pool_slack) +
           fp8PoolBytes(_opt.kv_dtype, slots);
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
  TraceSource(std::string const &path, int64_t max_steps, uint64_t seed, std::optional<KvDtype> kv_dtype,
              float kv_scale)
      : _reader(path), _path(path), _seed(seed)
  {
    _stored = _reader.info().kv_dtype;
    _dtype = traceReplayDtype(path, _stored, kv_dtype, "inputs.kv_dtype");
    // A trace stored in FP8 replays with the scale it stores; a bf16 one is quantised with the asked one.
    _scale = _stored == KvDtype::kBf16 ? poolScale(_dtype, kv_scale) : _reader.info().kv_scale;
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
    a.kv_dtype = _dtype;
    a.kv_scale = _scale;
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
    makePool();  // sizes _pool_slots
    return {_reader.stepMetadata(s, layout), recordedValues() ? _reader.info().num_slots : _pool_slots,
            _reader.info().shape.num_heads};
  }
  HostProblem problem(int64_t s, MaskLayout layout) const override
  {
    if (recordedValues())
    {
      HostProblem p = _reader.stepProblem(s, layout, _seed);
      if (p.kv_dtype == KvDtype::kBf16)  // a bf16 trace replayed as FP8: written as a serving stack writes it
        quantisePool(p, _dtype, _scale);
      return p;
    }
    HostProblem p = stepWithoutPool(s, layout);
    if (_dtype == KvDtype::kBf16)
      p.kv_pool = *sharedPool();
    else
      p.kv_pool_fp8 = *sharedFp8Pool();
    return p;
  }
  std::vector<uint16_t> const *sharedPool() const override
  {
    makePool();
    return recordedValues() || _dtype != KvDtype::kBf16 ? nullptr : &_pool;
  }
  std::vector<uint8_t> const *sharedFp8Pool() const override
  {
    makePool();
    return recordedValues() || _dtype == KvDtype::kBf16 ? nullptr : &_pool_fp8;
  }
  HostProblem stepWithoutPool(int64_t s, MaskLayout layout) const override
  {
    if (recordedValues())
      return problem(s, layout);
    makePool();
    HostProblem p;
    p.shape = _reader.info().shape;
    p.meta = _reader.stepMetadata(s, layout);
    p.num_slots = _pool_slots;
    p.kv_dtype = _dtype;
    p.kv_scale = _scale;
    p.q.resize(static_cast<size_t>(p.meta.numNodes()) * p.shape.num_heads * D_QK);
    SplitMix64 rng(_seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(s + 1));
    for (auto &x : p.q)
      x = floatToBf16(rng.uniformSigned());
    return p;
  }
  std::vector<uint16_t> expectedOutput(int64_t s) const override
  {
    // The recorded output is the stored pool's: a trace quantised on load is checked against the
    // reference on the pool it actually reads.
    return _dtype == _stored ? _reader.expectedOutput(s) : std::vector<uint16_t>{};
  }
  bool recordedValues() const override { return _reader.info().has_values; }
  double hostBytes() const override
  {
    // The pool: the recorded one, or the seeded one over the slots the steps use (a trace may name
    // any slot below num_slots); then the largest step's own buffers.
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
    // A pool stored in FP8 is read (or seeded) at its width; a bf16 one may be quantised beside it.
    if (_stored != KvDtype::kBf16)
      return slots * kvRowBytes(_stored) + step;
    return slots * D_QK * 2 + fp8PoolBytes(_dtype, slots) + step;
  }

private:
  /// Seeded values for the slots the trace uses (a recorded pool may be far larger than its highest
  /// slot); generated once, so steps cost only their queries. An FP8 replay keeps the quantised
  /// pool only.
  void makePool() const
  {
    if (recordedValues() || _pool_slots > 0)
      return;
    _pool_slots = std::max<int64_t>(slotsUsed(), 1);
    HostProblem p;
    p.num_slots = _pool_slots;
    p.kv_pool.resize(static_cast<size_t>(_pool_slots) * D_QK);
    SplitMix64 rng(_seed ^ 0x6a09e667f3bcc909ull);
    for (auto &x : p.kv_pool)
      x = floatToBf16(rng.uniformSigned());
    if (_stored != KvDtype::kBf16)
      quantiseSeededPool(p, _reader.info(), _path);  // as the trace stores it (a scale that overflows: refused)
    else
      quantisePool(p, _dtype, _scale);
    _pool = std::move(p.kv_pool);
    _pool_fp8 = std::move(p.kv_pool_fp8);
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
  KvDtype _stored = KvDtype::kBf16;  ///< as the trace stores its pool
  KvDtype _dtype = KvDtype::kBf16;   ///< as it is replayed
  float _scale = 1.0f;
  mutable std::vector<uint16_t> _pool;
  mutable std::vector<uint8_t> _pool_fp8;
  mutable int64_t _pool_slots = 0;
};
#endif
} // namespace

namespace
{
/// " fp8-e4m3", " fp8-e4m3 kv_scale=0.5": the pool's storage where it is not plain bf16.
std::string dtypeLabel(InputAxes const &a)
{
  if (a.kv_dtype == KvDtype::kBf16)
    return "";
  char scale[64] = "";
  if (a.kv_scale != 1.0)
    std::snprintf(scale, sizeof scale, " kv_scale=%.6g", a.kv_scale);
  return " " + toString(a.kv_dtype) + scale;
}
} // namespace

std::string inputLabel(InputAxes const &a)
{
  if (!a.trace.empty())
    return std::filesystem::path(a.trace).filename().string() + dtypeLabel(a);
  auto const p = a.prefix >= 1024 && a.prefix % 1024 == 0 ? std::to_string(a.prefix / 1024) + "K" : std::to_string(a.prefix);
  return "B=" + std::to_string(a.batch) + " H=" + std::to_string(a.heads) + " T=" + std::to_string(a.tree) + " P=" + p +
         (a.ragged ? " ragged" : "") + (a.compacted ? " compacted" : "") +
         (a.values == ValueMode::kTreeDominant ? " tree-dominant" : "") + dtypeLabel(a);
}

KvDtype traceReplayDtype(std::string const &path, KvDtype stored, std::optional<KvDtype> asked, std::string const &key)
{
  if (!asked)
    return stored;
  if (stored != KvDtype::kBf16 && *asked != stored)
    throw InputError(key + ": trace '" + path + "' stores its KV pool as " + toString(stored) +
                     ", which cannot be replayed as " + toString(*asked) +
                     " (only a bf16 pool is quantised on load): ask for " + toString(stored) + " or leave the key out");
  return *asked;
}

std::unique_ptr<StepSource> makeTraceSource(std::string const &path, int64_t max_steps, uint64_t seed,
                                            std::optional<KvDtype> kv_dtype, float kv_scale)
{
#ifdef CANOPY_HAVE_TRACE
  return std::make_unique<TraceSource>(path, max_steps, seed, kv_dtype, kv_scale);
#else
  (void)max_steps;
  (void)seed;
  (void)kv_dtype;
  (void)kv_scale;
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
  std::vector<std::string> whence;  // per source, how its dtype was chosen (the refusal below names it)
  for (size_t ti = 0; ti < c.traces.size(); ++ti)
  {
    std::vector<std::optional<KvDtype>> dtypes{std::nullopt};  // as stored
    if (!c.kv_dtypes.empty())
      dtypes.assign(c.kv_dtypes.begin(), c.kv_dtypes.end());
    for (auto const &dtype : dtypes)
    {
      out.push_back(makeTraceSource(c.traces[ti], c.max_steps, c.seed, dtype, c.kv_scale));
      whence.push_back("inputs.traces[" + std::to_string(ti) + "] '" + c.traces[ti] +
                       (dtype ? "'" : "' is replayed as stored: set inputs.kv_dtype"));
    }
  }
  for (auto const &sw : c.sweeps)
    for (int b : sw.batch)
      for (int h : sw.heads)
        for (int t : sw.tree)
          for (int64_t p : sw.prefix)
            for (KvDtype dtype : sw.kv_dtypes)
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
              o.kv_dtype = dtype;
              o.kv_scale = sw.kv_scale;
              o.seed = c.seed;
              out.push_back(makeSyntheticSource(o, sw.steps));
              whence.push_back(out.back()->label());
            }
  // The config's check of numerics against dtypes, with the traces' dtypes known: a numerics
  // with no meaning for any input is refused (for some inputs only: their rows say skipped).
  std::vector<KvDtype> dtypes;
  for (auto const &src : out)
    dtypes.push_back(src->axes().kv_dtype);
  refuseNumericsUndefinedForAll(c.numerics, dtypes, whence);
  return out;
}
} // namespace canopy
