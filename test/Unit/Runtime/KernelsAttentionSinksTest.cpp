//===- KernelsAttentionSinksTest.cpp - CPU attention with sinks ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// attentionSinks / attentionSinksBackward against the naive composition the
// GPT-OSS exporter writes, in double: explicit masked scores, the head's sink
// logit concatenated as one more column, the row softmax over S + 1 columns,
// the sink column sliced off, times V. The gradients are checked against
// that composition's analytic gradient (the softmax gradient of the
// concatenated row, whose sink column has dP = 0) and against central finite
// differences of the kernel itself, d sinks included. A last test checks
// that the results are bitwise identical for 1, 3 and 4 OpenMP threads.
//
//===----------------------------------------------------------------------===//

#include "KernelsTestUtil.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

using namespace rondo::cpu;
using namespace rondo::cpu::test;

namespace {

struct SinkCase {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
  int64_t window; // sliding window (causal only), 0 for none
  float sinkLo, sinkHi;
};

const SinkCase kSinkCases[] = {
    {1, 4, 2, 5, 7, 4, false, 0, -1.0f, 1.0f},
    {2, 4, 2, 6, 6, 4, true, 0, -1.0f, 1.0f},
    // Sinks that take most of the mass, and sinks that take almost none.
    {1, 2, 1, 6, 6, 8, true, 0, 3.0f, 5.0f},
    {1, 2, 2, 6, 6, 4, true, 0, -8.0f, -6.0f},
    // Rows with no visible key (S < T): all their mass is the sink's.
    {1, 2, 1, 6, 4, 4, true, 0, -1.0f, 1.0f},
    // Sliding windows (GPT-OSS alternates windowed and full layers).
    {1, 4, 2, 9, 9, 4, true, 3, -1.0f, 1.0f},
    {2, 2, 1, 6, 8, 4, true, 2, -1.0f, 1.0f},
    {1, 2, 1, 6, 4, 4, true, 2, -1.0f, 1.0f},
    // Large heads: threaded rows, several row blocks, band across blocks.
    {1, 2, 1, 300, 300, 4, true, 0, -1.0f, 1.0f},
    {1, 2, 1, 300, 300, 4, true, 40, -1.0f, 1.0f},
};

std::string describe(const SinkCase &c) {
  return "B " + std::to_string(c.B) + " Hq " + std::to_string(c.Hq) + " T " +
         std::to_string(c.T) + " S " + std::to_string(c.S) + " causal " +
         std::to_string(c.causal) + " window " + std::to_string(c.window) +
         " sinks [" + std::to_string(c.sinkLo) + ", " +
         std::to_string(c.sinkHi) + "]";
}

bool large(const SinkCase &c) { return c.T * c.S * c.D > 65536 * 4; }

/// The exporter's composition in double, with its analytic gradient.
struct Naive {
  std::vector<double> out, lse, dQ, dK, dV, dSinks;
};

Naive naive(const SinkCase &c, const Tensor &q, const Tensor &k,
            const Tensor &v, const Tensor &sinks, const Tensor &dOut,
            float scale) {
  Naive n;
  n.out.assign(size_t(q.size()), 0.0);
  n.lse.assign(size_t(c.B * c.Hq * c.T), 0.0);
  n.dQ.assign(size_t(q.size()), 0.0);
  n.dK.assign(size_t(k.size()), 0.0);
  n.dV.assign(size_t(v.size()), 0.0);
  n.dSinks.assign(size_t(c.Hq), 0.0);
  int64_t G = c.Hq / c.Hkv, S = c.S, D = c.D;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.T; ++i) {
        int64_t row = (b * c.Hq + h) * c.T + i;
        int64_t kvh = b * c.Hkv + h / G;
        // The concatenated row: S masked scores, then the sink.
        std::vector<double> z(size_t(S + 1), -INFINITY);
        for (int64_t j = 0; j < S; ++j) {
          bool masked = (c.causal && j > i + S - c.T) ||
                        (c.window > 0 && j <= i + S - c.T - c.window);
          if (masked)
            continue;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(q[row * D + d]) * k[(kvh * S + j) * D + d];
          z[size_t(j)] = dot * scale;
        }
        z[size_t(S)] = sinks[h];
        double m = -INFINITY;
        for (double x : z)
          m = std::max(m, x);
        double sum = 0.0;
        for (double x : z)
          sum += std::exp(x - m);
        std::vector<double> p(size_t(S + 1));
        for (int64_t j = 0; j <= S; ++j)
          p[size_t(j)] = std::exp(z[size_t(j)] - m) / sum;
        n.lse[size_t(row)] = m + std::log(sum);
        // Slice off the sink column, times V.
        for (int64_t j = 0; j < S; ++j)
          for (int64_t d = 0; d < D; ++d)
            n.out[size_t(row * D + d)] +=
                p[size_t(j)] * v[(kvh * S + j) * D + d];
        // Backward: dP of the sliced columns, 0 for the sink's.
        std::vector<double> dp(size_t(S + 1), 0.0);
        for (int64_t j = 0; j < S; ++j)
          for (int64_t d = 0; d < D; ++d)
            dp[size_t(j)] +=
                double(dOut[row * D + d]) * v[(kvh * S + j) * D + d];
        double pdp = 0.0;
        for (int64_t j = 0; j <= S; ++j)
          pdp += p[size_t(j)] * dp[size_t(j)];
        for (int64_t j = 0; j <= S; ++j) {
          double dz = p[size_t(j)] * (dp[size_t(j)] - pdp);
          if (j == S) {
            n.dSinks[size_t(h)] += dz;
            continue;
          }
          for (int64_t d = 0; d < D; ++d) {
            n.dQ[size_t(row * D + d)] += scale * dz * k[(kvh * S + j) * D + d];
            n.dK[size_t((kvh * S + j) * D + d)] += scale * dz * q[row * D + d];
            n.dV[size_t((kvh * S + j) * D + d)] +=
                p[size_t(j)] * dOut[row * D + d];
          }
        }
      }
  return n;
}

struct Inputs {
  Tensor q, k, v, sinks, dOut;
  float scale;
};

Inputs inputs(const SinkCase &c) {
  Inputs in{uniform(Shape{c.B, c.Hq, c.T, c.D}, -1.5f, 1.5f),
            uniform(Shape{c.B, c.Hkv, c.S, c.D}, -1.5f, 1.5f),
            uniform(Shape{c.B, c.Hkv, c.S, c.D}),
            uniform(Shape{c.Hq}, c.sinkLo, c.sinkHi),
            uniform(Shape{c.B, c.Hq, c.T, c.D}),
            0.7f};
  return in;
}

/// The kernels' forward and backward of `c` on `in`. The gradients start
/// as `fill`: NaN shows an element the backward left unwritten.
struct SinkResults {
  Tensor out, lse, dQ, dK, dV, dSinks;
};
SinkResults runSinks(const SinkCase &c, const Inputs &in, float fill = 0.0f) {
  SinkResults r{Tensor(in.q.shape),       Tensor(Shape{c.B, c.Hq, c.T}),
                Tensor(in.q.shape, fill), Tensor(in.k.shape, fill),
                Tensor(in.v.shape, fill), Tensor(in.sinks.shape, fill)};
  attentionSinks(in.q.cv(), in.k.cv(), in.v.cv(), in.sinks.cv(), c.causal,
                 c.window, in.scale, r.out.v(), r.lse.v());
  attentionSinksBackward(in.q.cv(), in.k.cv(), in.v.cv(), in.sinks.cv(),
                         r.out.cv(), r.lse.cv(), in.dOut.cv(), c.causal,
                         c.window, in.scale, r.dQ.v(), r.dK.v(), r.dV.v(),
                         r.dSinks.v());
  return r;
}

TEST(KernelAttentionSinks, ForwardMatchesTheExportersComposition) {
  for (const SinkCase &c : kSinkCases) {
    Inputs in = inputs(c);
    Tensor out(in.q.shape, std::nanf("")),
        lse(Shape{c.B, c.Hq, c.T}, std::nanf(""));
    attentionSinks(in.q.cv(), in.k.cv(), in.v.cv(), in.sinks.cv(), c.causal,
                   c.window, in.scale, out.v(), lse.v());
    Naive want = naive(c, in.q, in.k, in.v, in.sinks, in.dOut, in.scale);
    expectNear(describe(c) + " out", out.data, want.out, 1e-5, 1e-6);
    expectNear(describe(c) + " lse", lse.data, want.lse, 1e-5, 1e-6);
  }
}

TEST(KernelAttentionSinks, BackwardMatchesTheCompositionsGradient) {
  for (const SinkCase &c : kSinkCases) {
    Inputs in = inputs(c);
    auto [out, lse, dQ, dK, dV, dSinks] = runSinks(c, in, std::nanf(""));
    Naive want = naive(c, in.q, in.k, in.v, in.sinks, in.dOut, in.scale);
    std::string what = describe(c);
    expectNear(what + " dQ", dQ.data, want.dQ, 1e-4, 1e-5);
    expectNear(what + " dK", dK.data, want.dK, 1e-4, 1e-5);
    expectNear(what + " dV", dV.data, want.dV, 1e-4, 1e-5);
    expectNear(what + " dSinks", dSinks.data, want.dSinks, 1e-4, 1e-5);
  }
}

TEST(KernelAttentionSinks, BackwardFiniteDifferences) {
  for (const SinkCase &c : kSinkCases) {
    Inputs in = inputs(c);
    auto [out, lse, dQ, dK, dV, dSinks] = runSinks(c, in);
    Tensor o(in.q.shape), l(lse.shape);
    auto objective = [&] {
      attentionSinks(in.q.cv(), in.k.cv(), in.v.cv(), in.sinks.cv(), c.causal,
                     c.window, in.scale, o.v(), l.v());
      return dotObjective(in.dOut, o);
    };
    std::string what = describe(c);
    int64_t samples = large(c) ? 24 : 0;
    checkGradient(what + " dSinks", in.sinks, dSinks.data, objective, 1e-2f,
                  2e-3);
    checkGradient(what + " dQ", in.q, dQ.data, objective, 1e-2f, 2e-3, samples);
    checkGradient(what + " dK", in.k, dK.data, objective, 1e-2f, 2e-3, samples);
    checkGradient(what + " dV", in.v, dV.data, objective, 1e-2f, 2e-3, samples);
  }
}

TEST(KernelAttentionSinks, SkippedResultsAndTheSinklessKernelAgree) {
  // Only dSinks requested; and sinks of -inf are attention without sinks.
  SinkCase c{2, 4, 2, 7, 7, 4, true, 3, -1.0f, 1.0f};
  Inputs in = inputs(c);
  Tensor out(in.q.shape), lse(Shape{c.B, c.Hq, c.T});
  attentionSinks(in.q.cv(), in.k.cv(), in.v.cv(), in.sinks.cv(), c.causal,
                 c.window, in.scale, out.v(), lse.v());
  Tensor dSinks(in.sinks.shape, std::nanf(""));
  attentionSinksBackward(
      in.q.cv(), in.k.cv(), in.v.cv(), in.sinks.cv(), out.cv(), lse.cv(),
      in.dOut.cv(), c.causal, c.window, in.scale, FView{nullptr, in.q.shape},
      FView{nullptr, in.k.shape}, FView{nullptr, in.v.shape}, dSinks.v());
  Naive want = naive(c, in.q, in.k, in.v, in.sinks, in.dOut, in.scale);
  expectNear("dSinks alone", dSinks.data, want.dSinks, 1e-4, 1e-5);

  Tensor none(in.sinks.shape, -INFINITY);
  Tensor o1(in.q.shape), l1(lse.shape), o2(in.q.shape), l2(lse.shape);
  attentionSinks(in.q.cv(), in.k.cv(), in.v.cv(), none.cv(), c.causal, c.window,
                 in.scale, o1.v(), l1.v());
  attention(in.q.cv(), in.k.cv(), in.v.cv(), c.causal, c.window, in.scale,
            o2.v(), l2.v());
  EXPECT_TRUE(bitwiseEqual(o1.data, o2.data));
  EXPECT_TRUE(bitwiseEqual(l1.data, l2.data));
}

/// Every result of every case for the given inputs, concatenated.
std::vector<float> runSinksSuite(const std::vector<Inputs> &ins) {
  std::vector<float> all;
  for (size_t n = 0; n < ins.size(); ++n) {
    const SinkCase &c = kSinkCases[n];
    const Inputs &in = ins[n];
    auto [out, lse, dQ, dK, dV, dSinks] = runSinks(c, in);
    for (const Tensor *t : {&out, &lse, &dQ, &dK, &dV, &dSinks})
      all.insert(all.end(), t->data.begin(), t->data.end());
  }
  return all;
}

TEST(KernelAttentionSinks, BitwiseIdenticalAcrossThreadCounts) {
  std::vector<Inputs> ins;
  for (const SinkCase &c : kSinkCases)
    ins.push_back(inputs(c));
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> one = runSinksSuite(ins);
  omp_set_num_threads(4);
  std::vector<float> four = runSinksSuite(ins);
  omp_set_num_threads(3);
  std::vector<float> three = runSinksSuite(ins);
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwiseEqual(one, four));
  EXPECT_TRUE(bitwiseEqual(one, three));
}

} // namespace
