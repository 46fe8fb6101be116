// flashmla_peer: FlashMLA's dense Hopper decode kernel on the mask-free prefix part of tree verify,
// timed like `canopy run` in graph mode with l2_flush (CUDA graph replay, L2 flushed before every
// sample, median / p10 / p90 with Canopy's one quantile definition).
//
// Built only by scripts/build-flashmla (from FlashMLA and CUTLASS source trees the user points at),
// never by the project's CMake. It calls FlashMLA's three launchers through FlashMLA's own headers:
//   smxx::decode::run_get_decoding_sched_meta_kernel   the tile scheduler (which CTA takes which pages)
//   sm90::run_flash_splitkv_mla_kernel<bf16>           the split-KV kernel (d = 576, d_v = 512)
//   smxx::decode::run_flash_mla_combine_kernel<bf16>   the merge of the split partials
// with the parameters FlashMLA's own Python binding (csrc/api/dense_decode.h) gives them.
//
// What it measures, per (B, T, P) with H heads: Q of shape (B, s_q = T, h_q = H, 576), every one of
// the T x H rows of a request attending to the request's P prefix tokens with no mask (is_causal =
// false): the part of tree verify in which every tree node sees the whole prefix. The prefix is a
// paged KV cache (h_kv = 1, rows of 576, V = the first 512 columns) of 64-token pages, each request's
// pages contiguous (or shuffled with --page-order shuffled). The tree part (the T x T masked block)
// and the merge with it are not FlashMLA's to do and are not in the time.
//
// The scheduler's metadata depends only on the batch's sequence lengths, so a serving stack computes
// it once per decode step and every layer reuses it (FlashMLA's FlashMLASchedMeta). The headline time
// (median_us) is therefore one layer's call: split-KV kernel + combine, metadata computed beforehand.
// The time with the scheduler kernel in the graph as well is reported beside it (with_metadata_*).
//
//   flashmla_peer [--batches 1,8] [--trees 17,65,256,1024] [--prefixes 16384] [--heads 8]
//                 [--samples 20] [--warmup 3] [--check-rows 8] [--page-order contiguous|shuffled]
//                 [--seed 1] [--out flashmla.jsonl] [--smoke]
//
// Exit codes: 0 every shape ran and passed its check, 1 a check failed (or non-finite output),
// 2 bad arguments, 3 a CUDA error, 4 no sm_90 GPU (the kernel is sm_90a only).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

// FlashMLA's headers (csrc/ on the include path): the params structs and the launchers' declarations.
#include "params.h"
#include "sm90/decode/dense/splitkv_mla.h"
#include "smxx/decode/combine/combine.h"
#include "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.h"

#ifndef FLASHMLA_PEER_FLASHMLA_REV
#define FLASHMLA_PEER_FLASHMLA_REV "unknown"
#endif
#ifndef FLASHMLA_PEER_CUTLASS_VERSION
#define FLASHMLA_PEER_CUTLASS_VERSION "unknown"
#endif

namespace {

constexpr int kDqk = 576;             // K row: 512 "nope" + 64 rope
constexpr int kDv = 512;              // V = the first 512 columns of the same rows
constexpr int kPage = 64;             // FlashMLA's dense decode: page_block_size must be 64
constexpr int kRowsPerMBlock = 64;    // FlashMLA's BLOCK_SIZE_M (config.h): rows per CTA
constexpr int kFixedOverheadBlocks = 5;  // what FlashMLA's binding passes to the scheduler
constexpr size_t kFlushBytes = size_t(256) << 20;  // > the H200's 50 MB L2 (and any Hopper's)
const char *kWhat = "FlashMLA dense decode, prefix part only (non-causal, s_q = T, 64-token pages)";

struct CudaFailure {
  std::string what;
};

void check(cudaError_t e, const char *expr, int line)
{
  if (e != cudaSuccess) {
    std::ostringstream os;
    os << "CUDA error at flashmla_peer.cu:" << line << ": " << expr << ": " << cudaGetErrorString(e);
    throw CudaFailure{os.str()};
  }
}
#define CK(x) check((x), #x, __LINE__)

// ---- random inputs: uniform in [-1, 1), hashed from (seed, index), never zeros ------------------------
__host__ __device__ inline uint64_t splitmix64(uint64_t x)
{
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fillUniform(__nv_bfloat16 *p, size_t n, uint64_t seed)
{
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float u = float(splitmix64(seed * 0x100000001B3ull + i) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = __float2bfloat16(2.0f * u - 1.0f);
  }
}

// ---- fp32 reference of a few rows on the GPU ---------------------------------------------------------
// One block per checked row: scores over the request's P prefix tokens (through the block table),
// softmax in fp32, out = P V with V = the first 512 columns. lse is natural-log, of the scaled scores
// (what FlashMLA writes).
struct CheckRow {
  int b, row;  // request; row = node * H + head
};

__global__ void referenceRows(const __nv_bfloat16 *q, const __nv_bfloat16 *kv, const int *blockTable,
                             int blocksPerSeq, int rowsPerReq, int P, float scale, const CheckRow *rows,
                             float *scratch /* [nrows, P] */, float *outRef /* [nrows, 512] */,
                             float *lseRef /* [nrows] */)
{
  __shared__ float qs[kDqk];
  __shared__ float red[32];
  const CheckRow cr = rows[blockIdx.x];
  const __nv_bfloat16 *qrow = q + (size_t(cr.b) * rowsPerReq + cr.row) * kDqk;
  for (int d = threadIdx.x; d < kDqk; d += blockDim.x) qs[d] = __bfloat162float(qrow[d]);
  __syncthreads();
  float *s = scratch + size_t(blockIdx.x) * P;
  const int *bt = blockTable + size_t(cr.b) * blocksPerSeq;
  auto keyRow = [&](int k) { return kv + (size_t(bt[k / kPage]) * kPage + k % kPage) * kDqk; };

  float mx = -INFINITY;
  for (int k = threadIdx.x; k < P; k += blockDim.x) {
    const __nv_bfloat16 *kr = keyRow(k);
    float acc = 0.f;
    for (int d = 0; d < kDqk; ++d) acc += qs[d] * __bfloat162float(kr[d]);
    s[k] = acc * scale;
    mx = fmaxf(mx, s[k]);
  }
  auto blockReduce = [&](float v, bool isMax) {
    for (int o = 16; o > 0; o >>= 1) {
      float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = isMax ? fmaxf(v, w) : v + w;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = isMax ? -INFINITY : 0.f;
    for (int i = 0; i < int(blockDim.x >> 5); ++i) r = isMax ? fmaxf(r, red[i]) : r + red[i];
    return r;
  };
  mx = blockReduce(mx, true);
  float sum = 0.f;
  for (int k = threadIdx.x; k < P; k += blockDim.x) {
    float e = expf(s[k] - mx);
    s[k] = e;
    sum += e;
  }
  sum = blockReduce(sum, false);  // its barriers also publish s[] to the whole block
  for (int c = threadIdx.x; c < kDv; c += blockDim.x) {
    float acc = 0.f;
    for (int k = 0; k < P; ++k) acc += s[k] * __bfloat162float(keyRow(k)[c]);
    outRef[size_t(blockIdx.x) * kDv + c] = acc / sum;
  }
  if (threadIdx.x == 0) lseRef[blockIdx.x] = mx + logf(sum);
}

__global__ void countNonFinite(const __nv_bfloat16 *p, size_t n, unsigned long long *count)
{
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    local += !isfinite(__bfloat162float(p[i]));
  if (local) atomicAdd(count, local);
}

// ---- statistics: Canopy's one quantile definition (core/canopy_Statistics.hpp) -----------------------
double quantile(std::vector<double> const &sorted, double q)
{
  double pos = q * double(sorted.size() - 1);
  size_t lo = size_t(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

struct Timing {
  double median_us, p10_us, p90_us;
};

// ---- one shape ----------------------------------------------------------------------------------------
struct Options {
  std::vector<int> batches{1, 8}, trees{17, 65, 256, 1024}, prefixes{16384};
  int heads = 8, samples = 20, warmup = 3, checkRows = 8;
  bool shuffled = false;
  uint64_t seed = 1;
  std::string out;
};

struct Device {
  int id = 0, numSms = 0, ccMajor = 0, ccMinor = 0, runtime = 0, driver = 0;
  size_t l2 = 0;
  std::string name;
};

template <class T>
T *devAlloc(size_t n)
{
  void *p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T *>(p);
}

struct Buffers {  // every device buffer of one shape, freed together
  std::vector<void *> ptrs;
  template <class T>
  T *get(size_t n)
  {
    T *p = devAlloc<T>(n);
    ptrs.push_back(p);
    return p;
  }
  ~Buffers()
  {
    for (void *p : ptrs) cudaFree(p);
  }
};

std::string jsonEscape(std::string const &s)
{
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

struct Row {
  int B, T, P, H;
  Timing call, withMeta;
  int numSmParts, numMBlocks, totalSplits, maxSplitsPerRequest;
  double flops;
  int checkedRows;
  double maxRelL2, maxAbs, maxLseAbs;
  bool checkOk, finite;
};

Row benchShape(Options const &o, Device const &dev, int B, int T, int P, void *flushBuf, cudaStream_t st)
{
  const int H = o.heads;
  const int rows = T * H;                        // q_seq_per_hk: row = node * H + head (h_kv = 1)
  const int blocksPerSeq = (P + kPage - 1) / kPage;
  const int numBlocks = B * blocksPerSeq;        // pages in the cache
  const int numMBlocks = (rows + kRowsPerMBlock - 1) / kRowsPerMBlock;
  // FlashMLA's binding: num_sm_parts = max(num_sms / h_k / ceil(s_q * h_q / h_k / 64), 1).
  const int numSmParts = std::max(dev.numSms / 1 / numMBlocks, 1);
  const int totalSplits = B + numSmParts;
  const float scale = 1.0f / std::sqrt(192.0f);  // DeepSeek's softmax scale (qk_head_dim 192), as Canopy

  Buffers buf;
  auto *q = buf.get<__nv_bfloat16>(size_t(B) * rows * kDqk);
  auto *kv = buf.get<__nv_bfloat16>(size_t(numBlocks) * kPage * kDqk);
  auto *out = buf.get<__nv_bfloat16>(size_t(B) * rows * kDv);
  auto *lse = buf.get<float>(size_t(B) * rows);
  auto *lseAccum = buf.get<float>(size_t(totalSplits) * rows);
  auto *oAccum = buf.get<float>(size_t(totalSplits) * rows * kDv);
  auto *blockTable = buf.get<int>(size_t(B) * blocksPerSeq);
  auto *seqlens = buf.get<int>(B);
  auto *sched = buf.get<DecodingSchedMeta>(numSmParts);
  auto *numSplits = buf.get<int>(B + 1);

  const uint64_t shapeSeed = o.seed * 1000003ull + uint64_t(B) * 131 + uint64_t(T) * 7 + uint64_t(P);
  fillUniform<<<1024, 256, 0, st>>>(q, size_t(B) * rows * kDqk, shapeSeed * 2 + 1);
  fillUniform<<<4096, 256, 0, st>>>(kv, size_t(numBlocks) * kPage * kDqk, shapeSeed * 2 + 2);
  CK(cudaGetLastError());
  std::vector<int> table(size_t(B) * blocksPerSeq);
  std::iota(table.begin(), table.end(), 0);  // request b: pages b * blocksPerSeq + 0, 1, ...
  if (o.shuffled) std::shuffle(table.begin(), table.end(), std::mt19937_64(shapeSeed));
  std::vector<int> lens(B, P);
  CK(cudaMemcpyAsync(blockTable, table.data(), table.size() * sizeof(int), cudaMemcpyHostToDevice, st));
  CK(cudaMemcpyAsync(seqlens, lens.data(), lens.size() * sizeof(int), cudaMemcpyHostToDevice, st));
  CK(cudaMemsetAsync(out, 0xFF, size_t(B) * rows * kDv * sizeof(__nv_bfloat16), st));  // NaN until written

  // The three calls, with the parameters FlashMLA's binding (csrc/api/dense_decode.h) gives them.
  GetDecodeSchedMetaParams meta{};
  meta.b = B;
  meta.s_q = T;
  meta.block_size_n = kPage;
  meta.fixed_overhead_num_blocks = kFixedOverheadBlocks;
  meta.topk = -1;        // dense
  meta.extra_topk = -1;
  meta.topk_length = nullptr;
  meta.extra_topk_length = nullptr;
  meta.seqlens_k_ptr = seqlens;
  meta.tile_scheduler_metadata_ptr = sched;
  meta.num_splits_ptr = numSplits;
  meta.num_sm_parts = numSmParts;
  meta.stream = st;

  DenseAttnDecodeParams p{};
  p.b = B;
  p.s_q = T;
  p.q_seq_per_hk = rows;
  p.d = kDqk;
  p.d_v = kDv;
  p.h_q = H;
  p.h_k = 1;
  p.num_blocks = numBlocks;
  p.q_head_per_hk = H;
  p.is_causal = false;
  p.scale_softmax = scale;
  p.scale_softmax_log2 = float(double(scale) * 1.4426950408889634);
  p.q_ptr = q;
  p.k_ptr = kv;
  p.o_ptr = out;
  p.softmax_lse_ptr = lse;
  // Strides in elements. q: (B, rows, h_k = 1, 576); cache: (pages, 64, h_k = 1, 576);
  // out: (B, h_k = 1, rows, 512), as the binding allocates it.
  p.q_batch_stride = int64_t(rows) * kDqk;
  p.q_row_stride = kDqk;
  p.q_head_stride = kDqk;
  p.k_batch_stride = int64_t(kPage) * kDqk;
  p.k_row_stride = kDqk;
  p.k_head_stride = kDqk;
  p.o_batch_stride = int64_t(rows) * kDv;
  p.o_row_stride = kDv;
  p.o_head_stride = int64_t(rows) * kDv;
  p.block_table = blockTable;
  p.block_table_batch_stride = blocksPerSeq;
  p.page_block_size = kPage;
  p.seqlens_k_ptr = seqlens;
  p.tile_scheduler_metadata_ptr = sched;
  p.num_sm_parts = numSmParts;
  p.num_splits_ptr = numSplits;
  p.total_num_splits = totalSplits;
  p.softmax_lseaccum_ptr = lseAccum;
  p.oaccum_ptr = oAccum;
  p.stream = st;

  CombineParams c{};
  c.b = B;
  c.s_q = T;
  c.h_q = H;
  c.d_v = kDv;
  c.lse = lse;
  c.out = out;
  c.stride_lse_b = rows;       // num_heads_k * q_seq_per_hk
  c.stride_lse_s_q = H;
  c.stride_o_b = rows * kDv;   // h_q * s_q * d_v
  c.stride_o_s_q = H * kDv;
  c.stride_o_h_q = kDv;
  c.lse_accum = lseAccum;
  c.o_accum = oAccum;
  c.stride_lse_accum_split = rows;
  c.stride_lse_accum_s_q = H;
  c.stride_o_accum_split = rows * kDv;
  c.stride_o_accum_s_q = H * kDv;
  c.stride_o_accum_h_q = kDv;
  c.tile_scheduler_metadata_ptr = sched;
  c.num_splits_ptr = numSplits;
  c.num_sm_parts = numSmParts;
  c.attn_sink = nullptr;
  c.stream = st;

  auto metadata = [&] { smxx::decode::run_get_decoding_sched_meta_kernel(meta); };
  auto layerCall = [&] {
    sm90::run_flash_splitkv_mla_kernel<cutlass::bfloat16_t>(p);
    smxx::decode::run_flash_mla_combine_kernel<cutlass::bfloat16_t>(c);
  };

  // Eager once: metadata, then the call; check the output.
  metadata();
  layerCall();
  CK(cudaStreamSynchronize(st));
  CK(cudaGetLastError());

  std::vector<int> splitsHost(B + 1);
  CK(cudaMemcpy(splitsHost.data(), numSplits, splitsHost.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int maxPerReq = 0;
  for (int b = 0; b < B; ++b) maxPerReq = std::max(maxPerReq, splitsHost[b + 1] - splitsHost[b]);

  // Rows to check: first and last of the batch, the middle, then seeded random ones.
  std::vector<CheckRow> picks;
  auto add = [&](int b, int r) {
    for (auto const &x : picks)
      if (x.b == b && x.row == r) return;
    picks.push_back({b, r});
  };
  if (o.checkRows > 0) {
    add(0, 0);
    if (o.checkRows > 1) add(B - 1, rows - 1);
    if (o.checkRows > 2) add(B / 2, rows / 2);
    std::mt19937_64 rng(shapeSeed ^ 0x5eedull);
    for (int guard = 0; int(picks.size()) < o.checkRows && guard < 1000; ++guard)
      add(int(rng() % uint64_t(B)), int(rng() % uint64_t(rows)));
  }
  const int nCheck = int(picks.size());
  double maxRelL2 = 0, maxAbs = 0, maxLseAbs = 0;
  bool checkOk = true;
  if (nCheck > 0) {
    auto *dPicks = buf.get<CheckRow>(nCheck);
    auto *scratch = buf.get<float>(size_t(nCheck) * P);
    auto *outRef = buf.get<float>(size_t(nCheck) * kDv);
    auto *lseRef = buf.get<float>(nCheck);
    CK(cudaMemcpy(dPicks, picks.data(), nCheck * sizeof(CheckRow), cudaMemcpyHostToDevice));
    referenceRows<<<nCheck, 256, 0, st>>>(q, kv, blockTable, blocksPerSeq, rows, P, scale, dPicks, scratch,
                                          outRef, lseRef);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st));
    std::vector<float> ref(size_t(nCheck) * kDv), refLse(nCheck), lseHost(size_t(B) * rows);
    std::vector<__nv_bfloat16> got(kDv);
    CK(cudaMemcpy(ref.data(), outRef, ref.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(refLse.data(), lseRef, refLse.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lseHost.data(), lse, lseHost.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < nCheck; ++i) {
      // out is (B, h_k = 1, rows, 512): row r of request b at (b * rows + r) * 512.
      CK(cudaMemcpy(got.data(), out + (size_t(picks[i].b) * rows + picks[i].row) * kDv, kDv * sizeof(__nv_bfloat16),
                    cudaMemcpyDeviceToHost));
      double num = 0, den = 0, mabs = 0;
      for (int col = 0; col < kDv; ++col) {
        double g = double(__bfloat162float(got[col])), r = ref[size_t(i) * kDv + col];
        double d = std::isfinite(g) ? g - r : INFINITY;
        num += d * d;
        den += r * r;
        mabs = std::max(mabs, std::fabs(d));
      }
      double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
      double lseErr = std::fabs(double(lseHost[size_t(picks[i].b) * rows + picks[i].row]) - refLse[i]);
      if (!std::isfinite(lseErr)) lseErr = INFINITY;
      maxRelL2 = std::max(maxRelL2, rel);
      maxAbs = std::max(maxAbs, mabs);
      maxLseAbs = std::max(maxLseAbs, lseErr);
      // bf16 output and bf16 P in the kernel: ~1e-3 relative in practice; 2e-2 leaves room.
      if (!(rel <= 2e-2) || !(lseErr <= 1e-2)) {
        checkOk = false;
        std::fprintf(stderr, "flashmla_peer: B=%d T=%d P=%d request %d row %d: rel-L2 %.3g, max-abs %.3g, lse error %.3g\n",
                     B, T, P, picks[i].b, picks[i].row, rel, mabs, lseErr);
      }
    }
  }
  auto *bad = buf.get<unsigned long long>(1);
  CK(cudaMemsetAsync(bad, 0, sizeof(unsigned long long), st));
  countNonFinite<<<1024, 256, 0, st>>>(out, size_t(B) * rows * kDv, bad);
  unsigned long long badHost = 0;
  CK(cudaMemcpyAsync(&badHost, bad, sizeof(badHost), cudaMemcpyDeviceToHost, st));
  CK(cudaStreamSynchronize(st));

  // Two graphs: one layer's call (metadata reused), and the call with the scheduler kernel in front.
  auto capture = [&](bool withMeta) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    if (withMeta) metadata();
    layerCall();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphDestroy(g));
    return ge;
  };
  auto timeGraph = [&](cudaGraphExec_t ge) {
    for (int i = 0; i < o.warmup; ++i) CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    std::vector<cudaEvent_t> ev(2 * size_t(o.samples));
    for (auto &e : ev) CK(cudaEventCreate(&e));
    for (int i = 0; i < o.samples; ++i) {
      CK(cudaMemsetAsync(flushBuf, i & 0xFF, kFlushBytes, st));  // L2 flushed, outside the events
      CK(cudaEventRecord(ev[2 * i], st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(ev[2 * i + 1], st));
    }
    CK(cudaStreamSynchronize(st));
    std::vector<double> ms(o.samples);
    for (int i = 0; i < o.samples; ++i) {
      float t = 0;
      CK(cudaEventElapsedTime(&t, ev[2 * i], ev[2 * i + 1]));
      ms[i] = t;
    }
    for (auto &e : ev) CK(cudaEventDestroy(e));
    std::sort(ms.begin(), ms.end());
    return Timing{quantile(ms, 0.5) * 1e3, quantile(ms, 0.1) * 1e3, quantile(ms, 0.9) * 1e3};
  };
  cudaGraphExec_t gCall = capture(false), gMeta = capture(true);
  Timing tCall = timeGraph(gCall), tMeta = timeGraph(gMeta);
  CK(cudaGraphExecDestroy(gCall));
  CK(cudaGraphExecDestroy(gMeta));
  CK(cudaGetLastError());

  Row r{};
  r.B = B;
  r.T = T;
  r.P = P;
  r.H = H;
  r.call = tCall;
  r.withMeta = tMeta;
  r.numSmParts = numSmParts;
  r.numMBlocks = numMBlocks;
  r.totalSplits = splitsHost[B];
  r.maxSplitsPerRequest = maxPerReq;
  r.flops = 2.0 * B * double(rows) * P * (kDqk + kDv);  // Canopy's cost model, prefix keys only
  r.checkedRows = nCheck;
  r.maxRelL2 = maxRelL2;
  r.maxAbs = maxAbs;
  r.maxLseAbs = maxLseAbs;
  r.checkOk = checkOk;
  r.finite = badHost == 0;
  return r;
}

std::string deviceLabel(Device const &d)
{
  std::ostringstream os;
  os << d.name << " (sm_" << d.ccMajor << d.ccMinor << "), " << d.numSms << " SMs";
  return os.str();
}

std::string jsonRow(Row const &r, Options const &o, Device const &d)
{
  char b[4096];
  const double tflops = r.call.median_us > 0 ? r.flops / (r.call.median_us * 1e-6) / 1e12 : 0;
  std::snprintf(
      b, sizeof b,
      "{\"design\": \"flashmla-dense\", \"what\": \"%s\", \"B\": %d, \"T\": %d, \"P\": %d, \"H\": %d, "
      "\"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f, \"samples\": %d, \"finite\": %s, "
      "\"with_metadata_median_us\": %.3f, \"with_metadata_p10_us\": %.3f, \"with_metadata_p90_us\": %.3f, "
      "\"metadata\": \"scheduler kernel run once before the timed call (per step, reused by every layer); "
      "with_metadata_* has it in the graph\", "
      "\"flops\": %.6e, \"tflops\": %.2f, \"rows_per_request\": %d, \"m_blocks\": %d, \"num_sm_parts\": %d, "
      "\"splits\": %d, \"max_splits_per_request\": %d, \"page_order\": \"%s\", \"softmax_scale\": %.9g, "
      "\"checked_rows\": %d, \"max_rel_l2_error\": %.3e, \"max_abs_error\": %.3e, \"max_lse_error\": %.3e, "
      "\"check\": \"%s\", \"l2_flush_bytes\": %zu, \"warmup\": %d, \"flashmla\": \"%s\", \"cutlass\": \"%s\", "
      "\"cuda_runtime\": %d, \"cuda_driver\": %d, \"device\": \"%s\"}",
      kWhat, r.B, r.T, r.P, r.H, r.call.median_us, r.call.p10_us, r.call.p90_us, o.samples,
      r.finite ? "true" : "false", r.withMeta.median_us, r.withMeta.p10_us, r.withMeta.p90_us, r.flops, tflops,
      r.T * r.H, r.numMBlocks, r.numSmParts, r.totalSplits, r.maxSplitsPerRequest,
      o.shuffled ? "shuffled" : "contiguous", 1.0 / std::sqrt(192.0), r.checkedRows, r.maxRelL2, r.maxAbs,
      r.maxLseAbs, r.checkOk ? "ok" : "FAILED", kFlushBytes, o.warmup,
      jsonEscape(FLASHMLA_PEER_FLASHMLA_REV).c_str(), jsonEscape(FLASHMLA_PEER_CUTLASS_VERSION).c_str(), d.runtime,
      d.driver, jsonEscape(deviceLabel(d)).c_str());
  return b;
}

const char *kUsage =
    "flashmla_peer: FlashMLA's dense sm_90 decode kernel on the mask-free prefix part of tree verify\n"
    "(Q = (B, s_q = T, h_q = H, 576), non-causal, P prefix tokens per request in 64-token pages),\n"
    "timed with CUDA graph replay, L2 flushed before every sample (256 MB memset outside the events).\n"
    "\n"
    "  flashmla_peer [--batches 1,8] [--trees 17,65,256,1024] [--prefixes 16384] [--heads 8]\n"
    "                [--samples 20] [--warmup 3] [--check-rows 8] [--page-order contiguous|shuffled]\n"
    "                [--seed 1] [--out FILE.jsonl] [--smoke]\n"
    "\n"
    "median_us: one layer's call (split-KV kernel + combine; the scheduler metadata computed beforehand,\n"
    "as a serving stack reuses it across layers); with_metadata_*: the scheduler kernel in the graph too.\n"
    "Every shape is checked on --check-rows rows against an fp32 reference on the GPU.\n"
    "--smoke: B=1 T=17 P=256, 3 samples. One JSON line per shape goes to --out (same fields as\n"
    "experiments/peers/torch_reference.py's rows: design, B, T, P, H, median_us, p10_us, p90_us, ...).\n"
    "Exit codes: 0 ok, 1 a check failed, 2 bad arguments, 3 CUDA error, 4 no sm_90 GPU.\n";

bool parseInts(std::string const &s, std::vector<int> &v, long lo, long hi)
{
  v.clear();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char *end = nullptr;
    long x = std::strtol(item.c_str(), &end, 10);
    if (*end || x < lo || x > hi) return false;
    v.push_back(int(x));
  }
  return !v.empty();
}

}  // namespace

int main(int argc, char **argv)
{
  Options o;
  bool smoke = false;
  auto bad = [](std::string const &m) {
    std::fprintf(stderr, "flashmla_peer: %s (see --help)\n", m.c_str());
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](std::string &dst) {
      if (i + 1 >= argc) return false;
      dst = argv[++i];
      return true;
    };
    std::string v;
    auto intArg = [&](int &dst, long lo, long hi) {
      std::vector<int> t;
      if (!val(v) || !parseInts(v, t, lo, hi) || t.size() != 1) return false;
      dst = t[0];
      return true;
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--batches") {
      if (!val(v) || !parseInts(v, o.batches, 1, 4096)) return bad("--batches: a comma list of integers in [1, 4096]");
    } else if (a == "--trees") {
      if (!val(v) || !parseInts(v, o.trees, 1, 1024)) return bad("--trees: a comma list of integers in [1, 1024]");
    } else if (a == "--prefixes") {
      if (!val(v) || !parseInts(v, o.prefixes, 1, 1 << 24)) return bad("--prefixes: a comma list of integers in [1, 2^24]");
    } else if (a == "--heads") {
      if (!intArg(o.heads, 1, 128)) return bad("--heads: an integer in [1, 128]");
    } else if (a == "--samples") {
      if (!intArg(o.samples, 1, 1000000)) return bad("--samples: an integer in [1, 10^6]");
    } else if (a == "--warmup") {
      if (!intArg(o.warmup, 0, 1000000)) return bad("--warmup: an integer in [0, 10^6]");
    } else if (a == "--check-rows") {
      if (!intArg(o.checkRows, 0, 4096)) return bad("--check-rows: an integer in [0, 4096]");
    } else if (a == "--seed") {
      int s = 0;
      if (!intArg(s, 0, 2147483647)) return bad("--seed: a non-negative integer");
      o.seed = uint64_t(s);
    } else if (a == "--page-order") {
      if (!val(v) || (v != "contiguous" && v != "shuffled")) return bad("--page-order: contiguous or shuffled");
      o.shuffled = v == "shuffled";
    } else if (a == "--out") {
      if (!val(o.out) || o.out.empty()) return bad("--out: a file name");
    } else if (a == "--smoke") {
      smoke = true;
    } else {
      return bad("unknown argument '" + a + "'");
    }
  }
  if (smoke) {
    o.batches = {1};
    o.trees = {17};
    o.prefixes = {256};
    o.samples = 3;
  }
  // The combine kernel serves at most 160 scheduler partitions and a request's rows must fit the
  // kernel's TMA boxes; FlashMLA's binding takes any T x H, so do we.
  FILE *outFile = nullptr;
  std::string tmp;
  if (!o.out.empty()) {
    tmp = o.out + ".tmp";
    outFile = std::fopen(tmp.c_str(), "w");
    if (!outFile) return bad("--out: cannot write " + tmp);
  }

  Device d;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: flashmla_peer needs a CUDA device (sm_90)\n");
    if (outFile) {
      std::fclose(outFile);
      std::remove(tmp.c_str());
    }
    return 4;
  }
  int rc = 0;
  try {
    cudaDeviceProp prop{};
    CK(cudaGetDevice(&d.id));
    CK(cudaGetDeviceProperties(&prop, d.id));
    d.name = prop.name;
    d.numSms = prop.multiProcessorCount;
    d.ccMajor = prop.major;
    d.ccMinor = prop.minor;
    d.l2 = size_t(prop.l2CacheSize);
    CK(cudaRuntimeGetVersion(&d.runtime));
    CK(cudaDriverGetVersion(&d.driver));
    if (d.ccMajor != 9 || d.ccMinor != 0) {
      std::printf("SKIP: flashmla_peer runs FlashMLA's sm_90a kernel; this GPU is %s (sm_%d%d)\n", d.name.c_str(),
                  d.ccMajor, d.ccMinor);
      if (outFile) {
        std::fclose(outFile);
        std::remove(tmp.c_str());
      }
      return 4;
    }
    if (kFlushBytes < 2 * d.l2) std::fprintf(stderr, "flashmla_peer: warning: the flush buffer is < 2x L2\n");
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    void *flush = devAlloc<char>(kFlushBytes);
    std::printf("# %s; CUDA runtime %d, driver %d; FlashMLA %s, CUTLASS %s\n", deviceLabel(d).c_str(), d.runtime,
                d.driver, FLASHMLA_PEER_FLASHMLA_REV, FLASHMLA_PEER_CUTLASS_VERSION);
    std::printf("# %s; median_us = split-KV kernel + combine (metadata reused), L2 flushed, graph replay\n", kWhat);
    std::printf("| shape | us [p10, p90] | TFLOP/s | with metadata us | parts | splits | check |\n|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
    for (int B : o.batches)
      for (int T : o.trees)
        for (int P : o.prefixes) {
          int mblocks = (T * o.heads + kRowsPerMBlock - 1) / kRowsPerMBlock;
          if (std::max(d.numSms / mblocks, 1) > 160) {
            std::fprintf(stderr, "flashmla_peer: B=%d T=%d: more than 160 scheduler partitions (FlashMLA's combine limit)\n", B, T);
            rc = 2;
            continue;
          }
          Row r = benchShape(o, d, B, T, P, flush, st);
          std::printf("| B=%d T=%d P=%d H=%d | %.1f [%.1f, %.1f] | %.1f | %.1f | %d | %d | %s rel-L2 %.1e%s |\n", B, T,
                      P, r.H, r.call.median_us, r.call.p10_us, r.call.p90_us,
                      r.flops / (r.call.median_us * 1e-6) / 1e12, r.withMeta.median_us, r.numSmParts, r.totalSplits,
                      r.checkOk ? "ok" : "FAILED", r.maxRelL2, r.finite ? "" : ", NON-FINITE");
          std::fflush(stdout);
          if (outFile) std::fprintf(outFile, "%s\n", jsonRow(r, o, d).c_str());
          if (!r.checkOk || !r.finite) rc = std::max(rc, 1);
        }
    cudaFree(flush);
    cudaStreamDestroy(st);
  } catch (CudaFailure const &e) {
    std::fprintf(stderr, "flashmla_peer: %s\n", e.what.c_str());
    if (outFile) {
      std::fclose(outFile);
      std::remove(tmp.c_str());
    }
    return 3;
  }
  if (outFile) {
    if (std::fclose(outFile) != 0 || std::rename(tmp.c_str(), o.out.c_str()) != 0) {
      std::fprintf(stderr, "flashmla_peer: cannot write %s\n", o.out.c_str());
      return 3;
    }
  }
  return rc;
}
