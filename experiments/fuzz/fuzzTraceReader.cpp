/// \file fuzzTraceReader.cpp
/// \brief libFuzzer target for the trace reader (built and run by scripts/fuzz-trace). Two modes,
/// chosen by the first input byte:
///  - structured (most inputs): the bytes describe small trace columns (mostly plausible, with
///    targeted corruptions of offsets, trees, slots, ids, accepted and values), written as a
///    well-formed HDF5 image and read in-process, so every validation path of ours runs under the
///    sanitizers without libhdf5 ever seeing corrupt metadata;
///  - raw (first byte 0): the rest is an arbitrary HDF5 file image, read through the isolated
///    reader (libhdf5 1.10 can crash on corrupt metadata; the child process absorbs that).
/// The contract checked: the reader returns a valid trace or throws InputError, nothing else; a
/// trace it accepts serves every step in every mask layout as metadata that validateMetadata accepts.
#include "canopy_Error.hpp"
#include "canopy_TraceReader.hpp"
#include "canopy_TraceStats.hpp"
#include "canopy_TraceWriter.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace
{
using namespace canopy;

/// Reads small numbers from the fuzz input; zeros once it runs out.
class Bytes
{
public:
  Bytes(uint8_t const *data, size_t size) : _data(data), _size(size) {}
  uint8_t next() { return _pos < _size ? _data[_pos++] : 0; }
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(next()) % n; }
  bool chance(int in256) { return next() < in256; }

private:
  uint8_t const *_data;
  size_t _size;
  size_t _pos = 0;
};

TraceColumns decodeColumns(Bytes &in)
{
  TraceColumns c;
  c.source = "fuzz";
  c.created = "2025-01-01T00:00:00Z";
  c.shape.num_heads = 1 + static_cast<int>(in.below(3));
  c.num_slots = in.below(72);
  int64_t const steps = in.below(5);
  int64_t next_id = 0;
  bool const with_accepted = in.chance(200);
  for (int64_t s = 0; s < steps; ++s)
  {
    int64_t const batch = in.below(4);
    for (int64_t b = 0; b < batch; ++b)
    {
      c.request_id.push_back(in.chance(230) ? next_id++ : in.below(3));
      int64_t const P = in.below(7), T = in.chance(240) ? 1 + in.below(5) : 0;
      c.prefix_len.push_back(static_cast<int32_t>(P));
      for (int64_t k = 0; k < P; ++k)
        c.kv_indices.push_back(in.chance(240) ? in.below(c.num_slots + 1) : in.below(8) - 4);
      c.kv_offset.push_back(static_cast<int64_t>(c.kv_indices.size()));
      for (int64_t i = 0; i < T; ++i)
      {
        int32_t p = i == 0 ? -1 : static_cast<int32_t>(in.below(i));
        if (in.chance(12))
          p = static_cast<int32_t>(in.below(9)) - 3;
        c.parent.push_back(p);
        c.out_cache_loc.push_back(in.chance(240) ? in.below(c.num_slots + 1) : in.below(8) - 4);
      }
      c.tree_offset.push_back(static_cast<int64_t>(c.parent.size()));
      if (with_accepted)
        c.accepted.push_back(static_cast<int32_t>(in.chance(240) ? 1 + in.below(std::max<int64_t>(T, 1)) : in.below(9) - 2));
    }
    c.endStep();
  }
  // Targeted corruptions of the offset arrays and lengths.
  auto poke = [&](std::vector<int64_t> &v) {
    if (!v.empty() && in.chance(16))
      v[static_cast<size_t>(in.below(static_cast<int64_t>(v.size())))] += in.below(5) - 2;
  };
  poke(c.request_offset);
  poke(c.tree_offset);
  poke(c.kv_offset);
  if (in.chance(8) && !c.prefix_len.empty())
    c.prefix_len[static_cast<size_t>(in.below(static_cast<int64_t>(c.prefix_len.size())))] += 1;
  if (in.chance(8) && !c.out_cache_loc.empty())
    c.out_cache_loc.pop_back();
  // Format v2: an FP8 pool, its scale sometimes out of range.
  if (in.chance(64))
  {
    c.kv_dtype = static_cast<KvDtype>(1 + in.below(3));
    c.kv_scale = kvDtypeHasScale(c.kv_dtype) ? (in.chance(240) ? 0.25f : static_cast<float>(in.below(3)) - 1.0f) : 1.0f;
  }
  if (in.chance(40) && c.numNodes() <= 24)
  {
    c.has_values = true;
    int64_t const H = c.shape.num_heads;
    int64_t const nq = c.numNodes() * H * D_QK + (in.chance(16) ? D_QK : 0);
    c.q.assign(static_cast<size_t>(std::max<int64_t>(nq, 0)), 0x3f80);  // 1.0
    if (in.chance(160))
      c.out.assign(static_cast<size_t>(c.numNodes() * H * D_V), 0x3f00);
    if (c.kv_dtype == KvDtype::kBf16)
    {
      c.kv.assign(static_cast<size_t>(c.num_slots * D_QK), 0xbf00);  // -0.5
      if (!c.kv.empty() && in.chance(16))
        c.kv[static_cast<size_t>(in.below(static_cast<int64_t>(c.kv.size())))] = 0x7fc0;  // NaN
    }
    else
    {
      // Rows of 0x38 (1.0 in e4m3, 0.5 in e5m2); any byte poked, a scale or rope value among them.
      int64_t const row = kvRowBytes(c.kv_dtype);
      c.kv_fp8.assign(static_cast<size_t>(c.num_slots * row), 0x38);
      for (int64_t slot = 0; c.kv_dtype == KvDtype::kFp8E4m3BlockScaled && slot < c.num_slots; ++slot)
        for (int blk = 0; blk < KV_BLOCKS; ++blk)
        {
          float const one = 1.0f;
          std::memcpy(c.kv_fp8.data() + slot * row + KV_BLOCKSCALED_SCALES_AT + 4 * blk, &one, 4);
        }
      if (!c.kv_fp8.empty() && in.chance(32))
        c.kv_fp8[static_cast<size_t>(in.below(static_cast<int64_t>(c.kv_fp8.size())))] = in.next();
    }
  }
  return c;
}

/// What an accepted trace promises: every step, every layout, valid SGLang buffers; a recorded
/// pool in the trace's dtype at its row width.
void exerciseAccepted(TraceReader const &r)
{
  for (int64_t s = 0; s < r.numSteps(); ++s)
    for (MaskLayout layout : {MaskLayout::kFull, MaskLayout::kTree, MaskLayout::kParents})
      validateMetadata(r.stepMetadata(s, layout), r.info().num_slots);
  if (r.info().has_values && r.numSteps() > 0)
  {
    HostProblem const p = r.stepProblem(0, MaskLayout::kParents, 0);
    size_t const want = static_cast<size_t>(p.num_slots) * static_cast<size_t>(kvRowBytes(p.kv_dtype));
    if (p.kv_dtype != r.info().kv_dtype ||
        (p.kv_dtype == KvDtype::kBf16 ? p.kv_pool.size() * 2 : p.kv_pool_fp8.size()) != want)
      throw std::logic_error("accepted trace serves a pool that is not its dtype's");
  }
  formatTraceStats(r.info(), computeTraceStats(r.columns()));
}
} // namespace

namespace
{
[[noreturn]] void fail(char const *what, std::exception const &e)
{
  std::fprintf(stderr, "fuzzTraceReader: %s: %s\n", what, e.what());
  std::abort();
}

std::unique_ptr<TraceReader> readInput(uint8_t const *data, size_t size)
{
  if (data[0] == 0)
  {
    // Images here are at most 128 KB and parse in milliseconds: a 1 s deadline ends a looping
    // libhdf5 quickly and keeps the fuzzer's throughput (the default would be 10 s per such input).
    TraceReadOptions raw;
    raw.deadline_s = 1;
    return std::make_unique<TraceReader>(TraceReader::fromImage(data + 1, size - 1, "fuzz-raw", raw));
  }
  Bytes in(data + 1, size - 1);
  TraceColumns const c = decodeColumns(in);
  std::vector<unsigned char> const image = Impl::writeColumnsImage(c);
  TraceReadOptions in_process;
  in_process.isolate = false;
  return std::make_unique<TraceReader>(TraceReader::fromImage(image.data(), image.size(), "fuzz-structured", in_process));
}
} // namespace

/// Seeds for the raw mode (scripts/fuzz-trace sets CANOPY_FUZZ_SEED_DIR): small valid traces as
/// HDF5 images behind a 0 byte, compressed and not, with and without /values (bf16, and an FP8 pool
/// in format v2), so mutations start
/// from real superblocks, object headers, B-trees and heaps rather than from noise.
extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
  char const *dir = std::getenv("CANOPY_FUZZ_SEED_DIR");
  if (!dir)
    return 0;
  TraceColumns c;
  c.source = "seed";
  c.created = "2025-01-01T00:00:00Z";
  c.shape.num_heads = 1;
  c.num_slots = 16;
  c.request_id = {3, 4, 3};
  c.prefix_len = {2, 0, 3};
  c.kv_offset = {0, 2, 2, 5};
  c.kv_indices = {1, 2, 1, 2, 5};
  c.tree_offset = {0, 3, 4, 6};
  c.parent = {-1, 0, 0, -1, -1, 0};
  c.out_cache_loc = {5, 6, 7, 8, 9, 10};
  c.accepted = {2, 1, 2};
  c.request_offset = {0, 2, 3};
  int index = 0;
  for (int variant : {0, 1, 2})  // metadata only; bf16 /values (v1); an fp8-e4m3 pool (v2)
    for (int level : {0, 4})
    {
      TraceColumns v = c;
      if (variant > 0)
      {
        v.has_values = true;
        v.q.assign(static_cast<size_t>(v.numNodes()) * D_QK, 0x3f80);
        v.out.assign(static_cast<size_t>(v.numNodes()) * D_V, 0x3f00);
        if (variant == 1)
          v.kv.assign(static_cast<size_t>(v.num_slots) * D_QK, 0x3f00);
        else
        {
          v.kv_dtype = KvDtype::kFp8E4m3;
          v.kv_scale = 0.25f;
          v.kv_fp8.assign(static_cast<size_t>(v.num_slots) * D_QK, 0x38);
        }
      }
      TraceWriteOptions o;
      o.deflate_level = level;
      std::vector<unsigned char> image = Impl::writeColumnsImage(v, o);
      image.insert(image.begin(), 0);
      std::string const path = std::string(dir) + "/raw-seed-" + std::to_string(index++);
      if (FILE *f = std::fopen(path.c_str(), "wb"))
      {
        std::fwrite(image.data(), 1, image.size(), f);
        std::fclose(f);
      }
    }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size)
{
  if (size == 0)
    return 0;
  std::unique_ptr<TraceReader> reader;
  try
  {
    reader = readInput(data, size);
  }
  catch (InputError const &)
  {
    return 0;  // the expected outcome for a bad trace
  }
  catch (std::exception const &e)
  {
    fail("reading threw something other than InputError", e);
  }
  try
  {
    exerciseAccepted(*reader);
  }
  catch (std::exception const &e)
  {
    fail("an accepted trace failed to serve its steps", e);
  }
  return 0;
}
