//===- CudaKernelsAttentionSinksTest.cpp - CUDA attention with sinks ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// attentionSinks / attentionSinksBackward (GPT-OSS's per-head sink logit in
// the softmax denominator) against their CPU twins (tested against the
// exporter's explicit composition in test/Unit/Runtime/
// KernelsAttentionSinksTest.cpp): fp32 to 1e-5 and the bf16 tensor-core path
// to 2e-2 in max-abs-normalised error, every run done twice and compared bit
// for bit (d sinks included: a fixed reduction, no atomics). Cases cover full
// and windowed causal attention, GQA, S != T with rows that see no key (all
// their mass goes to the sink: out = 0, lse = sink), and sinks large enough
// to take most of the mass.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

namespace cuda_test {

namespace {

struct SinkCase {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
  int64_t window; // sliding window (causal only), 0 for none
  float sinkLo, sinkHi;
};

std::string sinkName(const SinkCase &c) {
  return "B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
         std::to_string(c.Hkv) + " T" + std::to_string(c.T) + " S" +
         std::to_string(c.S) + " D" + std::to_string(c.D) +
         (c.causal ? " causal" : "") +
         (c.window ? " window" + std::to_string(c.window) : "") + " sinks [" +
         std::to_string(c.sinkLo) + ", " + std::to_string(c.sinkHi) + "]";
}

/// The CPU references and the CUDA results (out, lse, dQ, dK, dV, dSinks),
/// the backward run from the CPU's out/lse so both see the same inputs.
struct SinkRun {
  Tensor refs[6];
  std::vector<std::vector<float>> got;
};

SinkRun runSinks(const SinkCase &c, const std::string &what) {
  Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.S, c.D};
  Shape ls{c.B, c.Hq, c.T}, ss{c.Hq};
  Tensor q = uniform(qs, -2.0f, 2.0f), k = uniform(ks, -2.0f, 2.0f);
  Tensor v = uniform(ks), g = uniform(qs);
  Tensor sinks = uniform(ss, c.sinkLo, c.sinkHi);
  float scale = 1.0f / std::sqrt(float(c.D));
  SinkRun r{
      {Tensor(qs), Tensor(ls), Tensor(qs), Tensor(ks), Tensor(ks), Tensor(ss)},
      {}};
  cpu::attentionSinks(q.cv(), k.cv(), v.cv(), sinks.cv(), c.causal, c.window,
                      scale, r.refs[0].v(), r.refs[1].v());
  cpu::attentionSinksBackward(q.cv(), k.cv(), v.cv(), sinks.cv(),
                              r.refs[0].cv(), r.refs[1].cv(), g.cv(), c.causal,
                              c.window, scale, r.refs[2].v(), r.refs[3].v(),
                              r.refs[4].v(), r.refs[5].v());
  Dev dQ(q), dK(k), dV(v), dG(g), dS(sinks), dO(r.refs[0]), dL(r.refs[1]);
  r.got = runTwice(
      {{qs, {}}, {ls, {}}, {qs, {}}, {ks, {}}, {ks, {}}, {ss, {}}},
      [&](const std::vector<FView> &o) {
        cu::attentionSinks(dQ.cv(), dK.cv(), dV.cv(), dS.cv(), c.causal,
                           c.window, scale, o[0], o[1]);
        cu::attentionSinksBackward(dQ.cv(), dK.cv(), dV.cv(), dS.cv(), dO.cv(),
                                   dL.cv(), dG.cv(), c.causal, c.window, scale,
                                   o[2], o[3], o[4], o[5]);
      },
      what);
  return r;
}

const char *const kNames[] = {"out", "lse", "dQ", "dK", "dV", "dSinks"};

} // namespace

TEST_F(CudaKernels, AttentionSinks) {
  const SinkCase cases[] = {
      {2, 4, 2, 37, 37, 16, true, 0, -1.0f, 1.0f},
      {1, 6, 2, 70, 70, 64, true, 0, 2.0f, 4.0f},
      {2, 4, 2, 37, 50, 16, false, 0, -1.0f, 1.0f},
      // Rows with no key (S < T): their mass is all the sink's.
      {1, 2, 1, 45, 20, 32, true, 0, -1.0f, 1.0f},
      // Windowed (GPT-OSS's alternate layers): inside a tile, across tiles.
      {2, 4, 2, 37, 37, 16, true, 5, -1.0f, 1.0f},
      {1, 6, 2, 130, 130, 64, true, 40, -1.0f, 1.0f},
      {1, 2, 1, 45, 20, 32, true, 3, -1.0f, 1.0f},
  };
  for (const SinkCase &c : cases) {
    std::string what = "attentionSinks " + sinkName(c);
    SinkRun r = runSinks(c, what);
    for (int i = 0; i < 6; ++i)
      expectClose(r.got[size_t(i)], r.refs[i], what + " " + kNames[i]);
  }
}

/// The bf16 cases on the kernels the current path takes (`path` names it).
static void checkSinksBf16(const char *path) {
  PrecisionGuard guard(cu::Precision::Bf16);
  const SinkCase cases[] = {
      {1, 2, 2, 77, 77, 64, true, 0, -1.0f, 1.0f},
      {2, 2, 2, 200, 200, 128, true, 0, -1.0f, 1.0f},
      {1, 8, 2, 257, 257, 64, true, 0, 1.0f, 3.0f},
      {1, 8, 2, 50, 130, 128, true, 0, -1.0f, 1.0f},
      {1, 4, 2, 130, 50, 64, true, 0, -1.0f, 1.0f},
      {1, 8, 2, 200, 200, 128, false, 0, -1.0f, 1.0f},
      // Windowed: narrower than a 64-key tile and wider, S != T.
      {1, 4, 2, 300, 300, 64, true, 8, -1.0f, 1.0f},
      {1, 4, 2, 300, 300, 128, true, 100, -1.0f, 1.0f},
      {1, 8, 2, 200, 330, 64, true, 70, -1.0f, 1.0f},
      // D = 256 (Gemma-3's heads): windowed over several tiles, large sinks
      // and S > T, rows with no key.
      {1, 4, 1, 300, 300, 256, true, 100, -1.0f, 1.0f},
      {1, 4, 1, 200, 330, 256, false, 0, 1.0f, 3.0f},
      {1, 4, 2, 130, 50, 256, true, 0, -1.0f, 1.0f},
  };
  for (const SinkCase &c : cases) {
    std::string what =
        std::string("attentionSinks bf16 ") + path + " " + sinkName(c);
    SinkRun r = runSinks(c, what);
    std::string line;
    for (int i = 0; i < 6; ++i) {
      double e = normErr(r.got[size_t(i)], r.refs[i].data);
      EXPECT_LE(e, kBf16Tol) << what << " " << kNames[i];
      char buf[48];
      std::snprintf(buf, sizeof(buf), " %s %.2e", kNames[i], e);
      line += buf;
    }
    std::printf("[ bf16 ] %s:%s\n", what.c_str(), line.c_str());
  }
}

TEST_F(CudaKernels, AttentionSinksBf16) { checkSinksBf16("default"); }

TEST_F(CudaKernels, AttentionSinksBf16MmaSync) {
  MmaSyncOnly only;
  checkSinksBf16("mma.sync");
}

// Sinks of -inf are attention without sinks, bit for bit, in both
// precisions; and asking only for dSinks gives the bits of the full call.
TEST_F(CudaKernels, AttentionSinksReduceToAttention) {
  // Bit-equality holds within one implementation: sinks always run Rondo's
  // kernels, plain attention on cuDNN where it applies (its own tests check
  // it against the CPU), so this compares Rondo's kernels with themselves.
  AttentionSwitch flash("flash");
  for (cu::Precision p : {cu::Precision::Fp32, cu::Precision::Bf16}) {
    PrecisionGuard guard(p);
    const SinkCase c{1, 4, 2, 100, 100, 64, true, 30, -1.0f, 1.0f};
    Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.S, c.D};
    Shape ls{c.B, c.Hq, c.T}, ss{c.Hq};
    Tensor q = uniform(qs, -2.0f, 2.0f), k = uniform(ks, -2.0f, 2.0f);
    Tensor v = uniform(ks), g = uniform(qs);
    Tensor none(ss, -INFINITY), sinks = uniform(ss);
    float scale = 0.125f;
    Dev dQ(q), dK(k), dV(v), dG(g), dN(none), dS(sinks);
    Dev scratchQ(q), scratchK(k), scratchV(v);
    std::string what = std::string("attentionSinks -inf ") +
                       (p == cu::Precision::Bf16 ? "bf16" : "fp32");
    auto got = runTwice(
        {{qs, {}}, {ls, {}}, {qs, {}}, {ls, {}}, {ss, {}}, {ss, {}}},
        [&](const std::vector<FView> &o) {
          cu::attentionSinks(dQ.cv(), dK.cv(), dV.cv(), dN.cv(), c.causal,
                             c.window, scale, o[0], o[1]);
          cu::attention(dQ.cv(), dK.cv(), dV.cv(), c.causal, c.window, scale,
                        o[2], o[3]);
          // dSinks alone, then with every gradient, on the sinks' forward.
          cu::attentionSinks(dQ.cv(), dK.cv(), dV.cv(), dS.cv(), c.causal,
                             c.window, scale, o[0], o[1]);
          CFView out{o[0].data, qs}, lse{o[1].data, ls};
          cu::attentionSinksBackward(dQ.cv(), dK.cv(), dV.cv(), dS.cv(), out,
                                     lse, dG.cv(), c.causal, c.window, scale,
                                     FView{nullptr, qs}, FView{nullptr, ks},
                                     FView{nullptr, ks}, o[4]);
          cu::attentionSinksBackward(
              dQ.cv(), dK.cv(), dV.cv(), dS.cv(), out, lse, dG.cv(), c.causal,
              c.window, scale, FView{scratchQ.p, qs}, FView{scratchK.p, ks},
              FView{scratchV.p, ks}, o[5]);
        },
        what);
    EXPECT_EQ(0, std::memcmp(got[4].data(), got[5].data(),
                             got[4].size() * sizeof(float)))
        << what << ": dSinks alone differs from dSinks with the others";
    // The -inf sinks' results were overwritten by the sinks' forward in o[0]
    // and o[1]: rerun them alone for the comparison with attention.
    auto plain = runTwice(
        {{qs, {}}, {ls, {}}},
        [&](const std::vector<FView> &o) {
          cu::attentionSinks(dQ.cv(), dK.cv(), dV.cv(), dN.cv(), c.causal,
                             c.window, scale, o[0], o[1]);
        },
        what + " alone");
    EXPECT_EQ(0, std::memcmp(plain[0].data(), got[2].data(),
                             got[2].size() * sizeof(float)))
        << what << ": out differs from attention's";
    EXPECT_EQ(0, std::memcmp(plain[1].data(), got[3].data(),
                             got[3].size() * sizeof(float)))
        << what << ": lse differs from attention's";
  }
}

} // namespace cuda_test
