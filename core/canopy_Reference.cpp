#include "canopy_Reference.hpp"

#include "canopy_Bf16.hpp"
#include "canopy_Error.hpp"
#include "canopy_Fp8.hpp"
#include "canopy_KvQuant.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace canopy
{
BatchRef hostRef(HostProblem const &p, uint16_t *out)
{
  BatchRef r;
  r.batch_size = p.meta.batchSize();
  r.num_heads = p.shape.num_heads;
  r.num_nodes = p.meta.numNodes();
  r.num_slots = p.num_slots;
  r.sm_scale = static_cast<float>(p.shape.sm_scale);
  r.mask_layout = p.meta.mask_layout;
  r.kv_indptr = p.meta.kv_indptr.data();
  r.kv_indices = p.meta.kv_indices.data();
  r.qo_indptr = p.meta.qo_indptr.data();
  r.out_cache_loc = p.meta.out_cache_loc.data();
  r.custom_mask = p.meta.custom_mask.data();
  r.mask_indptr = p.meta.mask_indptr.data();
  r.tree_parent = p.meta.tree_parent.data();
  r.q = p.q.data();
  r.kv_pool = p.kv_dtype == KvDtype::kBf16 ? p.kv_pool.data() : nullptr;
  r.kv_dtype = p.kv_dtype;
  r.kv_pool_fp8 = p.kv_dtype == KvDtype::kBf16 ? nullptr : p.kv_pool_fp8.data();
  r.kv_scale = p.kv_scale;
  r.out = out;
  return r;
}

namespace
{
bool treeVisible(BatchRef const &r, int b, int64_t i, int64_t j, int64_t prefix_len, int64_t tree_size)
{
  switch (r.mask_layout)
  {
  case MaskLayout::kFull: return r.custom_mask[r.mask_indptr[b] + i * (prefix_len + tree_size) + prefix_len + j] != 0;
  case MaskLayout::kTree: return r.custom_mask[r.mask_indptr[b] + i * tree_size + j] != 0;
  case MaskLayout::kParents:
  {
    int32_t const *parent = r.tree_parent + r.qo_indptr[b];
    for (int64_t k = i; k >= 0; k = parent[k])
      if (k == j)
        return true;
    return false;
  }
  }
  return false;
}
} // namespace

std::vector<double> referenceAttention(BatchRef const &r, Numerics numerics)
{
  // fp8-mma: Q and the softmax weights pass through the cache's FP8 type, as SGLang's kernels cast
  // them (no scale); the denominator sums the weights before the cast, as those kernels do.
  if (std::string const why = numericsUndefinedFor(r.kv_dtype, numerics); !why.empty())
    throw InputError("reference: " + why);
  bool const fp8_products = numerics == Numerics::kFp8Mma;
  Fp8Format const fmt = fp8FormatOf(r.kv_dtype);
  auto const cast = [&](double x) { return static_cast<double>(fp8ToFloat(floatToFp8(static_cast<float>(x), fmt), fmt)); };
  int const H = r.num_heads;
  std::vector<double> out(static_cast<size_t>(r.num_nodes) * H * D_V, 0.0);
  std::vector<double> kv;     // converted rows of the visible keys, [n][576]
  std::vector<double> score;  // [n]
  for (int b = 0; b < r.batch_size; ++b)
  {
    int64_t const P = r.kv_indptr[b + 1] - r.kv_indptr[b];
    int64_t const T = r.qo_indptr[b + 1] - r.qo_indptr[b];
    if (T == 0)
      continue;
    // Gather prefix + tree rows once per request, in fp64.
    kv.assign(static_cast<size_t>((P + T) * D_QK), 0.0);
    for (int64_t k = 0; k < P + T; ++k)
    {
      int64_t const slot = k < P ? r.kv_indices[r.kv_indptr[b] + k] : r.out_cache_loc[r.qo_indptr[b] + (k - P)];
      dequantiseRow(r, slot, &kv[k * D_QK]);
    }
    for (int64_t i = 0; i < T; ++i)
    {
      int64_t const row = r.qo_indptr[b] + i;
      for (int h = 0; h < H; ++h)
      {
        uint16_t const *qrow = r.q + (row * H + h) * D_QK;
        double qd[D_QK];
        for (int d = 0; d < D_QK; ++d)
          qd[d] = fp8_products ? cast(bf16ToFloat(qrow[d])) : bf16ToFloat(qrow[d]);
        score.assign(static_cast<size_t>(P + T), -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < P + T; ++k)
        {
          if (k >= P && !treeVisible(r, b, i, k - P, P, T))
            continue;
          double s = 0;
          for (int d = 0; d < D_QK; ++d)
            s += qd[d] * kv[k * D_QK + d];
          score[k] = s * static_cast<double>(r.sm_scale);
          mx = std::max(mx, score[k]);
        }
        double denom = 0;
        double *o = out.data() + (row * H + h) * D_V;
        for (int64_t k = 0; k < P + T; ++k)
        {
          if (score[k] == -std::numeric_limits<double>::infinity())
            continue;
          double const w = std::exp(score[k] - mx);
          denom += w;
          double const pw = fp8_products ? cast(w) : w;
          for (int d = 0; d < D_V; ++d)
            o[d] += pw * kv[k * D_QK + d];
        }
        for (int d = 0; d < D_V; ++d)
          o[d] /= denom;
      }
    }
  }
  return out;
}

std::vector<double> referenceAttention(HostProblem const &p, Numerics numerics)
{
  return referenceAttention(hostRef(p), numerics);
}

ErrorStats compareToReference(std::vector<double> const &ref, uint16_t const *out, size_t count)
{
  return compareToReference(ref, out, count, BF16_BOUNDS);
}

ErrorStats compareToReference(std::vector<double> const &ref, uint16_t const *out, size_t count, ErrorBounds const &bound)
{
  ErrorStats e;
  double num = 0, den = 0;
  size_t const n = std::min(count, ref.size());
  if (count != ref.size())
  {
    e.num_bad = static_cast<int64_t>(std::max(count, ref.size()) - n);
    e.first_bad = static_cast<int64_t>(n);
  }
  for (size_t r0 = 0; r0 < n; r0 += D_V)
  {
    size_t const r1 = std::min(n, r0 + D_V);
    double rnum = 0, rden = 0, rmax = 0, rerr = 0;
    for (size_t i = r0; i < r1; ++i)
    {
      double const v = bf16ToFloat(out[i]);
      if (!std::isfinite(v))
      {
        if (e.first_bad < 0 || static_cast<int64_t>(i) < e.first_bad)
          e.first_bad = static_cast<int64_t>(i);
        ++e.num_bad;
        continue;
      }
      double const d = v - ref[i];
      rerr = std::max(rerr, std::abs(d));
      rmax = std::max(rmax, std::abs(ref[i]));
      rnum += d * d;
      rden += ref[i] * ref[i];
    }
    e.max_abs = std::max(e.max_abs, rerr);
    num += rnum;
    den += rden;
    double const row_rel = rden > 0 ? std::sqrt(rnum / rden) : std::sqrt(rnum);
    if (row_rel > e.worst_row_rel_l2 || e.worst_row < 0)
    {
      e.worst_row_rel_l2 = row_rel;
      e.worst_row = static_cast<int64_t>(r0 / D_V);
    }
    // bf16 spacing at the row's largest value: 2^(exponent - 7) (8 significant bits).
    double const ulp = rmax > 0 ? std::ldexp(1.0, std::ilogb(rmax) - 7) : 0;
    e.max_ulps = std::max(e.max_ulps, ulp > 0 ? rerr / ulp : (rerr > 0 ? std::numeric_limits<double>::infinity() : 0));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.pass = e.num_bad == 0 && e.rel_l2 <= bound.rel_l2 && e.worst_row_rel_l2 <= bound.row_rel_l2;
  return e;
}

ErrorBounds errorBounds(KvDtype dtype, Numerics numerics)
{
  if (numerics == Numerics::kDequant)
    return BF16_BOUNDS;
  if (dtype == KvDtype::kFp8E5m2)
    return {FP8_MMA_E5M2_REL_L2_TOLERANCE, FP8_MMA_E5M2_ROW_REL_L2_TOLERANCE};
  return {FP8_MMA_E4M3_REL_L2_TOLERANCE, FP8_MMA_E4M3_ROW_REL_L2_TOLERANCE};
}

namespace
{
/// The FP8 mutations: the pool read wrongly. Rope as FP8 has no BatchRef form: the misread values
/// go into a bf16 pool (exact: e4m3 times a power-of-two scale is a bf16 value).
std::vector<double> misreadPool(HostProblem const &problem, Mutation mutation, Numerics numerics)
{
  auto const need = [&](bool ok, char const *dtypes) {
    if (!ok)
      throw InputError("mutation " + toString(mutation) + ": needs a " + dtypes + " pool, not " +
                       toString(problem.kv_dtype));
  };
  BatchRef r = hostRef(problem);
  switch (mutation)
  {
  case Mutation::kKvScaleWrong:
  case Mutation::kKvScaleTwice:
    need(problem.kv_dtype == KvDtype::kFp8E4m3 || problem.kv_dtype == KvDtype::kFp8E5m2, "fp8-e4m3 or fp8-e5m2");
    r.kv_scale = mutation == Mutation::kKvScaleWrong ? 2 * r.kv_scale : r.kv_scale * r.kv_scale;
    return referenceAttention(r, numerics);
  case Mutation::kE5m2AsE4m3:
    need(problem.kv_dtype == KvDtype::kFp8E5m2, "fp8-e5m2");
    r.kv_dtype = KvDtype::kFp8E4m3;
    return referenceAttention(r, numerics);
  default: break;
  }
  need(problem.kv_dtype == KvDtype::kFp8E4m3BlockScaled, "fp8-e4m3-blockscaled");
  HostProblem misread = problem;
  misread.kv_dtype = KvDtype::kBf16;
  misread.kv_pool.assign(static_cast<size_t>(problem.num_slots) * D_QK, 0);
  int const row_bytes = kvRowBytes(problem.kv_dtype);
  std::vector<double> row(D_QK);
  for (int64_t slot = 0; slot < problem.num_slots; ++slot)
  {
    dequantiseRow(r, slot, row.data());
    uint8_t const *rope = problem.kv_pool_fp8.data() + slot * row_bytes + KV_BLOCKSCALED_ROPE_AT;
    for (int d = 0; d < D_ROPE; ++d)
      row[D_LATENT + d] = fp8ToFloat(rope[d], FP8_E4M3);
    for (int d = 0; d < D_QK; ++d)
      misread.kv_pool[slot * D_QK + d] = floatToBf16(static_cast<float>(row[d]));
  }
  return referenceAttention(misread, numerics);
}
} // namespace

std::vector<double> mutatedReference(HostProblem const &problem, Mutation mutation, Numerics numerics)
{
  BatchRef r = hostRef(problem);
  if (mutation == Mutation::kNone)
    return referenceAttention(r, numerics);
  if (mutation == Mutation::kWrongScale)
  {
    r.sm_scale *= 2;
    return referenceAttention(r, numerics);
  }
  if (mutation == Mutation::kKvScaleWrong || mutation == Mutation::kKvScaleTwice ||
      mutation == Mutation::kE5m2AsE4m3 || mutation == Mutation::kRopeAsFp8)
    return misreadPool(problem, mutation, numerics);
  // The other mutations change visibility: express them as a tree-layout mask built from the
  // parents, and (no prefix) an empty prefix list.
  BatchMetadata meta = problem.meta;
  meta.mask_layout = MaskLayout::kTree;
  meta.custom_mask.clear();
  meta.mask_indptr.assign(1, 0);
  for (int b = 0; b < meta.batchSize(); ++b)
  {
    int64_t const n0 = meta.qo_indptr[b], T = meta.qo_indptr[b + 1] - n0;
    int32_t const *parent = meta.tree_parent.data() + n0;
    auto ancestor = [&](int64_t i, int64_t j) {
      for (int64_t k = i; k >= 0; k = parent[k])
        if (k == j)
          return true;
      return false;
    };
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
      {
        bool vis = ancestor(i, j);
        if (mutation == Mutation::kSelfOnly)
          vis = i == j;
        else if (mutation == Mutation::kCausalTree)
          vis = j <= i;
        else if (mutation == Mutation::kSiblingsVisible)
          vis = vis || (i != j && parent[i] == parent[j] && parent[i] >= 0);
        meta.custom_mask.push_back(vis ? 1 : 0);
      }
    meta.mask_indptr.push_back(static_cast<int64_t>(meta.custom_mask.size()));
  }
  std::vector<int32_t> no_prefix(meta.kv_indptr.size(), 0);
  r.mask_layout = MaskLayout::kTree;
  r.custom_mask = meta.custom_mask.data();
  r.mask_indptr = meta.mask_indptr.data();
  if (mutation == Mutation::kNoPrefix)
    r.kv_indptr = no_prefix.data();
  return referenceAttention(r, numerics);
}
} // namespace canopy
