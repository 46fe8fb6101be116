/// \file canopy_TraceReader.cpp
/// \brief Trace reader: HDF5 -> columns (every dataset read once, whole) -> validation -> steps.
#include "canopy_TraceReader.hpp"

#include "canopy_Error.hpp"
#include "canopy_KvQuant.hpp"
#include "canopy_TraceHdf5.hpp"
#include "canopy_TraceIsolation.hpp"

#include <cctype>
#include <filesystem>
#include <functional>
#include <optional>

namespace canopy
{
namespace
{
using namespace Impl;

Hid openGroup(hid_t file, std::string const &path)
{
  if (!linkExists(file, path))
    throw InputError(path + ": missing (a required group of the format)");
  Hid obj(H5Oopen(file, path.c_str(), H5P_DEFAULT), H5Oclose);
  if (!obj.valid())
    throw InputError(path + ": cannot be opened (HDF5: " + hdf5ErrorMessage() + ")");
  if (H5Iget_type(obj.get()) != H5I_GROUP)
    throw InputError(path + ": is not a group");
  return obj;  // a group opened through H5Oopen is closed by H5Oclose
}

bool isIsoTimestamp(std::string const &s)
{
  // YYYY-MM-DDTHH:MM:SS, then anything (fraction, zone): what C++ and Python writers produce.
  static char const pattern[] = "dddd-dd-ddTdd:dd:dd";
  if (s.size() < sizeof(pattern) - 1)
    return false;
  for (size_t i = 0; i + 1 < sizeof(pattern); ++i)
    if (pattern[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(s[i])) : s[i] != pattern[i])
      return false;
  return true;
}

/// The most entries a dataset may have, as an offsets dataset read before it says (its last entry,
/// plus one for another offsets dataset); why names that entry.
struct LengthBound
{
  hsize_t most;
  std::string why;
};

std::optional<LengthBound> boundBy(std::vector<int64_t> const &offsets, std::string const &name, int64_t extra = 0)
{
  if (offsets.empty() || offsets.back() < 0)
    return std::nullopt;  // validation names what is wrong with such offsets
  return LengthBound{static_cast<hsize_t>(offsets.back()) + static_cast<hsize_t>(extra),
                     name + " index " + std::to_string(offsets.size() - 1) + " (last) holds " +
                         std::to_string(offsets.back()) + (extra ? " + " + std::to_string(extra) : "")};
}

/// A 1-D dataset, refused before anything is allocated or inflated when it declares more entries
/// than \p bound (a small compressed dataset can declare gigabytes of zeros).
template <class T>
std::vector<T> readVector(hid_t file, std::string const &path, std::optional<LengthBound> const &bound = std::nullopt)
{
  Hid ds = openDataset(file, path);
  checkIntType(ds.get(), IntKindOf<T>::value, path);
  hsize_t const n = datasetDims(ds.get(), 1, path)[0];
  if (bound && n > bound->most)
    throw InputError(path + ": declares " + std::to_string(n) + " entries, more than the " +
                     std::to_string(bound->most) + " allowed, since " + bound->why + "; refused before reading it");
  checkStored(ds.get(), IntKindOf<T>::value, n, path);
  std::vector<T> v(static_cast<size_t>(n));
  readDataset(ds.get(), IntKindOf<T>::value, v.data(), n, path);
  return v;
}

/// A /values dataset of exactly \p dims: bf16 bits (uint16, attribute dtype = "bfloat16"), or an FP8
/// pool's row bytes (uint8, attribute dtype = the pool's kv dtype), as \p dtype_attr says.
template <class T>
std::vector<T> readValues(hid_t file, std::string const &path, std::vector<hsize_t> const &dims,
                          std::string const &dims_text, std::string const &dtype_attr = "bfloat16")
{
  Hid ds = openDataset(file, path);
  checkIntType(ds.get(), IntKindOf<T>::value, path);
  std::string const dtype = readStringAttr(ds.get(), "dtype", path);
  if (dtype != dtype_attr)
    throw InputError(path + ": attribute dtype is '" + dtype + "', expected '" + dtype_attr + "'" +
                     (dtype_attr == "bfloat16" ? "" : " (/model kv_dtype)"));
  std::vector<hsize_t> const got = datasetDims(ds.get(), static_cast<int>(dims.size()), path);
  for (size_t i = 0; i < dims.size(); ++i)
    if (got[i] != dims[i])
    {
      std::string g, w;
      for (size_t j = 0; j < dims.size(); ++j)
      {
        g += "[" + std::to_string(got[j]) + "]";
        w += "[" + std::to_string(dims[j]) + "]";
      }
      throw InputError(path + ": has shape " + g + ", expected " + w + " (" + dims_text + "); dimension " +
                       std::to_string(i) + " differs");
    }
  hsize_t count = 1;
  for (hsize_t d : dims)
    count = d != 0 && count > MAX_DATASET_ELEMENTS / d ? MAX_DATASET_ELEMENTS + 1 : count * d;
  checkStored(ds.get(), IntKindOf<T>::value, count, path);
  std::vector<T> v(static_cast<size_t>(count));
  readDataset(ds.get(), IntKindOf<T>::value, v.data(), count, path);
  return v;
}

/// /model kv_dtype and kv_scale: v1 knows bf16 only (other attributes were never read); v2 names
/// any KvDtype and carries kv_scale exactly for the one-scale dtypes.
void readKvDtype(hid_t model, int64_t version, TraceColumns &c)
{
  std::string const kv_dtype = readStringAttr(model, "kv_dtype", "/model");
  if (version == TRACE_FORMAT_V1)
  {
    if (kv_dtype != "bf16")
      throw InputError("/model: attribute kv_dtype is '" + kv_dtype + "', but a version 1 trace holds bf16 pools "
                       "only (an FP8 pool needs version 2)");
    return;
  }
  c.kv_dtype = parseKvDtype(kv_dtype, "/model attribute kv_dtype");
  bool const has_scale = attrExists(model, "kv_scale", "/model");
  if (kvDtypeHasScale(c.kv_dtype))
  {
    if (!has_scale)
      throw InputError("/model attribute kv_scale: is missing; a " + kv_dtype +
                       " pool needs its per-tensor scale (SGLang's k_scale, 1.0 when the checkpoint has none)");
    c.kv_scale = readFloat32Attr(model, "kv_scale", "/model");  // its value is checked by validation
  }
  else if (has_scale)
    throw InputError("/model attribute kv_scale: present, but a " + kv_dtype + " pool has no per-tensor scale" +
                     (c.kv_dtype == KvDtype::kBf16 ? "" : " (each row carries its block scales)") +
                     "; remove it");
}

TraceColumns readColumns(hid_t file)
{
  TraceColumns c;
  {
    Hid root = openGroup(file, "/");
    std::string const format = readStringAttr(root.get(), "format", "/");
    if (format != TRACE_FORMAT_NAME)
      throw InputError("/: attribute format is '" + format + "', expected '" + TRACE_FORMAT_NAME + "'");
    c.format_version = readIntAttr(root.get(), "version", "/");
    if (c.format_version != TRACE_FORMAT_V1 && c.format_version != TRACE_FORMAT_VERSION)
      throw InputError("/: attribute version is " + std::to_string(c.format_version) + "; this reader reads versions " +
                       std::to_string(TRACE_FORMAT_V1) + " and " + std::to_string(TRACE_FORMAT_VERSION));
    c.source = readStringAttr(root.get(), "source", "/");
    c.created = readStringAttr(root.get(), "created", "/");
    if (!isIsoTimestamp(c.created))
      throw InputError("/: attribute created is '" + c.created + "', expected ISO-8601 (YYYY-MM-DDTHH:MM:SS...)");
  }
  {
    Hid model = openGroup(file, "/model");
    int64_t const heads = readIntAttr(model.get(), "num_heads", "/model");
    if (heads < 1 || heads > 4096)
      throw InputError("/model: attribute num_heads is " + std::to_string(heads) + ", must be in [1, 4096]");
    c.shape.num_heads = static_cast<int>(heads);
    int64_t const d_latent = readIntAttr(model.get(), "d_latent", "/model");
    int64_t const d_rope = readIntAttr(model.get(), "d_rope", "/model");
    if (d_latent != D_LATENT || d_rope != D_ROPE)
      throw InputError("/model: attributes d_latent = " + std::to_string(d_latent) + ", d_rope = " +
                       std::to_string(d_rope) + "; only absorbed MLA with 512 + 64 is supported");
    c.shape.sm_scale = readFloatAttr(model.get(), "sm_scale", "/model");
    readKvDtype(model.get(), c.format_version, c);
  }
  {
    Hid pool = openGroup(file, "/pool");
    c.num_slots = readIntAttr(pool.get(), "num_slots", "/pool");
  }
  // Each offsets dataset bounds the datasets it indexes before they are read.
  c.request_offset = readVector<int64_t>(file, "/steps/request_offset");
  auto const rows = boundBy(c.request_offset, "/steps/request_offset");
  auto const rows1 = boundBy(c.request_offset, "/steps/request_offset", 1);
  c.request_id = readVector<int64_t>(file, "/requests/request_id", rows);
  c.prefix_len = readVector<int32_t>(file, "/requests/prefix_len", rows);
  c.tree_offset = readVector<int64_t>(file, "/requests/tree_offset", rows1);
  c.kv_offset = readVector<int64_t>(file, "/requests/kv_offset", rows1);
  if (linkExists(file, "/requests/accepted"))
    c.accepted = readVector<int32_t>(file, "/requests/accepted", rows);
  auto const nodes = boundBy(c.tree_offset, "/requests/tree_offset");
  c.parent = readVector<int32_t>(file, "/tree/parent", nodes);
  c.out_cache_loc = readVector<int64_t>(file, "/tree/out_cache_loc", nodes);
  c.kv_indices = readVector<int64_t>(file, "/tokens/kv_indices", boundBy(c.kv_offset, "/requests/kv_offset"));
  if (linkExists(file, "/values"))
  {
    // Shapes are checked before reading, against sizes that must be valid first.
    openGroup(file, "/values");
    validateTraceColumns(c);
    c.has_values = true;
    hsize_t const N = static_cast<hsize_t>(c.numNodes()), H = static_cast<hsize_t>(c.shape.num_heads);
    c.q = readValues<uint16_t>(file, "/values/q", {N, H, D_QK}, "[N][num_heads][576]");
    hsize_t const slots = static_cast<hsize_t>(c.num_slots);
    if (c.kv_dtype == KvDtype::kBf16)
      c.kv = readValues<uint16_t>(file, "/values/kv", {slots, D_QK}, "[num_slots][576]");
    else
    {
      int const row = kvRowBytes(c.kv_dtype);
      c.kv_fp8 = readValues<uint8_t>(file, "/values/kv", {slots, static_cast<hsize_t>(row)},
                                     "[num_slots][" + std::to_string(row) + "] bytes, a " + toString(c.kv_dtype) + " row",
                                     toString(c.kv_dtype));
    }
    if (linkExists(file, "/values/out"))
      c.out = readValues<uint16_t>(file, "/values/out", {N, H, D_V}, "[N][num_heads][512]");
  }
  return c;  // validated by the caller (in the parent process when isolated)
}

TraceColumns readWith(std::string const &label, hid_t fapl, char const *open_name)
{
  quietHdf5();
  try
  {
    Hid file = ownFile(H5Fopen(open_name, H5F_ACC_RDONLY, fapl));
    if (!file.valid())
      throw InputError("not a readable HDF5 file (truncated, corrupt or another format) (HDF5: " +
                       hdf5ErrorMessage() + ")");
    return readColumns(file.get());
  }
  catch (InputError const &e)
  {
    throw InputError(label + ": " + e.what());
  }
}

TraceInfo infoOf(TraceColumns const &c)
{
  TraceInfo info;
  info.source = c.source;
  info.created = c.created;
  info.format_version = c.format_version ? c.format_version : traceFormatVersionFor(c.kv_dtype);
  info.shape = c.shape;
  info.kv_dtype = c.kv_dtype;
  info.kv_scale = c.kv_scale;
  info.num_slots = c.num_slots;
  info.num_steps = c.numSteps();
  info.num_requests = c.numRows();
  info.num_nodes = c.numNodes();
  info.num_prefix_tokens = static_cast<int64_t>(c.kv_indices.size());
  info.has_values = c.has_values;
  info.has_expected_out = c.has_values && !c.out.empty();
  info.has_accepted = !c.accepted.empty();
  return info;
}

/// Reads (in a child process when isolated), then validates in this process.
TraceColumns readAndValidate(std::function<TraceColumns()> const &read, std::string const &label,
                             TraceReadOptions const &options, uint64_t file_bytes)
{
  double const deadline = options.deadline_s > 0 ? options.deadline_s : readerDeadlineSeconds(file_bytes);
  TraceColumns c = options.isolate ? readColumnsIsolated(read, label, deadline) : read();
  try
  {
    validateTraceColumns(c);
  }
  catch (InputError const &e)
  {
    throw InputError(label + ": " + e.what());
  }
  return c;
}
} // namespace

TraceColumns readTraceColumns(std::string const &path, TraceReadOptions const &options)
{
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(path + ": " + (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file"));
  uint64_t const bytes = std::filesystem::file_size(path, ec);
  return readAndValidate([&] { return readWith(path, H5P_DEFAULT, path.c_str()); }, path, options, ec ? 0 : bytes);
}

TraceReader::TraceReader(std::string const &path, TraceReadOptions const &options)
    : _name(path), _columns(readTraceColumns(path, options)), _info(infoOf(_columns))
{
}

TraceReader::TraceReader(TraceColumns columns, std::string name) : _name(std::move(name)), _columns(std::move(columns))
{
  try
  {
    validateTraceColumns(_columns);
  }
  catch (InputError const &e)
  {
    throw InputError(_name + ": " + e.what());
  }
  _info = infoOf(_columns);
}

TraceReader::TraceReader(Validated, std::string name, TraceColumns columns)
    : _name(std::move(name)), _columns(std::move(columns)), _info(infoOf(_columns))
{
}

TraceReader TraceReader::fromImage(void const *data, size_t size, std::string const &name, TraceReadOptions const &options)
{
  if (size == 0)
    throw InputError(name + ": empty file image");
  auto read = [&] {
    quietHdf5();
    Hid fapl = ownPlist(H5Pcreate(H5P_FILE_ACCESS));
    // Core driver without a backing store: the image is copied into HDF5's memory, never touches disk.
    if (H5Pset_fapl_core(fapl.get(), 1 << 16, 0) < 0 || H5Pset_file_image(fapl.get(), const_cast<void *>(data), size) < 0)
      throw RuntimeFailure(name + ": cannot set up an in-memory HDF5 file (HDF5: " + hdf5ErrorMessage() + ")");
    return readWith(name, fapl.get(), name.c_str());
  };
  return TraceReader(Validated{}, name, readAndValidate(read, name, options, size));
}

void TraceReader::checkStep(int64_t s) const
{
  if (s < 0 || s >= numSteps())
    throw InputError(_name + ": step " + std::to_string(s) + " out of range [0, " + std::to_string(numSteps()) + ")");
}

int TraceReader::stepBatchSize(int64_t s) const
{
  checkStep(s);
  return static_cast<int>(_columns.request_offset[s + 1] - _columns.request_offset[s]);
}

BatchMetadata TraceReader::stepMetadata(int64_t s, MaskLayout layout) const
{
  checkStep(s);
  return canopy::stepMetadata(_columns, s, layout);
}

void TraceReader::stepMetadata(int64_t s, MaskLayout layout, BatchMetadata &out) const
{
  checkStep(s);
  canopy::stepMetadata(_columns, s, layout, out);
}

HostProblem TraceReader::stepProblem(int64_t s, MaskLayout layout, uint64_t seed) const
{
  HostProblem p;
  p.shape = _info.shape;
  p.num_slots = _info.num_slots;
  p.meta = stepMetadata(s, layout);
  if (!_columns.has_values)
  {
    fillRandomValues(p, seed);
    quantiseSeededPool(p, _info, _name);
    return p;
  }
  size_t const row = static_cast<size_t>(_info.shape.num_heads) * D_QK;
  size_t const n0 = static_cast<size_t>(_columns.tree_offset[_columns.request_offset[s]]);
  size_t const n1 = static_cast<size_t>(_columns.tree_offset[_columns.request_offset[s + 1]]);
  p.q.assign(_columns.q.begin() + n0 * row, _columns.q.begin() + n1 * row);
  p.kv_dtype = _columns.kv_dtype;
  p.kv_scale = _columns.kv_scale;
  if (p.kv_dtype == KvDtype::kBf16)
    p.kv_pool = _columns.kv;
  else
    p.kv_pool_fp8 = _columns.kv_fp8;
  return p;
}

void quantiseSeededPool(HostProblem &p, TraceInfo const &info, std::string const &label)
{
  if (info.kv_dtype == KvDtype::kBf16)
    return;
  quantisePool(p, info.kv_dtype, info.kv_scale);
  size_t const row = static_cast<size_t>(kvRowBytes(p.kv_dtype));
  for (int64_t slot = 0; slot < p.num_slots; ++slot)
    if (std::string const problem = fp8RowProblem(p.kv_dtype, p.kv_pool_fp8.data() + static_cast<size_t>(slot) * row);
        !problem.empty())
      throw InputError(label + ": /model attribute kv_scale " + std::to_string(info.kv_scale) +
                       " is too small for seeded values in [-1, 1] (the trace has no /values): stored as " +
                       toString(info.kv_dtype) + ", pool row " + std::to_string(slot) + " " + problem +
                       "; replay it with recorded values, or write it with a larger scale");
}

std::vector<uint16_t> TraceReader::expectedOutput(int64_t s) const
{
  checkStep(s);
  if (_columns.out.empty())
    return {};
  size_t const row = static_cast<size_t>(_info.shape.num_heads) * D_V;
  size_t const n0 = static_cast<size_t>(_columns.tree_offset[_columns.request_offset[s]]);
  size_t const n1 = static_cast<size_t>(_columns.tree_offset[_columns.request_offset[s + 1]]);
  return {_columns.out.begin() + n0 * row, _columns.out.begin() + n1 * row};
}

std::vector<int32_t> TraceReader::accepted(int64_t s) const
{
  checkStep(s);
  if (_columns.accepted.empty())
    return {};
  return {_columns.accepted.begin() + _columns.request_offset[s], _columns.accepted.begin() + _columns.request_offset[s + 1]};
}

std::vector<int64_t> TraceReader::requestIds(int64_t s) const
{
  checkStep(s);
  return {_columns.request_id.begin() + _columns.request_offset[s],
          _columns.request_id.begin() + _columns.request_offset[s + 1]};
}

std::vector<TraceRequest> TraceReader::stepRequests(int64_t s) const
{
  checkStep(s);
  return canopy::stepRequests(_columns, s);
}

void TraceReader::stepView(int64_t s, TraceStepView &view) const
{
  checkStep(s);
  canopy::stepView(_columns, s, view);
}
} // namespace canopy
