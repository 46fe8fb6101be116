/// \file canopy_Trace.hpp
/// \brief Verify traces (formats v1 and v2, docs/trace-format.md): the summary a reader exposes, the
/// per-request form a writer takes, and the columnar form (one vector per HDF5 dataset) both are built on.
#pragma once

#include "canopy_Problem.hpp"
#include "canopy_Types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace canopy
{
/// Value of the root attribute `format`, and the versions this code reads: v1 (bf16 pools only) and
/// v2 (v1 plus the pool's KV dtype and scale, docs/design.md §8).
constexpr char const *TRACE_FORMAT_NAME = "canopy-verify-trace";
constexpr int64_t TRACE_FORMAT_V1 = 1;
constexpr int64_t TRACE_FORMAT_VERSION = 2;  ///< the newest

/// \brief The version a writer gives a trace of \p kv_dtype: v1 for bf16, so that every bf16 trace
/// stays readable by v1 readers; v2 for the FP8 dtypes, which v1 cannot describe.
constexpr int64_t traceFormatVersionFor(KvDtype kv_dtype)
{
  return kv_dtype == KvDtype::kBf16 ? TRACE_FORMAT_V1 : TRACE_FORMAT_VERSION;
}

/// \brief Whether the KV dtype carries one per-tensor scale (/model attribute kv_scale).
constexpr bool kvDtypeHasScale(KvDtype kv_dtype)
{
  return kv_dtype == KvDtype::kFp8E4m3 || kv_dtype == KvDtype::kFp8E5m2;
}

/// \brief What a trace holds, known once it is open (and validated).
struct TraceInfo
{
  std::string source, created;
  int64_t format_version = TRACE_FORMAT_V1;  ///< as the file says (as the writer would write, from memory)
  ModelShape shape;
  KvDtype kv_dtype = KvDtype::kBf16;
  float kv_scale = 1.f;  ///< fp8-e4m3 / fp8-e5m2 only: value = decode(byte) * kv_scale
  int64_t num_slots = 0;
  int64_t num_steps = 0, num_requests = 0, num_nodes = 0, num_prefix_tokens = 0;
  bool has_values = false, has_expected_out = false, has_accepted = false;
};

/// \brief One request row of one step. accepted = 0 means "not recorded" (a file either records it
/// for every row or for none).
struct TraceRequest
{
  int64_t request_id = 0;
  RequestSpec spec;
  int32_t accepted = 0;
};

struct TraceStep
{
  std::vector<TraceRequest> requests;
};

/// \brief A whole trace in the per-request form (convenient to build by hand; writeTrace takes it).
struct TraceContent
{
  std::string source;
  std::string created;  ///< ISO-8601; empty = the time of writing
  ModelShape shape;
  KvDtype kv_dtype = KvDtype::kBf16;  ///< the pool's storage (format v2 when not bf16)
  float kv_scale = 1.f;               ///< fp8-e4m3 / fp8-e5m2: SGLang's per-tensor k_scale
  int64_t num_slots = 0;
  std::vector<TraceStep> steps;
  /// Optional /values: bf16 bits, q [N][H][576], kv [num_slots][576], out [N][H][512] (out may be
  /// empty when q and the pool are given; all empty = no /values). An FP8 pool is kv_fp8 instead
  /// of kv: [num_slots][kvRowBytes(kv_dtype)] raw row bytes.
  std::vector<uint16_t> q, kv, out;
  std::vector<uint8_t> kv_fp8;
};

/// \brief The columnar form: exactly the datasets of the format, so reading, validating and writing
/// are single passes over flat arrays. R = rows (request x step), N = tree nodes, K = prefix tokens.
struct TraceColumns
{
  std::string source, created;
  /// The root attribute version as read from a file; 0 for columns built in memory (a writer
  /// writes traceFormatVersionFor(kv_dtype), whatever this holds).
  int64_t format_version = 0;
  ModelShape shape;
  KvDtype kv_dtype = KvDtype::kBf16;  ///< /model kv_dtype
  float kv_scale = 1.f;               ///< /model kv_scale (fp8-e4m3 / fp8-e5m2; 1 otherwise)
  int64_t num_slots = 0;
  std::vector<int64_t> request_offset{0};  ///< /steps/request_offset [S+1]
  std::vector<int64_t> request_id;         ///< /requests/request_id [R]
  std::vector<int32_t> prefix_len;         ///< /requests/prefix_len [R]
  std::vector<int64_t> tree_offset{0};     ///< /requests/tree_offset [R+1]
  std::vector<int64_t> kv_offset{0};       ///< /requests/kv_offset [R+1]
  std::vector<int32_t> accepted;           ///< /requests/accepted [R], empty = absent
  std::vector<int32_t> parent;             ///< /tree/parent [N]
  std::vector<int64_t> out_cache_loc;      ///< /tree/out_cache_loc [N]
  std::vector<int64_t> kv_indices;         ///< /tokens/kv_indices [K]
  bool has_values = false;                 ///< /values present (q and the pool)
  std::vector<uint16_t> q, kv, out;        ///< /values/q, /values/kv (bf16 pool), /values/out (may be empty)
  std::vector<uint8_t> kv_fp8;             ///< /values/kv of an FP8 pool: [num_slots][kvRowBytes(kv_dtype)]

  int64_t numSteps() const { return static_cast<int64_t>(request_offset.size()) - 1; }
  int64_t numRows() const { return static_cast<int64_t>(request_id.size()); }
  int64_t numNodes() const { return static_cast<int64_t>(parent.size()); }

  /// \brief Closes the current step: the rows appended since the last call belong to it.
  void endStep() { request_offset.push_back(numRows()); }
};

/// \brief Checks every invariant of the format on the columns (docs/trace-format.md): offsets start
/// at 0, are monotone and end at their dataset's length; prefix lengths match kv_offset; trees have
/// one root (node 0) and parent[i] < i; accepted in [1, T]; slots in [0, num_slots); tree slots of a
/// step are distinct and not in any prefix of that step; request ids unique per step; per-step prefix
/// tokens fit kv_indptr's int32; kv_scale finite and > 0 (1 where the dtype has none); values sized
/// [N][H][576], the pool [num_slots][row] for its dtype, [N][H][512], and readable where read
/// (finite bf16; no NaN encoding, bad block scale or non-finite rope value in an FP8 row). Linear time.
/// \throws InputError naming the dataset and the first bad index.
void validateTraceColumns(TraceColumns const &columns);

/// \brief Per-request form -> columns (no validation).
TraceColumns toColumns(TraceContent const &content);

/// \brief The requests of step \p s as RequestSpecs (copies).
std::vector<TraceRequest> stepRequests(TraceColumns const &columns, int64_t s);

/// \brief Zero-copy view of one step: the step's rows are consecutive in every dataset, so its
/// prefix slots, tree slots and parents are plain slices of the columns; only the two indptr arrays
/// (B+1 entries, relative to the step) are computed. What a replay loop needs without copying P.
struct TraceStepView
{
  int batch_size = 0;
  std::vector<int32_t> kv_indptr;          ///< [B+1], SGLang dtype
  std::vector<int64_t> qo_indptr;          ///< [B+1]
  int64_t const *kv_indices = nullptr;     ///< [num_prefix_tokens]
  int64_t const *out_cache_loc = nullptr;  ///< [num_nodes]
  int32_t const *tree_parent = nullptr;    ///< [num_nodes]
  int64_t const *request_id = nullptr;     ///< [batch_size]
  int32_t const *accepted = nullptr;       ///< [batch_size], null when not recorded
  int64_t num_prefix_tokens = 0, num_nodes = 0;
};

/// \brief Fills \p view for step \p s; reuses its vectors, so a warm view allocates nothing.
/// \pre the columns are valid and 0 <= s < numSteps(); the view lives as long as the columns.
void stepView(TraceColumns const &columns, int64_t s, TraceStepView &view);

/// \brief SGLang-native metadata of step \p s (docs/design.md §1) straight from the columns.
/// \pre the columns are valid.
BatchMetadata stepMetadata(TraceColumns const &columns, int64_t s, MaskLayout layout);
/// \brief The same into \p out, reusing its buffers' capacity: a replay loop that keeps one
/// BatchMetadata allocates nothing once it has seen its largest step.
void stepMetadata(TraceColumns const &columns, int64_t s, MaskLayout layout, BatchMetadata &out);

/// \brief "YYYY-MM-DDTHH:MM:SSZ" for now (UTC).
std::string isoTimestampNow();
} // namespace canopy
