/// \file canopy_TraceReader.hpp
/// \brief Reads a verify trace (format v1 or v2): the whole file is loaded and validated when it is
/// opened, then each step is served as SGLang-native metadata (docs/design.md §1) or as a complete
/// HostProblem, its KV pool in the trace's dtype (docs/design.md §8).
#pragma once

#include "canopy_Trace.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
struct TraceReadOptions
{
  /// Parse the file with HDF5 in a forked child process (see canopy_TraceIsolation.hpp): libhdf5
  /// can crash on corrupt metadata, and a crash must become an InputError, not take the caller down.
  /// Costs a fork and one pipe copy of the columns: measured 1.64 s vs 1.00 s in-process for a
  /// 2000-step, 32.6M-prefix-token trace (benchTraceReader). Turn off only for trusted files.
  bool isolate = true;
  /// Seconds the isolated reader may take before it is killed and the file reported unreadable;
  /// 0: scaled by the file's size (Impl::readerDeadlineSeconds: 10 s plus 1 s per 4 MiB).
  double deadline_s = 0;
};

/// \brief Loads the datasets of a trace file into host columns, checking attributes, presence,
/// dtypes (exact integer size and sign, little-endian) and shapes; then validateTraceColumns.
/// \throws InputError "<file>: <dataset>: <problem at the first bad index>" on any problem.
TraceColumns readTraceColumns(std::string const &path, TraceReadOptions const &options = {});

class TraceReader
{
public:
  /// \brief Opens and validates everything up front; InputError on any problem (never a partial reader).
  explicit TraceReader(std::string const &path, TraceReadOptions const &options = {});
  /// \brief The same from an in-memory file image (fuzzing, embedded fixtures); \p name labels errors.
  static TraceReader fromImage(void const *data, size_t size, std::string const &name = "<memory>",
                               TraceReadOptions const &options = {});
  /// \brief Wraps columns already in memory (validated here).
  explicit TraceReader(TraceColumns columns, std::string name = "<memory>");

  TraceInfo const &info() const { return _info; }
  std::string const &name() const { return _name; }
  TraceColumns const &columns() const { return _columns; }
  int64_t numSteps() const { return _columns.numSteps(); }

  /// \brief Requests in step \p s. The step accessors throw InputError for s outside [0, numSteps()).
  int stepBatchSize(int64_t s) const;
  /// \brief The SGLang-native buffers of step \p s in \p layout.
  BatchMetadata stepMetadata(int64_t s, MaskLayout layout) const;
  /// \brief The same into \p out, reusing its capacity (no allocation in a steady replay loop).
  void stepMetadata(int64_t s, MaskLayout layout, BatchMetadata &out) const;
  /// \brief Metadata plus values: the recorded q rows of the step and the recorded pool when the file
  /// has /values, else q and the pool filled by fillRandomValues(problem, seed) (same seed, same bits)
  /// and, for an FP8 trace, quantised as its pool is stored (quantiseSeededPool). The problem's
  /// kv_dtype, kv_scale and pool (kv_pool or kv_pool_fp8) are the trace's.
  HostProblem stepProblem(int64_t s, MaskLayout layout, uint64_t seed) const;
  /// \brief Recorded /values/out rows of step \p s ([T][H][512] bf16 bits); empty when absent.
  std::vector<uint16_t> expectedOutput(int64_t s) const;
  /// \brief Accepted lengths of the step's requests; empty when the file does not record them.
  std::vector<int32_t> accepted(int64_t s) const;
  std::vector<int64_t> requestIds(int64_t s) const;
  std::vector<TraceRequest> stepRequests(int64_t s) const;
  /// \brief Zero-copy view of step \p s (see TraceStepView); valid while the reader lives.
  void stepView(int64_t s, TraceStepView &view) const;

private:
  struct Validated
  {
  };
  TraceReader(Validated, std::string name, TraceColumns columns);  // columns already validated
  void checkStep(int64_t s) const;
  std::string _name;
  TraceColumns _columns;
  TraceInfo _info;
};

/// \brief Gives a seeded bf16 pool the storage of a trace of \p info (quantisePool with its kv_dtype
/// and kv_scale), as replay does for a trace without /values. A trace's scale suits its recorded
/// values, not necessarily seeded ones: when seeded values (|x| <= 1) divided by it overflow FP8,
/// InputError naming \p label, /model kv_scale and the first unreadable row.
void quantiseSeededPool(HostProblem &problem, TraceInfo const &info, std::string const &label);
} // namespace canopy
