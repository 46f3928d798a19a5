//===- Loss.cpp - Cross-entropy kernels -----------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Per-row losses are computed in parallel into a buffer and then summed in
// ascending row order on one thread, so the reported loss does not depend on
// the thread count. Row log-sum-exps subtract the row max and sum in double.
//
// linearCrossEntropy never materialises [N, V] logits: each chunk of
// `chunkRows` rows gets its logits from one sgemm, is reduced (forward) or
// turned into dLogits in place (backward), and is then dropped. The backward
// accumulates dW over chunks in chunk order with beta = 1 sgemms after
// zeroing it, so the result is the same for any thread count (the chunking
// itself is part of the call's definition). Chunks whose rows are all
// ignored are skipped: they contribute nothing. linearCrossEntropyWithGrad
// runs the two loops as one, each chunk's logits serving the loss and then
// becoming its gradient, with the same calls in the same order.
//
// The backward kernels have no error channel; a row whose label is neither
// ignoreIndex nor in [0, V) is treated as ignored there (the forward has
// already reported it).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace rondo::cpu {

namespace {

/// Max and sum(exp(x - max)) of a row.
void rowMaxSum(const float *x, int64_t V, float &m, double &sum) {
  m = x[0];
  for (int64_t c = 1; c < V; ++c)
    m = std::max(m, x[c]);
  sum = 0.0;
  for (int64_t c = 0; c < V; ++c)
    sum += std::exp(x[c] - m);
}

double rowLoss(const float *x, int64_t V, int64_t label) {
  float m;
  double sum;
  rowMaxSum(x, V, m, sum);
  return double(m) + std::log(sum) - double(x[label]);
}

/// In place: x = scale * (softmax(x) - onehot(label)).
void rowGrad(float *x, int64_t V, int64_t label, float scale) {
  float m;
  double sum;
  rowMaxSum(x, V, m, sum);
  double inv = double(scale) / sum;
  for (int64_t c = 0; c < V; ++c)
    x[c] = float(double(std::exp(x[c] - m)) * inv);
  x[label] -= scale;
}

inline bool validLabel(int64_t label, int64_t ignoreIndex, int64_t V) {
  return label != ignoreIndex && label >= 0 && label < V;
}

bool checkLabels(IView labels, int64_t n, int64_t ignoreIndex, int64_t V) {
  for (int64_t r = 0; r < n; ++r) {
    int64_t l = labels.data[r];
    if (l != ignoreIndex && (l < 0 || l >= V))
      return false;
  }
  return true;
}

void rowsOf(const Shape &shape, int64_t &rows, int64_t &width) {
  width = shape.rank ? shape.dims[shape.rank - 1] : 1;
  rows = width ? shape.numel() / width : 0;
}

/// Sums per-row losses of the rows [r0, r0 + n) of `logits` into `losses`.
void chunkLosses(const float *logits, int64_t n, int64_t V, IView labels,
                 int64_t r0, int64_t ignoreIndex, double *losses) {
  detail::parallelBlocks(
      n, std::max<int64_t>(1, 2048 / std::max<int64_t>(V, 1)), V * 4,
      [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          int64_t l = labels.data[r0 + r];
          losses[r0 + r] = validLabel(l, ignoreIndex, V)
                               ? rowLoss(logits + r * V, V, l)
                               : 0.0;
        }
      });
}

void chunkGrads(float *logits, int64_t n, int64_t V, IView labels, int64_t r0,
                int64_t ignoreIndex, float scale) {
  detail::parallelBlocks(n,
                         std::max<int64_t>(1, 2048 / std::max<int64_t>(V, 1)),
                         V * 4, [&](int64_t lo, int64_t hi) {
                           for (int64_t r = lo; r < hi; ++r) {
                             int64_t l = labels.data[r0 + r];
                             float *row = logits + r * V;
                             if (validLabel(l, ignoreIndex, V))
                               rowGrad(row, V, l, scale);
                             else
                               std::fill(row, row + V, 0.0f);
                           }
                         });
}

struct LinearDims {
  int64_t N, D, V;
};

LinearDims linearDims(const Shape &h, const Shape &w, bool transW) {
  LinearDims d;
  rowsOf(h, d.N, d.D);
  if (w.rank != 2)
    detail::fatal("linearCrossEntropy: weight must be rank 2");
  int64_t wD = transW ? w.dims[1] : w.dims[0];
  d.V = transW ? w.dims[0] : w.dims[1];
  if (wD != d.D)
    detail::fatal("linearCrossEntropy: hidden size %lld does not match %lld",
                  (long long)d.D, (long long)wD);
  return d;
}

bool anyValid(IView labels, int64_t r0, int64_t n, int64_t ignoreIndex,
              int64_t V) {
  for (int64_t r = r0; r < r0 + n; ++r)
    if (validLabel(labels.data[r], ignoreIndex, V))
      return true;
  return false;
}

/// The loss sum over non-ignored rows, in ascending row order.
void sumLosses(const double *losses, IView labels, int64_t N,
               int64_t ignoreIndex, double *lossSum, int64_t *count) {
  double total = 0.0;
  int64_t n = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (labels.data[r] == ignoreIndex)
      continue;
    total += losses[size_t(r)];
    ++n;
  }
  *lossSum = total;
  *count = n;
}

/// logits[n, V] = h[r0 : r0 + n] . W.
void chunkLogits(CFView h, CFView w, bool transW, const LinearDims &d,
                 int64_t r0, int64_t n, float *logits) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transW ? CblasTrans : CblasNoTrans,
              int(n), int(d.V), int(d.D), 1.0f, h.data + r0 * d.D, int(d.D),
              w.data, int(transW ? d.D : d.V), 0.0f, logits, int(d.V));
}

/// dH[r0 : r0 + n] = dLogits . op(W)^T and dW += the chunk's part, from the
/// chunk's logits gradient.
void chunkProducts(const float *grads, CFView h, CFView w, bool transW,
                   const LinearDims &d, int64_t r0, int64_t n, FView dH,
                   FView dW) {
  if (dH.data)
    // dH = dLogits . W^T ([D, V] weight) or dLogits . W ([V, D] weight).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, transW ? CblasNoTrans : CblasTrans,
                int(n), int(d.D), int(d.V), 1.0f, grads, int(d.V), w.data,
                int(transW ? d.D : d.V), 0.0f, dH.data + r0 * d.D, int(d.D));
  if (!dW.data)
    return;
  if (transW) // dW[V, D] += dLogits^T . h
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(d.V), int(d.D),
                int(n), 1.0f, grads, int(d.V), h.data + r0 * d.D, int(d.D),
                1.0f, dW.data, int(d.D));
  else // dW[D, V] += h^T . dLogits
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(d.D), int(d.V),
                int(n), 1.0f, h.data + r0 * d.D, int(d.D), grads, int(d.V),
                1.0f, dW.data, int(d.V));
}

} // namespace

bool crossEntropy(CFView logits, IView labels, int64_t ignoreIndex,
                  double *lossSum, int64_t *count) {
  int64_t N, V;
  rowsOf(logits.shape, N, V);
  *lossSum = 0.0;
  *count = 0;
  if (!checkLabels(labels, N, ignoreIndex, V))
    return false;
  std::vector<double> losses(static_cast<size_t>(N));
  chunkLosses(logits.data, N, V, labels, 0, ignoreIndex, losses.data());
  sumLosses(losses.data(), labels, N, ignoreIndex, lossSum, count);
  return true;
}

void crossEntropyBackward(CFView logits, IView labels, int64_t ignoreIndex,
                          float gradScale, FView dLogits) {
  int64_t N, V;
  rowsOf(logits.shape, N, V);
  copy(logits, dLogits);
  chunkGrads(dLogits.data, N, V, labels, 0, ignoreIndex, gradScale);
}

bool linearCrossEntropy(CFView h, CFView w, bool transW, IView labels,
                        int64_t ignoreIndex, int64_t chunkRows, double *lossSum,
                        int64_t *count) {
  LinearDims d = linearDims(h.shape, w.shape, transW);
  *lossSum = 0.0;
  *count = 0;
  if (!checkLabels(labels, d.N, ignoreIndex, d.V))
    return false;
  int64_t chunk = chunkRows <= 0 ? d.N : std::min(chunkRows, d.N);
  std::vector<float> logits(size_t(chunk * d.V));
  std::vector<double> losses(size_t(d.N), 0.0);
  for (int64_t r0 = 0; r0 < d.N; r0 += chunk) {
    int64_t n = std::min(chunk, d.N - r0);
    if (!anyValid(labels, r0, n, ignoreIndex, d.V))
      continue;
    chunkLogits(h, w, transW, d, r0, n, logits.data());
    chunkLosses(logits.data(), n, d.V, labels, r0, ignoreIndex, losses.data());
  }
  sumLosses(losses.data(), labels, d.N, ignoreIndex, lossSum, count);
  return true;
}

namespace {
/// The list's loss contract on top of the host forms: the sum as float, an
/// invalid label into the flag or, without one, a message and exit (a void
/// kernel has no error channel).
void storeLoss(bool valid, double sum, float *lossSum, int *badLabel) {
  *lossSum = float(sum);
  if (valid)
    return;
  if (badLabel) {
    *badLabel = 1;
    return;
  }
  std::fprintf(stderr, "error: a label is outside the vocabulary\n");
  std::exit(1);
}
} // namespace

void crossEntropy(CFView logits, IView labels, int64_t ignoreIndex,
                  float *lossSum, int *badLabel) {
  double sum = 0;
  int64_t count = 0;
  bool valid = crossEntropy(logits, labels, ignoreIndex, &sum, &count);
  storeLoss(valid, sum, lossSum, badLabel);
}

void linearCrossEntropy(CFView h, CFView w, bool transW, IView labels,
                        int64_t ignoreIndex, int64_t chunkRows, float *lossSum,
                        int *badLabel) {
  double sum = 0;
  int64_t count = 0;
  bool valid = linearCrossEntropy(h, w, transW, labels, ignoreIndex, chunkRows,
                                  &sum, &count);
  storeLoss(valid, sum, lossSum, badLabel);
}

namespace {
/// The backward's chunk loop; with `losses`, each row's loss as well, from
/// the chunk's logits before they become its gradient. dW is overwritten,
/// or added to with addToDW.
void backwardChunks(CFView h, CFView w, bool transW, IView labels,
                    int64_t ignoreIndex, int64_t chunkRows, float gradScale,
                    double *losses, FView dH, FView dW, bool addToDW = false) {
  LinearDims d = linearDims(h.shape, w.shape, transW);
  if (dW.data && !addToDW)
    fill(dW, 0.0f);
  int64_t chunk = chunkRows <= 0 ? d.N : std::min(chunkRows, d.N);
  std::vector<float> grads(size_t(chunk * d.V));
  for (int64_t r0 = 0; r0 < d.N; r0 += chunk) {
    int64_t n = std::min(chunk, d.N - r0);
    if (!anyValid(labels, r0, n, ignoreIndex, d.V)) {
      if (dH.data)
        std::fill(dH.data + r0 * d.D, dH.data + (r0 + n) * d.D, 0.0f);
      continue;
    }
    chunkLogits(h, w, transW, d, r0, n, grads.data());
    if (losses)
      chunkLosses(grads.data(), n, d.V, labels, r0, ignoreIndex, losses);
    chunkGrads(grads.data(), n, d.V, labels, r0, ignoreIndex, gradScale);
    chunkProducts(grads.data(), h, w, transW, d, r0, n, dH, dW);
  }
}
} // namespace

void linearCrossEntropyBackward(CFView h, CFView w, bool transW, IView labels,
                                int64_t ignoreIndex, int64_t chunkRows,
                                float gradScale, FView dH, FView dW) {
  backwardChunks(h, w, transW, labels, ignoreIndex, chunkRows, gradScale,
                 nullptr, dH, dW);
}

namespace {
void withGrad(CFView h, CFView w, bool transW, IView labels,
              int64_t ignoreIndex, int64_t chunkRows, float gradScale,
              float *lossSum, int *badLabel, FView dH, FView dW, bool addToDW) {
  int64_t N, D;
  rowsOf(h.shape, N, D);
  int64_t V = transW ? w.shape.dims[0] : w.shape.dims[1];
  // The forward computes no loss once a label is invalid.
  bool valid = checkLabels(labels, N, ignoreIndex, V);
  std::vector<double> losses(size_t(N), 0.0);
  backwardChunks(h, w, transW, labels, ignoreIndex, chunkRows, gradScale,
                 valid ? losses.data() : nullptr, dH, dW, addToDW);
  double sum = 0;
  int64_t count = 0;
  if (valid)
    sumLosses(losses.data(), labels, N, ignoreIndex, &sum, &count);
  storeLoss(valid, sum, lossSum, badLabel);
}
} // namespace

void linearCrossEntropyWithGrad(CFView h, CFView w, bool transW, IView labels,
                                int64_t ignoreIndex, int64_t chunkRows,
                                float gradScale, float *lossSum, int *badLabel,
                                FView dH, FView dW) {
  withGrad(h, w, transW, labels, ignoreIndex, chunkRows, gradScale, lossSum,
           badLabel, dH, dW, /*addToDW=*/false);
}

void linearCrossEntropyWithGradAdd(CFView h, CFView w, bool transW,
                                   IView labels, int64_t ignoreIndex,
                                   int64_t chunkRows, float gradScale,
                                   float *lossSum, int *badLabel, FView dH,
                                   FView dW) {
  withGrad(h, w, transW, labels, ignoreIndex, chunkRows, gradScale, lossSum,
           badLabel, dH, dW, /*addToDW=*/true);
}

} // namespace rondo::cpu
