//===- KernelsStructuresTest.cpp - CPU kernels: norms, attention, loss ---===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Forward kernels are checked against straightforward double-precision loops
// written here. Backward kernels are checked against central finite
// differences of the scalar objective sum(dOut * f(x)), evaluated with the
// forward kernel itself, for every input that has a gradient. A last group
// checks that results are bitwise identical for 1 and 4 OpenMP threads.
//
//===----------------------------------------------------------------------===//

#include "KernelsTestUtil.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace rondo::cpu;
using namespace rondo::cpu::test;

namespace {

//===----------------------------------------------------------------------===//
// Softmax, norms, rotary
//===----------------------------------------------------------------------===//

TEST(KernelSoftmax, Forward) {
  for (Shape s : {Shape{4, 7}, Shape{2, 3, 5}, Shape{9}, Shape{3, 1}}) {
    Tensor x = uniform(s, -4.0f, 4.0f);
    x[0] += 1000.0f; // stability: exp(1000) overflows without the max shift
    Tensor y(s, std::nanf(""));
    softmax(x.cv(), y.v());
    int64_t w = s.dims[s.rank - 1];
    std::vector<double> want;
    for (int64_t r = 0; r < s.numel() / w; ++r) {
      double m = -1e300, sum = 0.0;
      for (int64_t c = 0; c < w; ++c)
        m = std::max(m, double(x[r * w + c]));
      for (int64_t c = 0; c < w; ++c)
        sum += std::exp(x[r * w + c] - m);
      for (int64_t c = 0; c < w; ++c)
        want.push_back(std::exp(x[r * w + c] - m) / sum);
    }
    expectNear("softmax", y.data, want, 1e-5, 1e-7);
  }
}

TEST(KernelSoftmax, BackwardFiniteDifferences) {
  Shape s{5, 8};
  Tensor x = uniform(s, -2.0f, 2.0f), dY = uniform(s);
  Tensor y(s), dX(s);
  softmax(x.cv(), y.v());
  softmaxBackward(y.cv(), dY.cv(), dX.v());
  checkGradient("softmaxBackward", x, dX.data, [&] {
    softmax(x.cv(), y.v());
    return dotObjective(dY, y);
  });
}

TEST(KernelNorms, RmsNormForward) {
  Shape s{3, 4, 10};
  Tensor x = uniform(s, -2.0f, 2.0f), w = uniform(Shape{10}, 0.5f, 1.5f);
  float eps = 1e-5f;
  for (bool withWeight : {true, false}) {
    Tensor y(s, std::nanf(""));
    rmsNorm(x.cv(), withWeight ? w.cv() : CFView{}, eps, y.v());
    std::vector<double> want;
    for (int64_t r = 0; r < 12; ++r) {
      double ss = 0.0;
      for (int64_t c = 0; c < 10; ++c)
        ss += double(x[r * 10 + c]) * x[r * 10 + c];
      double inv = 1.0 / std::sqrt(ss / 10 + eps);
      for (int64_t c = 0; c < 10; ++c)
        want.push_back(x[r * 10 + c] * inv * (withWeight ? w[c] : 1.0));
    }
    expectNear("rmsNorm", y.data, want, 1e-5, 1e-6);
  }
}

TEST(KernelNorms, RmsNormBackwardFiniteDifferences) {
  Shape s{4, 9};
  float eps = 1e-5f;
  for (bool withWeight : {true, false}) {
    Tensor x = uniform(s, -2.0f, 2.0f), w = uniform(Shape{9}, 0.5f, 1.5f);
    Tensor dY = uniform(s);
    CFView wv = withWeight ? w.cv() : CFView{};
    Tensor dX(s, std::nanf("")), dW(Shape{9}, std::nanf(""));
    rmsNormBackward(x.cv(), wv, eps, dY.cv(), dX.v(),
                    withWeight ? dW.v() : FView{});
    Tensor y(s);
    auto objective = [&] {
      rmsNorm(x.cv(), withWeight ? w.cv() : CFView{}, eps, y.v());
      return dotObjective(dY, y);
    };
    checkGradient("rmsNormBackward dX", x, dX.data, objective);
    if (withWeight)
      checkGradient("rmsNormBackward dW", w, dW.data, objective);
  }
}

TEST(KernelNorms, LayerNormForward) {
  Shape s{5, 12};
  Tensor x = uniform(s, -2.0f, 2.0f);
  Tensor w = uniform(Shape{12}, 0.5f, 1.5f), b = uniform(Shape{12});
  float eps = 1e-5f;
  for (int variant = 0; variant < 3; ++variant) {
    CFView wv = variant == 2 ? CFView{} : w.cv();
    CFView bv = variant >= 1 ? CFView{} : b.cv();
    Tensor y(s, std::nanf(""));
    layerNorm(x.cv(), wv, bv, eps, y.v());
    std::vector<double> want;
    for (int64_t r = 0; r < 5; ++r) {
      double mean = 0.0, var = 0.0;
      for (int64_t c = 0; c < 12; ++c)
        mean += x[r * 12 + c];
      mean /= 12;
      for (int64_t c = 0; c < 12; ++c)
        var += (x[r * 12 + c] - mean) * (x[r * 12 + c] - mean);
      var /= 12;
      for (int64_t c = 0; c < 12; ++c)
        want.push_back((x[r * 12 + c] - mean) / std::sqrt(var + eps) *
                           (wv.data ? w[c] : 1.0) +
                       (bv.data ? b[c] : 0.0));
    }
    expectNear("layerNorm variant " + std::to_string(variant), y.data, want,
               1e-5, 1e-6);
  }
}

TEST(KernelNorms, LayerNormBackwardFiniteDifferences) {
  Shape s{2, 3, 11};
  float eps = 1e-5f;
  for (bool withWeight : {true, false}) {
    Tensor x = uniform(s, -2.0f, 2.0f), w = uniform(Shape{11}, 0.5f, 1.5f);
    Tensor b = uniform(Shape{11}), dY = uniform(s);
    CFView wv = withWeight ? w.cv() : CFView{};
    Tensor dX(s, std::nanf("")), dW(Shape{11}, std::nanf("")),
        dB(Shape{11}, std::nanf(""));
    layerNormBackward(x.cv(), wv, eps, dY.cv(), dX.v(),
                      withWeight ? dW.v() : FView{}, dB.v());
    Tensor y(s);
    auto objective = [&] {
      layerNorm(x.cv(), withWeight ? w.cv() : CFView{}, b.cv(), eps, y.v());
      return dotObjective(dY, y);
    };
    checkGradient("layerNormBackward dX", x, dX.data, objective);
    if (withWeight)
      checkGradient("layerNormBackward dW", w, dW.data, objective);
    checkGradient("layerNormBackward dB", b, dB.data, objective);
    // dX may be skipped; dW/dB are unaffected.
    Tensor dW2(Shape{11}), dB2(Shape{11});
    layerNormBackward(x.cv(), wv, eps, dY.cv(), FView{},
                      withWeight ? dW2.v() : FView{}, dB2.v());
    EXPECT_TRUE(bitwiseEqual(dB.data, dB2.data));
    if (withWeight) {
      EXPECT_TRUE(bitwiseEqual(dW.data, dW2.data));
    }
  }
}

void rotaryTables(int64_t T, int64_t D, Tensor &cosT, Tensor &sinT) {
  cosT = Tensor(Shape{T, D});
  sinT = Tensor(Shape{T, D});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      double freq = std::pow(10000.0, -double(2 * (d % (D / 2))) / double(D));
      cosT[t * D + d] = float(std::cos(t * freq));
      sinT[t * D + d] = float(std::sin(t * freq));
    }
}

TEST(KernelRotary, Forward) {
  int64_t B = 2, H = 3, T = 5, D = 8;
  Tensor x = uniform(Shape{B, H, T, D}), cosT, sinT;
  rotaryTables(T, D, cosT, sinT);
  Tensor y(x.shape, std::nanf(""));
  rotary(x.cv(), cosT.cv(), sinT.cv(), y.v());
  std::vector<double> want;
  for (int64_t r = 0; r < B * H * T; ++r) {
    int64_t t = r % T;
    for (int64_t d = 0; d < D; ++d) {
      double rot = d < D / 2 ? -double(x[r * D + d + D / 2])
                             : double(x[r * D + d - D / 2]);
      want.push_back(x[r * D + d] * double(cosT[t * D + d]) +
                     rot * sinT[t * D + d]);
    }
  }
  expectNear("rotary", y.data, want, 1e-6, 1e-6);
}

TEST(KernelRotary, BackwardFiniteDifferences) {
  int64_t T = 4, D = 6;
  Tensor x = uniform(Shape{1, 2, T, D}), cosT, sinT;
  rotaryTables(T, D, cosT, sinT);
  Tensor dY = uniform(x.shape), dX(x.shape), y(x.shape);
  rotaryBackward(dY.cv(), cosT.cv(), sinT.cv(), dX.v());
  checkGradient("rotaryBackward", x, dX.data, [&] {
    rotary(x.cv(), cosT.cv(), sinT.cv(), y.v());
    return dotObjective(dY, y);
  });
}

/// rmsNormRotary: each (token, head) row normed, moved to [B, H, T, D] and
/// rotated, against the formulas in double; its gradients against finite
/// differences of the forward.
TEST(KernelRotary, NormRotaryForwardAndGradients) {
  int64_t B = 2, T = 5, H = 3, D = 8;
  float eps = 1e-6f;
  Tensor x = uniform(Shape{B, T, H, D}, -2.0f, 2.0f), cosT, sinT;
  Tensor w = uniform(Shape{D}, 0.5f, 1.5f);
  rotaryTables(T, D, cosT, sinT);
  Tensor y(Shape{B, H, T, D}, std::nanf(""));
  rmsNormRotary(x.cv(), w.cv(), eps, cosT.cv(), sinT.cv(), y.v());
  std::vector<double> want(size_t(y.shape.numel()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float *row = x.data.data() + ((b * T + t) * H + h) * D;
        double ss = 0;
        for (int64_t d = 0; d < D; ++d)
          ss += double(row[d]) * row[d];
        double inv = 1.0 / std::sqrt(ss / double(D) + eps);
        auto normed = [&](int64_t d) { return row[d] * inv * w[d]; };
        for (int64_t d = 0; d < D; ++d) {
          double rot = d < D / 2 ? -normed(d + D / 2) : normed(d - D / 2);
          want[size_t(((b * H + h) * T + t) * D + d)] =
              normed(d) * cosT[t * D + d] + rot * sinT[t * D + d];
        }
      }
  expectNear("rmsNormRotary", y.data, want, 1e-5, 1e-5);

  Tensor dY = uniform(y.shape), dX(x.shape), dW(w.shape);
  rmsNormRotaryBackward(x.cv(), w.cv(), eps, cosT.cv(), sinT.cv(), dY.cv(),
                        dX.v(), dW.v());
  auto objective = [&] {
    rmsNormRotary(x.cv(), w.cv(), eps, cosT.cv(), sinT.cv(), y.v());
    return dotObjective(dY, y);
  };
  checkGradient("rmsNormRotaryBackward dX", x, dX.data, objective);
  checkGradient("rmsNormRotaryBackward dW", w, dW.data, objective);
}

/// transposeRotary: each (token, head) row of a head without a norm moved
/// to [B, H, T, D] and rotated, against the formula in double; its gradient
/// against finite differences of the forward.
TEST(KernelRotary, TransposeRotaryForwardAndGradient) {
  int64_t B = 2, T = 5, H = 3, D = 8;
  Tensor x = uniform(Shape{B, T, H, D}, -2.0f, 2.0f), cosT, sinT;
  rotaryTables(T, D, cosT, sinT);
  Tensor y(Shape{B, H, T, D}, std::nanf(""));
  transposeRotary(x.cv(), cosT.cv(), sinT.cv(), y.v());
  std::vector<double> want(size_t(y.shape.numel()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float *row = x.data.data() + ((b * T + t) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) {
          double rot =
              d < D / 2 ? -double(row[d + D / 2]) : double(row[d - D / 2]);
          want[size_t(((b * H + h) * T + t) * D + d)] =
              double(row[d]) * cosT[t * D + d] + rot * sinT[t * D + d];
        }
      }
  expectNear("transposeRotary", y.data, want, 1e-5, 1e-5);

  Tensor dY = uniform(y.shape), dX(x.shape, std::nanf(""));
  transposeRotaryBackward(dY.cv(), cosT.cv(), sinT.cv(), dX.v());
  checkGradient("transposeRotaryBackward", x, dX.data, [&] {
    transposeRotary(x.cv(), cosT.cv(), sinT.cv(), y.v());
    return dotObjective(dY, y);
  });
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

struct AttnCase {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
  int64_t window = 0; // sliding window (causal only), 0 for none
};

const AttnCase kAttnCases[] = {
    {1, 4, 2, 5, 7, 4, false},
    {1, 4, 2, 5, 7, 4, true},
    {2, 2, 2, 6, 6, 8, true},
    {1, 2, 1, 6, 4, 4, true}, // rows 0-1 masked
    {2, 3, 1, 3, 5, 5, false},
    {1, 1, 1, 1, 1, 3, true},
    // Large heads (T * S * D > 65536 * 4): processed head by head with
    // threaded row loops, and in several blocks of query rows.
    {1, 2, 1, 300, 300, 4, true},
    {1, 2, 1, 300, 280, 4, true},
    {1, 2, 2, 260, 270, 4, false},
    // Sliding windows: narrower than the sequence, S != T (the band
    // bottom-right aligned), rows with no key, a window of 1 (the diagonal),
    // and large heads where the band spans several row blocks.
    {1, 4, 2, 9, 9, 4, true, 3},
    {2, 2, 1, 6, 8, 4, true, 2},
    {1, 2, 1, 6, 4, 4, true, 2},
    {1, 2, 2, 7, 7, 4, true, 1},
    {1, 2, 1, 300, 300, 4, true, 40},
    {1, 2, 1, 300, 320, 4, true, 270},
};

/// Large cases are checked on a sample of elements to keep the test fast.
int64_t attnSamples(const AttnCase &c) {
  return c.T * c.S * c.D > 65536 * 4 ? 24 : 0;
}

void refAttention(const AttnCase &c, const Tensor &q, const Tensor &k,
                  const Tensor &v, float scale, std::vector<double> &out,
                  std::vector<double> &lse) {
  out.assign(size_t(c.B * c.Hq * c.T * c.D), 0.0);
  lse.assign(size_t(c.B * c.Hq * c.T), 0.0);
  int64_t G = c.Hq / c.Hkv;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.T; ++i) {
        int64_t row = (b * c.Hq + h) * c.T + i;
        int64_t kvh = b * c.Hkv + h / G;
        std::vector<double> s(size_t(c.S), -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j < c.S; ++j) {
          if (c.causal && j > i + c.S - c.T)
            continue;
          if (c.window > 0 && j <= i + c.S - c.T - c.window)
            continue;
          double dot = 0.0;
          for (int64_t d = 0; d < c.D; ++d)
            dot += double(q[row * c.D + d]) * k[(kvh * c.S + j) * c.D + d];
          s[size_t(j)] = dot * scale;
          m = std::max(m, s[size_t(j)]);
        }
        if (m == -INFINITY) {
          lse[size_t(row)] = -INFINITY;
          continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < c.S; ++j)
          sum += std::exp(s[size_t(j)] - m);
        for (int64_t j = 0; j < c.S; ++j) {
          double p = std::exp(s[size_t(j)] - m) / sum;
          for (int64_t d = 0; d < c.D; ++d)
            out[size_t(row * c.D + d)] += p * v[(kvh * c.S + j) * c.D + d];
        }
        lse[size_t(row)] = m + std::log(sum);
      }
}

TEST(KernelAttention, Forward) {
  for (const AttnCase &c : kAttnCases) {
    Tensor q = uniform(Shape{c.B, c.Hq, c.T, c.D}, -2.0f, 2.0f);
    Tensor k = uniform(Shape{c.B, c.Hkv, c.S, c.D}, -2.0f, 2.0f);
    Tensor v = uniform(Shape{c.B, c.Hkv, c.S, c.D});
    float scale = 1.0f / std::sqrt(float(c.D));
    Tensor out(q.shape, std::nanf("")), lse(Shape{c.B, c.Hq, c.T}, 0.0f);
    attention(q.cv(), k.cv(), v.cv(), c.causal, c.window, scale, out.v(),
              lse.v());
    std::vector<double> wantOut, wantLse;
    refAttention(c, q, k, v, scale, wantOut, wantLse);
    std::string what = "attention T " + std::to_string(c.T) + " S " +
                       std::to_string(c.S) + " causal " +
                       std::to_string(c.causal) + " window " +
                       std::to_string(c.window);
    expectNear(what + " out", out.data, wantOut, 1e-5, 1e-6);
    expectNear(what + " lse", lse.data, wantLse, 1e-5, 1e-6);
  }
}

TEST(KernelAttention, BackwardFiniteDifferences) {
  for (const AttnCase &c : kAttnCases) {
    Tensor q = uniform(Shape{c.B, c.Hq, c.T, c.D}, -1.5f, 1.5f);
    Tensor k = uniform(Shape{c.B, c.Hkv, c.S, c.D}, -1.5f, 1.5f);
    Tensor v = uniform(Shape{c.B, c.Hkv, c.S, c.D});
    Tensor dOut = uniform(q.shape);
    float scale = 0.7f;
    Tensor out(q.shape), lse(Shape{c.B, c.Hq, c.T});
    attention(q.cv(), k.cv(), v.cv(), c.causal, c.window, scale, out.v(),
              lse.v());
    Tensor dQ(q.shape, std::nanf("")), dK(k.shape, std::nanf("")),
        dV(v.shape, std::nanf(""));
    attentionBackward(q.cv(), k.cv(), v.cv(), out.cv(), lse.cv(), dOut.cv(),
                      c.causal, c.window, scale, dQ.v(), dK.v(), dV.v());
    Tensor o(q.shape), l(lse.shape);
    auto objective = [&] {
      attention(q.cv(), k.cv(), v.cv(), c.causal, c.window, scale, o.v(),
                l.v());
      return dotObjective(dOut, o);
    };
    std::string what = "attentionBackward T " + std::to_string(c.T) + " S " +
                       std::to_string(c.S) + " causal " +
                       std::to_string(c.causal) + " window " +
                       std::to_string(c.window);
    int64_t samples = attnSamples(c);
    checkGradient(what + " dQ", q, dQ.data, objective, 1e-2f, 2e-3, samples);
    checkGradient(what + " dK", k, dK.data, objective, 1e-2f, 2e-3, samples);
    checkGradient(what + " dV", v, dV.data, objective, 1e-2f, 2e-3, samples);
  }
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

double refRowLoss(const float *x, int64_t V, int64_t label) {
  double m = -1e300, s = 0.0;
  for (int64_t c = 0; c < V; ++c)
    m = std::max(m, double(x[c]));
  for (int64_t c = 0; c < V; ++c)
    s += std::exp(x[c] - m);
  return m + std::log(s) - x[label];
}

TEST(KernelLoss, CrossEntropyForward) {
  int64_t N = 6, V = 11;
  Tensor logits = uniform(Shape{N, V}, -3.0f, 3.0f);
  logits[2 * V + 1] = 500.0f; // stability
  Ids labels{Shape{N}, {3, -100, 1, 10, 0, -100}};
  double loss = -1.0;
  int64_t count = -1;
  ASSERT_TRUE(crossEntropy(logits.cv(), labels.v(), -100, &loss, &count));
  double want = 0.0;
  for (int64_t r = 0; r < N; ++r)
    if (labels.data[size_t(r)] != -100)
      want += refRowLoss(logits.data.data() + r * V, V, labels.data[size_t(r)]);
  EXPECT_EQ(count, 4);
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want));

  Ids bad{Shape{N}, {3, -100, 11, 0, 0, 0}};
  EXPECT_FALSE(crossEntropy(logits.cv(), bad.v(), -100, &loss, &count));
  Ids negative{Shape{N}, {3, -1, 1, 0, 0, 0}};
  EXPECT_FALSE(crossEntropy(logits.cv(), negative.v(), -100, &loss, &count));
}

TEST(KernelLoss, CrossEntropyBackwardFiniteDifferences) {
  int64_t N = 5, V = 7;
  Tensor logits = uniform(Shape{N, V}, -2.0f, 2.0f);
  Ids labels{Shape{N}, {3, 0, -1, 6, 2}};
  float gradScale = 0.37f;
  Tensor dLogits(logits.shape, std::nanf(""));
  crossEntropyBackward(logits.cv(), labels.v(), -1, gradScale, dLogits.v());
  checkGradient("crossEntropyBackward", logits, dLogits.data, [&] {
    double loss;
    int64_t count;
    EXPECT_TRUE(crossEntropy(logits.cv(), labels.v(), -1, &loss, &count));
    return gradScale * loss;
  });
  for (int64_t c = 0; c < V; ++c)
    EXPECT_EQ(dLogits[2 * V + c], 0.0f); // ignored row
}

struct LinearCeCase {
  int64_t N, D, V, chunk;
  bool transW;
};

const LinearCeCase kLinearCeCases[] = {
    {7, 5, 9, 3, false},  {7, 5, 9, 3, true},  {7, 5, 9, 7, false},
    {7, 5, 9, 100, true}, {8, 4, 13, 4, true}, {6, 3, 5, 1, false},
    {7, 5, 9, 0, false},
};

TEST(KernelLoss, LinearCrossEntropyForward) {
  for (const LinearCeCase &c : kLinearCeCases) {
    Tensor h = uniform(Shape{c.N, c.D}, -2.0f, 2.0f);
    Tensor w = uniform(c.transW ? Shape{c.V, c.D} : Shape{c.D, c.V});
    Ids labels{Shape{c.N}, {}};
    for (int64_t r = 0; r < c.N; ++r)
      labels.data.push_back(r % 3 == 1 ? -100 : (r * 5) % c.V);
    double loss = -1.0;
    int64_t count = -1;
    ASSERT_TRUE(linearCrossEntropy(h.cv(), w.cv(), c.transW, labels.v(), -100,
                                   c.chunk, &loss, &count));
    double want = 0.0;
    int64_t wantCount = 0;
    std::vector<float> logits(size_t(c.V));
    for (int64_t r = 0; r < c.N; ++r) {
      int64_t l = labels.data[size_t(r)];
      if (l == -100)
        continue;
      std::vector<double> z(size_t(c.V), 0.0);
      for (int64_t j = 0; j < c.V; ++j)
        for (int64_t d = 0; d < c.D; ++d)
          z[size_t(j)] += double(h[r * c.D + d]) *
                          (c.transW ? w[j * c.D + d] : w[d * c.V + j]);
      double m = *std::max_element(z.begin(), z.end()), s = 0.0;
      for (double zz : z)
        s += std::exp(zz - m);
      want += m + std::log(s) - z[size_t(l)];
      ++wantCount;
    }
    EXPECT_EQ(count, wantCount);
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want) + 1e-5)
        << "chunk " << c.chunk << " transW " << c.transW;
  }
  // An out-of-range label is reported.
  Tensor h = uniform(Shape{3, 2}), w = uniform(Shape{2, 4});
  Ids bad{Shape{3}, {0, 4, 1}};
  double loss;
  int64_t count;
  EXPECT_FALSE(linearCrossEntropy(h.cv(), w.cv(), false, bad.v(), -100, 2,
                                  &loss, &count));
}

/// Hidden states, weight and labels of a gradient case: every third row
/// ignored, and with chunks of 3 a chunk whose rows are all ignored.
struct GradientInputs {
  Tensor h, w;
  Ids labels;
};
GradientInputs gradientInputs(const LinearCeCase &c) {
  Tensor h = uniform(Shape{c.N, c.D}, -2.0f, 2.0f);
  Tensor w = uniform(c.transW ? Shape{c.V, c.D} : Shape{c.D, c.V});
  Ids labels{Shape{c.N}, {}};
  for (int64_t r = 0; r < c.N; ++r)
    labels.data.push_back(r % 3 == 1 ? -100 : (r * 5 + 1) % c.V);
  if (c.chunk == 3)
    labels.data[3] = labels.data[4] = labels.data[5] = -100;
  return {std::move(h), std::move(w), std::move(labels)};
}

TEST(KernelLoss, LinearCrossEntropyBackwardFiniteDifferences) {
  for (const LinearCeCase &c : kLinearCeCases) {
    GradientInputs in = gradientInputs(c);
    Tensor &h = in.h, &w = in.w;
    Ids &labels = in.labels;
    float gradScale = 1.0f / 3.0f;
    Tensor dH(h.shape, std::nanf("")), dW(w.shape, std::nanf(""));
    linearCrossEntropyBackward(h.cv(), w.cv(), c.transW, labels.v(), -100,
                               c.chunk, gradScale, dH.v(), dW.v());
    auto objective = [&] {
      double loss;
      int64_t count;
      EXPECT_TRUE(linearCrossEntropy(h.cv(), w.cv(), c.transW, labels.v(), -100,
                                     c.chunk, &loss, &count));
      return gradScale * loss;
    };
    std::string what = "linearCrossEntropyBackward chunk " +
                       std::to_string(c.chunk) + " transW " +
                       std::to_string(c.transW);
    checkGradient(what + " dH", h, dH.data, objective);
    checkGradient(what + " dW", w, dW.data, objective);
    // Either output may be skipped without changing the other.
    Tensor dW2(w.shape, 5.0f);
    linearCrossEntropyBackward(h.cv(), w.cv(), c.transW, labels.v(), -100,
                               c.chunk, gradScale, FView{}, dW2.v());
    EXPECT_TRUE(bitwiseEqual(dW.data, dW2.data)) << what;
    Tensor dH2(h.shape, 5.0f);
    linearCrossEntropyBackward(h.cv(), w.cv(), c.transW, labels.v(), -100,
                               c.chunk, gradScale, dH2.v(), FView{});
    EXPECT_TRUE(bitwiseEqual(dH.data, dH2.data)) << what;
  }
}

/// The fused call is the two calls it replaces: the same loss, the same
/// gradients, bit for bit (kern-fuse-linear-cross-entropy relies on it), with
/// ignored chunks, skipped outputs and an invalid label.
TEST(KernelLoss, LinearCrossEntropyWithGradIsTheTwoCalls) {
  for (const LinearCeCase &c : kLinearCeCases) {
    GradientInputs in = gradientInputs(c);
    Tensor &h = in.h, &w = in.w;
    Ids &labels = in.labels;
    std::string what = "chunk " + std::to_string(c.chunk) + " transW " +
                       std::to_string(c.transW);
    float gradScale = 1.0f / 3.0f;
    float lossSum = -1.0f;
    int bad = 0;
    linearCrossEntropy(h.cv(), w.cv(), c.transW, labels.v(), -100, c.chunk,
                       &lossSum, &bad);
    Tensor dH(h.shape), dW(w.shape);
    linearCrossEntropyBackward(h.cv(), w.cv(), c.transW, labels.v(), -100,
                               c.chunk, gradScale, dH.v(), dW.v());
    float fusedSum = -2.0f;
    int fusedBad = 0;
    Tensor fH(h.shape, 5.0f), fW(w.shape, 5.0f);
    linearCrossEntropyWithGrad(h.cv(), w.cv(), c.transW, labels.v(), -100,
                               c.chunk, gradScale, &fusedSum, &fusedBad, fH.v(),
                               fW.v());
    EXPECT_EQ(0, std::memcmp(&lossSum, &fusedSum, sizeof(float))) << what;
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(fusedBad, 0);
    EXPECT_TRUE(bitwiseEqual(dH.data, fH.data)) << what;
    EXPECT_TRUE(bitwiseEqual(dW.data, fW.data)) << what;
    // A frozen head skips dW and computes the same dH.
    Tensor sH(h.shape, 5.0f);
    linearCrossEntropyWithGrad(h.cv(), w.cv(), c.transW, labels.v(), -100,
                               c.chunk, gradScale, &fusedSum, nullptr, sH.v(),
                               FView{});
    EXPECT_TRUE(bitwiseEqual(dH.data, sH.data)) << what;
  }
  // An invalid label: no loss (0) and the flag, as the forward reports it;
  // the gradient treats the row as ignored, as the backward does.
  Tensor h = uniform(Shape{3, 2}), w = uniform(Shape{2, 4});
  Ids bad{Shape{3}, {0, 4, 1}};
  Tensor dH(h.shape), dW(w.shape), fH(h.shape), fW(w.shape);
  linearCrossEntropyBackward(h.cv(), w.cv(), false, bad.v(), -100, 2, 0.5f,
                             dH.v(), dW.v());
  float sum = -1.0f;
  int flag = 0;
  linearCrossEntropyWithGrad(h.cv(), w.cv(), false, bad.v(), -100, 2, 0.5f,
                             &sum, &flag, fH.v(), fW.v());
  EXPECT_EQ(sum, 0.0f);
  EXPECT_EQ(flag, 1);
  EXPECT_TRUE(bitwiseEqual(dH.data, fH.data));
  EXPECT_TRUE(bitwiseEqual(dW.data, fW.data));
}

//===----------------------------------------------------------------------===//
// Determinism across thread counts
//===----------------------------------------------------------------------===//

/// Runs every kernel of interest on fixed inputs large enough to be split
/// across threads and returns all outputs concatenated.
std::vector<float> runDeterminismSuite() {
  std::mt19937 gen(777);
  auto rand = [&](Shape s) {
    Tensor t(s);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float &x : t.data)
      x = dist(gen);
    return t;
  };
  std::vector<float> all;
  auto keep = [&](const Tensor &t) {
    all.insert(all.end(), t.data.begin(), t.data.end());
  };

  Tensor a = rand(Shape{256, 257}), b = rand(Shape{257});
  Tensor sum(Shape{256, 257});
  binary(BinaryKind::Mul, a.cv(), b.cv(), sum.v());
  keep(sum);
  Tensor dA(a.shape), dB(b.shape);
  binaryBackward(BinaryKind::Mul, a.cv(), b.cv(), a.cv(), dA.v(), dB.v());
  keep(dA);
  keep(dB);
  Tensor col(Shape{256, 1});
  sumToShape(a.cv(), col.v());
  keep(col);
  Tensor gelu(a.shape);
  unary(UnaryKind::GeluErf, a.cv(), gelu.v());
  keep(gelu);

  Tensor x = rand(Shape{300, 129}), dY = rand(Shape{300, 129});
  Tensor w = rand(Shape{129});
  Tensor y(x.shape), dX(x.shape), dW(w.shape), dBias(w.shape);
  softmax(x.cv(), y.v());
  keep(y);
  softmaxBackward(y.cv(), dY.cv(), dX.v());
  keep(dX);
  layerNormBackward(x.cv(), w.cv(), 1e-5f, dY.cv(), dX.v(), dW.v(), dBias.v());
  keep(dX);
  keep(dW);
  keep(dBias);
  rmsNormBackward(x.cv(), w.cv(), 1e-5f, dY.cv(), dX.v(), dW.v());
  keep(dX);
  keep(dW);

  Tensor q = rand(Shape{1, 4, 64, 32}), k = rand(Shape{1, 2, 64, 32});
  Tensor v = rand(Shape{1, 2, 64, 32}), dO = rand(q.shape);
  Tensor out(q.shape), lse(Shape{1, 4, 64});
  attention(q.cv(), k.cv(), v.cv(), true, 0, 0.2f, out.v(), lse.v());
  keep(out);
  keep(lse);
  Tensor dQ(q.shape), dK(k.shape), dV(v.shape);
  attentionBackward(q.cv(), k.cv(), v.cv(), out.cv(), lse.cv(), dO.cv(), true,
                    0, 0.2f, dQ.v(), dK.v(), dV.v());
  keep(dQ);
  keep(dK);
  keep(dV);
  // Large heads (threaded rows rather than threaded heads), GQA, S != T.
  Tensor q2 = rand(Shape{2, 4, 100, 32}), k2 = rand(Shape{2, 2, 90, 32});
  Tensor v2 = rand(k2.shape), dO2 = rand(q2.shape);
  Tensor out2(q2.shape), lse2(Shape{2, 4, 100});
  attention(q2.cv(), k2.cv(), v2.cv(), true, 0, 0.2f, out2.v(), lse2.v());
  keep(out2);
  keep(lse2);
  Tensor dQ2(q2.shape), dK2(k2.shape), dV2(v2.shape);
  attentionBackward(q2.cv(), k2.cv(), v2.cv(), out2.cv(), lse2.cv(), dO2.cv(),
                    true, 0, 0.2f, dQ2.v(), dK2.v(), dV2.v());
  keep(dQ2);
  keep(dK2);
  keep(dV2);

  Ids ids{Shape{500}, {}};
  for (int64_t i = 0; i < 500; ++i)
    ids.data.push_back((i * 7) % 50);
  Tensor table = rand(Shape{50, 96}), dOutRows = rand(Shape{500, 96});
  gatherRowsBackward(ids.v(), dOutRows.cv(), table.v());
  keep(table);

  Ids labels{Shape{300}, {}};
  for (int64_t i = 0; i < 300; ++i)
    labels.data.push_back(i % 11 == 0 ? -100 : (i * 13) % 129);
  double loss;
  int64_t count;
  crossEntropy(x.cv(), labels.v(), -100, &loss, &count);
  all.push_back(float(loss));
  all.push_back(float(loss - double(float(loss))));
  crossEntropyBackward(x.cv(), labels.v(), -100, 0.5f, dX.v());
  keep(dX);
  Tensor h = rand(Shape{300, 48}), wv = rand(Shape{48, 129});
  Tensor dH(h.shape), dWv(wv.shape);
  linearCrossEntropyBackward(h.cv(), wv.cv(), false, labels.v(), -100, 64, 0.5f,
                             dH.v(), dWv.v());
  keep(dH);
  keep(dWv);

  int64_t perm[] = {1, 0};
  Tensor t(Shape{257, 256});
  transpose(a.cv(), perm, t.v());
  keep(t);
  return all;
}

TEST(KernelDeterminism, BitwiseIdenticalAcrossThreadCounts) {
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> one = runDeterminismSuite();
  omp_set_num_threads(4);
  std::vector<float> four = runDeterminismSuite();
  omp_set_num_threads(3);
  std::vector<float> three = runDeterminismSuite();
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwiseEqual(one, four));
  EXPECT_TRUE(bitwiseEqual(one, three));
}

} // namespace
