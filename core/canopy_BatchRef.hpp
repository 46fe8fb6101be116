/// \file canopy_BatchRef.hpp
/// \brief The one list of a verify batch's native buffers (BatchBuffers, over any holder: raw
/// pointer, View, device buffer) and BatchRef, its POD raw-pointer form: what every design's run()
/// receives and what the CUDA launchers see. No Kokkos: plain nvcc compiles it.
#pragma once

#include "canopy_KvDtype.hpp"
#include "canopy_Types.hpp"

#include <cstdint>

namespace canopy
{
/// \brief What sizes a buffer: each buffer's length is one of these counts of the batch.
enum class BufferExtent
{
  kRows,          ///< B + 1 (offset arrays)
  kPrefixTokens,  ///< sum P
  kNodes,         ///< sum T
  kMaskBytes,     ///< custom_mask bytes
  kQueries,       ///< sum T * H * 576
  kPool,          ///< num_slots * 576
  kOutputs        ///< sum T * H * 512
};

/// \brief The batch's buffers, each held by \p Holder (Holder<T const> for inputs, Holder<T> for the
/// output). SGLang's dtypes (docs/design.md §1). Adding a buffer is one line here, one in
/// forEachBuffer, and the code that reads it.
template <template <class> class Holder>
struct BatchBuffers
{
  Holder<int32_t const> kv_indptr;      ///< [B+1]
  Holder<int64_t const> kv_indices;     ///< [sum P]
  Holder<int64_t const> qo_indptr;      ///< [B+1]
  Holder<int64_t const> out_cache_loc;  ///< [sum T]
  Holder<uint8_t const> custom_mask;    ///< full/tree layouts
  Holder<int64_t const> mask_indptr;    ///< [B+1]
  Holder<int32_t const> tree_parent;    ///< [sum T], parents layout
  Holder<uint16_t const> q;             ///< bf16 [sum T][H][576]
  Holder<uint16_t const> kv_pool;       ///< bf16 [num_slots][576]; V = first 512 columns
  Holder<uint16_t> out;                 ///< bf16 [sum T][H][512]
};

/// \brief Calls f(name, extent, b.<buffer>...) for the seven metadata buffers of each batch-shaped
/// argument (a BatchBuffers, or a BatchMetadata for these seven), in the order of BatchBuffers.
template <class F, class... Batches>
void forEachMetadataBuffer(F &&f, Batches &&...b)
{
  f("kv_indptr", BufferExtent::kRows, b.kv_indptr...);
  f("kv_indices", BufferExtent::kPrefixTokens, b.kv_indices...);
  f("qo_indptr", BufferExtent::kRows, b.qo_indptr...);
  f("out_cache_loc", BufferExtent::kNodes, b.out_cache_loc...);
  f("custom_mask", BufferExtent::kMaskBytes, b.custom_mask...);
  f("mask_indptr", BufferExtent::kRows, b.mask_indptr...);
  f("tree_parent", BufferExtent::kNodes, b.tree_parent...);
}

/// \brief forEachMetadataBuffer, then q, kv_pool and out.
template <class F, class... Batches>
void forEachBuffer(F &&f, Batches &&...b)
{
  forEachMetadataBuffer(f, b...);
  f("q", BufferExtent::kQueries, b.q...);
  f("kv_pool", BufferExtent::kPool, b.kv_pool...);
  f("out", BufferExtent::kOutputs, b.out...);
}

template <class T>
using RawPointer = T *;

/// \brief One batch: raw pointers to its buffers (host or device memory, per design) and the
/// scalars that read them. Trivially copyable: the CUDA kernels take it by value.
struct BatchRef : BatchBuffers<RawPointer>
{
  int batch_size = 0;      ///< B rows, padded rows included (a padded row has P = T = 0)
  int num_heads = 0;       ///< H
  int64_t num_nodes = 0;   ///< rows of q/out in use (sum T); buffers may hold more (bucket capacity)
  int64_t num_slots = 0;   ///< rows of kv_pool
  float sm_scale = 0.f;
  MaskLayout mask_layout = MaskLayout::kFull;
  /// The pool's storage (docs/design.md §8). bf16: kv_pool holds it. Otherwise kv_pool is null and
  /// kv_pool_fp8 holds [num_slots][kvRowBytes(kv_dtype)] bytes; fp8-e4m3 and fp8-e5m2 values are
  /// decode(byte) * kv_scale, the block-scaled row carries its own scales.
  KvDtype kv_dtype = KvDtype::kBf16;
  uint8_t const *kv_pool_fp8 = nullptr;
  float kv_scale = 1.f;
};

/// \brief The counts a batch's buffer sizes derive from; elements() is the one formula per extent.
struct BufferCounts
{
  int64_t rows = 0;           ///< B + 1
  int64_t nodes = 0;          ///< sum T
  int64_t prefix_tokens = 0;  ///< sum P
  int64_t mask_bytes = 0;
  int64_t heads = 0;
  int64_t slots = 0;

  constexpr int64_t elements(BufferExtent extent) const
  {
    switch (extent)
    {
    case BufferExtent::kRows: return rows;
    case BufferExtent::kPrefixTokens: return prefix_tokens;
    case BufferExtent::kNodes: return nodes;
    case BufferExtent::kMaskBytes: return mask_bytes;
    case BufferExtent::kQueries: return nodes * heads * D_QK;
    case BufferExtent::kPool: return slots * D_QK;
    case BufferExtent::kOutputs: return nodes * heads * D_V;
    }
    return 0;
  }
};
} // namespace canopy
