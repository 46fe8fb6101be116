/// \file canopy_TraceWriter.cpp
/// \brief Trace writer: columns -> HDF5 groups, attributes and chunked, shuffled, deflated datasets
/// (version 1 for a bf16 pool, 2 for an FP8 one: traceFormatVersionFor).
#include "canopy_TraceWriter.hpp"

#include "canopy_Error.hpp"
#include "canopy_SyncedWrite.hpp"
#include "canopy_TraceHdf5.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace canopy
{
namespace
{
using namespace Impl;

void writeFile(hid_t file, TraceColumns const &c, TraceWriteOptions const &o)
{
  WriteOptions const w{o.deflate_level, o.chunk_bytes};
  writeStringAttr(file, "format", TRACE_FORMAT_NAME);
  writeInt64Attr(file, "version", traceFormatVersionFor(c.kv_dtype));
  writeStringAttr(file, "source", c.source);
  writeStringAttr(file, "created", c.created.empty() ? isoTimestampNow() : c.created);
  {
    Hid model = createGroup(file, "model");
    writeInt64Attr(model.get(), "num_heads", c.shape.num_heads);
    writeInt64Attr(model.get(), "d_latent", D_LATENT);
    writeInt64Attr(model.get(), "d_rope", D_ROPE);
    writeDoubleAttr(model.get(), "sm_scale", c.shape.sm_scale);
    writeStringAttr(model.get(), "kv_dtype", toString(c.kv_dtype));
    if (kvDtypeHasScale(c.kv_dtype))
      writeFloatAttr(model.get(), "kv_scale", c.kv_scale);
  }
  {
    Hid pool = createGroup(file, "pool");
    writeInt64Attr(pool.get(), "num_slots", c.num_slots);
  }
  {
    Hid steps = createGroup(file, "steps");
    writeDataset(steps.get(), "request_offset", c.request_offset, w);
  }
  {
    Hid req = createGroup(file, "requests");
    writeDataset(req.get(), "request_id", c.request_id, w);
    writeDataset(req.get(), "prefix_len", c.prefix_len, w);
    writeDataset(req.get(), "tree_offset", c.tree_offset, w);
    writeDataset(req.get(), "kv_offset", c.kv_offset, w);
    if (!c.accepted.empty())
      writeDataset(req.get(), "accepted", c.accepted, w);
  }
  {
    Hid tree = createGroup(file, "tree");
    writeDataset(tree.get(), "parent", c.parent, w);
    writeDataset(tree.get(), "out_cache_loc", c.out_cache_loc, w);
  }
  {
    Hid tokens = createGroup(file, "tokens");
    writeDataset(tokens.get(), "kv_indices", c.kv_indices, w);
  }
  if (c.has_values)
  {
    Hid values = createGroup(file, "values");
    hsize_t const H = static_cast<hsize_t>(c.shape.num_heads);
    auto rows = [](std::vector<uint16_t> const &v, hsize_t row) { return static_cast<hsize_t>(v.size()) / row; };
    auto put = [&](char const *name, std::vector<uint16_t> const &v, std::vector<hsize_t> const &dims) {
      writeDataset(values.get(), name, IntKind::kUInt16, v.data(), dims, w);
      Hid ds = ownDataset(H5Dopen2(values.get(), name, H5P_DEFAULT));
      writeStringAttr(ds.get(), "dtype", "bfloat16");
    };
    put("q", c.q, {rows(c.q, H * D_QK), H, D_QK});
    if (c.kv_dtype == KvDtype::kBf16)
      put("kv", c.kv, {rows(c.kv, D_QK), D_QK});
    else
    {
      // The pool as the serving stack holds it: raw row bytes, named by their dtype.
      hsize_t const row = static_cast<hsize_t>(kvRowBytes(c.kv_dtype));
      writeDataset(values.get(), "kv", IntKind::kUInt8, c.kv_fp8.data(), {c.kv_fp8.size() / row, row}, w);
      Hid ds = ownDataset(H5Dopen2(values.get(), "kv", H5P_DEFAULT));
      writeStringAttr(ds.get(), "dtype", toString(c.kv_dtype));
    }
    if (!c.out.empty())
      put("out", c.out, {rows(c.out, H * D_V), H, D_V});
  }
}

std::string tempNameFor(std::string const &path)
{
  static std::atomic<unsigned> counter{0};
  return path + ".tmp-" + std::to_string(static_cast<long>(getpid())) + "-" + std::to_string(counter++);
}
} // namespace

namespace Impl
{
void writeColumnsUnchecked(std::string const &path, TraceColumns const &columns, TraceWriteOptions const &options)
{
  quietHdf5();
  std::filesystem::path const target(path);
  std::filesystem::path const dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw InputError(path + ": output folder '" + dir.string() + "' does not exist");
  // HDF5 builds the file in memory and this process writes it: a full disk is then a failed write(2)
  // reported here, never an HDF5 file left open that the library's exit handler trips over.
  std::vector<unsigned char> const image = writeColumnsImage(columns, options);
  std::string const tmp = tempNameFor(path);
  try
  {
    writeSynced(tmp, image.data(), image.size());
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw RuntimeFailure("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  catch (RuntimeFailure const &e)
  {
    std::remove(tmp.c_str());
    throw RuntimeFailure(std::string("trace writer: ") + e.what());
  }
}

std::vector<unsigned char> writeColumnsImage(TraceColumns const &columns, TraceWriteOptions const &options)
{
  quietHdf5();
  Hid fapl = ownPlist(H5Pcreate(H5P_FILE_ACCESS));
  if (H5Pset_fapl_core(fapl.get(), 1 << 16, 0) < 0)
    throw RuntimeFailure("trace writer: cannot set up an in-memory HDF5 file (HDF5: " + hdf5ErrorMessage() + ")");
  static std::atomic<unsigned> counter{0};
  std::string const name = "canopy-trace-image-" + std::to_string(counter++);
  Hid file = ownFile(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!file.valid())
    throw RuntimeFailure("trace writer: cannot create an in-memory file (HDF5: " + hdf5ErrorMessage() + ")");
  writeFile(file.get(), columns, options);
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0)
    throw RuntimeFailure("trace writer: flush failed (HDF5: " + hdf5ErrorMessage() + ")");
  ssize_t const size = H5Fget_file_image(file.get(), nullptr, 0);
  if (size <= 0)
    throw RuntimeFailure("trace writer: no file image (HDF5: " + hdf5ErrorMessage() + ")");
  std::vector<unsigned char> image(static_cast<size_t>(size));
  if (H5Fget_file_image(file.get(), image.data(), image.size()) != size)
    throw RuntimeFailure("trace writer: file image copy failed (HDF5: " + hdf5ErrorMessage() + ")");
  return image;
}
} // namespace Impl

void writeTraceColumns(std::string const &path, TraceColumns const &columns, TraceWriteOptions const &options)
{
  try
  {
    validateTraceColumns(columns);
  }
  catch (InputError const &e)
  {
    throw InputError(path + ": refusing to write an invalid trace: " + e.what());
  }
  Impl::writeColumnsUnchecked(path, columns, options);
}

void writeTrace(std::string const &path, TraceContent const &content)
{
  writeTraceColumns(path, toColumns(content));
}
} // namespace canopy
