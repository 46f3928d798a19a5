//===- Experts.cpp - Mixture-of-experts kernels ---------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The router's top-k and the grouped products of a mixture of experts. Each
// (token, slot) row meets the matrix of the expert it was routed to. Instead
// of gathering a copy of that matrix per row (what the exported graph says
// literally), the rows are sorted by expert with a stable counting sort
// (offsets per expert from the ids), each expert's rows are multiplied as one
// sgemm and the results written back to their rows. The order depends only
// on the ids, so results are bitwise identical for any number of threads or
// workers; a weight gradient sums its expert's rows in ascending row order
// inside one sgemm.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstring>
#include <vector>

namespace rondo::cpu {
namespace {

/// Rows sorted by expert: rows offsets[e] .. offsets[e + 1] of `order` are
/// the rows routed to expert e, ascending.
struct ExpertOrder {
  std::vector<int64_t> offsets, order;
};

ExpertOrder sortByExpert(IView ids, int64_t n, int64_t experts,
                         const char *kernel) {
  ExpertOrder o;
  o.offsets.assign(experts + 1, 0);
  for (int64_t r = 0; r < n; ++r) {
    int64_t e = ids.data[r];
    if (e < 0 || e >= experts)
      detail::contract(kernel,
                       "expert id %lld of row %lld is outside [0, %lld)",
                       (long long)e, (long long)r, (long long)experts);
    ++o.offsets[e + 1];
  }
  for (int64_t e = 0; e < experts; ++e)
    o.offsets[e + 1] += o.offsets[e];
  o.order.resize(n);
  std::vector<int64_t> next(o.offsets.begin(), o.offsets.end() - 1);
  for (int64_t r = 0; r < n; ++r)
    o.order[next[ids.data[r]]++] = r;
  return o;
}

/// Copies the rows `order[begin, end)` of a [*, width] matrix into `dst`.
void gatherRowsOf(const float *src, int64_t width, const int64_t *order,
                  int64_t count, float *dst) {
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(dst + i * width, src + order[i] * width, sizeof(float) * width);
}

} // namespace

void topK(CFView x, FView values, MIView indices) {
  auto s = kernels::topKSizes(
      x.shape, values.shape, indices.shape,
      [](auto... args) { detail::contract("topK", args...); });
  int64_t D = s.D, k = s.k;
  // NaN first, then larger values, then lower positions.
  detail::parallelFor(s.rows, D * 4, [&](int64_t r) {
    const float *row = x.data + r * D;
    std::vector<int64_t> pos(D);
    for (int64_t j = 0; j < D; ++j)
      pos[j] = j;
    std::partial_sort(pos.begin(), pos.begin() + k, pos.end(),
                      [&](int64_t a, int64_t b) {
                        bool na = std::isnan(row[a]), nb = std::isnan(row[b]);
                        if (na != nb)
                          return na;
                        if (!na && row[a] != row[b])
                          return row[a] > row[b];
                        return a < b;
                      });
    for (int64_t j = 0; j < k; ++j) {
      values.data[r * k + j] = row[pos[j]];
      indices.data[r * k + j] = pos[j];
    }
  });
}

void topKBackward(IView indices, CFView dValues, FView dX) {
  if (!(indices.shape == dValues.shape) ||
      dX.shape.rank != dValues.shape.rank || dX.shape.rank < 1)
    detail::contract("topKBackward", "indices, dValues and dX do not match");
  int64_t D = dX.shape.dims[dX.shape.rank - 1];
  int64_t k = dValues.shape.dims[dValues.shape.rank - 1];
  int64_t rows = D ? dX.shape.numel() / D : 0;
  std::fill(dX.data, dX.data + dX.shape.numel(), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      int64_t p = indices.data[r * k + j];
      if (p < 0 || p >= D)
        detail::contract("topKBackward", "index %lld outside [0, %lld)",
                         (long long)p, (long long)D);
      dX.data[r * D + p] += dValues.data[r * k + j];
    }
}

void expertMatmul(CFView x, CFView w, IView ids, FView out, bool transW) {
  auto s = kernels::expertSizes(
      x.shape, w.shape, ids.shape, out.shape, transW,
      [](auto... args) { detail::contract("expertMatmul", args...); });
  ExpertOrder o = sortByExpert(ids, s.N, s.E, "expertMatmul");
  std::vector<float> xs(s.N * s.K), ys(s.N * s.M);
  gatherRowsOf(x.data, s.K, o.order.data(), s.N, xs.data());
  for (int64_t e = 0; e < s.E; ++e) {
    int64_t begin = o.offsets[e], rows = o.offsets[e + 1] - begin;
    if (rows == 0)
      continue;
    if (s.K == 0) {
      std::fill(ys.begin() + begin * s.M, ys.begin() + (begin + rows) * s.M,
                0.0f);
      continue;
    }
    // w[e] is [K, M], or [M, K] read transposed.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, transW ? CblasTrans : CblasNoTrans,
                int(rows), int(s.M), int(s.K), 1.0f, xs.data() + begin * s.K,
                int(s.K), w.data + e * s.K * s.M, int(transW ? s.K : s.M), 0.0f,
                ys.data() + begin * s.M, int(s.M));
  }
  for (int64_t i = 0; i < s.N; ++i)
    std::memcpy(out.data + o.order[i] * s.M, ys.data() + i * s.M,
                sizeof(float) * s.M);
}

void expertMatmulWeightGrad(CFView x, CFView dY, IView ids, FView dW,
                            bool transW) {
  auto s = kernels::expertSizes(
      x.shape, dW.shape, ids.shape, dY.shape, transW, [](auto... args) {
        detail::contract("expertMatmulWeightGrad", args...);
      });
  ExpertOrder o = sortByExpert(ids, s.N, s.E, "expertMatmulWeightGrad");
  std::vector<float> xs(s.N * s.K), dys(s.N * s.M);
  gatherRowsOf(x.data, s.K, o.order.data(), s.N, xs.data());
  gatherRowsOf(dY.data, s.M, o.order.data(), s.N, dys.data());
  int64_t mat = s.K * s.M;
  for (int64_t e = 0; e < s.E; ++e) {
    int64_t begin = o.offsets[e], rows = o.offsets[e + 1] - begin;
    float *dw = dW.data + e * mat;
    if (rows == 0 || mat == 0) {
      std::fill(dw, dw + mat, 0.0f);
      continue;
    }
    const float *xe = xs.data() + begin * s.K, *ye = dys.data() + begin * s.M;
    if (transW) // dW[e] [M, K] = dYeᵀ · xe
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(s.M), int(s.K),
                  int(rows), 1.0f, ye, int(s.M), xe, int(s.K), 0.0f, dw,
                  int(s.K));
    else // dW[e] [K, M] = xeᵀ · dYe
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(s.K), int(s.M),
                  int(rows), 1.0f, xe, int(s.K), ye, int(s.M), 0.0f, dw,
                  int(s.M));
  }
}

} // namespace rondo::cpu
