#include "canopy_Reference.hpp"

#include "canopy_Bf16.hpp"

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
  r.kv_pool = p.kv_pool.data();
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

std::vector<double> referenceAttention(BatchRef const &r)
{
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
      for (int d = 0; d < D_QK; ++d)
        kv[k * D_QK + d] = bf16ToFloat(r.kv_pool[slot * D_QK + d]);
    }
    for (int64_t i = 0; i < T; ++i)
    {
      int64_t const row = r.qo_indptr[b] + i;
      for (int h = 0; h < H; ++h)
      {
        uint16_t const *qrow = r.q + (row * H + h) * D_QK;
        double qd[D_QK];
        for (int d = 0; d < D_QK; ++d)
          qd[d] = bf16ToFloat(qrow[d]);
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
          for (int d = 0; d < D_V; ++d)
            o[d] += w * kv[k * D_QK + d];
        }
        for (int d = 0; d < D_V; ++d)
          o[d] /= denom;
      }
    }
  }
  return out;
}

std::vector<double> referenceAttention(HostProblem const &p) { return referenceAttention(hostRef(p)); }

ErrorStats compareToReference(std::vector<double> const &ref, uint16_t const *out, size_t count, double tol)
{
  ErrorStats e;
  double num = 0, den = 0;
  size_t const n = std::min(count, ref.size());
  if (count != ref.size())
  {
    e.num_bad = static_cast<int64_t>(std::max(count, ref.size()) - n);
    e.first_bad = static_cast<int64_t>(n);
  }
  for (size_t i = 0; i < n; ++i)
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
    e.max_abs = std::max(e.max_abs, std::abs(d));
    num += d * d;
    den += ref[i] * ref[i];
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.pass = e.num_bad == 0 && e.rel_l2 <= tol;
  return e;
}
} // namespace canopy
