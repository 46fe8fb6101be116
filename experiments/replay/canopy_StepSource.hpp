/// \file canopy_StepSource.hpp
/// \brief Where replayed verify steps come from: a recorded trace or a synthetic shape.
#pragma once

#include "canopy_ExperimentConfig.hpp"
#include "canopy_Generator.hpp"
#include "canopy_Problem.hpp"
#include "canopy_Results.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace canopy
{
/// \brief A step without its values: the metadata, the KV pool rows it needs and the heads.
struct StepShape
{
  BatchMetadata meta;
  int64_t num_slots = 0;
  int num_heads = 0;
};

/// \brief "B=8 H=8 T=65 P=16K ragged" for a synthetic shape, the file name for a trace: for tables only.
std::string inputLabel(InputAxes const &axes);

class StepSource
{
public:
  virtual ~StepSource() = default;
  /// \brief What the steps are, as fields (result rows carry them).
  virtual InputAxes axes() const = 0;
  /// \brief The display label of axes() (table rows).
  std::string label() const { return inputLabel(axes()); }
  virtual int64_t numSteps() const = 0;
  /// \brief Metadata and sizes only (no values): what sizes a bucket's static buffers.
  virtual StepShape shape(int64_t step, MaskLayout layout) const = 0;
  /// \brief Metadata + values (recorded, or seeded so every design sees identical inputs).
  virtual HostProblem problem(int64_t step, MaskLayout layout) const = 0;
  /// \brief Recorded expected output of the step (bf16 bits), empty when the source has none.
  virtual std::vector<uint16_t> expectedOutput(int64_t) const { return {}; }
  virtual bool recordedValues() const { return false; }
  /// \brief When every step uses the same bf16 KV pool, that pool (generated once, trimmed to the
  /// slots the source uses); the replay uploads it once per bucket instead of once per step.
  virtual std::vector<uint16_t> const *sharedPool() const { return nullptr; }
  /// \brief The same for an FP8 pool ([slots][kvRowBytes(axes().kv_dtype)] bytes, scale
  /// axes().kv_scale): the shared pool quantised once.
  virtual std::vector<uint8_t> const *sharedFp8Pool() const { return nullptr; }
  /// \brief The step without its pool (kv_pool and kv_pool_fp8 empty) when sharedPool() or
  /// sharedFp8Pool() is set, else problem(). Its kv_dtype and kv_scale are the pool's all the same.
  virtual HostProblem stepWithoutPool(int64_t step, MaskLayout layout) const { return problem(step, layout); }
  /// \brief Host bytes the source holds at once for its largest step (problemHostBytes' terms: the
  /// pool, q, slot indices, the mask, the fp64 reference and a design's output), known before any
  /// value is made: what requireFitsInMemory checks before the work.
  virtual double hostBytes() const = 0;
};

/// \brief One shape of a sweep (\p shape: batch, heads, tree, prefix, ragged, slots, values, seed,
/// KV dtype and scale), \p steps independent seeded problems.
std::unique_ptr<StepSource> makeSyntheticSource(GeneratorOptions const &shape, int steps);

/// \brief A recorded trace (validated on open; InputError naming the dataset otherwise), replayed
/// with its pool stored as \p kv_dtype (\p kv_scale for fp8-e4m3 / fp8-e5m2), or as the trace stores
/// it when \p kv_dtype is empty. Throws InputError when this build has no HDF5 support.
std::unique_ptr<StepSource> makeTraceSource(std::string const &path, int64_t max_steps, uint64_t seed,
                                            std::optional<KvDtype> kv_dtype = std::nullopt, float kv_scale = 1.0f);

/// \brief The dtype a trace stored as \p stored is replayed in when \p asked (empty: as stored): a
/// bf16 pool is quantised into any dtype on load; an FP8 pool cannot become another dtype (its
/// values are gone), InputError naming the trace and \p key.
KvDtype traceReplayDtype(std::string const &path, KvDtype stored, std::optional<KvDtype> asked, std::string const &key);

/// \brief Every input of the config (traces first, then the sweep grid), in a stable order.
std::vector<std::unique_ptr<StepSource>> makeSources(ExperimentConfig const &config);
} // namespace canopy
