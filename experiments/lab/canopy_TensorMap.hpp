/// \file canopy_TensorMap.hpp
/// \brief Tensor maps for the bulk tensor copy (TMA) over a row-major bf16 matrix, such as the KV
/// pool. The encoder is the driver's cuTensorMapEncodeTiled, reached through the runtime's entry
/// point query, so nothing links libcuda. Host code; plain g++ can include it.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace canopy::cuda
{
/// \brief Encodes into \p map a 2-D tensor map over \p rows x \p cols bf16 values at \p base (rows
/// \p row_stride_bytes apart; a multiple of 16), whose boxes are \p box_rows rows x \p box_cols
/// columns (box_cols x 2 <= 128 bytes) laid out with the 128-byte swizzle; coordinates past the
/// matrix read as zeros. Host work only (no device call, capture-safe). cudaErrorInvalidValue for a
/// shape the copy engine cannot address (base not 16-byte aligned, more than 2^31 rows).
cudaError_t encodeBf16RowMap(CUtensorMap &map, void const *base, uint64_t rows, uint64_t cols,
                             uint64_t row_stride_bytes, uint32_t box_rows, uint32_t box_cols);
} // namespace canopy::cuda
