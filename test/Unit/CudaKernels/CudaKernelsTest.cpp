//===- CudaKernelsTest.cpp - CUDA kernels against the CPU kernels ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Every CUDA kernel runs on random inputs next to its CPU twin (the reference,
// itself tested in test/Unit/Runtime/KernelsTest.cpp). Outputs must agree to
// 1e-5 in max-abs-normalised error, max|gpu - cpu| / max|cpu|, and two CUDA
// runs on the same inputs must agree bit for bit. Outputs are poisoned (NaN)
// before each run, so an element a kernel forgets to write fails the
// comparison. Kernels run on a non-default stream set with setCurrentStream.
//
// Without a GPU (cudaGetDeviceCount fails or reports 0 devices) every test
// skips itself.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

#include <cstdlib>

namespace cuda_test {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, Binary) {
  for (BinaryKind k : kBinaryKinds)
    for (const BinaryCase &c : kBinaryCases) {
      Tensor a, b;
      binaryInputs(k, c, a, b);
      Tensor ref(c.out);
      cpu::binary(k, a.cv(), b.cv(), ref.v());
      Dev da(a), db(b);
      std::string what = std::string("binary ") + binaryName(k);
      auto got = runTwice({{c.out, {}}},
                          [&](const std::vector<FView> &o) {
                            cu::binary(k, da.cv(), db.cv(), o[0]);
                          },
                          what);
      expectClose(got[0], ref, what);
    }
}

TEST_F(CudaKernels, BinaryBackward) {
  for (BinaryKind k : kBinaryKinds)
    for (const BinaryCase &c : kBinaryCases)
      for (int skip = 0; skip < 2; ++skip) {
        Tensor a, b;
        binaryInputs(k, c, a, b);
        Tensor g = uniform(c.out);
        Tensor ra(c.a), rb(c.b);
        cpu::binaryBackward(k, a.cv(), b.cv(), g.cv(),
                            skip ? FView{nullptr, c.a} : ra.v(), rb.v());
        Dev da(a), db(b), dg(g);
        std::string what = std::string("binaryBackward ") + binaryName(k);
        // With skip, dA is not asked for (a null view) and not allocated.
        std::vector<OutSpec> outs{{c.b, {}}};
        if (!skip)
          outs.push_back({c.a, {}});
        auto got = runTwice(outs,
                            [&](const std::vector<FView> &o) {
                              cu::binaryBackward(
                                  k, da.cv(), db.cv(), dg.cv(),
                                  skip ? FView{nullptr, c.a} : o[1], o[0]);
                            },
                            what);
        expectClose(got[0], rb, what + " dB");
        if (!skip)
          expectClose(got[1], ra, what + " dA");
      }
}

TEST_F(CudaKernels, Unary) {
  for (int ki = 0; ki <= int(UnaryKind::Cos); ++ki) {
    UnaryKind k = UnaryKind(ki);
    Shape s{3, 7, 129};
    Tensor x;
    if (k == UnaryKind::Log || k == UnaryKind::Sqrt || k == UnaryKind::Rsqrt)
      x = uniform(s, 0.1f, 3.0f);
    else if (k == UnaryKind::Reciprocal)
      x = awayFromZero(s, -3.0f, 3.0f, 0.2f);
    else
      x = uniform(s, -4.0f, 4.0f);
    Tensor g = uniform(s);
    Tensor ref(s), refB(s);
    cpu::unary(k, x.cv(), ref.v());
    cpu::unaryBackward(k, x.cv(), g.cv(), refB.v());
    Dev dx(x), dg(g);
    std::string what = std::string("unary ") + unaryName(k);
    auto got = runTwice({{s, {}}, {s, {}}},
                        [&](const std::vector<FView> &o) {
                          cu::unary(k, dx.cv(), o[0]);
                          cu::unaryBackward(k, dx.cv(), dg.cv(), o[1]);
                        },
                        what);
    expectClose(got[0], ref, what);
    expectClose(got[1], refB, what + " backward");
  }
}

TEST_F(CudaKernels, ScaleFillCopyAccumulateRoundToBf16) {
  Shape s{5, 1000};
  Tensor x = uniform(s, -100.0f, 100.0f), y = uniform(s);
  x.data[0] = NAN;
  x.data[1] = INFINITY;
  x.data[2] = -0.0f;
  Tensor rScale(s), rFill(s), rCopy(s), rAcc = y, rBf(s);
  cpu::scale(x.cv(), 0.37f, rScale.v());
  cpu::fill(rFill.v(), 2.5f);
  cpu::copy(x.cv(), rCopy.v());
  cpu::accumulate(x.cv(), rAcc.v());
  cpu::roundToBf16(x.cv(), rBf.v());
  Dev dx(x);
  auto got = runTwice({{s, {}}, {s, {}}, {s, {}}, {s, y.data}, {s, {}}},
                      [&](const std::vector<FView> &o) {
                        cu::scale(dx.cv(), 0.37f, o[0]);
                        cu::fill(o[1], 2.5f);
                        cu::copy(dx.cv(), o[2]);
                        cu::accumulate(dx.cv(), o[3]);
                        cu::roundToBf16(dx.cv(), o[4]);
                      },
                      "misc");
  // These are exact (NaN payloads aside: arithmetic on a NaN gives the
  // GPU's canonical NaN, the CPU keeps the input's; roundToBf16 is all bit
  // operations and must match NaNs bit for bit too).
  const Tensor *refs[] = {&rScale, &rFill, &rCopy, &rAcc, &rBf};
  const char *names[] = {"scale", "fill", "copy", "accumulate", "roundToBf16"};
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> &g = got[size_t(i)], &r = refs[i]->data;
    size_t mismatches = 0;
    for (size_t j = 0; j < r.size(); ++j) {
      bool bothNaN = std::isnan(g[j]) && std::isnan(r[j]) && i != 4;
      if (!bothNaN && std::memcmp(&g[j], &r[j], sizeof(float)) != 0)
        ++mismatches;
    }
    EXPECT_EQ(mismatches, 0u) << names[i] << " is not bitwise equal to the CPU";
  }
}

TEST_F(CudaKernels, BroadcastToAndSumToShape) {
  struct Case {
    Shape small, big;
  };
  const Case cases[] = {
      {{8, 1, 5}, {8, 6, 5}},      {{33, 1}, {64, 33, 17}},
      {{}, {300, 1000}},           {{1, 17}, {64, 33, 17}},
      {{3, 1, 5}, {2, 3, 4, 5}},   {{7}, {50000, 7}},
      {{1000}, {2, 1000}},         {{2, 1, 1}, {2, 3000, 40}},
      {{4, 5, 6}, {4, 5, 6}},
  };
  for (const Case &c : cases) {
    Tensor x = uniform(c.small), big = uniform(c.big);
    Tensor rB(c.big), rS(c.small);
    cpu::broadcastTo(x.cv(), rB.v());
    cpu::sumToShape(big.cv(), rS.v());
    Dev dx(x), dbig(big);
    std::string what = "broadcast/sum " + str(c.big) + "->" + str(c.small);
    auto got = runTwice({{c.big, {}}, {c.small, {}}},
                        [&](const std::vector<FView> &o) {
                          cu::broadcastTo(dx.cv(), o[0]);
                          cu::sumToShape(dbig.cv(), o[1]);
                        },
                        what);
    expectClose(got[0], rB, what + " broadcastTo", 0.0);
    expectClose(got[1], rS, what + " sumToShape");
  }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, Transpose) {
  struct Case {
    Shape in;
    std::vector<int64_t> perm;
  };
  const Case cases[] = {{{2, 3, 4, 5}, {0, 2, 1, 3}},
                        {{2, 3, 4, 5}, {3, 2, 1, 0}},
                        {{64, 96}, {1, 0}},
                        {{2, 37, 4, 16}, {0, 2, 1, 3}}};
  for (const Case &c : cases) {
    Tensor x = uniform(c.in);
    Shape os = c.in;
    for (int i = 0; i < c.in.rank; ++i)
      os.dims[i] = c.in.dims[c.perm[size_t(i)]];
    Tensor ref(os);
    cpu::transpose(x.cv(), c.perm.data(), ref.v());
    Dev dx(x);
    auto got = runTwice({{os, {}}},
                        [&](const std::vector<FView> &o) {
                          cu::transpose(dx.cv(), c.perm.data(), o[0]);
                        },
                        "transpose");
    expectClose(got[0], ref, "transpose", 0.0);
  }
}

TEST_F(CudaKernels, SliceAndSliceBackward) {
  Shape in{6, 7, 8};
  std::vector<int64_t> starts{1, 6, 0}, steps{2, -2, 3};
  Shape os{3, 4, 3};
  Tensor x = uniform(in), g = uniform(os);
  Tensor ref(os), refB(in);
  cpu::slice(x.cv(), starts.data(), steps.data(), ref.v());
  cpu::sliceBackward(g.cv(), starts.data(), steps.data(), refB.v());
  Dev dx(x), dg(g);
  auto got = runTwice({{os, {}}, {in, {}}},
                      [&](const std::vector<FView> &o) {
                        cu::slice(dx.cv(), starts.data(), steps.data(), o[0]);
                        cu::sliceBackward(dg.cv(), starts.data(), steps.data(),
                                          o[1]);
                      },
                      "slice");
  expectClose(got[0], ref, "slice", 0.0);
  expectClose(got[1], refB, "sliceBackward", 0.0);
}

TEST_F(CudaKernels, Concat) {
  for (int axis : {0, 1, -1}) {
    Shape s0{4, 3, 5}, s1{4, 3, 5}, s2{4, 3, 5};
    int ax = axis < 0 ? axis + 3 : axis;
    s1.dims[ax] = 2;
    s2.dims[ax] = 7;
    Shape os = s0;
    os.dims[ax] = s0.dims[ax] + 2 + 7;
    Tensor t0 = uniform(s0), t1 = uniform(s1), t2 = uniform(s2), ref(os);
    CFView ins[3] = {t0.cv(), t1.cv(), t2.cv()};
    cpu::concat(ins, 3, axis, ref.v());
    Dev d0(t0), d1(t1), d2(t2);
    CFView dins[3] = {d0.cv(), d1.cv(), d2.cv()};
    auto got = runTwice({{os, {}}},
                        [&](const std::vector<FView> &o) {
                          cu::concat(dins, 3, axis, o[0]);
                        },
                        "concat");
    expectClose(got[0], ref, "concat axis " + std::to_string(axis), 0.0);
  }
}

TEST_F(CudaKernels, GatherRowsAndBackward) {
  struct Case {
    int64_t rows, width, n;
  };
  const Case cases[] = {{10, 7, 25}, {100, 96, 5000}, {3000, 64, 2048}};
  for (const Case &c : cases) {
    Shape ts{c.rows, c.width};
    Tensor table = uniform(ts);
    std::uniform_int_distribution<int64_t> id(-c.rows, c.rows - 1);
    std::vector<int64_t> ids(size_t(c.n));
    for (auto &i : ids)
      i = id(rng());
    Shape is{c.n};
    Shape os{c.n, c.width};
    Tensor ref(os), g = uniform(os), dTable0 = uniform(ts);
    Tensor refB = dTable0;
    cpu::gatherRows(table.cv(), IView{ids.data(), is}, ref.v());
    cpu::gatherRowsBackward(IView{ids.data(), is}, g.cv(), refB.v());
    Dev dt(table), dg(g);
    DevIds di(ids, is);
    auto got = runTwice({{os, {}}, {ts, dTable0.data}},
                        [&](const std::vector<FView> &o) {
                          cu::gatherRows(dt.cv(), di.v(), o[0]);
                          cu::gatherRowsBackward(di.v(), dg.cv(), o[1]);
                        },
                        "gatherRows");
    expectClose(got[0], ref, "gatherRows", 0.0);
    expectClose(got[1], refB, "gatherRowsBackward");
  }
}

// gatherRowsBackwardAdd (a GPU trainer's embedding gradient added in its
// slot) is fill, gatherRowsBackward and accumulate, bit for bit, and
// matches the CPU twin.
TEST_F(CudaKernels, GatherRowsBackwardAddIsFillScatterAccumulate) {
  for (int64_t n : {int64_t(25), int64_t(5000)}) {
    const int64_t rows = 300, width = 96;
    Shape ts{rows, width}, is{n}, os{n, width};
    std::uniform_int_distribution<int64_t> id(-rows, rows - 1);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto &i : ids)
      i = id(rng());
    Tensor g = uniform(os), slot0 = uniform(ts), cpuGot = slot0;
    cpu::gatherRowsBackwardAdd(IView{ids.data(), is}, g.cv(), cpuGot.v());
    Dev dg(g);
    DevIds di(ids, is);
    auto got = runTwice(
        {{ts, slot0.data}, {ts, slot0.data}, {ts, {}}},
        [&](const std::vector<FView> &o) {
          cu::gatherRowsBackwardAdd(di.v(), dg.cv(), o[0]);
          cu::fill(o[2], 0.0f);
          cu::gatherRowsBackward(di.v(), dg.cv(), o[2]);
          cu::accumulate(CFView{o[2].data, ts}, o[1]);
        },
        "gatherRowsBackwardAdd");
    EXPECT_EQ(got[0], got[1]) << "gatherRowsBackwardAdd against the three";
    expectClose(got[0], cpuGot, "gatherRowsBackwardAdd against the CPU");
  }
}

TEST_F(CudaKernels, GatherRowsBadIdGivesNaNAndFlag) {
  Shape ts{4, 3};
  Tensor table = uniform(ts);
  std::vector<int64_t> ids{0, 7, -1};
  Dev dt(table);
  DevIds di(ids, Shape{3});
  int *flag = nullptr;
  ck(cudaMalloc(&flag, sizeof(int)), "cudaMalloc");
  ck(cudaMemset(flag, 0, sizeof(int)), "memset");
  auto got = runTwice({{Shape{3, 3}, {}}},
                      [&](const std::vector<FView> &o) {
                        cu::gatherRows(dt.cv(), di.v(), o[0], flag);
                      },
                      "gatherRows bad id");
  int h = 0;
  ck(cudaMemcpy(&h, flag, sizeof(int), cudaMemcpyDeviceToHost), "download");
  cudaFree(flag);
  EXPECT_EQ(h, 1);
  EXPECT_TRUE(std::isnan(got[0][3]));
  EXPECT_EQ(got[0][0], table.data[0]);
  EXPECT_EQ(got[0][6], table.data[9]);
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

struct MatmulCase {
  Shape a, b, out;
  bool ta, tb;
};

/// cu::matmul against cpu::matmul on each case, writing a fresh output and
/// accumulating into a random one; `label` starts each message.
void checkMatmuls(std::initializer_list<MatmulCase> cases,
                  const std::string &label, double tol) {
  for (const MatmulCase &c : cases)
    for (int acc = 0; acc < 2; ++acc) {
      Tensor a = uniform(c.a), b = uniform(c.b), init = uniform(c.out);
      Tensor ref = init;
      cpu::matmul(a.cv(), b.cv(), ref.v(), c.ta, c.tb, acc != 0);
      Dev da(a), db(b);
      std::string what =
          label + " " + str(c.a) + "x" + str(c.b) + (acc ? " accumulate" : "");
      auto got = runTwice({{c.out, acc ? init.data : std::vector<float>{}}},
                          [&](const std::vector<FView> &o) {
                            cu::matmul(da.cv(), db.cv(), o[0], c.ta, c.tb,
                                       acc != 0);
                          },
                          what);
      expectClose(got[0], ref, what, tol);
    }
}

TEST_F(CudaKernels, Matmul) {
  checkMatmuls(
      {
          {{3, 5, 7}, {7, 4}, {3, 5, 4}, false, false}, // folded x.W
          {{3, 7, 5}, {7, 4}, {3, 5, 4}, true, false},  // transA, not folded
          {{3, 5, 7}, {4, 7}, {3, 5, 4}, false, true},  // folded, transB
          {{2, 1, 5, 6}, {1, 3, 6, 4}, {2, 3, 5, 4}, false, false},
          {{2, 3, 6, 5}, {3, 4, 6}, {2, 3, 5, 4}, true, true},
          {{7}, {2, 7, 4}, {2, 4}, false, false}, // vector a
          {{2, 5, 7}, {7}, {2, 5}, false, false}, // vector b
          {{7}, {7}, {}, false, false},           // dot
          {{4, 64, 512}, {512, 96}, {4, 64, 96}, false, false},
          {{2, 4, 37, 16}, {2, 4, 45, 16}, {2, 4, 37, 45}, false, true},
          {{256, 384}, {256, 200}, {384, 200}, true, false},
      },
      "matmul", kTol);
}

TEST_F(CudaKernels, MatmulEmptyContraction) {
  Shape as{3, 0}, bs{0, 4}, os{3, 4};
  Tensor a(as), b(bs), init = uniform(os);
  Tensor ref(os);
  cpu::matmul(a.cv(), b.cv(), ref.v(), false, false);
  Dev da(a), db(b);
  auto got = runTwice({{os, init.data}},
                      [&](const std::vector<FView> &o) {
                        cu::matmul(da.cv(), db.cv(), o[0], false, false);
                      },
                      "matmul K=0");
  expectClose(got[0], ref, "matmul K=0", 0.0);
}

//===----------------------------------------------------------------------===//
// Softmax, norms, rotary
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, Softmax) {
  for (Shape s : {Shape{5, 1}, Shape{3, 4, 37}, Shape{64, 1000},
                  Shape{3, 5000}}) {
    Tensor x = uniform(s, -5.0f, 5.0f), g = uniform(s);
    Tensor y(s), dx(s);
    cpu::softmax(x.cv(), y.v());
    cpu::softmaxBackward(y.cv(), g.cv(), dx.v());
    Dev dxIn(x), dy(y), dg(g);
    auto got = runTwice({{s, {}}, {s, {}}},
                        [&](const std::vector<FView> &o) {
                          cu::softmax(dxIn.cv(), o[0]);
                          cu::softmaxBackward(dy.cv(), dg.cv(), o[1]);
                        },
                        "softmax");
    expectClose(got[0], y, "softmax");
    expectClose(got[1], dx, "softmaxBackward");
  }
}

TEST_F(CudaKernels, RmsNorm) {
  for (Shape s : {Shape{300, 96}, Shape{7, 2048}, Shape{2, 3, 5}})
    for (int withW = 0; withW < 2; ++withW) {
      int64_t D = s.dims[s.rank - 1];
      Tensor x = uniform(s, -2.0f, 2.0f), w = uniform(Shape{D}, 0.5f, 1.5f);
      Tensor g = uniform(s);
      CFView wv = withW ? w.cv() : CFView{nullptr, Shape{D}};
      Tensor y(s), dx(s), dw(Shape{D});
      cpu::rmsNorm(x.cv(), wv, 1e-5f, y.v());
      cpu::rmsNormBackward(x.cv(), wv, 1e-5f, g.cv(), dx.v(), dw.v());
      Dev dX(x), dW(w), dG(g);
      CFView dwv = withW ? dW.cv() : CFView{nullptr, Shape{D}};
      auto got = runTwice({{s, {}}, {s, {}}, {Shape{D}, {}}},
                          [&](const std::vector<FView> &o) {
                            cu::rmsNorm(dX.cv(), dwv, 1e-5f, o[0]);
                            cu::rmsNormBackward(dX.cv(), dwv, 1e-5f, dG.cv(),
                                                o[1], o[2]);
                          },
                          "rmsNorm");
      expectClose(got[0], y, "rmsNorm");
      expectClose(got[1], dx, "rmsNormBackward dX");
      expectClose(got[2], dw, "rmsNormBackward dW");
    }
}

TEST_F(CudaKernels, LayerNorm) {
  for (Shape s : {Shape{300, 96}, Shape{7, 2048}, Shape{2, 3, 5}})
    for (int withW = 0; withW < 2; ++withW) {
      int64_t D = s.dims[s.rank - 1];
      Tensor x = uniform(s, -2.0f, 3.0f), w = uniform(Shape{D}, 0.5f, 1.5f);
      Tensor bias = uniform(Shape{D}), g = uniform(s);
      CFView wv = withW ? w.cv() : CFView{nullptr, Shape{D}};
      CFView bv = withW ? bias.cv() : CFView{nullptr, Shape{D}};
      Tensor y(s), dx(s), dw(Shape{D}), db(Shape{D});
      cpu::layerNorm(x.cv(), wv, bv, 1e-5f, y.v());
      cpu::layerNormBackward(x.cv(), wv, 1e-5f, g.cv(), dx.v(), dw.v(),
                             db.v());
      Dev dX(x), dW(w), dB(bias), dG(g);
      CFView dwv = withW ? dW.cv() : CFView{nullptr, Shape{D}};
      CFView dbv = withW ? dB.cv() : CFView{nullptr, Shape{D}};
      auto got = runTwice(
          {{s, {}}, {s, {}}, {Shape{D}, {}}, {Shape{D}, {}}},
          [&](const std::vector<FView> &o) {
            cu::layerNorm(dX.cv(), dwv, dbv, 1e-5f, o[0]);
            cu::layerNormBackward(dX.cv(), dwv, 1e-5f, dG.cv(), o[1], o[2],
                                  o[3]);
          },
          "layerNorm");
      expectClose(got[0], y, "layerNorm");
      expectClose(got[1], dx, "layerNormBackward dX");
      expectClose(got[2], dw, "layerNormBackward dW");
      expectClose(got[3], db, "layerNormBackward dB");
    }
}

TEST_F(CudaKernels, Rotary) {
  Shape s{2, 3, 37, 16}, cs{37, 16};
  Tensor x = uniform(s), c = uniform(cs), sn = uniform(cs), g = uniform(s);
  Tensor y(s), dx(s);
  cpu::rotary(x.cv(), c.cv(), sn.cv(), y.v());
  cpu::rotaryBackward(g.cv(), c.cv(), sn.cv(), dx.v());
  Dev dX(x), dC(c), dS(sn), dG(g);
  auto got = runTwice({{s, {}}, {s, {}}},
                      [&](const std::vector<FView> &o) {
                        cu::rotary(dX.cv(), dC.cv(), dS.cv(), o[0]);
                        cu::rotaryBackward(dG.cv(), dC.cv(), dS.cv(), o[1]);
                      },
                      "rotary");
  expectClose(got[0], y, "rotary");
  expectClose(got[1], dx, "rotaryBackward");
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

std::string attnName(const AttnCase &c) {
  return "B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
         std::to_string(c.Hkv) + " T" + std::to_string(c.T) + " S" +
         std::to_string(c.S) + " D" + std::to_string(c.D) +
         (c.causal ? " causal" : "") +
         (c.window ? " window" + std::to_string(c.window) : "");
}

AttnRun runAttention(const AttnCase &c, const std::string &what) {
  Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.S, c.D};
  Shape ls{c.B, c.Hq, c.T};
  Tensor q = uniform(qs, -2.0f, 2.0f), k = uniform(ks, -2.0f, 2.0f);
  Tensor v = uniform(ks), g = uniform(qs);
  float scale = 1.0f / std::sqrt(float(c.D));
  AttnRun r{Tensor(qs), Tensor(ls), Tensor(qs), Tensor(ks), Tensor(ks), {}};
  cpu::attention(q.cv(), k.cv(), v.cv(), c.causal, c.window, scale, r.out.v(),
                 r.lse.v());
  cpu::attentionBackward(q.cv(), k.cv(), v.cv(), r.out.cv(), r.lse.cv(), g.cv(),
                         c.causal, c.window, scale, r.dq.v(), r.dk.v(),
                         r.dv.v());
  Dev dQ(q), dK(k), dV(v), dG(g), dO(r.out), dL(r.lse);
  r.got = runTwice(
      {{qs, {}}, {ls, {}}, {qs, {}}, {ks, {}}, {ks, {}}},
      [&](const std::vector<FView> &o) {
        cu::attention(dQ.cv(), dK.cv(), dV.cv(), c.causal, c.window, scale,
                      o[0], o[1]);
        r.fwdImpl = cu::lastAttentionImpl();
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                              dG.cv(), c.causal, c.window, scale, o[2], o[3],
                              o[4]);
        r.bwdImpl = cu::lastAttentionImpl();
      },
      what);
  return r;
}

TEST_F(CudaKernels, Attention) {
  const AttnCase cases[] = {
      {2, 4, 2, 37, 37, 16, true},   {1, 6, 2, 70, 70, 64, true},
      {2, 4, 4, 20, 45, 32, true},   {1, 2, 1, 45, 20, 32, true},
      {2, 4, 2, 37, 50, 16, false},  {1, 2, 2, 33, 33, 128, true},
      {1, 2, 1, 17, 40, 256, false}, {1, 8, 1, 129, 129, 64, true},
      // Sliding windows: inside one tile, across tiles (tiles before the
      // band skipped, in the forward and dQ, and after it in dK/dV), S != T,
      // rows with no key; the narrowest window whose dQ and dK are not zero
      // (with window 1 each row's softmax is exactly 1, so both are rounding
      // noise on either side and a relative comparison means nothing).
      {2, 4, 2, 37, 37, 16, true, 5},
      {1, 6, 2, 130, 130, 64, true, 40},
      {2, 4, 4, 20, 45, 32, true, 7},
      {1, 2, 1, 45, 20, 32, true, 3},
      {1, 2, 2, 100, 100, 128, true, 2},
  };
  for (const AttnCase &c : cases) {
    std::string what = "attention " + attnName(c);
    AttnRun r = runAttention(c, what);
    expectClose(r.got[0], r.out, what + " out");
    expectClose(r.got[1], r.lse, what + " lse");
    expectClose(r.got[2], r.dq, what + " dQ");
    expectClose(r.got[3], r.dk, what + " dK");
    expectClose(r.got[4], r.dv, what + " dV");
  }
}

TEST_F(CudaKernels, MatmulBf16) {
  PrecisionGuard bf16(cu::Precision::Bf16);
  checkMatmuls(
      {
          {{3, 5, 7}, {7, 4}, {3, 5, 4}, false, false},
          {{3, 7, 5}, {7, 4}, {3, 5, 4}, true, false},
          {{2, 3, 6, 5}, {3, 4, 6}, {2, 3, 5, 4}, true, true},
          {{4, 64, 512}, {512, 96}, {4, 64, 96}, false, false},
          {{256, 384}, {256, 200}, {384, 200}, true, false},
          {{300, 1024}, {640, 1024}, {300, 640}, false, true},
      },
      "bf16 matmul", kBf16Tol);
}

/// Rows (over [B, Hq, T]) that see no key: causal with i + S - T < 0.
bool rowSeesNoKey(const AttnCase &c, int64_t row) {
  int64_t i = row % c.T;
  return c.causal && i + c.S - c.T < 0;
}

// The Precision::Bf16 path (FlashAttention.cu) against the fp32 CPU kernels:
// head dims 64, 128 and 256, MHA and GQA, causal and not, tails of the 64-row
// tiles, S > T and S < T (rows with no key: out = 0 and lse = -inf, dQ = 0,
// exactly). Each run is also done twice and compared bit for bit. These take
// the default dispatch (cuDNN where it applies: CudnnAttentionTest.cpp);
// the Flash tests below keep Rondo's kernels (RONDO_ATTENTION=flash).
void checkAttentionBf16(const char *path) {
  const AttnCase cases[] = {
      {1, 2, 2, 1, 1, 64, true},       {1, 2, 2, 77, 77, 64, true},
      {2, 2, 2, 200, 200, 128, true},  {1, 8, 2, 257, 257, 64, true},
      {1, 8, 2, 257, 257, 128, true},  {1, 8, 2, 200, 200, 128, false},
      {2, 4, 4, 77, 77, 64, false},    {1, 8, 2, 64, 64, 128, true},
      {1, 8, 2, 50, 130, 128, true},   {1, 8, 2, 50, 130, 64, false},
      {1, 4, 2, 130, 50, 64, true},    {1, 4, 2, 130, 50, 128, true},
      {1, 2, 1, 1, 77, 128, true},     {1, 2, 2, 128, 192, 64, false},
      {1, 2, 1, 333, 333, 128, false}, {1, 2, 1, 300, 100, 64, true},
      // Sliding windows: narrower than a 64-key tile and wider, tiles before
      // the band skipped (forward, dQ) and after it (dK/dV), S != T, rows
      // with no key.
      {1, 4, 2, 300, 300, 64, true, 8},
      {1, 4, 2, 300, 300, 128, true, 100},
      {1, 8, 2, 200, 330, 64, true, 70},
      {1, 4, 2, 130, 50, 128, true, 20},
      {2, 2, 2, 257, 257, 128, true, 1},
      // Several 128-row tiles of the wgmma kernels (group 4; a window with
      // S > T).
      {1, 4, 1, 520, 520, 128, true},
      {1, 4, 2, 400, 600, 64, true, 150},
  };
  // Head dimension 256 (Gemma-3: 4 query heads on 1 kv head): tails of the
  // 32-, 64- and 128-row tiles, S > T and S < T, not causal, windows
  // narrower than a tile, wider, of one key, and Gemma's 512 over several
  // query and key tiles; then enough 128-row query tiles (9 x 32 heads) to
  // fill any current GPU, so that the dQ kernel takes its 128-row tiles
  // where they fit (H100).
  const AttnCase cases256[] = {
      {1, 4, 1, 300, 300, 256, true},
      {2, 2, 2, 200, 200, 256, false},
      {1, 4, 2, 130, 50, 256, true},
      {1, 4, 1, 50, 130, 256, false},
      {1, 2, 1, 1, 77, 256, true},
      {1, 4, 1, 77, 77, 256, true, 8},
      {1, 4, 1, 400, 600, 256, true, 150},
      {1, 2, 1, 129, 129, 256, true, 1},
      {1, 4, 1, 700, 700, 256, true, 512},
      {1, 32, 4, 1100, 1100, 256, true, 128},
  };
  std::vector<AttnCase> all(std::begin(cases), std::end(cases));
  all.insert(all.end(), std::begin(cases256), std::end(cases256));
  checkAttentionBf16Cases(path, all);
}

/// Each case against the CPU kernels (and run twice, bit for bit: runTwice).
std::vector<AttnImpls>
checkAttentionBf16Cases(const char *path, const std::vector<AttnCase> &all) {
  PrecisionGuard guard(cu::Precision::Bf16);
  std::vector<AttnImpls> impls;
  for (const AttnCase &c : all) {
    std::string what = std::string("attention bf16 ") + path + " " + attnName(c);
    AttnRun r = runAttention(c, what);
    impls.push_back({r.fwdImpl, r.bwdImpl});
    const std::vector<std::vector<float>> &got = r.got;
    const char *names[] = {"out", "lse", "dQ", "dK", "dV"};
    const Tensor *refs[] = {&r.out, &r.lse, &r.dq, &r.dk, &r.dv};
    std::string line;
    for (int i = 0; i < 5; ++i) {
      double e = normErr(got[i], refs[i]->data);
      // With a single visible key the softmax is constant, so the exact dQ
      // and dK are zero and a normalised error means nothing: measure the
      // bf16 result against the size of dV (same dO, same P) instead.
      double refMax = 0, gotMax = 0, dvMax = 0;
      for (float x : refs[i]->data)
        refMax = std::max(refMax, double(std::fabs(x)));
      for (float x : got[i])
        gotMax = std::max(gotMax, double(std::fabs(x)));
      for (float x : r.dv.data)
        dvMax = std::max(dvMax, double(std::fabs(x)));
      if (refMax < 1e-6 * dvMax)
        e = gotMax / dvMax;
      EXPECT_LE(e, kBf16Tol)
          << what << " " << names[i] << " " << str(refs[i]->shape);
      char buf[48];
      std::snprintf(buf, sizeof(buf), " %s %.2e", names[i], e);
      line += buf;
    }
    std::printf("[ bf16 ] %s:%s (fwd %s, bwd %s)\n", what.c_str(), line.c_str(),
                implName(r.fwdImpl), implName(r.bwdImpl));
    // Rows with no key to attend: exact zeros and -inf.
    for (int64_t row = 0; row < c.B * c.Hq * c.T; ++row) {
      if (!rowSeesNoKey(c, row))
        continue;
      EXPECT_EQ(got[1][size_t(row)], -INFINITY) << what << " lse row " << row;
      bool zeros = true;
      for (int64_t d = 0; d < c.D; ++d) {
        size_t at = size_t(row * c.D + d);
        zeros &= got[0][at] == 0.0f && got[2][at] == 0.0f;
      }
      EXPECT_TRUE(zeros) << what << " out / dQ row " << row << " not zero";
    }
  }
  return impls;
}

// Forward then backward on the forward's own out/lse, twice, at a multi-tile
// GQA shape: bit-identical results; and the backward with some gradients
// skipped (null data) gives the same bits for the others.
TEST_F(CudaKernels, AttentionBf16) { checkAttentionBf16("default"); }

// Rondo's own bf16 kernels (wgmma on Hopper) where the default would take
// cuDNN.
TEST_F(CudaKernels, AttentionBf16Flash) {
  AttentionSwitch flash("flash");
  checkAttentionBf16("flash");
}

TEST_F(CudaKernels, AttentionBf16MmaSync) {
  MmaSyncOnly only;
  checkAttentionBf16("mma.sync");
}

void checkAttentionBf16Deterministic(const AttnCase &c) {
  PrecisionGuard guard(cu::Precision::Bf16);
  Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.S, c.D};
  Shape ls{c.B, c.Hq, c.T};
  Tensor q = uniform(qs, -2.0f, 2.0f), k = uniform(ks, -2.0f, 2.0f);
  Tensor v = uniform(ks), g = uniform(qs);
  float scale = 1.0f / std::sqrt(float(c.D));
  Dev dQ(q), dK(k), dV(v), dG(g);
  std::string what = "attention bf16 chain " + attnName(c);
  auto full = runTwice(
      {{qs, {}}, {ls, {}}, {qs, {}}, {ks, {}}, {ks, {}}},
      [&](const std::vector<FView> &o) {
        cu::attention(dQ.cv(), dK.cv(), dV.cv(), c.causal, c.window, scale,
                      o[0], o[1]);
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(),
                              CFView{o[0].data, o[0].shape},
                              CFView{o[1].data, o[1].shape}, dG.cv(), c.causal,
                              c.window, scale, o[2], o[3], o[4]);
      },
      what);
  Tensor outT(qs), lseT(ls);
  outT.data = full[0];
  lseT.data = full[1];
  Dev dO(outT), dL(lseT);
  auto partial = runTwice(
      {{qs, {}}, {ks, {}}, {ks, {}}},
      [&](const std::vector<FView> &o) {
        FView none{nullptr, qs}, noneK{nullptr, ks};
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                              dG.cv(), c.causal, c.window, scale, o[0], noneK,
                              noneK);
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                              dG.cv(), c.causal, c.window, scale, none, o[1],
                              noneK);
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                              dG.cv(), c.causal, c.window, scale, none, noneK,
                              o[2]);
      },
      what + " partial");
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(0,
              std::memcmp(partial[size_t(i)].data(), full[size_t(i) + 2].data(),
                          full[size_t(i) + 2].size() * sizeof(float)))
        << what << ": gradient " << i << " differs when others are skipped";
}

// D = 256 at Gemma-3-1B's heads and window: its dK/dV kernel's warp pairs
// hand P^T over through shared memory, and a gradient skipped leaves one
// warp of each pair without a store.
const AttnCase kDeterminismCases[] = {{2, 8, 2, 700, 700, 128, true},
                                      {2, 4, 1, 700, 700, 256, true, 512}};

TEST_F(CudaKernels, AttentionBf16Deterministic) {
  for (const AttnCase &c : kDeterminismCases)
    checkAttentionBf16Deterministic(c);
}

TEST_F(CudaKernels, AttentionBf16DeterministicMmaSync) {
  MmaSyncOnly only;
  for (const AttnCase &c : kDeterminismCases)
    checkAttentionBf16Deterministic(c);
}

// The Hopper backward at D = 128 on each of its versions, whichever is the
// default (elsewhere both are the default path again).
TEST_F(CudaKernels, AttentionBf16TwoKernelBackward) {
  FusedBackward two(false);
  checkAttentionBf16("two-kernel");
}

TEST_F(CudaKernels, AttentionBf16FusedBackward) {
  FusedBackward fused(true);
  checkAttentionBf16("fused");
  for (const AttnCase &c : kDeterminismCases)
    checkAttentionBf16Deterministic(c);
}

// The fused Hopper backward (D = 128) over many key tiles: its dQ is the sum
// of every key tile's contribution, added in key-tile order behind a counter
// per query tile, so each run must match the CPU and repeat bit for bit
// (runTwice) with many blocks adding to each dQ row at once. Causal with
// two batch rows and GQA, S > T, a window over several key tiles, and not
// causal with S != T; then the same run with dQ alone and dK/dV alone.
TEST_F(CudaKernels, AttentionBf16FusedBackwardManyKeyTiles) {
  FusedBackward fused(true);
  const std::vector<AttnCase> cases = {
      {2, 4, 2, 1100, 1100, 128, true},
      {1, 4, 1, 700, 1300, 128, true},
      {1, 4, 2, 1200, 1200, 128, true, 300},
      {1, 2, 1, 600, 1000, 128, false},
  };
  checkAttentionBf16Cases("fused", cases);
  checkAttentionBf16Deterministic(cases[0]);
}

} // namespace cuda_test
