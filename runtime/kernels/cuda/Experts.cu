//===- Experts.cu - Mixture-of-experts kernels ----------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The GPU twins of kernels/cpu/Experts.cpp. The router's top-k is one thread
// per row. The grouped products sort the rows by expert on the device and
// run as grouped GEMMs (GroupedGemm.cu): under Precision::Bf16 on the tensor
// cores; under Precision::Fp32 the products stay one thread per output
// element (exact fp32, each summing in ascending order) and the weight
// gradient sums each expert's own sorted rows in fp32. The `Bf16` twins take
// operands kern-bf16-storage already stored in bf16 (resident bf16 copies of
// the expert weights, bf16 activations) and feed them to the tensor cores
// without an fp32 copy (GroupedGemmBf16Sm90.cu). Every order depends
// only on the ids, so results are bitwise reproducible. An expert id outside
// [0, E) makes the rows or elements it touches NaN (the device cannot abort
// with a message; the CPU library does): its output row, and all of a weight
// gradient.
//
//===----------------------------------------------------------------------===//

#include "GroupedGemm.cuh"
#include "Internal.cuh"
#include "Profile.cuh"

#include <cmath>

namespace rondo::cuda {
using namespace detail;

namespace {

/// a ranks before b: NaN first, then larger, then the lower position.
__device__ bool ranksBefore(float va, int64_t a, float vb, int64_t b) {
  bool na = isnan(va), nb = isnan(vb);
  if (na != nb)
    return na;
  if (!na && va != vb)
    return va > vb;
  return a < b;
}

__global__ void topKKernel(const float *x, float *values, int64_t *indices,
                           int64_t rows, int64_t d, int64_t k) {
  RONDO_GRID_STRIDE(r, rows) {
    const float *row = x + r * d;
    // The j-th choice is the best position ranking after the (j-1)-th.
    int64_t prev = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t p = 0; p < d; ++p) {
        if (prev >= 0 && !ranksBefore(row[prev], prev, row[p], p))
          continue;
        if (best < 0 || ranksBefore(row[p], p, row[best], best))
          best = p;
      }
      values[r * k + j] = row[best];
      indices[r * k + j] = best;
      prev = best;
    }
  }
}

__global__ void topKBackwardKernel(const int64_t *indices, const float *dv,
                                   float *dx, int64_t rows, int64_t d,
                                   int64_t k) {
  RONDO_GRID_STRIDE(r, rows) {
    for (int64_t p = 0; p < d; ++p)
      dx[r * d + p] = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      int64_t p = indices[r * k + j];
      if (p >= 0 && p < d)
        dx[r * d + p] += dv[r * k + j];
    }
  }
}

__global__ void expertMatmulKernel(const float *x, const float *w,
                                   const int64_t *ids, float *out, int64_t n,
                                   int64_t kk, int64_t m, int64_t e,
                                   bool transW) {
  RONDO_GRID_STRIDE(i, n * m) {
    int64_t row = i / m, col = i % m, id = ids[row];
    if (id < 0 || id >= e) {
      out[i] = NAN;
      continue;
    }
    const float *we = w + id * kk * m;
    float acc = 0.0f;
    for (int64_t p = 0; p < kk; ++p)
      acc += x[row * kk + p] * (transW ? we[col * kk + p] : we[p * m + col]);
    out[i] = acc;
  }
}

} // namespace

void topK(CFView x, FView values, MIView indices) {
  ProfileScope profileScope("topK");
  auto s = kernels::topKSizes(x.shape, values.shape, indices.shape,
                              [](auto... args) { contract("topK", args...); });
  if (s.rows == 0)
    return;
  topKKernel<<<gridFor(s.rows), kThreads, 0, currentStream()>>>(
      x.data, values.data, indices.data, s.rows, s.D, s.k);
  checkLaunch("topK");
}

void topKBackward(IView indices, CFView dValues, FView dX) {
  ProfileScope profileScope("topKBackward");
  if (!(indices.shape == dValues.shape) ||
      dX.shape.rank != dValues.shape.rank || dX.shape.rank < 1)
    contract("topKBackward", "indices, dValues and dX do not match");
  int64_t d = dX.shape.dims[dX.shape.rank - 1];
  int64_t k = dValues.shape.dims[dValues.shape.rank - 1];
  int64_t rows = d ? dX.shape.numel() / d : 0;
  if (rows == 0)
    return;
  topKBackwardKernel<<<gridFor(rows), kThreads, 0, currentStream()>>>(
      indices.data, dValues.data, dX.data, rows, d, k);
  checkLaunch("topKBackward");
}

void expertMatmul(CFView x, CFView w, IView ids, FView out, bool transW) {
  ProfileScope profileScope("expertMatmul");
  auto s = kernels::expertSizes(
      x.shape, w.shape, ids.shape, out.shape, transW,
      [](auto... args) { contract("expertMatmul", args...); });
  if (s.N * s.M == 0)
    return;
  if (precision() == Precision::Bf16) {
    grouped::expertProductBf16(x.data, w.data, ids.data, out.data, s.N, s.K,
                               s.M, s.E, transW, "expertMatmul");
    return;
  }
  expertMatmulKernel<<<gridFor(s.N * s.M), kThreads, 0, currentStream()>>>(
      x.data, w.data, ids.data, out.data, s.N, s.K, s.M, s.E, transW);
  checkLaunch("expertMatmul");
}

void expertMatmulWeightGrad(CFView x, CFView dY, IView ids, FView dW,
                            bool transW) {
  ProfileScope profileScope("expertMatmulWeightGrad");
  auto s = kernels::expertSizes(
      x.shape, dW.shape, ids.shape, dY.shape, transW,
      [](auto... args) { contract("expertMatmulWeightGrad", args...); });
  if (s.E * s.K * s.M == 0)
    return;
  grouped::expertWeightGrad(x.data, dY.data, ids.data, dW.data, s.N, s.K, s.M,
                            s.E, transW, precision() == Precision::Bf16,
                            "expertMatmulWeightGrad");
}

void expertMatmulBf16(CBView x, CBView w, IView ids, FView out, bool transW) {
  ProfileScope profileScope("expertMatmulBf16");
  auto s = kernels::expertSizes(
      x.shape, w.shape, ids.shape, out.shape, transW,
      [](auto... args) { contract("expertMatmulBf16", args...); });
  if (s.N * s.M == 0)
    return;
  // bf16 operands mean the tensor cores whatever the precision: the values
  // are already rounded, as kern-bf16-storage rounded them for matmulBf16.
  grouped::expertProductBf16Operands(bf16Data(x), bf16Data(w), ids.data,
                                     out.data, s.N, s.K, s.M, s.E, transW,
                                     "expertMatmulBf16");
}

void expertMatmulWeightGradBf16(CBView x, CBView dY, IView ids, FView dW,
                                bool transW) {
  ProfileScope profileScope("expertMatmulWeightGradBf16");
  auto s = kernels::expertSizes(
      x.shape, dW.shape, ids.shape, dY.shape, transW,
      [](auto... args) { contract("expertMatmulWeightGradBf16", args...); });
  if (s.E * s.K * s.M == 0)
    return;
  grouped::expertWeightGradBf16Operands(bf16Data(x), bf16Data(dY), ids.data,
                                        dW.data, s.N, s.K, s.M, s.E, transW,
                                        "expertMatmulWeightGradBf16");
}

} // namespace rondo::cuda
