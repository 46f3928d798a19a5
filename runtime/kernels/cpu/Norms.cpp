//===- Norms.cpp - Softmax, normalisation and rotary kernels --------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// All of these work on rows of the last axis, and each row belongs to one
// thread. Row statistics (softmax sums, means, variances, the dot products
// of the backward passes) are accumulated in double: rows can be thousands
// of elements long and these sums feed every element of the row. Variance
// is the two-pass form, sum((x - mean)^2), which does not cancel the way
// E[x^2] - mean^2 does.
//
// Weight gradients (dW, dB) are column sums over rows. They are computed in
// a second pass where each thread owns a block of columns and walks the rows
// in ascending order, so the sum order is fixed and nothing is shared.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace rondo::cpu {

using detail::parallelBlocks;

namespace {

/// Splits a tensor into rows of its last dimension.
void rowsOf(const Shape &shape, int64_t &rows, int64_t &width) {
  width = shape.rank ? shape.dims[shape.rank - 1] : 1;
  rows = width ? shape.numel() / width : 0;
}

int64_t rowsPerBlock(int64_t width) {
  return std::max<int64_t>(1, 2048 / std::max<int64_t>(width, 1));
}

/// Runs row(r) for every r in [0, rows), in parallel blocks of rows of
/// `width` elements that cost `cost` each.
template <typename Row>
void forEachRow(int64_t rows, int64_t width, int64_t cost, Row &&row) {
  parallelBlocks(rows, rowsPerBlock(width), width * cost,
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t r = lo; r < hi; ++r)
                     row(r);
                 });
}

/// out[c] = sum over rows r (ascending) of term(r, c), for c in [0, width),
/// parallel over blocks of columns.
template <typename Term>
void columnSums(int64_t rows, int64_t width, float *out, Term &&term) {
  constexpr int64_t kCols = 128;
  int64_t blocks = (width + kCols - 1) / kCols;
  detail::parallelFor(blocks, rows * kCols * 2, [&](int64_t blk) {
    int64_t c0 = blk * kCols;
    int64_t nc = std::min(kCols, width - c0);
    double acc[kCols];
    for (int64_t c = 0; c < nc; ++c)
      acc[c] = 0.0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < nc; ++c)
        acc[c] += term(r, c0 + c);
    for (int64_t c = 0; c < nc; ++c)
      out[c0 + c] = float(acc[c]);
  });
}

} // namespace

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

void softmax(CFView x, FView out) {
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  forEachRow(rows, width, 4, [&](int64_t r) {
    const float *xr = x.data + r * width;
    float *yr = out.data + r * width;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < width; ++c)
      m = std::max(m, xr[c]);
    if (m == -std::numeric_limits<float>::infinity())
      m = 0.0f; // all -inf: avoid inf - inf
    double sum = 0.0;
    for (int64_t c = 0; c < width; ++c) {
      float e = std::exp(xr[c] - m);
      yr[c] = e;
      sum += e;
    }
    double inv = 1.0 / sum;
    for (int64_t c = 0; c < width; ++c)
      yr[c] = float(yr[c] * inv);
  });
}

void softmaxBackward(CFView y, CFView dY, FView dX) {
  int64_t rows, width;
  rowsOf(y.shape, rows, width);
  forEachRow(rows, width, 3, [&](int64_t r) {
    const float *yr = y.data + r * width;
    const float *gr = dY.data + r * width;
    float *dr = dX.data + r * width;
    double dot = 0.0;
    for (int64_t c = 0; c < width; ++c)
      dot += double(yr[c]) * gr[c];
    float d = float(dot);
    for (int64_t c = 0; c < width; ++c)
      dr[c] = yr[c] * (gr[c] - d);
  });
}

//===----------------------------------------------------------------------===//
// RMSNorm
//===----------------------------------------------------------------------===//

namespace {

double rmsInv(const float *x, int64_t width, float eps) {
  double ss = 0.0;
  for (int64_t c = 0; c < width; ++c)
    ss += double(x[c]) * x[c];
  return 1.0 / std::sqrt(ss / double(width) + double(eps));
}

} // namespace

void rmsNorm(CFView x, CFView w, float eps, FView y) {
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  forEachRow(rows, width, 3, [&](int64_t r) {
    const float *xr = x.data + r * width;
    float *yr = y.data + r * width;
    float inv = float(rmsInv(xr, width, eps));
    if (w.data)
      for (int64_t c = 0; c < width; ++c)
        yr[c] = xr[c] * inv * w.data[c];
    else
      for (int64_t c = 0; c < width; ++c)
        yr[c] = xr[c] * inv;
  });
}

void rmsNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                     FView dW) {
  // y = x * r * w with r = (mean(x^2) + eps)^-1/2, so with g = dY * w:
  //   dX = r * g - x * r^3 * mean(g * x),   dW = sum_rows dY * x * r.
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  std::vector<float> inv(static_cast<size_t>(rows));
  forEachRow(rows, width, 4, [&](int64_t r) {
    const float *xr = x.data + r * width;
    const float *gr = dY.data + r * width;
    double rinv = rmsInv(xr, width, eps);
    inv[size_t(r)] = float(rinv);
    if (!dX.data)
      return;
    double dot = 0.0;
    for (int64_t c = 0; c < width; ++c)
      dot += double(w.data ? gr[c] * w.data[c] : gr[c]) * xr[c];
    float a = float(rinv);
    float bcoef = float(rinv * rinv * rinv * dot / double(width));
    float *dr = dX.data + r * width;
    if (w.data)
      for (int64_t c = 0; c < width; ++c)
        dr[c] = a * (gr[c] * w.data[c]) - bcoef * xr[c];
    else
      for (int64_t c = 0; c < width; ++c)
        dr[c] = a * gr[c] - bcoef * xr[c];
  });
  if (dW.data)
    columnSums(rows, width, dW.data, [&](int64_t r, int64_t c) {
      return double(dY.data[r * width + c]) * x.data[r * width + c] *
             inv[size_t(r)];
    });
}

//===----------------------------------------------------------------------===//
// LayerNorm
//===----------------------------------------------------------------------===//

namespace {

void meanRstd(const float *x, int64_t width, float eps, double &mean,
              double &rstd) {
  double s = 0.0;
  for (int64_t c = 0; c < width; ++c)
    s += x[c];
  mean = s / double(width);
  double v = 0.0;
  for (int64_t c = 0; c < width; ++c) {
    double d = x[c] - mean;
    v += d * d;
  }
  rstd = 1.0 / std::sqrt(v / double(width) + double(eps));
}

} // namespace

void layerNorm(CFView x, CFView w, CFView b, float eps, FView y) {
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  forEachRow(rows, width, 4, [&](int64_t r) {
    const float *xr = x.data + r * width;
    float *yr = y.data + r * width;
    double mean, rstd;
    meanRstd(xr, width, eps, mean, rstd);
    float m = float(mean), s = float(rstd);
    for (int64_t c = 0; c < width; ++c) {
      float v = (xr[c] - m) * s;
      if (w.data)
        v *= w.data[c];
      if (b.data)
        v += b.data[c];
      yr[c] = v;
    }
  });
}

void layerNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                       FView dW, FView dB) {
  // With xhat = (x - mean) * rstd and g = dY * w:
  //   dX = rstd * (g - mean(g) - xhat * mean(g * xhat)),
  //   dW = sum_rows dY * xhat,   dB = sum_rows dY.
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  std::vector<float> means(static_cast<size_t>(rows)),
      rstds(static_cast<size_t>(rows));
  forEachRow(rows, width, 6, [&](int64_t r) {
    const float *xr = x.data + r * width;
    const float *gr = dY.data + r * width;
    double mean, rstd;
    meanRstd(xr, width, eps, mean, rstd);
    means[size_t(r)] = float(mean);
    rstds[size_t(r)] = float(rstd);
    if (!dX.data)
      return;
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = 0; c < width; ++c) {
      double g = w.data ? gr[c] * w.data[c] : gr[c];
      sg += g;
      sgx += g * ((xr[c] - mean) * rstd);
    }
    float mg = float(sg / double(width));
    float mgx = float(sgx / double(width));
    float m = float(mean), s = float(rstd);
    float *dr = dX.data + r * width;
    for (int64_t c = 0; c < width; ++c) {
      float g = w.data ? gr[c] * w.data[c] : gr[c];
      float xhat = (xr[c] - m) * s;
      dr[c] = s * (g - mg - xhat * mgx);
    }
  });
  if (dW.data)
    columnSums(rows, width, dW.data, [&](int64_t r, int64_t c) {
      float xhat =
          (x.data[r * width + c] - means[size_t(r)]) * rstds[size_t(r)];
      return double(dY.data[r * width + c]) * xhat;
    });
  if (dB.data)
    columnSums(rows, width, dB.data, [&](int64_t r, int64_t c) {
      return double(dY.data[r * width + c]);
    });
}

//===----------------------------------------------------------------------===//
// Rotary embedding
//===----------------------------------------------------------------------===//

namespace {

/// Shared walk for rotary and its backward: x and y are [..., T, D], cos and
/// sin [T, D]; fn(in, out, cos, sin, half) handles one row of D.
template <typename Fn>
void rotaryRows(const Shape &shape, const float *in, const float *cosT,
                const float *sinT, float *out, Fn &&fn) {
  if (shape.rank < 2)
    detail::fatal("rotary: input must have rank >= 2");
  int64_t T = shape.dims[shape.rank - 2], D = shape.dims[shape.rank - 1];
  if (D % 2 != 0)
    detail::fatal("rotary: head dimension %lld is odd", (long long)D);
  int64_t rows = shape.numel() / std::max<int64_t>(D, 1);
  forEachRow(rows, D, 3, [&](int64_t r) {
    int64_t t = r % T;
    fn(in + r * D, out + r * D, cosT + t * D, sinT + t * D, D / 2);
  });
}

} // namespace

void rotary(CFView x, CFView cos, CFView sin, FView y) {
  rotaryRows(x.shape, x.data, cos.data, sin.data, y.data,
             [](const float *xr, float *yr, const float *c, const float *s,
                int64_t h) {
               for (int64_t i = 0; i < h; ++i)
                 yr[i] = xr[i] * c[i] - xr[i + h] * s[i];
               for (int64_t i = h; i < 2 * h; ++i)
                 yr[i] = xr[i] * c[i] + xr[i - h] * s[i];
             });
}

void rotaryBackward(CFView dY, CFView cos, CFView sin, FView dX) {
  // The transpose of rotate_half moves the first half of its input to the
  // second half and the negated second half to the first.
  rotaryRows(dY.shape, dY.data, cos.data, sin.data, dX.data,
             [](const float *gr, float *dr, const float *c, const float *s,
                int64_t h) {
               for (int64_t i = 0; i < h; ++i)
                 dr[i] = gr[i] * c[i] + gr[i + h] * s[i + h];
               for (int64_t i = h; i < 2 * h; ++i)
                 dr[i] = gr[i] * c[i] - gr[i - h] * s[i - h];
             });
}

} // namespace rondo::cpu

//===----------------------------------------------------------------------===//
// Query / key norm, head transpose and rotary (kern-fuse-norm-rotary)
//===----------------------------------------------------------------------===//

namespace rondo::cpu {

namespace {
constexpr int64_t kTransposeHeads[4] = {0, 2, 1, 3};
} // namespace

// The definitions of the fused GPU kernels: the three kernels they replace,
// composed through temporaries (host trainers keep the separate calls).
void rmsNormRotary(CFView x, CFView w, float eps, CFView cos, CFView sin,
                   FView y) {
  std::vector<float> normed(size_t(x.shape.numel())),
      moved(size_t(y.shape.numel()));
  rmsNorm(x, w, eps, FView{normed.data(), x.shape});
  transpose(CFView{normed.data(), x.shape}, kTransposeHeads,
            FView{moved.data(), y.shape});
  rotary(CFView{moved.data(), y.shape}, cos, sin, y);
}

void rmsNormRotaryBackward(CFView x, CFView w, float eps, CFView cos,
                           CFView sin, CFView dY, FView dX, FView dW) {
  std::vector<float> rotated(size_t(dY.shape.numel())),
      moved(size_t(x.shape.numel()));
  rotaryBackward(dY, cos, sin, FView{rotated.data(), dY.shape});
  transpose(CFView{rotated.data(), dY.shape}, kTransposeHeads,
            FView{moved.data(), x.shape});
  rmsNormBackward(x, w, eps, CFView{moved.data(), x.shape}, dX, dW);
}

void transposeRotary(CFView x, CFView cos, CFView sin, FView y) {
  std::vector<float> moved(size_t(y.shape.numel()));
  transpose(x, kTransposeHeads, FView{moved.data(), y.shape});
  rotary(CFView{moved.data(), y.shape}, cos, sin, y);
}

void transposeRotaryBackward(CFView dY, CFView cos, CFView sin, FView dX) {
  std::vector<float> rotated(size_t(dY.shape.numel()));
  rotaryBackward(dY, cos, sin, FView{rotated.data(), dY.shape});
  transpose(CFView{rotated.data(), dY.shape}, kTransposeHeads, dX);
}

void addRmsNorm(CFView a, CFView b, CFView w, float eps, FView sum, FView y) {
  binary(BinaryKind::Add, a, b, sum);
  rmsNorm(CFView{sum.data, sum.shape}, w, eps, y);
}

void rmsNormBackwardAdd(CFView x, CFView w, float eps, CFView dY, CFView r,
                        FView sum, FView dW) {
  std::vector<float> dX(size_t(x.shape.numel()));
  rmsNormBackward(x, w, eps, dY, FView{dX.data(), x.shape}, dW);
  binary(BinaryKind::Add, r, CFView{dX.data(), x.shape}, sum);
}

} // namespace rondo::cpu
