/// \file canopy_TraceHdf5.cpp
/// \brief HDF5 C API helpers for traces: handles, errors, typed attributes and datasets.
#include "canopy_TraceHdf5.hpp"

#include "canopy_Error.hpp"

#include <algorithm>
#include <mutex>

namespace canopy::Impl
{
void quietHdf5()
{
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

namespace
{
herr_t innermost(unsigned n, H5E_error2_t const *err, void *out)
{
  auto *msg = static_cast<std::string *>(out);
  if (n == 0 && err && err->desc)
    *msg = err->desc;
  return 0;
}
} // namespace

std::string hdf5ErrorMessage()
{
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg;
}

Hid ownFile(hid_t id) { return {id, H5Fclose}; }
Hid ownGroup(hid_t id) { return {id, H5Gclose}; }
Hid ownDataset(hid_t id) { return {id, H5Dclose}; }
Hid ownAttribute(hid_t id) { return {id, H5Aclose}; }
Hid ownType(hid_t id) { return {id, H5Tclose}; }
Hid ownSpace(hid_t id) { return {id, H5Sclose}; }
Hid ownPlist(hid_t id) { return {id, H5Pclose}; }

char const *intKindName(IntKind kind)
{
  switch (kind)
  {
  case IntKind::kInt32: return "int32";
  case IntKind::kInt64: return "int64";
  case IntKind::kUInt16: return "uint16";
  case IntKind::kUInt8: return "uint8";
  }
  return "?";
}

hid_t nativeType(IntKind kind)
{
  switch (kind)
  {
  case IntKind::kInt32: return H5T_NATIVE_INT32;
  case IntKind::kInt64: return H5T_NATIVE_INT64;
  case IntKind::kUInt16: return H5T_NATIVE_UINT16;
  case IntKind::kUInt8: return H5T_NATIVE_UINT8;
  }
  return -1;
}

hid_t fileTypeLE(IntKind kind)
{
  switch (kind)
  {
  case IntKind::kInt32: return H5T_STD_I32LE;
  case IntKind::kInt64: return H5T_STD_I64LE;
  case IntKind::kUInt16: return H5T_STD_U16LE;
  case IntKind::kUInt8: return H5T_STD_U8LE;
  }
  return -1;
}

namespace
{
size_t kindSize(IntKind kind)
{
  switch (kind)
  {
  case IntKind::kUInt8: return 1;
  case IntKind::kUInt16: return 2;
  case IntKind::kInt32: return 4;
  case IntKind::kInt64: return 8;
  }
  return 8;
}

[[noreturn]] void bad(std::string const &what, std::string const &message)
{
  std::string detail = hdf5ErrorMessage();
  throw InputError(what + ": " + message + (detail.empty() ? "" : " (HDF5: " + detail + ")"));
}

std::string attrPath(std::string const &obj, char const *name) { return obj + (obj == "/" ? "" : "/") + "@" + name; }

/// Opens an attribute and checks it holds exactly one value of \p cls.
Hid openScalarAttr(hid_t obj, char const *name, std::string const &obj_path, H5T_class_t cls, char const *cls_name)
{
  std::string const what = obj_path + " attribute " + name;
  htri_t const exists = H5Aexists(obj, name);
  if (exists < 0)
    bad(what, "cannot be queried");
  if (exists == 0)
    bad(what, "is missing");
  Hid attr = ownAttribute(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr.valid())
    bad(what, "cannot be opened");
  Hid type = ownType(H5Aget_type(attr.get()));
  if (!type.valid() || H5Tget_class(type.get()) != cls)
    bad(what, std::string("must be a ") + cls_name);
  Hid space = ownSpace(H5Aget_space(attr.get()));
  hssize_t const n = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  if (n != 1)
    bad(what, "must hold exactly one value, holds " + std::to_string(static_cast<long long>(n)));
  return attr;
}
} // namespace

bool linkExists(hid_t file, std::string const &path)
{
  size_t pos = 1;
  while (true)
  {
    size_t const next = path.find('/', pos);
    std::string const prefix = path.substr(0, next);
    htri_t const e = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    if (e <= 0)
    {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (next == std::string::npos)
      return true;
    pos = next + 1;
  }
}

Hid openDataset(hid_t file, std::string const &path)
{
  if (!linkExists(file, path))
    throw InputError(path + ": missing (a required dataset of the format)");
  // H5Oopen + H5Iget_type rather than H5Oget_info*, whose signature differs between 1.10 and 1.12+.
  Hid obj(H5Oopen(file, path.c_str(), H5P_DEFAULT), H5Oclose);
  if (!obj.valid())
    bad(path, "cannot be opened");
  if (H5Iget_type(obj.get()) != H5I_DATASET)
    bad(path, "is not a dataset");
  return Hid(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
}

std::string readStringAttr(hid_t obj, char const *name, std::string const &obj_path)
{
  std::string const what = obj_path + " attribute " + name;
  Hid attr = openScalarAttr(obj, name, obj_path, H5T_STRING, "string");
  Hid type = ownType(H5Aget_type(attr.get()));
  htri_t const is_var = H5Tis_variable_str(type.get());
  if (is_var < 0)
    bad(what, "has an unreadable string type");
  if (is_var)
  {
    // Read back with a variable-length memory type of the file's character set (h5py writes UTF-8).
    Hid mem = ownType(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char *value = nullptr;
    if (H5Aread(attr.get(), mem.get(), &value) < 0)
      bad(what, "cannot be read");
    std::string out = value ? value : "";
    if (value)
      H5free_memory(value);
    return out;
  }
  size_t const size = H5Tget_size(type.get());
  if (size == 0 || size > (1u << 20))
    bad(what, "has an implausible string size " + std::to_string(size));
  Hid mem = ownType(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem.get(), size);
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
  H5Tset_strpad(mem.get(), H5Tget_strpad(type.get()));
  std::string buf(size, '\0');
  if (H5Aread(attr.get(), mem.get(), buf.data()) < 0)
    bad(what, "cannot be read");
  buf.resize(std::min(buf.find('\0'), buf.size()));
  // Space-padded fixed strings (Fortran style) carry trailing blanks that are not part of the value.
  if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD)
    buf.erase(buf.find_last_not_of(' ') + 1);
  return buf;
}

int64_t readIntAttr(hid_t obj, char const *name, std::string const &obj_path)
{
  Hid attr = openScalarAttr(obj, name, obj_path, H5T_INTEGER, "integer");
  int64_t v = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &v) < 0)
    bad(obj_path + " attribute " + name, "cannot be read as int64");
  return v;
}

double readFloatAttr(hid_t obj, char const *name, std::string const &obj_path)
{
  Hid attr = openScalarAttr(obj, name, obj_path, H5T_FLOAT, "floating-point number");
  double v = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v) < 0)
    bad(obj_path + " attribute " + name, "cannot be read as float64");
  return v;
}

float readFloat32Attr(hid_t obj, char const *name, std::string const &obj_path)
{
  Hid attr = openScalarAttr(obj, name, obj_path, H5T_FLOAT, "floating-point number");
  Hid type = ownType(H5Aget_type(attr.get()));
  if (!type.valid() || H5Tget_size(type.get()) != 4)
    bad(obj_path + " attribute " + name, "must be a float32 (IEEE binary32), is " +
                                             std::to_string(type.valid() ? 8 * H5Tget_size(type.get()) : 0) + "-bit");
  float v = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_FLOAT, &v) < 0)
    bad(obj_path + " attribute " + name, "cannot be read as float32");
  return v;
}

bool attrExists(hid_t obj, char const *name, std::string const &obj_path)
{
  htri_t const exists = H5Aexists(obj, name);
  if (exists < 0)
    bad(obj_path + " attribute " + name, "cannot be queried");
  return exists > 0;
}

void checkIntType(hid_t dataset, IntKind kind, std::string const &path)
{
  Hid type = ownType(H5Dget_type(dataset));
  if (!type.valid())
    bad(path, "has an unreadable type");
  H5T_class_t const cls = H5Tget_class(type.get());
  std::string const want = std::string(intKindName(kind)) + " little-endian";
  if (cls != H5T_INTEGER)
    bad(path, "has a non-integer type, expected " + want);
  bool const want_signed = kind == IntKind::kInt32 || kind == IntKind::kInt64;
  size_t const size = H5Tget_size(type.get());
  H5T_sign_t const sign = H5Tget_sign(type.get());
  if (size != kindSize(kind) || (sign == H5T_SGN_2) != want_signed)
    bad(path, std::string("has type ") + (sign == H5T_SGN_2 ? "int" : "uint") + std::to_string(8 * size) +
                  ", expected " + want);
  if (size > 1 && H5Tget_order(type.get()) != H5T_ORDER_LE)  // a byte has no order to check
    bad(path, "is not little-endian, expected " + want);
}

std::vector<hsize_t> datasetDims(hid_t dataset, int rank, std::string const &path)
{
  Hid space = ownSpace(H5Dget_space(dataset));
  if (!space.valid())
    bad(path, "has an unreadable dataspace");
  H5S_class_t const cls = H5Sget_simple_extent_type(space.get());
  if (cls != H5S_SIMPLE)
    bad(path, "must be a simple array of rank " + std::to_string(rank) + (cls == H5S_NULL ? " (it is a null dataspace)" : cls == H5S_SCALAR ? " (it is a scalar)" : ""));
  int const r = H5Sget_simple_extent_ndims(space.get());
  if (r != rank)
    bad(path, "has rank " + std::to_string(r) + ", expected " + std::to_string(rank));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    bad(path, "has unreadable dimensions");
  return dims;
}

/// A chunked dataset's mandatory filters must all be in this HDF5 library: a chunk written through a
/// filter it lacks cannot be read, and the read would only say "corrupt". (An optional filter that
/// was unavailable when written left its chunks unfiltered, and they read fine.)
void checkFilters(hid_t dcpl, std::string const &path)
{
  int const n = H5Pget_nfilters(dcpl);
  if (n < 0)
    bad(path, "has an unreadable filter pipeline");
  for (int i = 0; i < n; ++i)
  {
    unsigned flags = 0, config = 0;
    size_t nvalues = 0;
    char name[64] = {0};
    H5Z_filter_t const id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nvalues, nullptr, sizeof(name),
                                           name, &config);
    if (id < 0)
      bad(path, "has an unreadable filter pipeline");
    if ((flags & H5Z_FLAG_OPTIONAL) == 0 && H5Zfilter_avail(id) <= 0)
      bad(path, "is stored through HDF5 filter " + std::to_string(id) + (name[0] ? " (" + std::string(name) + ")" : "") +
                    ", which this HDF5 library does not have; write the trace with deflate (as canopy trace synth does)");
  }
}

void checkStored(hid_t dataset, IntKind kind, hsize_t count, std::string const &path)
{
  if (count > MAX_DATASET_ELEMENTS)
    bad(path, "declares " + std::to_string(count) + " elements, more than a trace may hold (" +
                  std::to_string(MAX_DATASET_ELEMENTS) + ")");
  if (count == 0)
    return;
  // Never-written chunks read back as fill values; a trace writer writes every element, so
  // missing storage means a truncated or corrupt file. (H5Dget_space_status cannot tell: it
  // compares stored bytes with the raw size, so every compressed dataset looks partial.)
  Hid dcpl = ownPlist(H5Dget_create_plist(dataset));
  H5D_layout_t const layout = dcpl.valid() ? H5Pget_layout(dcpl.get()) : H5D_LAYOUT_ERROR;
  if (layout == H5D_CHUNKED)
  {
    checkFilters(dcpl.get(), path);
    Hid space = ownSpace(H5Dget_space(dataset));
    int const rank = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0))), chunk(dims.size());
    if (rank <= 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0 ||
        H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank)
      bad(path, "has an unreadable chunk layout");
    hsize_t expected = 1;
    for (size_t i = 0; i < dims.size(); ++i)
    {
      if (chunk[i] == 0)
        bad(path, "has a zero chunk dimension");
      expected *= (dims[i] + chunk[i] - 1) / chunk[i];
    }
    hsize_t written = 0;
    if (H5Dget_num_chunks(dataset, space.get(), &written) < 0)
      bad(path, "cannot count its chunks");
    if (written != expected)
      bad(path, "has " + std::to_string(written) + " of its " + std::to_string(expected) +
                    " chunks stored: elements were never written (truncated or corrupt file)");
  }
  else if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT)
    bad(path, "has an unsupported storage layout");
  // Deflate expands at most ~1032:1, so stored bytes bound what a corrupt header can make us allocate;
  // and a corrupt chunk index can claim more storage than the whole file has.
  hsize_t const stored = H5Dget_storage_size(dataset);
  hsize_t const raw = count * kindSize(kind);
  if (raw / 1100 > stored || (layout != H5D_CHUNKED && stored < raw))
    bad(path, "declares " + std::to_string(raw) + " bytes but stores only " + std::to_string(stored));
  Hid file = ownFile(H5Iget_file_id(dataset));
  hsize_t file_bytes = 0;
  if (file.valid() && H5Fget_filesize(file.get(), &file_bytes) >= 0 && raw / 1100 > file_bytes)
    bad(path, "declares " + std::to_string(raw) + " bytes, more than a file of " + std::to_string(file_bytes) +
                  " bytes can hold");
}

void readDataset(hid_t dataset, IntKind kind, void *out, hsize_t count, std::string const &path)
{
  if (count == 0)
    return;
  if (H5Dread(dataset, nativeType(kind), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
    bad(path, "cannot be read (corrupt or truncated data)");
}

// ---- writing -------------------------------------------------------------------------------
namespace
{
[[noreturn]] void writeFailed(std::string const &what)
{
  std::string detail = hdf5ErrorMessage();
  throw RuntimeFailure("trace writer: " + what + (detail.empty() ? "" : " (HDF5: " + detail + ")"));
}
} // namespace

Hid createGroup(hid_t parent, char const *name)
{
  Hid g = ownGroup(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!g.valid())
    writeFailed(std::string("cannot create group ") + name);
  return g;
}

namespace
{
void writeAttr(hid_t obj, char const *name, hid_t file_type, hid_t mem_type, void const *value)
{
  Hid space = ownSpace(H5Screate(H5S_SCALAR));
  Hid attr = ownAttribute(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), mem_type, value) < 0)
    writeFailed(std::string("cannot write attribute ") + name);
}
} // namespace

void writeStringAttr(hid_t obj, char const *name, std::string const &value)
{
  // Variable-length UTF-8: what h5py writes for a Python str, so both sides read each other's files.
  Hid type = ownType(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  char const *p = value.c_str();
  writeAttr(obj, name, type.get(), type.get(), &p);
}

void writeInt64Attr(hid_t obj, char const *name, int64_t value)
{
  writeAttr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void writeDoubleAttr(hid_t obj, char const *name, double value)
{
  writeAttr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void writeFloatAttr(hid_t obj, char const *name, float value)
{
  writeAttr(obj, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &value);
}

void writeDataset(hid_t parent, char const *name, IntKind kind, void const *data, std::vector<hsize_t> const &dims,
                  WriteOptions const &options)
{
  hsize_t count = 1;
  for (hsize_t d : dims)
    count *= d;
  Hid space = ownSpace(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Hid dcpl = ownPlist(H5Pcreate(H5P_DATASET_CREATE));
  if (count > 0)
  {
    // Chunk along the first dimension only: a chunk holds whole rows (a node's q, a slot's KV).
    hsize_t row = 1;
    for (size_t i = 1; i < dims.size(); ++i)
      row *= dims[i];
    hsize_t const row_bytes = row * kindSize(kind);
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], static_cast<hsize_t>(options.chunk_bytes) / row_bytes));
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (options.deflate_level > 0)
    {
      // Byte shuffle first: slot numbers and offsets differ mostly in their low bytes.
      H5Pset_shuffle(dcpl.get());
      H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.deflate_level));
    }
  }
  Hid ds = ownDataset(H5Dcreate2(parent, name, fileTypeLE(kind), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!ds.valid())
    writeFailed(std::string("cannot create dataset ") + name);
  if (count > 0 && H5Dwrite(ds.get(), nativeType(kind), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    writeFailed(std::string("cannot write dataset ") + name);
}
} // namespace canopy::Impl
