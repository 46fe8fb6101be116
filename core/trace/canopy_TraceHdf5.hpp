/// \file canopy_TraceHdf5.hpp
/// \brief Internal: the thin layer over HDF5's C API that the trace reader and writer share (owned
/// handles, HDF5 errors turned into exceptions with HDF5's own message, typed dataset I/O).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace canopy::Impl
{
/// \brief Turns off HDF5's automatic error printing (once per process): failures are reported
/// through our exceptions instead of a stack dump on stderr.
void quietHdf5();

/// \brief The innermost message on HDF5's error stack (then clears the stack); "" if none.
std::string hdf5ErrorMessage();

/// \brief An owned HDF5 identifier, closed with the matching H5?close on destruction.
class Hid
{
public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer close) : _id(id), _close(close) {}
  Hid(Hid const &) = delete;
  Hid &operator=(Hid const &) = delete;
  Hid(Hid &&o) noexcept : _id(o._id), _close(o._close) { o._id = -1; }
  Hid &operator=(Hid &&o) noexcept
  {
    if (this != &o)
    {
      reset();
      _id = o._id;
      _close = o._close;
      o._id = -1;
    }
    return *this;
  }
  ~Hid() { reset(); }
  hid_t get() const { return _id; }
  bool valid() const { return _id >= 0; }
  /// \brief Closes now; returns false when HDF5 reports an error on close (e.g. a failed flush).
  bool close()
  {
    bool ok = true;
    if (_id >= 0 && _close)
      ok = _close(_id) >= 0;
    _id = -1;
    return ok;
  }

private:
  void reset()
  {
    if (_id >= 0 && _close)
      _close(_id);
    _id = -1;
  }
  hid_t _id = -1;
  Closer _close = nullptr;
};

Hid ownFile(hid_t id);
Hid ownGroup(hid_t id);
Hid ownDataset(hid_t id);
Hid ownAttribute(hid_t id);
Hid ownType(hid_t id);
Hid ownSpace(hid_t id);
Hid ownPlist(hid_t id);

/// Scalar element types of the format and their HDF5 descriptions.
enum class IntKind
{
  kInt32,
  kInt64,
  kUInt16,
  kUInt8  ///< raw FP8 pool rows (format v2)
};
template <class T> struct IntKindOf;
template <> struct IntKindOf<int32_t> { static constexpr IntKind value = IntKind::kInt32; };
template <> struct IntKindOf<int64_t> { static constexpr IntKind value = IntKind::kInt64; };
template <> struct IntKindOf<uint16_t> { static constexpr IntKind value = IntKind::kUInt16; };
template <> struct IntKindOf<uint8_t> { static constexpr IntKind value = IntKind::kUInt8; };
char const *intKindName(IntKind kind);
hid_t nativeType(IntKind kind);
hid_t fileTypeLE(IntKind kind);

// ---- reading: every failure is an InputError naming the object (a bad file is bad input) ----
/// \brief Whether every component of the absolute \p path exists (HDF5's H5Lexists needs that walk).
bool linkExists(hid_t file, std::string const &path);
/// \brief Opens a dataset; InputError "missing" or "is not a dataset".
Hid openDataset(hid_t file, std::string const &path);
std::string readStringAttr(hid_t obj, char const *name, std::string const &obj_path);
int64_t readIntAttr(hid_t obj, char const *name, std::string const &obj_path);
double readFloatAttr(hid_t obj, char const *name, std::string const &obj_path);
/// \brief A floating-point attribute stored as IEEE binary32 (a wider type could hold a value fp32
/// cannot, which would then be silently rounded).
float readFloat32Attr(hid_t obj, char const *name, std::string const &obj_path);
/// \brief Whether \p obj has an attribute \p name (InputError when HDF5 cannot tell).
bool attrExists(hid_t obj, char const *name, std::string const &obj_path);
/// \brief Requires an integer type of exactly \p kind (size, sign) stored little-endian.
void checkIntType(hid_t dataset, IntKind kind, std::string const &path);
/// \brief Dimensions of a simple dataspace of rank \p rank; InputError otherwise.
std::vector<hsize_t> datasetDims(hid_t dataset, int rank, std::string const &path);
/// \brief The most elements a trace dataset may declare (2^34: 128 GiB of int64, beyond any host's
/// trace): a larger count is refused before anything is allocated.
constexpr hsize_t MAX_DATASET_ELEMENTS = hsize_t{1} << 34;
/// \brief Checks, before the caller allocates for it, that a dataset of \p count elements of \p kind
/// is within MAX_DATASET_ELEMENTS and really stored: every chunk written, and no more bytes declared
/// than its storage and the file's size can hold (a corrupt header can declare petabytes).
void checkStored(hid_t dataset, IntKind kind, hsize_t count, std::string const &path);
/// \brief Reads the whole dataset (\p count elements of \p kind) into \p out, which checkStored
/// has vetted.
void readDataset(hid_t dataset, IntKind kind, void *out, hsize_t count, std::string const &path);

// ---- writing -------------------------------------------------------------------------------
struct WriteOptions
{
  int deflate_level = 4;            ///< 0 = no compression
  int64_t chunk_bytes = 1 << 20;    ///< target chunk size
};

Hid createGroup(hid_t parent, char const *name);
void writeStringAttr(hid_t obj, char const *name, std::string const &value);
void writeInt64Attr(hid_t obj, char const *name, int64_t value);
void writeDoubleAttr(hid_t obj, char const *name, double value);
void writeFloatAttr(hid_t obj, char const *name, float value);

/// \brief Writes a little-endian integer dataset of shape \p dims (chunked + shuffle + deflate when
/// non-empty; contiguous when empty, since HDF5 cannot chunk a zero-length fixed dimension).
void writeDataset(hid_t parent, char const *name, IntKind kind, void const *data, std::vector<hsize_t> const &dims,
                  WriteOptions const &options);
template <class T>
void writeDataset(hid_t parent, char const *name, std::vector<T> const &data, WriteOptions const &options)
{
  writeDataset(parent, name, IntKindOf<T>::value, data.data(), {static_cast<hsize_t>(data.size())}, options);
}
} // namespace canopy::Impl
