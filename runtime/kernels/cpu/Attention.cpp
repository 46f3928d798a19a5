//===- Attention.cpp - Scaled dot-product attention -----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The matrix products (Q K^T, P V and, in the backward, dO V^T, dS K, dS^T Q,
// P^T dO) are cblas_sgemm calls on blocks of up to kRowBlock query rows; only
// the row-wise softmax work is done here. For a causal block the products
// stop at the last key visible to any row of the block, and each row's
// probabilities beyond its own last visible key are set to exactly 0 (exp is
// never evaluated there), so masked positions contribute exactly 0. With a
// sliding window the products also start at the first key visible to any
// row of the block (keys before it are never read), and each row's
// probabilities before its own first visible key are exactly 0 too.
//
// Forward keeps the numerically stable form: scores are shifted by the row
// max before exp, the row sum is carried in double, P is normalised before
// the P V product, and lse = max + log(sum) is saved. The backward recomputes
// P = exp(s - lse) from that lse (no second max/sum pass) and uses
// delta_i = dO_i . O_i in place of sum_j P_ij dP_ij, as FlashAttention does.
// dK and dV are zeroed and then accumulated with beta = 1 products over the
// query heads of the group in ascending order (row blocks ascending within a
// head), so their sum order is fixed.
//
// Parallelism is chosen from the shapes alone, never from the thread count:
// small heads (where OpenBLAS would run single-threaded anyway) are spread
// over threads one head (forward) or one kv group (backward) per task; large
// heads are processed one after another with OpenBLAS threading each product
// and OpenMP splitting the softmax rows. Either way every output element is
// produced by one fixed sequence of operations.
//
// A causal query row with no visible key (only possible when S < T) gets
// out = 0 and lse = -inf, and passes no gradient.
//
// Attention sinks (GPT-OSS: attentionSinks) add one logit per query head to
// every row's softmax denominator, a key with no value: the row max starts
// at the sink and the row sum at exp(sink - max), so lse includes the sink
// and the backward's P = exp(s - lse) is already the sink-normalised
// probability; dQ, dK and dV need nothing else. A row with no visible key
// then gives all its mass to the sink (out = 0, lse = sink). The sink's own
// gradient is -P_sink * delta per row (the softmax gradient of a column
// whose dP is 0), summed per head over batch and rows in ascending order in
// a pass of its own, so it does not depend on how the rows were split.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <limits>
#include <vector>

namespace rondo::cpu {

namespace {

struct AttnDims {
  int64_t B, Hq, Hkv, T, S, D, group;
  bool causal;
  int64_t window; // > 0: sliding window (causal only)
};

AttnDims attnDims(const Shape &q, const Shape &k, const Shape &v, bool causal,
                  int64_t window) {
  if (q.rank != 4 || k.rank != 4 || v.rank != 4)
    detail::fatal("attention: q, k and v must be rank 4");
  if (window < 0 || (window > 0 && !causal))
    detail::fatal("attention: window %lld needs causal attention",
                  (long long)window);
  AttnDims d{q.dims[0], q.dims[1], k.dims[1], q.dims[2], k.dims[2],
             q.dims[3], 1,         causal,    window};
  if (d.Hkv <= 0 || d.Hq % d.Hkv != 0)
    detail::fatal("attention: %lld query heads not a multiple of %lld kv heads",
                  (long long)d.Hq, (long long)d.Hkv);
  if (k.dims[0] != d.B || !(k == v) || k.dims[3] != d.D)
    detail::fatal("attention: k/v shapes do not match q");
  d.group = d.Hq / d.Hkv;
  return d;
}

/// Query rows per block: bounds the [rows, S] score buffers.
constexpr int64_t kRowBlock = 256;

/// Heads with T * S * D at most this are "small": below OpenBLAS's own
/// threading threshold (65536 * 4 multiply-adds per call), so they are
/// parallelised over heads instead.
constexpr int64_t kSmallHead = 65536 * 4;

/// Number of keys visible to query row i: it sees [firstKey, visibleKeys).
inline int64_t visibleKeys(const AttnDims &d, int64_t i) {
  if (!d.causal)
    return d.S;
  return std::clamp<int64_t>(i + d.S - d.T + 1, 0, d.S);
}

/// The first key visible to query row i (non-decreasing in i).
inline int64_t firstKey(const AttnDims &d, int64_t i) {
  return d.window > 0 ? std::max<int64_t>(visibleKeys(d, i) - d.window, 0) : 0;
}

/// Runs fn(r) for r in [0, n), on OpenMP threads when `parallel`.
template <typename Fn>
void forRows(bool parallel, int64_t n, int64_t cost, Fn &&fn) {
  if (parallel)
    detail::parallelFor(n, cost, fn);
  else
    for (int64_t r = 0; r < n; ++r)
      fn(r);
}

/// C[m, n] = alpha * A . B^T + beta * C with A [m, k], B [n, k] row-major.
void gemmNT(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
            int64_t lda, const float *b, int64_t ldb, float beta, float *c,
            int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

/// C[m, n] = alpha * A . B + beta * C with A [m, k], B [k, n].
void gemmNN(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
            int64_t lda, const float *b, int64_t ldb, float beta, float *c,
            int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

/// C[m, n] = alpha * A^T . B + beta * C with A [k, m], B [k, n].
void gemmTN(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
            int64_t lda, const float *b, int64_t ldb, float beta, float *c,
            int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

/// Forward for one query head. `scratch` holds kRowBlock * S floats. `sink`
/// is the head's sink logit, or null.
void attentionHead(const AttnDims &d, float scale, const float *q,
                   const float *k, const float *v, const float *sink,
                   float *out, float *lse, float *scratch, bool parallelRows) {
  const float emptyLse = sink ? *sink : -std::numeric_limits<float>::infinity();
  for (int64_t i0 = 0; i0 < d.T; i0 += kRowBlock) {
    int64_t rows = std::min(kRowBlock, d.T - i0);
    // The block reads keys [j0, j0 + nMax).
    int64_t j0 = firstKey(d, i0);
    int64_t nMax = visibleKeys(d, i0 + rows - 1) - j0;
    if (nMax <= 0) {
      std::fill(out + i0 * d.D, out + (i0 + rows) * d.D, 0.0f);
      if (lse)
        std::fill(lse + i0, lse + i0 + rows, emptyLse);
      continue;
    }
    // scores[r, j] = scale * q_r . k_{j0 + j} for j < nMax.
    gemmNT(rows, nMax, d.D, scale, q + i0 * d.D, d.D, k + j0 * d.D, d.D, 0.0f,
           scratch, nMax);
    forRows(parallelRows, rows, nMax * 4, [&](int64_t r) {
      float *p = scratch + r * nMax;
      int64_t lo = firstKey(d, i0 + r) - j0;
      int64_t n = visibleKeys(d, i0 + r) - j0;
      if (n <= lo) {
        std::fill(p, p + nMax, 0.0f);
        if (lse)
          lse[i0 + r] = emptyLse;
        return;
      }
      float m = sink ? std::max(*sink, p[lo]) : p[lo];
      for (int64_t j = lo + 1; j < n; ++j)
        m = std::max(m, p[j]);
      double sum = sink ? double(std::exp(*sink - m)) : 0.0;
      for (int64_t j = lo; j < n; ++j) {
        float e = std::exp(p[j] - m);
        p[j] = e;
        sum += e;
      }
      double inv = 1.0 / sum;
      for (int64_t j = lo; j < n; ++j)
        p[j] = float(p[j] * inv);
      std::fill(p, p + lo, 0.0f);
      std::fill(p + n, p + nMax, 0.0f);
      if (lse)
        lse[i0 + r] = float(double(m) + std::log(sum));
    });
    // out = P . V
    gemmNN(rows, d.D, nMax, 1.0f, scratch, nMax, v + j0 * d.D, d.D, 0.0f,
           out + i0 * d.D, d.D);
  }
}

/// Backward for one kv group (the query heads hq0 .. hq0 + group - 1 of one
/// batch entry and their kv head). dK/dV of the group must be zero on entry.
/// `p` and `ds` hold kRowBlock * S floats each.
void attentionGroupBackward(const AttnDims &d, float scale,
                            CFView q, CFView k, CFView v, CFView out,
                            CFView lse, CFView dOut, int64_t b, int64_t hk,
                            FView dQ, FView dK, FView dV, float *p, float *ds,
                            bool parallelRows) {
  int64_t T = d.T, S = d.S, D = d.D;
  int64_t kvOff = (b * d.Hkv + hk) * S * D;
  const float *kh = k.data + kvOff, *vh = v.data + kvOff;
  for (int64_t hl = 0; hl < d.group; ++hl) {
    int64_t head = b * d.Hq + hk * d.group + hl; // flat (b, h)
    for (int64_t i0 = 0; i0 < T; i0 += kRowBlock) {
      int64_t rows = std::min(kRowBlock, T - i0);
      int64_t row0 = head * T + i0; // flat index of the block's first row
      // The block reads keys [j0, j0 + nMax).
      int64_t j0 = firstKey(d, i0);
      int64_t nMax = visibleKeys(d, i0 + rows - 1) - j0;
      if (nMax <= 0) {
        if (dQ.data)
          std::fill(dQ.data + row0 * D, dQ.data + (row0 + rows) * D, 0.0f);
        continue;
      }
      const float *qb = q.data + row0 * D, *gb = dOut.data + row0 * D;
      const float *kb = kh + j0 * D, *vb = vh + j0 * D;
      gemmNT(rows, nMax, D, scale, qb, D, kb, D, 0.0f, p, nMax); // scores
      gemmNT(rows, nMax, D, 1.0f, gb, D, vb, D, 0.0f, ds, nMax); // dP
      forRows(parallelRows, rows, nMax * 4, [&](int64_t r) {
        float *pr = p + r * nMax, *dsr = ds + r * nMax;
        int64_t lo = firstKey(d, i0 + r) - j0;
        int64_t n = visibleKeys(d, i0 + r) - j0;
        float l = lse.data[row0 + r];
        if (n <= lo || std::isinf(l)) {
          std::fill(pr, pr + nMax, 0.0f);
          std::fill(dsr, dsr + nMax, 0.0f);
          return;
        }
        const float *gr = gb + r * D, *orow = out.data + (row0 + r) * D;
        double delta = 0.0;
        for (int64_t e = 0; e < D; ++e)
          delta += double(gr[e]) * orow[e];
        float dl = float(delta);
        for (int64_t j = lo; j < n; ++j) {
          float pj = std::exp(pr[j] - l);
          pr[j] = pj;
          dsr[j] = pj * (dsr[j] - dl);
        }
        std::fill(pr, pr + lo, 0.0f);
        std::fill(dsr, dsr + lo, 0.0f);
        std::fill(pr + n, pr + nMax, 0.0f);
        std::fill(dsr + n, dsr + nMax, 0.0f);
      });
      if (dQ.data) // dQ = scale * dS . K
        gemmNN(rows, D, nMax, scale, ds, nMax, kb, D, 0.0f, dQ.data + row0 * D,
               D);
      int64_t kvBlock = kvOff + j0 * D;
      if (dK.data) // dK += scale * dS^T . Q
        gemmTN(nMax, D, rows, scale, ds, nMax, qb, D, 1.0f, dK.data + kvBlock,
               D);
      if (dV.data) // dV += P^T . dO
        gemmTN(nMax, D, rows, 1.0f, p, nMax, gb, D, 1.0f, dV.data + kvBlock, D);
    }
  }
}

bool smallHeads(const AttnDims &d) { return d.T * d.S * d.D <= kSmallHead; }

/// sinks must be [Hq].
void checkSinks(const AttnDims &d, const Shape &sinks, const char *name) {
  if (sinks.rank != 1 || sinks.dims[0] != d.Hq)
    detail::fatal("%s: sinks must be [%lld], one per query head", name,
                  (long long)d.Hq);
}

/// dSinks[h] = -sum_{b, i} exp(sinks[h] - lse) * (dO . O), per head in
/// ascending (b, i) order in double.
void sinkGradient(const AttnDims &d, CFView sinks, CFView out, CFView lse,
                  CFView dOut, FView dSinks) {
  detail::parallelFor(d.Hq, d.B * d.T * d.D * 2, [&](int64_t h) {
    double acc = 0.0;
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t i = 0; i < d.T; ++i) {
        int64_t row = (b * d.Hq + h) * d.T + i;
        float l = lse.data[row];
        if (std::isinf(l))
          continue;
        const float *g = dOut.data + row * d.D, *o = out.data + row * d.D;
        double delta = 0.0;
        for (int64_t e = 0; e < d.D; ++e)
          delta += double(g[e]) * o[e];
        acc +=
            std::exp(double(sinks.data[h]) - double(l)) * double(float(delta));
      }
    dSinks.data[h] = float(-acc);
  });
}

void attentionImpl(CFView q, CFView k, CFView v, const float *sinks,
                   bool causal, int64_t window, float scale, FView out,
                   FView lse) {
  AttnDims d = attnDims(q.shape, k.shape, v.shape, causal, window);
  int64_t heads = d.B * d.Hq;
  if (heads == 0 || d.T == 0)
    return;
  int64_t blockRows = std::min(kRowBlock, d.T);
  auto run = [&](int64_t head, float *scratch, bool parallelRows) {
    int64_t b = head / d.Hq, h = head % d.Hq;
    int64_t kvOff = (b * d.Hkv + h / d.group) * d.S * d.D;
    attentionHead(
        d, scale, q.data + head * d.T * d.D, k.data + kvOff, v.data + kvOff,
        sinks ? sinks + h : nullptr, out.data + head * d.T * d.D,
        lse.data ? lse.data + head * d.T : nullptr, scratch, parallelRows);
  };
  if (smallHeads(d)) {
    detail::parallelFor(heads, d.T * d.S * d.D * 2, [&](int64_t head) {
      std::vector<float> scratch(size_t(blockRows * std::max<int64_t>(d.S, 1)));
      run(head, scratch.data(), false);
    });
    return;
  }
  std::vector<float> scratch(size_t(blockRows * std::max<int64_t>(d.S, 1)));
  for (int64_t head = 0; head < heads; ++head)
    run(head, scratch.data(), true);
}

} // namespace

void attention(CFView q, CFView k, CFView v, bool causal, int64_t window,
               float scale, FView out, FView lse) {
  attentionImpl(q, k, v, nullptr, causal, window, scale, out, lse);
}

void attentionSinks(CFView q, CFView k, CFView v, CFView sinks, bool causal,
                    int64_t window, float scale, FView out, FView lse) {
  checkSinks(attnDims(q.shape, k.shape, v.shape, causal, window), sinks.shape,
             "attentionSinks");
  attentionImpl(q, k, v, sinks.data, causal, window, scale, out, lse);
}

void attentionBackward(CFView q, CFView k, CFView v, CFView out, CFView lse,
                       CFView dOut, bool causal, int64_t window, float scale,
                       FView dQ, FView dK, FView dV) {
  AttnDims d = attnDims(q.shape, k.shape, v.shape, causal, window);
  if (dK.data)
    fill(dK, 0.0f);
  if (dV.data)
    fill(dV, 0.0f);
  int64_t groups = d.B * d.Hkv;
  if (groups == 0 || d.T == 0) {
    if (dQ.data)
      fill(dQ, 0.0f);
    return;
  }
  size_t bufSize = size_t(std::min(kRowBlock, d.T) * std::max<int64_t>(d.S, 1));
  auto run = [&](int64_t g, float *p, float *ds, bool parallelRows) {
    attentionGroupBackward(d, scale, q, k, v, out, lse, dOut, g / d.Hkv,
                           g % d.Hkv, dQ, dK, dV, p, ds, parallelRows);
  };
  if (smallHeads(d)) {
    detail::parallelFor(groups, d.group * d.T * d.S * d.D * 5, [&](int64_t g) {
      std::vector<float> p(bufSize), ds(bufSize);
      run(g, p.data(), ds.data(), false);
    });
    return;
  }
  std::vector<float> p(bufSize), ds(bufSize);
  for (int64_t g = 0; g < groups; ++g)
    run(g, p.data(), ds.data(), true);
}

void attentionSinksBackward(CFView q, CFView k, CFView v, CFView sinks,
                            CFView out, CFView lse, CFView dOut, bool causal,
                            int64_t window, float scale, FView dQ, FView dK,
                            FView dV, FView dSinks) {
  AttnDims d = attnDims(q.shape, k.shape, v.shape, causal, window);
  checkSinks(d, sinks.shape, "attentionSinksBackward");
  // P = exp(s - lse) already carries the sink: the dQ/dK/dV pass is
  // attention's.
  if (dQ.data || dK.data || dV.data)
    attentionBackward(q, k, v, out, lse, dOut, causal, window, scale, dQ, dK,
                      dV);
  if (dSinks.data)
    sinkGradient(d, sinks, out, lse, dOut, dSinks);
}

} // namespace rondo::cpu
