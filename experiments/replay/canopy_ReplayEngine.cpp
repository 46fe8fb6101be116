#include "canopy_ReplayEngine.hpp"

#include "canopy_BatchStorage.hpp"
#include "canopy_CostModel.hpp"
#include "canopy_Environment.hpp"
#include "canopy_Error.hpp"
#include "canopy_Executor.hpp"
#include "canopy_Merge.hpp"
#include "canopy_Random.hpp"
#include "canopy_Reference.hpp"
#include "canopy_Registry.hpp"
#include "canopy_Statistics.hpp"
#include "canopy_StepCheck.hpp"
#include "canopy_StepSource.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace canopy
{
bool stepChecked(uint64_t seed, int64_t step, double rate)
{
  if (rate >= 1.0)
    return true;
  if (rate <= 0.0)
    return false;
  SplitMix64 h(seed ^ (0xa0761d6478bd642full * static_cast<uint64_t>(step + 1)));
  return h.uniform() < rate;
}

namespace
{
struct Combo
{
  std::string design;
  MaskLayout mask;
  int nsplit;
  WorkspaceStrategy workspace;
  ExecMode mode;
  bool l2_flush;
  Numerics numerics;
};

std::vector<Combo> combos(ExperimentConfig const &c)
{
  std::vector<Combo> out;
  for (auto const &m : c.masks)
    for (int ns : c.nsplit)
      for (auto ws : c.workspace)
        for (auto mode : c.modes)
          for (bool fl : c.l2_flush)
            for (Numerics nu : c.numerics)
              for (auto const &d : c.designs)
                out.push_back({d, m, ns, ws, mode, fl, nu});
  return out;
}

/// Steps of one source grouped by padded bucket, with the capacity the bucket's static buffers need.
struct Bucket
{
  int size = 0;
  std::vector<int64_t> steps;
  BatchCapacity capacity;
  PlanBounds bounds;
};

std::map<int, Bucket> bucketize(StepSource const &src, ExperimentConfig const &c, MaskLayout mask)
{
  std::map<int, Bucket> buckets;
  KvDtype const kv_dtype = src.axes().kv_dtype;
  for (int64_t s = 0; s < src.numSteps(); ++s)
  {
    StepShape const shape = src.shape(s, mask);
    BatchMetadata const &m = shape.meta;
    int const size = paddedBucket(c.buckets, m.batchSize());
    Bucket &b = buckets[size];
    b.size = size;
    b.steps.push_back(s);
    b.capacity.max_batch = size;
    b.capacity.max_nodes = std::max(b.capacity.max_nodes, m.numNodes());
    b.capacity.max_prefix_tokens = std::max<int64_t>(b.capacity.max_prefix_tokens, static_cast<int64_t>(m.kv_indices.size()));
    b.capacity.max_mask_bytes = std::max<int64_t>(b.capacity.max_mask_bytes, static_cast<int64_t>(m.custom_mask.size()));
    b.bounds.max_batch = size;
    b.bounds.max_tree = std::max<int>(b.bounds.max_tree, static_cast<int>(m.maxTreeSize()));
    b.bounds.max_prefix = std::max(b.bounds.max_prefix, m.maxPrefixLen());
    b.bounds.max_nodes = std::max(b.bounds.max_nodes, m.numNodes());
    b.bounds.mask_layout = mask;
    b.bounds.kv_dtype = kv_dtype;
    b.capacity.num_slots = std::max(b.capacity.num_slots, shape.num_slots);
    b.capacity.num_heads = shape.num_heads;
    b.bounds.num_heads = shape.num_heads;
  }
  return buckets;
}

struct RowAccumulator
{
  std::vector<double> samples, step_medians;
  double flops = 0, bytes = 0, kv_bytes = 0, roofline = 0, mma_roofline = 0, fma_roofline = 0, copy_roofline = 0;
  int64_t checked = 0;
  double max_abs = 0, rel_l2 = 0;
  bool failed = false;
  bool unsupported = false;  ///< the design cannot serve this bucket's shape (the note says why)
  std::string note;
};

/// The last step made, kept across designs: synthetic steps at long context take seconds to
/// generate (a pool of millions of rows), and every design of a combination needs the same one.
class StepCache
{
public:
  HostProblem const &get(StepSource const &src, int64_t step, MaskLayout mask)
  {
    if (!_valid || _src != &src || _step != step || _mask != mask)
    {
      _problem = src.stepWithoutPool(step, mask);
      _src = &src;
      _step = step;
      _mask = mask;
      _valid = true;
    }
    return _problem;
  }

private:
  HostProblem _problem;
  StepSource const *_src = nullptr;
  int64_t _step = -1;
  MaskLayout _mask = MaskLayout::kFull;
  bool _valid = false;
};

void runCombo(ExperimentConfig const &c, StepSource const &src, std::map<int, Bucket> const &buckets, Combo const &k,
              ReferenceCache &refs, StepCache &steps, ResultRow &row,
              std::map<int, RowAccumulator> &per_bucket, std::function<void(int64_t)> const &tick)
{
  DesignPtr design = makeDesign(k.design);
  Executor &exec = executorFor(design->memory());
  row.device = exec.rowDevice();
  // A numerics with no meaning for this input's dtype (another input of the run has one it fits).
  std::string why = numericsUndefinedFor(src.axes().kv_dtype, k.numerics);
  bool const skip = !why.empty() || !exec.supports(k.mode, *design, &why);
  if (skip)
  {
    row.status = RowStatus::kSkipped;
    row.note = why;
    tick(src.numSteps());
    return;
  }
  DesignOptions opt;
  opt.nsplit = k.nsplit;
  opt.workspace = k.workspace;
  opt.strict = c.strict;
  opt.numerics = k.numerics;
  InputAxes const axes = src.axes();
  double const peak_f = exec.peakFlops() > 0 ? exec.peakFlops() : c.peak_flops;
  double const peak_b = exec.peakBytesPerSecond() > 0 ? exec.peakBytesPerSecond() : c.peak_bytes_per_s;
  double const peak_mma = exec.peakMmaSyncFlops();
  double const peak_fma = exec.peakFp32FmaFlops();
  double const peak_copy = exec.peakTileCopyBytesPerSecond();

  for (auto const &[size, bucket] : buckets)
  {
    RowAccumulator &acc = per_bucket[size];
    std::unique_ptr<BatchStorage> storage;
    bool prepared = false;
    std::vector<uint16_t> const *shared_pool = src.sharedPool();
    std::vector<uint8_t> const *shared_fp8 = src.sharedFp8Pool();
    for (int64_t s : bucket.steps)
    {
      HostProblem const &p = steps.get(src, s, k.mask);
      BatchMetadata meta = p.meta;  // padded to the bucket, as the graph runner pads
      padBatch(meta, bucket.size);
      if (!storage)
      {
        // A design that does not serve the pool's dtype with these numerics says so from plan()
        // (requireServed), and memory that holds no FP8 pool from its upload: the row is
        // unsupported with the reason, never run another way.
        try
        {
          design->plan(bucket.bounds, opt);
          storage = makeBatchStorage(design->memory(), bucket.capacity);
          if (shared_pool)
            storage->uploadPool(*shared_pool);
          else if (shared_fp8)
            storage->uploadFp8Pool(*shared_fp8, axes.kv_dtype, static_cast<float>(axes.kv_scale));
          else
            storage->uploadPoolOf(p);
        }
        catch (Unsupported const &e)
        {
          storage.reset();
          acc.unsupported = true;
          acc.note = e.what();
          tick(static_cast<int64_t>(bucket.steps.size()));
          break;
        }
      }
      else if (!shared_pool && !shared_fp8)
        storage->uploadPoolOf(p);
      storage->setMetadata(meta, p.shape);
      storage->uploadQueries(p.q);
      if (!prepared)
      {
        // Eager warm-up first (module load, scratch growth, 'grow' workspaces), then capture.
        for (int w = 0; w < std::max(1, c.warmup); ++w)
          exec.timeRun(*design, *storage, ExecMode::kEager, false);
        exec.prepare(*design, *storage, k.mode);
        prepared = true;
      }
      Cost const cost = costOf(meta, p.shape.num_heads, axes.kv_dtype);
      if (stepChecked(c.seed, s, c.check_rate) &&
          (c.max_check_flops <= 0 || cost.flops <= static_cast<double>(c.max_check_flops)))
      {
        storage->poisonOutput();
        exec.timeRun(*design, *storage, k.mode, false);
        ErrorStats const e = checkStepOutput(src, s, p, storage->downloadOutput(), refs, k.numerics);
        ++acc.checked;
        acc.max_abs = std::max(acc.max_abs, e.max_abs);
        acc.rel_l2 = std::max(acc.rel_l2, e.rel_l2);
        if (!e.pass)
        {
          acc.failed = true;
          acc.note = "step " + std::to_string(s) + ": rel L2 " + std::to_string(e.rel_l2) + ", worst row " +
                     std::to_string(e.worst_row) + " rel L2 " + std::to_string(e.worst_row_rel_l2) + ", " +
                     std::to_string(e.num_bad) + " NaN/unwritten (first at " + std::to_string(e.first_bad) + ")";
        }
      }
      if (!acc.failed)
      {
        for (int w = 0; w < c.warmup; ++w)
          exec.timeRun(*design, *storage, k.mode, k.l2_flush);
        std::vector<double> t;
        for (int r = 0; r < c.repetitions; ++r)
          t.push_back(exec.timeRun(*design, *storage, k.mode, k.l2_flush));
        acc.samples.insert(acc.samples.end(), t.begin(), t.end());
        acc.step_medians.push_back(summarize(t).median);
        acc.flops += cost.flops;
        acc.bytes += cost.bytes_min;
        acc.kv_bytes += cost.kv_bytes;
        if (peak_f > 0 && peak_b > 0)
          acc.roofline += rooflineSeconds(cost, peak_f, peak_b);
        if (peak_mma > 0 && peak_b > 0)
          acc.mma_roofline += rooflineSeconds(cost, peak_mma, peak_b);
        if (peak_fma > 0 && peak_b > 0)
          acc.fma_roofline += rooflineSeconds(cost, peak_fma, peak_b);
        if (peak_f > 0 && peak_copy > 0)
          acc.copy_roofline += copyRooflineSeconds(cost, peak_f, peak_copy);
      }
      tick(1);
    }
    exec.release();
    row.workspace_bytes = std::max(row.workspace_bytes, static_cast<double>(design->workspaceBytes()));
  }
  row.path = design->path();
  row.splits = design->splits();
}

void finishRow(ResultRow &row, RowAccumulator const &acc)
{
  Summary const s = summarize(acc.samples);
  row.samples = static_cast<int64_t>(s.n);
  row.steps = static_cast<int64_t>(acc.step_medians.size());
  row.median = s.n ? s.median : 0;
  row.p10 = s.n ? s.p10 : 0;
  row.p90 = s.n ? s.p90 : 0;
  for (double m : acc.step_medians)
    row.total_median += m;
  row.flops = acc.flops;
  row.bytes = acc.bytes;
  row.kv_bytes = acc.kv_bytes;
  if (row.total_median > 0)
  {
    row.tflops = acc.flops / row.total_median * 1e-12;
    row.gbps = acc.bytes / row.total_median * 1e-9;
    row.roofline_s = acc.roofline;
    row.roofline_fraction = acc.roofline / row.total_median;
    row.mma_roofline_s = acc.mma_roofline;
    row.mma_roofline_fraction = acc.mma_roofline / row.total_median;
    row.fma_roofline_s = acc.fma_roofline;
    row.fma_roofline_fraction = acc.fma_roofline / row.total_median;
    row.copy_roofline_s = acc.copy_roofline;
    row.copy_roofline_fraction = acc.copy_roofline / row.total_median;
  }
  row.checked_steps = acc.checked;
  row.max_abs = acc.max_abs;
  row.rel_l2 = acc.rel_l2;
  if (acc.failed)
  {
    row.status = RowStatus::kFailed;
    row.note = acc.note;
  }
  else if (acc.unsupported)
  {
    row.status = RowStatus::kUnsupported;
    row.note = acc.note;
  }
}
} // namespace

ResultSet runExperiment(ExperimentConfig const &c, ProgressFn const &progress)
{
  return runExperiment(c, makeSources(c), progress);
}

ResultSet runExperiment(ExperimentConfig const &c, std::vector<std::unique_ptr<StepSource>> const &sources,
                        ProgressFn const &progress)
{
  ResultSet rs;
  rs.experiment = c.name;
  rs.description = c.description;
  rs.baseline = c.baseline;
  rs.repetitions = c.repetitions;
  auto const all = combos(c);
  // Work is sharded by (input, option combination), never by design: the designs of a unit run in
  // the same process on the same device, so every speedup stays a ratio measured side by side.
  int64_t const designs = std::max<int64_t>(1, static_cast<int64_t>(c.designs.size()));
  RunLayout const layout{static_cast<int64_t>(sources.size()), static_cast<int64_t>(all.size()), designs};
  auto inShard = [&](size_t src_index, size_t combo_index) {
    return orderInShard(layout, static_cast<int64_t>(src_index * all.size() + combo_index), c.shard_index, c.shard_count);
  };
  int64_t total = 0, done = 0;
  for (size_t si = 0; si < sources.size(); ++si)
    for (size_t ci = 0; ci < all.size(); ++ci)
      total += inShard(si, ci) ? sources[si]->numSteps() : 0;
  ProgressFn tick_total = progress;
  std::function<void(int64_t)> const tick = [&](int64_t n) {
    done += n;
    if (tick_total)
      tick_total(done, total);
  };
  std::set<MemoryKind> kinds;
  ReferenceCache refs;
  StepCache steps;
  for (size_t si = 0; si < sources.size(); ++si)
  {
    auto const &src = sources[si];
    // Buckets depend on the source and the mask layout only: sized once for every design and option.
    std::map<MaskLayout, std::map<int, Bucket>> buckets;
    for (size_t ci = 0; ci < all.size(); ++ci)
    {
      if (!inShard(si, ci))
        continue;
      Combo const &k = all[ci];
      ResultRow base;
      base.order = static_cast<int64_t>(si * all.size() + ci);
      base.design = k.design;
      base.axes = src->axes();
      base.input = inputLabel(base.axes);
      base.mask = k.mask;
      base.nsplit = k.nsplit;
      base.workspace = k.workspace;
      base.mode = k.mode;
      base.l2_flush = k.l2_flush;
      base.numerics = k.numerics;
      std::map<int, RowAccumulator> per_bucket;
      if (!buckets.count(k.mask))
        buckets[k.mask] = bucketize(*src, c, k.mask);
      runCombo(c, *src, buckets.at(k.mask), k, refs, steps, base, per_bucket, tick);
      kinds.insert(makeDesign(k.design)->memory());
      if (base.status == RowStatus::kSkipped)
      {
        base.group = "all";
        rs.rows.push_back(base);
        continue;
      }
      if (c.group_by == "batch")
        for (auto const &[size, acc] : per_bucket)
        {
          ResultRow row = base;
          row.group = "bucket " + std::to_string(size);
          finishRow(row, acc);
          rs.rows.push_back(row);
        }
      else
      {
        RowAccumulator merged;
        for (auto const &[size, acc] : per_bucket)
        {
          merged.samples.insert(merged.samples.end(), acc.samples.begin(), acc.samples.end());
          merged.step_medians.insert(merged.step_medians.end(), acc.step_medians.begin(), acc.step_medians.end());
          merged.flops += acc.flops;
          merged.bytes += acc.bytes;
          merged.kv_bytes += acc.kv_bytes;
          merged.roofline += acc.roofline;
          merged.mma_roofline += acc.mma_roofline;
          merged.fma_roofline += acc.fma_roofline;
          merged.copy_roofline += acc.copy_roofline;
          merged.checked += acc.checked;
          merged.max_abs = std::max(merged.max_abs, acc.max_abs);
          merged.rel_l2 = std::max(merged.rel_l2, acc.rel_l2);
          if (acc.failed && !merged.failed)
          {
            merged.failed = true;
            merged.note = "bucket " + std::to_string(size) + ": " + acc.note;
          }
          else if (acc.unsupported && !merged.failed && !merged.unsupported)
          {
            merged.unsupported = true;
            merged.note = "bucket " + std::to_string(size) + ": " + acc.note;
          }
        }
        base.group = "all";
        finishRow(base, merged);
        rs.rows.push_back(base);
      }
    }
  }
  computeSpeedups(rs);
  rs.environment = collectEnvironment(c, kinds);
  // What canopy merge checks a shard against: the run's layout (from the config) and the rows written.
  rs.environment["layout"] = runLayoutText(layout);
  rs.environment["rows"] = std::to_string(rs.rows.size());
  rs.environment["rows_identity"] = rowsIdentityDigest(rs.rows);
  return rs;
}
} // namespace canopy
