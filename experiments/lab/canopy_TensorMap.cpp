/// \file canopy_TensorMap.cpp
/// \brief encodeBf16RowMap: cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion.
#include "canopy_TensorMap.hpp"

#include <mutex>

namespace canopy::cuda
{
namespace
{
using EncodeTiled = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, cuuint64_t const *,
                                 cuuint64_t const *, cuuint32_t const *, cuuint32_t const *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder()
{
  static std::once_flag once;
  static EncodeTiled fn = nullptr;
  std::call_once(once, [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    // 12000: the ABI of cuTensorMapEncodeTiled since CUDA 12.0, which every CUDA 12/13 driver serves.
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  });
  return fn;
}
} // namespace

cudaError_t encodeBf16RowMap(CUtensorMap &map, void const *base, uint64_t rows, uint64_t cols,
                             uint64_t row_stride_bytes, uint32_t box_rows, uint32_t box_cols)
{
  if (!base || reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows == 0 || rows > (uint64_t{1} << 31) ||
      cols == 0 || row_stride_bytes % 16 != 0 || row_stride_bytes < cols * 2 || box_rows == 0 || box_rows > 256 ||
      box_cols == 0 || box_cols * 2 > 128)
    return cudaErrorInvalidValue;
  EncodeTiled const encode = encoder();
  if (!encode)
    return cudaErrorNotSupported;
  cuuint64_t const dims[2] = {cols, rows};
  cuuint64_t const strides[1] = {row_stride_bytes};
  cuuint32_t const box[2] = {box_cols, box_rows};
  cuuint32_t const elem[2] = {1, 1};
  CUresult const r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(base), dims, strides, box,
                            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
} // namespace canopy::cuda
