//===- CudaKernelsLossTest.cpp - CUDA losses, context, timings -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The losses against their CPU twins, the execution context (streams and
// handles per thread, contract errors), the disabled timing runs, and the
// report of the worst error of the whole binary (see CudaKernelsTest.cpp).
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"
#include "ScalarOps.h"

#include <cstdlib>
#include <iterator>

namespace cuda_test {

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

struct LossDev {
  float *sum = nullptr;
  int *bad = nullptr;
  LossDev() {
    ck(cudaMalloc(&sum, sizeof(float)), "cudaMalloc");
    ck(cudaMalloc(&bad, sizeof(int)), "cudaMalloc");
    ck(cudaMemset(bad, 0, sizeof(int)), "memset");
  }
  ~LossDev() {
    cudaFree(sum);
    cudaFree(bad);
  }
  void read(float &s, int &b) {
    ck(cudaMemcpy(&s, sum, sizeof(float), cudaMemcpyDeviceToHost), "read");
    ck(cudaMemcpy(&b, bad, sizeof(int), cudaMemcpyDeviceToHost), "read");
  }
};

std::vector<int64_t> randomLabels(int64_t n, int64_t V, int64_t ignore) {
  std::uniform_int_distribution<int64_t> dist(0, V - 1);
  std::vector<int64_t> l(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    l[size_t(i)] = i % 5 == 3 ? ignore : dist(rng());
  return l;
}

TEST_F(CudaKernels, CrossEntropy) {
  for (Shape s : {Shape{33, 301}, Shape{64, 5000}}) {
    int64_t N = s.dims[0], V = s.dims[1];
    Tensor logits = uniform(s, -4.0f, 4.0f);
    auto labels = randomLabels(N, V, -100);
    IView lv{labels.data(), Shape{N}};
    double refSum = 0;
    int64_t count = 0;
    ASSERT_TRUE(cpu::crossEntropy(logits.cv(), lv, -100, &refSum, &count));
    Tensor dref(s);
    cpu::crossEntropyBackward(logits.cv(), lv, -100, 0.03f, dref.v());
    Dev dl(logits);
    DevIds dlab(labels, Shape{N});
    LossDev ld;
    ck(cudaDeviceSynchronize(), "sync uploads");
    float sums[2];
    for (int run = 0; run < 2; ++run) {
      cu::crossEntropy(dl.cv(), dlab.v(), -100, ld.sum, ld.bad);
      ck(cudaStreamSynchronize(stream_), "sync");
      int bad = -1;
      ld.read(sums[run], bad);
      EXPECT_EQ(bad, 0);
    }
    EXPECT_EQ(0, std::memcmp(&sums[0], &sums[1], sizeof(float)));
    Tensor refT(Shape{1}, float(refSum));
    expectClose({sums[0]}, refT, "crossEntropy lossSum");
    auto got = runTwice(
        {{s, {}}},
        [&](const std::vector<FView> &o) {
          cu::crossEntropyBackward(dl.cv(), dlab.v(), -100, 0.03f, o[0]);
        },
        "crossEntropyBackward");
    expectClose(got[0], dref, "crossEntropyBackward");
  }
}

TEST_F(CudaKernels, CrossEntropyBadLabel) {
  Shape s{6, 10};
  Tensor logits = uniform(s);
  std::vector<int64_t> labels{1, 2, -100, 10, 3, 4};
  Dev dl(logits);
  DevIds dlab(labels, Shape{6});
  LossDev ld;
  float one = 1.0f;
  ck(cudaMemcpy(ld.sum, &one, sizeof(float), cudaMemcpyHostToDevice), "set");
  ck(cudaDeviceSynchronize(), "sync uploads");
  cu::crossEntropy(dl.cv(), dlab.v(), -100, ld.sum, ld.bad);
  ck(cudaStreamSynchronize(stream_), "sync");
  float sum = -1;
  int bad = -1;
  ld.read(sum, bad);
  EXPECT_EQ(sum, 0.0f);
  EXPECT_EQ(bad, 1);
  // A null flag is allowed.
  cu::crossEntropy(dl.cv(), dlab.v(), -100, ld.sum, nullptr);
  ck(cudaStreamSynchronize(stream_), "sync");
}

/// linearCrossEntropy and its backward against the CPU, at the tolerance of
/// the current precision; a vocabulary of 304 takes the bf16 rows eight
/// values at a time, 301 the scalar loop.
void CudaKernels::checkLinearCrossEntropy(const char *label, double tol) {
  const int64_t N = 33, D = 48;
  for (int64_t V : {int64_t(301), int64_t(304)})
    for (int transW = 0; transW < 2; ++transW)
      for (int64_t chunk : {int64_t(0), int64_t(7)}) {
        Shape hs{N, D}, ws = transW ? Shape{V, D} : Shape{D, V};
        Tensor h = uniform(hs), w = uniform(ws);
        auto labels = randomLabels(N, V, -1);
        IView lv{labels.data(), Shape{N}};
        double refSum = 0;
        int64_t count = 0;
        ASSERT_TRUE(cpu::linearCrossEntropy(h.cv(), w.cv(), transW != 0, lv, -1,
                                            chunk, &refSum, &count));
        Tensor dh(hs), dw(ws);
        cpu::linearCrossEntropyBackward(h.cv(), w.cv(), transW != 0, lv, -1,
                                        chunk, 0.05f, dh.v(), dw.v());
        Dev dH(h), dW(w);
        DevIds dlab(labels, Shape{N});
        LossDev ld;
        ck(cudaDeviceSynchronize(), "sync uploads");
        float sums[2];
        for (int run = 0; run < 2; ++run) {
          cu::linearCrossEntropy(dH.cv(), dW.cv(), transW != 0, dlab.v(), -1,
                                 chunk, ld.sum, ld.bad);
          ck(cudaStreamSynchronize(stream_), "sync");
          int bad = -1;
          ld.read(sums[run], bad);
          EXPECT_EQ(bad, 0);
        }
        EXPECT_EQ(0, std::memcmp(&sums[0], &sums[1], sizeof(float)));
        std::string what = std::string(label) + " V=" + std::to_string(V) +
                           " transW=" + std::to_string(transW) +
                           " chunk=" + std::to_string(chunk);
        Tensor refT(Shape{1}, float(refSum));
        expectClose({sums[0]}, refT, what + " lossSum", tol);
        auto got = runTwice(
            {{hs, {}}, {ws, {}}},
            [&](const std::vector<FView> &o) {
              cu::linearCrossEntropyBackward(dH.cv(), dW.cv(), transW != 0,
                                             dlab.v(), -1, chunk, 0.05f, o[0],
                                             o[1]);
            },
            what + " backward");
        expectClose(got[0], dh, what + " dH", tol);
        expectClose(got[1], dw, what + " dW", tol);
        // The fused call gives the two calls' bits: the loss sum, dH and dW.
        auto fused = runTwice(
            {{hs, {}}, {ws, {}}},
            [&](const std::vector<FView> &o) {
              cu::linearCrossEntropyWithGrad(dH.cv(), dW.cv(), transW != 0,
                                             dlab.v(), -1, chunk, 0.05f, ld.sum,
                                             ld.bad, o[0], o[1]);
            },
            what + " fused");
        float fusedSum = 0;
        int bad = -1;
        ld.read(fusedSum, bad);
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(0, std::memcmp(&sums[0], &fusedSum, sizeof(float))) << what;
        EXPECT_EQ(0, std::memcmp(got[0].data(), fused[0].data(),
                                 got[0].size() * sizeof(float)))
            << what << " fused dH";
        EXPECT_EQ(0, std::memcmp(got[1].data(), fused[1].data(),
                                 got[1].size() * sizeof(float)))
            << what << " fused dW";
        // The weight stored in bf16 (a resident weight's copy): the bits of
        // the fp32-weight kernels given its widened values, which they
        // round back to the same bf16 under bf16.
        std::vector<uint16_t> w16(w.data.size());
        Tensor wWide(ws);
        for (size_t i = 0; i < w16.size(); ++i) {
          w16[i] = rondo::kernels::floatToBf16Bits(w.data[i]);
          wWide.data[i] = rondo::kernels::bf16BitsToFloat(w16[i]);
        }
        Dev dWide(wWide);
        uint16_t *dw16 = nullptr;
        ck(cudaMalloc(&dw16, w16.size() * 2), "cudaMalloc");
        ck(cudaMemcpy(dw16, w16.data(), w16.size() * 2, cudaMemcpyHostToDevice),
           "upload");
        cpu::CBView cw16{dw16, ws};
        auto wide = runTwice(
            {{hs, {}}, {ws, {}}},
            [&](const std::vector<FView> &o) {
              cu::linearCrossEntropyWithGrad(dH.cv(), dWide.cv(), transW != 0,
                                             dlab.v(), -1, chunk, 0.05f, ld.sum,
                                             ld.bad, o[0], o[1]);
            },
            what + " widened weight");
        float wideSum = 0;
        ld.read(wideSum, bad);
        auto stored = runTwice(
            {{hs, {}}, {ws, {}}},
            [&](const std::vector<FView> &o) {
              cu::linearCrossEntropyWithGradBf16W(dH.cv(), cw16, transW != 0,
                                                  dlab.v(), -1, chunk, 0.05f,
                                                  ld.sum, ld.bad, o[0], o[1]);
            },
            what + " Bf16W");
        float storedSum = 0;
        ld.read(storedSum, bad);
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(0, std::memcmp(&wideSum, &storedSum, sizeof(float)))
            << what << " Bf16W loss";
        EXPECT_EQ(0, std::memcmp(wide[0].data(), stored[0].data(),
                                 wide[0].size() * sizeof(float)))
            << what << " Bf16W dH";
        EXPECT_EQ(0, std::memcmp(wide[1].data(), stored[1].data(),
                                 wide[1].size() * sizeof(float)))
            << what << " Bf16W dW";
        // The adding twins (a GPU trainer's head gradient added into its
        // slot): dW += what the overwriting call writes, the loss and dH
        // the same bits; on the CPU as well.
        Tensor prior = uniform(ws);
        for (int bf16Weight = 0; bf16Weight < 2; ++bf16Weight) {
          auto added = runTwice(
              {{hs, {}}, {ws, prior.data}},
              [&](const std::vector<FView> &o) {
                if (bf16Weight)
                  cu::linearCrossEntropyWithGradBf16WAdd(
                      dH.cv(), cw16, transW != 0, dlab.v(), -1, chunk, 0.05f,
                      ld.sum, ld.bad, o[0], o[1]);
                else
                  cu::linearCrossEntropyWithGradAdd(
                      dH.cv(), dWide.cv(), transW != 0, dlab.v(), -1, chunk,
                      0.05f, ld.sum, ld.bad, o[0], o[1]);
              },
              what + (bf16Weight ? " Bf16WAdd" : " WithGradAdd"));
          float addedSum = 0;
          ld.read(addedSum, bad);
          EXPECT_EQ(bad, 0);
          EXPECT_EQ(0, std::memcmp(&wideSum, &addedSum, sizeof(float)))
              << what << " Add loss";
          EXPECT_EQ(0, std::memcmp(wide[0].data(), added[0].data(),
                                   wide[0].size() * sizeof(float)))
              << what << " Add dH";
          Tensor sum(ws);
          for (size_t i = 0; i < sum.data.size(); ++i)
            sum.data[i] = prior.data[i] + wide[1][i];
          expectClose(added[1], sum, what + " Add dW", tol);
        }
        {
          Tensor cpuDh(hs), cpuDw(ws), cpuAdded(ws);
          cpuAdded.data = prior.data;
          float cpuSum = 0, cpuAddedSum = 0;
          int cpuBad = -1;
          cpu::linearCrossEntropyWithGrad(h.cv(), wWide.cv(), transW != 0, lv,
                                          -1, chunk, 0.05f, &cpuSum, &cpuBad,
                                          cpuDh.v(), cpuDw.v());
          Tensor cpuDh2(hs);
          cpu::linearCrossEntropyWithGradAdd(h.cv(), wWide.cv(), transW != 0,
                                             lv, -1, chunk, 0.05f, &cpuAddedSum,
                                             &cpuBad, cpuDh2.v(), cpuAdded.v());
          EXPECT_EQ(cpuSum, cpuAddedSum) << what << " CPU Add loss";
          EXPECT_EQ(cpuDh.data, cpuDh2.data) << what << " CPU Add dH";
          Tensor sum(ws);
          for (size_t i = 0; i < sum.data.size(); ++i)
            sum.data[i] = prior.data[i] + cpuDw.data[i];
          expectClose(cpuAdded.data, sum, what + " CPU Add dW", kTol);
        }
        auto storedBwd = runTwice(
            {{hs, {}}, {ws, {}}},
            [&](const std::vector<FView> &o) {
              cu::linearCrossEntropyBackwardBf16W(dH.cv(), cw16, transW != 0,
                                                  dlab.v(), -1, chunk, 0.05f,
                                                  o[0], o[1]);
            },
            what + " backward Bf16W");
        EXPECT_EQ(0, std::memcmp(wide[0].data(), storedBwd[0].data(),
                                 wide[0].size() * sizeof(float)))
            << what << " backward Bf16W dH";
        cu::linearCrossEntropyBf16W(dH.cv(), cw16, transW != 0, dlab.v(), -1,
                                    chunk, ld.sum, ld.bad);
        ck(cudaStreamSynchronize(stream_), "sync");
        float fwdSum = 0;
        ld.read(fwdSum, bad);
        EXPECT_EQ(0, std::memcmp(&wideSum, &fwdSum, sizeof(float)))
            << what << " forward Bf16W loss";
        cudaFree(dw16);
      }
}

TEST_F(CudaKernels, LinearCrossEntropy) {
  checkLinearCrossEntropy("linearCrossEntropy", kTol);
}

TEST_F(CudaKernels, LinearCrossEntropyBf16) {
  // The weight is rounded once per call and shared by the chunks' products.
  PrecisionGuard bf16(cu::Precision::Bf16);
  checkLinearCrossEntropy("bf16 linearCrossEntropy", kBf16Tol);
}

//===----------------------------------------------------------------------===//
// Context
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, ContractViolationThrowsNamingKernelAndDevice) {
  Dev a(uniform(Shape{3, 4})), b(uniform(Shape{5, 6}));
  Tensor o(Shape{3, 6});
  Dev out(o);
  try {
    cu::matmul(a.cv(), b.cv(), FView{out.p, o.shape}, false, false);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error &e) {
    std::string m = e.what();
    EXPECT_NE(m.find("matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("device"), std::string::npos) << m;
  }
}

TEST_F(CudaKernels, StreamIsThreadLocal) {
  EXPECT_EQ(cu::currentStream(), stream_);
  {
    cu::StreamGuard guard(nullptr);
    EXPECT_EQ(cu::currentStream(), nullptr);
  }
  EXPECT_EQ(cu::currentStream(), stream_);
}

TEST_F(CudaKernels, ThreadsUseTheirOwnStreamsAndHandles) {
  // Each thread enqueues on its own stream with its own cuBLAS handle; the
  // results are the same bits as on the test's thread.
  Tensor a = uniform(Shape{3, 64, 128}), b = uniform(Shape{128, 96});
  Tensor x = uniform(Shape{64, 256}), w = uniform(Shape{256}),
         g = uniform(Shape{64, 256});
  Dev da(a), db(b), dx(x), dw(w), dg(g);
  ck(cudaDeviceSynchronize(), "sync uploads");
  auto work = [&](std::vector<float> &c, std::vector<float> &dW) {
    float *pc = nullptr, *pw = nullptr;
    ck(cudaMalloc(&pc, 3 * 64 * 96 * sizeof(float)), "cudaMalloc");
    ck(cudaMalloc(&pw, 256 * sizeof(float)), "cudaMalloc");
    cu::matmul(da.cv(), db.cv(), FView{pc, Shape{3, 64, 96}}, false, false);
    cu::rmsNormBackward(dx.cv(), dw.cv(), 1e-6f, dg.cv(),
                        FView{nullptr, Shape{64, 256}}, FView{pw, Shape{256}});
    ck(cudaStreamSynchronize(cu::currentStream()), "sync");
    c.resize(3 * 64 * 96);
    dW.resize(256);
    ck(cudaMemcpy(c.data(), pc, c.size() * 4, cudaMemcpyDeviceToHost), "get");
    ck(cudaMemcpy(dW.data(), pw, dW.size() * 4, cudaMemcpyDeviceToHost), "get");
    cudaFree(pc);
    cudaFree(pw);
  };
  std::vector<float> c0, w0;
  work(c0, w0);
  std::vector<float> c[2], dW[2];
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      try {
        cudaStream_t st = nullptr;
        ck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
        cu::setCurrentStream(st);
        work(c[t], dW[t]);
        cu::releaseThreadResources();
        cudaStreamDestroy(st);
      } catch (const std::exception &e) {
        errors[t] = e.what();
      }
    });
  for (auto &th : threads)
    th.join();
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(errors[t], "");
    if (!errors[t].empty())
      continue;
    EXPECT_EQ(0, std::memcmp(c[t].data(), c0.data(), c0.size() * 4));
    EXPECT_EQ(0, std::memcmp(dW[t].data(), w0.data(), w0.size() * 4));
  }
  EXPECT_EQ(cu::currentStream(), stream_); // other threads' settings
}

struct DevBuf {
  float *p = nullptr;
  Shape shape;
  /// Random in [lo, hi]; lo == hi: zeros (no host data).
  explicit DevBuf(Shape s, float lo = -1.0f, float hi = 1.0f) : shape(s) {
    size_t n = size_t(s.numel());
    ck(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc");
    if (lo == hi) {
      ck(cudaMemset(p, 0, n * sizeof(float)), "memset");
      return;
    }
    Tensor t = uniform(s, lo, hi);
    ck(cudaMemcpy(p, t.data.data(), n * sizeof(float), cudaMemcpyHostToDevice),
       "upload");
  }
  ~DevBuf() { cudaFree(p); }
  FView v() const { return FView{p, shape}; }
  CFView cv() const { return CFView{p, shape}; }
};

/// Causal attention forward and backward on random [B, H, T, D] buffers
/// (Hq query heads, Hkv key/value heads): milliseconds per call over `reps`
/// runs, and the forward's flops (causal: half the scores).
struct AttnTimes {
  double fwd, bwd, flops;
};
AttnTimes timeCausalAttention(int64_t B, int64_t Hq, int64_t Hkv, int64_t T,
                              int64_t D, int reps) {
  DevBuf q(Shape{B, Hq, T, D}), k(Shape{B, Hkv, T, D}), v(Shape{B, Hkv, T, D});
  DevBuf o(Shape{B, Hq, T, D}), l(Shape{B, Hq, T}), g(Shape{B, Hq, T, D});
  DevBuf dq(Shape{B, Hq, T, D}, 0.0f, 0.0f),
      dk(Shape{B, Hkv, T, D}, 0.0f, 0.0f), dv(Shape{B, Hkv, T, D}, 0.0f, 0.0f);
  float scale = 1.0f / std::sqrt(float(D));
  AttnTimes t;
  t.fwd = timeMs(
      [&] {
        cu::attention(q.cv(), k.cv(), v.cv(), true, 0, scale, o.v(), l.v());
      },
      reps);
  t.bwd = timeMs(
      [&] {
        cu::attentionBackward(q.cv(), k.cv(), v.cv(), o.cv(), l.cv(), g.cv(),
                              true, 0, scale, dq.v(), dk.v(), dv.v());
      },
      reps);
  t.flops = 4.0 * B * Hq * T * T * D / 2;
  return t;
}

// Not a correctness test: rough timings of this first (fp32, simple) version
// at training sizes, for the record. Run with --gtest_also_run_disabled_tests.
TEST_F(CudaKernels, DISABLED_Timing) {
  {
    const int64_t n = 4096;
    DevBuf a(Shape{n, n}), b(Shape{n, n}), c(Shape{n, n});
    double ms =
        timeMs([&] { cu::matmul(a.cv(), b.cv(), c.v(), false, false); });
    std::printf("[ timing ] matmul fp32 4096^3: %.3f ms, %.1f TFLOP/s\n", ms,
                2.0 * n * n * n / ms / 1e9);
  }
  {
    AttnTimes t = timeCausalAttention(1, 16, 8, 2048, 128, 5);
    std::printf("[ timing ] attention causal B1 Hq16 Hkv8 T2048 D128: fwd "
                "%.3f ms (%.2f TFLOP/s), bwd %.3f ms (%.2f TFLOP/s)\n",
                t.fwd, t.flops / t.fwd / 1e9, t.bwd,
                2.5 * t.flops / t.bwd / 1e9);
  }
  {
    const int64_t R = 16384, W = 2048;
    DevBuf x(Shape{R, W}), w(Shape{W}), y(Shape{R, W}), g(Shape{R, W}),
        dx(Shape{R, W}), dw(Shape{W});
    double f = timeMs([&] { cu::rmsNorm(x.cv(), w.cv(), 1e-6f, y.v()); });
    double bw = timeMs([&] {
      cu::rmsNormBackward(x.cv(), w.cv(), 1e-6f, g.cv(), dx.v(), dw.v());
    });
    double bytes = double(R) * W * 4;
    std::printf("[ timing ] rmsNorm [16384, 2048]: fwd %.3f ms (%.0f GB/s), "
                "bwd %.3f ms (%.0f GB/s)\n",
                f, 2 * bytes / f / 1e6, bw, 5 * bytes / bw / 1e6);
    double s =
        timeMs([&] { cu::binary(BinaryKind::Mul, x.cv(), g.cv(), y.v()); });
    std::printf("[ timing ] binary Mul [16384, 2048]: %.3f ms (%.0f GB/s)\n", s,
                3 * bytes / s / 1e6);
    double st = timeMs([&] { cu::sumToShape(x.cv(), dw.v()); });
    std::printf("[ timing ] sumToShape [16384, 2048] -> [2048]: %.3f ms "
                "(%.0f GB/s)\n",
                st, bytes / st / 1e6);
  }
  {
    const int64_t N = 4096, V = 151936;
    DevBuf logits(Shape{N, V}, -4.0f, 4.0f), dl(Shape{N, V}, 0.0f, 0.0f);
    std::vector<int64_t> labels = randomLabels(N, V, -100);
    DevIds lab(labels, Shape{N});
    LossDev ld;
    double f = timeMs(
        [&] { cu::crossEntropy(logits.cv(), lab.v(), -100, ld.sum, ld.bad); },
        5);
    double bw = timeMs(
        [&] {
          cu::crossEntropyBackward(logits.cv(), lab.v(), -100, 1e-3f, dl.v());
        },
        5);
    double bytes = double(N) * V * 4;
    std::printf("[ timing ] crossEntropy [4096, 151936]: fwd %.3f ms "
                "(%.0f GB/s), bwd %.3f ms\n",
                f, bytes / f / 1e6, bw);
  }
  {
    const int64_t rows = 151936, W = 2048, n = 16384;
    DevBuf table(Shape{rows, W}, 0.0f, 0.0f), g(Shape{n, W});
    std::uniform_int_distribution<int64_t> dist(0, rows - 1);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto &i : ids)
      i = dist(rng());
    DevIds di(ids, Shape{n});
    double bw =
        timeMs([&] { cu::gatherRowsBackward(di.v(), g.cv(), table.v()); });
    std::printf("[ timing ] gatherRowsBackward 16384 ids into [151936, 2048]: "
                "%.3f ms\n",
                bw);
  }
}

// The Precision::Bf16 attention at a training size. Run with
// --gtest_also_run_disabled_tests.
TEST_F(CudaKernels, DISABLED_FlashTiming) {
  PrecisionGuard guard(cu::Precision::Bf16);
  for (int64_t D : {128, 64}) {
    AttnTimes t = timeCausalAttention(2, 16, 8, 4096, D, 10);
    std::printf("[ timing ] attention bf16 causal B2 Hq16 Hkv8 T4096 D%lld: "
                "fwd %.3f ms (%.1f TFLOP/s), bwd %.3f ms (%.1f TFLOP/s)\n",
                (long long)D, t.fwd, t.flops / t.fwd / 1e9, t.bwd,
                2.5 * t.flops / t.bwd / 1e9);
  }
}

/// One row of causal bf16 attention with 16 query and 8 kv heads: the
/// forward, the backward, and the backward with only dQ / only dK and dV
/// wanted (each including the shared conversions), in ms, with the
/// forward's FLOPs (counted as causal).
struct FlashTimes {
  double fwd, bwd, bwdQ, bwdKV, flops;
};
FlashTimes timeFlash(int64_t T, int64_t D, int64_t B = 1) {
  const int64_t Hq = 16, Hkv = 8;
  const int reps = 20;
  DevBuf q(Shape{B, Hq, T, D}), k(Shape{B, Hkv, T, D}), v(Shape{B, Hkv, T, D});
  DevBuf o(Shape{B, Hq, T, D}), l(Shape{B, Hq, T}), g(Shape{B, Hq, T, D});
  DevBuf dq(Shape{B, Hq, T, D}, 0.0f, 0.0f),
      dk(Shape{B, Hkv, T, D}, 0.0f, 0.0f), dv(Shape{B, Hkv, T, D}, 0.0f, 0.0f);
  const float scale = 1.0f / std::sqrt(float(D));
  FView noneQ{nullptr, Shape{B, Hq, T, D}}, noneK{nullptr, Shape{B, Hkv, T, D}};
  FlashTimes t;
  t.flops = 4.0 * B * Hq * T * T * D / 2;
  t.fwd = timeMs(
      [&] {
        cu::attention(q.cv(), k.cv(), v.cv(), true, 0, scale, o.v(), l.v());
      },
      reps);
  // The backward on the forward's own out/lse (the last forward's).
  auto backward = [&](FView dQ, FView dK, FView dV) {
    return timeMs(
        [&] {
          cu::attentionBackward(q.cv(), k.cv(), v.cv(), o.cv(), l.cv(), g.cv(),
                                true, 0, scale, dQ, dK, dV);
        },
        reps);
  };
  t.bwd = backward(dq.v(), dk.v(), dv.v());
  t.bwdQ = backward(dq.v(), noneK, noneK);
  t.bwdKV = backward(noneQ, dk.v(), dv.v());
  return t;
}

// The bf16 attention at W1's shape (Qwen3-1.7B: one row of T = 4096, 16
// query heads, 8 kv heads, D = 128, causal). Run with
// --gtest_also_run_disabled_tests.
TEST_F(CudaKernels, DISABLED_FlashTimingW1) {
  PrecisionGuard guard(cu::Precision::Bf16);
  FlashTimes t = timeFlash(4096, 128);
  std::printf("[ timing ] attention bf16 W1 (B1 Hq16 Hkv8 T4096 D128 causal): "
              "fwd %.3f ms (%.1f TFLOP/s), bwd %.3f ms (%.1f TFLOP/s); bwd "
              "dQ only %.3f ms, dK/dV only %.3f ms\n",
              t.fwd, t.flops / t.fwd / 1e9, t.bwd, 2.5 * t.flops / t.bwd / 1e9,
              t.bwdQ, t.bwdKV);
}

// The bf16 attention on each path at W1's shape (B 2) and beside it, one
// line per case for bench/: fwd, bwd (conversions included, as the trainer
// calls them), and the backward with only dQ / only dK and dV wanted. Paths:
// cuDNN's fused attention (its deterministic backward, and its atomic-dQ
// backward for comparison, which is not reproducible), Rondo's kernels as
// they run by default without cuDNN (wgmma on Hopper, two-kernel backward),
// the fused wgmma backward and the mma.sync kernels. Run with
// --gtest_also_run_disabled_tests --gtest_filter='*FlashTimingPaths';
// RONDO_BENCH_PATHS (comma-separated) picks paths.
TEST_F(CudaKernels, DISABLED_FlashTimingPaths) {
  PrecisionGuard guard(cu::Precision::Bf16);
  // RONDO_BENCH_KEEP_POOL=1: the default memory pool keeps freed memory
  // across synchronisations (as PyTorch's caching allocator does), so that
  // the conversions' stream-ordered temporaries are not mapped afresh on
  // every timed call; otherwise each call after a sync pays for it.
  const char *keep = std::getenv("RONDO_BENCH_KEEP_POOL");
  const bool keepPool = keep && keep[0] == '1';
  if (keepPool) {
    int dev = 0;
    cudaMemPool_t pool;
    ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, dev), cudaSuccess);
    uint64_t threshold = UINT64_MAX;
    ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                      &threshold),
              cudaSuccess);
  }
  struct Case {
    int64_t B, T, D;
  };
  const Case cases[] = {
      {2, 4096, 128}, {1, 4096, 128}, {1, 8192, 128}, {1, 4096, 64}};
  const char *only = std::getenv("RONDO_BENCH_PATHS");
  // RONDO_BENCH_W1_ONLY=1: W1's case alone (for profiles).
  const char *w1Only = std::getenv("RONDO_BENCH_W1_ONLY");
  const size_t numCases = w1Only && w1Only[0] == '1' ? 1 : std::size(cases);
  for (const char *path :
       {"cudnn", "cudnn-atomic", "flash", "fused", "mma.sync"}) {
    if (only && !std::strstr(only, path))
      continue;
    const std::string p = path;
    setenv("RONDO_ATTENTION", p.rfind("cudnn", 0) == 0 ? "cudnn" : "flash", 1);
    setenv("RONDO_CUDNN_BWD", p == "cudnn-atomic" ? "atomic" : "deterministic",
           1);
    setenv("RONDO_FLASH_FUSED_BWD", p == "fused" ? "1" : "0", 1);
    setenv("RONDO_FLASH_SM90", p == "mma.sync" ? "0" : "1", 1);
    if (p.rfind("cudnn", 0) == 0 && cu::cudnnAttentionUnavailable()) {
      std::printf("[ flash ] path=%s skipped: %s\n", path,
                  cu::cudnnAttentionUnavailable());
      continue;
    }
    for (size_t i = 0; i < numCases; ++i) {
      const Case &c = cases[i];
      FlashTimes t = timeFlash(c.T, c.D, c.B);
      std::printf("[ flash ] path=%s impl=%s pool=%s B=%lld Hq=16 Hkv=8 "
                  "T=%lld D=%lld causal fwd_ms=%.4f bwd_ms=%.4f "
                  "fwd_tflops=%.1f bwd_tflops=%.1f bwd_dq_only_ms=%.4f "
                  "bwd_dkv_only_ms=%.4f\n",
                  path, implName(cu::lastAttentionImpl()),
                  keepPool ? "keep" : "release", (long long)c.B, (long long)c.T,
                  (long long)c.D, t.fwd, t.bwd, t.flops / t.fwd / 1e9,
                  2.5 * t.flops / t.bwd / 1e9, t.bwdQ, t.bwdKV);
    }
  }
  for (const char *var : {"RONDO_ATTENTION", "RONDO_CUDNN_BWD",
                          "RONDO_FLASH_FUSED_BWD", "RONDO_FLASH_SM90"})
    unsetenv(var);
}

/// Attention at Gemma-3-1B's shape (4 query heads, 1 kv head, D = 256,
/// causal, T = S) with an optional sliding window: ms per call of the
/// forward, the backward and the backward's dQ / dK-dV halves (conversions
/// included, as the trainer calls them), and the forward's FLOPs over the
/// attended pairs (the causal triangle as T^2 / 2, as everywhere here).
struct WindowTimes {
  double fwd, bwd, bwdQ, bwdKV, flops;
};
WindowTimes timeWindowed(int64_t B, int64_t T, int64_t window, int reps) {
  const int64_t Hq = 4, Hkv = 1, D = 256;
  DevBuf q(Shape{B, Hq, T, D}), k(Shape{B, Hkv, T, D}), v(Shape{B, Hkv, T, D});
  DevBuf o(Shape{B, Hq, T, D}), l(Shape{B, Hq, T}), g(Shape{B, Hq, T, D});
  DevBuf dq(Shape{B, Hq, T, D}, 0.0f, 0.0f),
      dk(Shape{B, Hkv, T, D}, 0.0f, 0.0f), dv(Shape{B, Hkv, T, D}, 0.0f, 0.0f);
  const float scale = 1.0f / std::sqrt(float(D));
  FView noneQ{nullptr, Shape{B, Hq, T, D}}, noneK{nullptr, Shape{B, Hkv, T, D}};
  double pairs = double(T) * double(T) / 2;
  if (window > 0 && window < T)
    pairs = double(window) * double(window + 1) / 2 +
            double(T - window) * double(window);
  WindowTimes t;
  t.flops = 4.0 * B * Hq * pairs * D;
  t.fwd = timeMs(
      [&] {
        cu::attention(q.cv(), k.cv(), v.cv(), true, window, scale, o.v(),
                      l.v());
      },
      reps);
  auto backward = [&](FView dQ, FView dK, FView dV) {
    return timeMs(
        [&] {
          cu::attentionBackward(q.cv(), k.cv(), v.cv(), o.cv(), l.cv(), g.cv(),
                                true, window, scale, dQ, dK, dV);
        },
        reps);
  };
  t.bwd = backward(dq.v(), dk.v(), dv.v());
  t.bwdQ = backward(dq.v(), noneK, noneK);
  t.bwdKV = backward(noneQ, dk.v(), dv.v());
  return t;
}

// Gemma-3-1B's attention (B = 1 and 2 rows of T = 4096, Hq 4, Hkv 1, D 256,
// causal; its local layers' 512-token window and its global layers' none)
// on the bf16 paths (the default, wgmma where the GPU has it, and mma.sync)
// and on the fp32 kernels that D = 256 fell back to before it had bf16
// kernels. One line per case for bench/. Run with
// --gtest_also_run_disabled_tests --gtest_filter='*FlashTimingGemma3'.
TEST_F(CudaKernels, DISABLED_FlashTimingGemma3) {
  // The memory pool keeps freed memory, as in DISABLED_FlashTimingPaths
  // with RONDO_BENCH_KEEP_POOL=1 (and as PyTorch's caching allocator does).
  int dev = 0;
  cudaMemPool_t pool;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, dev), cudaSuccess);
  uint64_t threshold = UINT64_MAX;
  ASSERT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                    &threshold),
            cudaSuccess);
  for (const char *path : {"default", "mma.sync", "fp32"}) {
    const bool fp32 = std::string(path) == "fp32";
    PrecisionGuard guard(fp32 ? cu::Precision::Fp32 : cu::Precision::Bf16);
    if (std::string(path) == "mma.sync")
      setenv("RONDO_FLASH_SM90", "0", 1);
    for (int64_t B : {1, 2})
      for (int64_t window : {512, 0}) {
        WindowTimes t = timeWindowed(B, 4096, window, fp32 ? 3 : 20);
        std::printf("[ flash ] path=%s B=%lld Hq=4 Hkv=1 T=4096 D=256 causal "
                    "window=%lld fwd_ms=%.4f bwd_ms=%.4f fwd_tflops=%.1f "
                    "bwd_tflops=%.1f bwd_dq_only_ms=%.4f "
                    "bwd_dkv_only_ms=%.4f\n",
                    path, (long long)B, (long long)window, t.fwd, t.bwd,
                    t.flops / t.fwd / 1e9, 2.5 * t.flops / t.bwd / 1e9, t.bwdQ,
                    t.bwdKV);
      }
    unsetenv("RONDO_FLASH_SM90");
  }
}

TEST_F(CudaKernels, ReportWorstError) {
  // Runs last in file order: prints the largest error seen (for the record).
  std::printf("[ worst max-abs-normalised error so far: %.3g (%s) ]\n",
              worstErr(), worstWhat().c_str());
}

} // namespace cuda_test
