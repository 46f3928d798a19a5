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

#include "CudaKernels.h"
#include "Kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cpu = rondo::cpu;
namespace cu = rondo::cuda;
using cpu::BinaryKind;
using cpu::CFView;
using cpu::FView;
using cpu::IView;
using cpu::Shape;
using cpu::UnaryKind;

namespace {

constexpr double kTol = 1e-5;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

bool gpuAvailable() {
  static int state = -1;
  if (state < 0) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    state = e == cudaSuccess && n > 0;
    if (e != cudaSuccess)
      cudaGetLastError();
  }
  return state == 1;
}

void ck(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::mt19937 &rng() {
  static std::mt19937 gen;
  static const testing::TestInfo *seededFor = nullptr;
  const testing::TestInfo *current =
      testing::UnitTest::GetInstance()->current_test_info();
  if (current != seededFor) {
    seededFor = current;
    gen.seed(20261122);
  }
  return gen;
}

std::string str(const Shape &s) {
  std::string r = "[";
  for (int i = 0; i < s.rank; ++i)
    r += (i ? "," : "") + std::to_string(s.dims[i]);
  return r + "]";
}

struct Tensor {
  Shape shape;
  std::vector<float> data;
  Tensor() = default;
  explicit Tensor(Shape s, float value = 0.0f)
      : shape(s), data(size_t(s.numel()), value) {}
  FView v() { return FView{data.data(), shape}; }
  CFView cv() const { return CFView{data.data(), shape}; }
};

Tensor uniform(Shape s, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(s);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float &x : t.data)
    x = dist(rng());
  return t;
}

/// Uniform with |x| >= gap.
Tensor awayFromZero(Shape s, float lo, float hi, float gap) {
  Tensor t = uniform(s, lo, hi);
  for (float &x : t.data)
    if (std::fabs(x) < gap)
      x = x < 0 ? -gap : gap;
  return t;
}

/// A device copy of a float tensor.
struct Dev {
  float *p = nullptr;
  Shape shape;
  size_t n = 0;
  Dev() = default;
  explicit Dev(const Tensor &t) : shape(t.shape), n(t.data.size()) {
    ck(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc");
    ck(cudaMemcpy(p, t.data.data(), n * sizeof(float), cudaMemcpyHostToDevice),
       "upload");
  }
  ~Dev() {
    if (p)
      cudaFree(p);
  }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;
  CFView cv() const { return CFView{p, shape}; }
};

struct DevIds {
  int64_t *p = nullptr;
  Shape shape;
  explicit DevIds(const std::vector<int64_t> &ids, Shape s) : shape(s) {
    ck(cudaMalloc(&p, std::max<size_t>(ids.size(), 1) * sizeof(int64_t)),
       "cudaMalloc");
    ck(cudaMemcpy(p, ids.data(), ids.size() * sizeof(int64_t),
                  cudaMemcpyHostToDevice),
       "upload ids");
  }
  ~DevIds() { cudaFree(p); }
  IView v() const { return IView{p, shape}; }
};

/// max|got - ref| / max|ref| (equal infinities count as exact, NaN fails).
double normErr(const std::vector<float> &got, const std::vector<float> &ref) {
  if (got.size() != ref.size())
    return INFINITY;
  double scale = 0.0, err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::isfinite(ref[i]))
      scale = std::max(scale, std::fabs(double(ref[i])));
  for (size_t i = 0; i < ref.size(); ++i) {
    double g = got[i], r = ref[i];
    if (std::isnan(g) || std::isnan(r)) {
      if (!(std::isnan(g) && std::isnan(r)))
        return INFINITY;
      continue;
    }
    if (std::isinf(r) || std::isinf(g)) {
      if (g != r)
        return INFINITY;
      continue;
    }
    err = std::max(err, std::fabs(g - r));
  }
  return scale > 0.0 ? err / scale : err;
}

/// The largest error seen by the suite (printed at the end).
double &worstErr() {
  static double w = 0.0;
  return w;
}
std::string &worstWhat() {
  static std::string w;
  return w;
}

void expectClose(const std::vector<float> &got, const Tensor &ref,
                 const std::string &what, double tol = kTol) {
  double e = normErr(got, ref.data);
  if (e > worstErr()) {
    worstErr() = e;
    worstWhat() = what;
  }
  EXPECT_LE(e, tol) << what << " " << str(ref.shape);
}

/// An output of a GPU run: its shape and initial content (empty: poison).
struct OutSpec {
  Shape shape;
  std::vector<float> init;
};

/// Runs `fn` twice on fresh (re-initialised or NaN-poisoned) device outputs,
/// checks that both runs give identical bits, returns the first run's
/// outputs.
std::vector<std::vector<float>>
runTwice(const std::vector<OutSpec> &outs,
         const std::function<void(const std::vector<FView> &)> &fn,
         const std::string &what) {
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    std::vector<float *> ptrs;
    std::vector<FView> views;
    for (const OutSpec &o : outs) {
      size_t n = size_t(o.shape.numel());
      float *p = nullptr;
      ck(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc");
      if (!o.init.empty())
        ck(cudaMemcpy(p, o.init.data(), n * sizeof(float),
                      cudaMemcpyHostToDevice),
           "init");
      else
        ck(cudaMemset(p, run == 0 ? 0xff : 0x7f, n * sizeof(float)), "poison");
      ptrs.push_back(p);
      views.push_back(FView{p, o.shape});
    }
    ck(cudaDeviceSynchronize(), "sync before");
    fn(views);
    ck(cudaStreamSynchronize(cu::currentStream()), (what + ": sync").c_str());
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<float> h(size_t(outs[i].shape.numel()));
      ck(cudaMemcpy(h.data(), ptrs[i], h.size() * sizeof(float),
                    cudaMemcpyDeviceToHost),
         "download");
      results[run].push_back(std::move(h));
      cudaFree(ptrs[i]);
    }
  }
  for (size_t i = 0; i < outs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(results[0][i].data(), results[1][i].data(),
                             results[0][i].size() * sizeof(float)))
        << what << ": output " << i << " differs between two CUDA runs";
  return results[0];
}

class CudaKernels : public testing::Test {
protected:
  void SetUp() override {
    if (!gpuAvailable())
      GTEST_SKIP() << "no CUDA GPU present (cudaGetDeviceCount failed or "
                      "returned 0): CUDA kernel tests skipped";
    ck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
       "cudaStreamCreate");
    cu::setCurrentStream(stream_);
  }
  void TearDown() override {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cu::setCurrentStream(nullptr);
      cudaStreamDestroy(stream_);
    }
  }
  /// Shared by the fp32 and bf16 linear cross-entropy tests.
  void checkLinearCrossEntropy(const char *label, double tol);
  cudaStream_t stream_ = nullptr;
};

const char *binaryName(BinaryKind k) {
  static const char *names[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};
  return names[int(k)];
}
const char *unaryName(UnaryKind k) {
  static const char *names[] = {"Neg",  "Exp",     "Log",        "Sqrt",
                                "Rsqrt", "Reciprocal", "Sigmoid", "Tanh",
                                "Relu", "Silu",    "GeluTanh",   "GeluErf",
                                "Abs",  "Sin",     "Cos"};
  return names[int(k)];
}

const BinaryKind kBinaryKinds[] = {BinaryKind::Add, BinaryKind::Sub,
                                   BinaryKind::Mul, BinaryKind::Div,
                                   BinaryKind::Pow, BinaryKind::Max,
                                   BinaryKind::Min};

struct BinaryCase {
  Shape a, b, out;
};
const BinaryCase kBinaryCases[] = {
    {{4, 5, 6}, {4, 5, 6}, {4, 5, 6}},
    {{4, 5, 6}, {6}, {4, 5, 6}},
    {{4, 1, 6}, {5, 1}, {4, 5, 6}},
    {{}, {3, 4}, {3, 4}},
    {{2, 1, 3, 1}, {1, 7, 1, 5}, {2, 7, 3, 5}},
    {{64, 300}, {64, 1}, {64, 300}},
};

void binaryInputs(BinaryKind k, const BinaryCase &c, Tensor &a, Tensor &b) {
  if (k == BinaryKind::Pow) {
    a = uniform(c.a, 0.2f, 2.0f);
    b = uniform(c.b, -2.0f, 2.0f);
  } else if (k == BinaryKind::Div) {
    a = uniform(c.a);
    b = awayFromZero(c.b, -2.0f, 2.0f, 0.3f);
  } else {
    a = uniform(c.a);
    b = uniform(c.b);
  }
  if (k == BinaryKind::Max || k == BinaryKind::Min) // some ties
    for (size_t i = 0; i < std::min(a.data.size(), b.data.size()); i += 3)
      a.data[i] = b.data[i];
}

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

TEST_F(CudaKernels, Matmul) {
  struct Case {
    Shape a, b, out;
    bool ta, tb;
  };
  const Case cases[] = {
      {{3, 5, 7}, {7, 4}, {3, 5, 4}, false, false},   // folded x.W
      {{3, 7, 5}, {7, 4}, {3, 5, 4}, true, false},    // transA, not folded
      {{3, 5, 7}, {4, 7}, {3, 5, 4}, false, true},    // folded, transB
      {{2, 1, 5, 6}, {1, 3, 6, 4}, {2, 3, 5, 4}, false, false},
      {{2, 3, 6, 5}, {3, 4, 6}, {2, 3, 5, 4}, true, true},
      {{7}, {2, 7, 4}, {2, 4}, false, false},         // vector a
      {{2, 5, 7}, {7}, {2, 5}, false, false},         // vector b
      {{7}, {7}, {}, false, false},                   // dot
      {{4, 64, 512}, {512, 96}, {4, 64, 96}, false, false},
      {{2, 4, 37, 16}, {2, 4, 45, 16}, {2, 4, 37, 45}, false, true},
      {{256, 384}, {256, 200}, {384, 200}, true, false},
  };
  for (const Case &c : cases)
    for (int acc = 0; acc < 2; ++acc) {
      Tensor a = uniform(c.a), b = uniform(c.b), init = uniform(c.out);
      Tensor ref = init;
      cpu::matmul(a.cv(), b.cv(), ref.v(), c.ta, c.tb, acc != 0);
      Dev da(a), db(b);
      std::string what = "matmul " + str(c.a) + "x" + str(c.b) +
                         (acc ? " accumulate" : "");
      auto got = runTwice({{c.out, acc ? init.data : std::vector<float>{}}},
                          [&](const std::vector<FView> &o) {
                            cu::matmul(da.cv(), db.cv(), o[0], c.ta, c.tb,
                                       acc != 0);
                          },
                          what);
      expectClose(got[0], ref, what);
    }
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

TEST_F(CudaKernels, Attention) {
  struct Case {
    int64_t B, Hq, Hkv, T, S, D;
    bool causal;
  };
  const Case cases[] = {
      {2, 4, 2, 37, 37, 16, true},   {1, 6, 2, 70, 70, 64, true},
      {2, 4, 4, 20, 45, 32, true},   {1, 2, 1, 45, 20, 32, true},
      {2, 4, 2, 37, 50, 16, false},  {1, 2, 2, 33, 33, 128, true},
      {1, 2, 1, 17, 40, 256, false}, {1, 8, 1, 129, 129, 64, true},
  };
  for (const Case &c : cases) {
    Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.S, c.D};
    Shape ls{c.B, c.Hq, c.T};
    Tensor q = uniform(qs, -2.0f, 2.0f), k = uniform(ks, -2.0f, 2.0f);
    Tensor v = uniform(ks), g = uniform(qs);
    float scale = 1.0f / std::sqrt(float(c.D));
    Tensor out(qs), lse(ls), dq(qs), dk(ks), dv(ks);
    cpu::attention(q.cv(), k.cv(), v.cv(), c.causal, scale, out.v(), lse.v());
    cpu::attentionBackward(q.cv(), k.cv(), v.cv(), out.cv(), lse.cv(), g.cv(),
                           c.causal, scale, dq.v(), dk.v(), dv.v());
    Dev dQ(q), dK(k), dV(v), dG(g), dO(out), dL(lse);
    std::string what = "attention B" + std::to_string(c.B) + " Hq" +
                       std::to_string(c.Hq) + " Hkv" + std::to_string(c.Hkv) +
                       " T" + std::to_string(c.T) + " S" +
                       std::to_string(c.S) + " D" + std::to_string(c.D) +
                       (c.causal ? " causal" : "");
    // Forward, and the backward from the CPU's out/lse (so that the two
    // backward passes see the same inputs).
    auto got = runTwice({{qs, {}}, {ls, {}}, {qs, {}}, {ks, {}}, {ks, {}}},
                        [&](const std::vector<FView> &o) {
                          cu::attention(dQ.cv(), dK.cv(), dV.cv(), c.causal,
                                        scale, o[0], o[1]);
                          cu::attentionBackward(
                              dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                              dG.cv(), c.causal, scale, o[2], o[3], o[4]);
                        },
                        what);
    expectClose(got[0], out, what + " out");
    expectClose(got[1], lse, what + " lse");
    expectClose(got[2], dq, what + " dQ");
    expectClose(got[3], dk, what + " dK");
    expectClose(got[4], dv, what + " dV");
  }
}

/// Sets the kernel library's precision for a scope and restores the previous
/// one on exit (also when an assertion fails or an exception escapes).
class PrecisionGuard {
public:
  explicit PrecisionGuard(cu::Precision p) : previous_(cu::precision()) {
    cu::setPrecision(p);
  }
  ~PrecisionGuard() { cu::setPrecision(previous_); }
  PrecisionGuard(const PrecisionGuard &) = delete;
  PrecisionGuard &operator=(const PrecisionGuard &) = delete;

private:
  cu::Precision previous_;
};

/// bf16 inputs, fp32 accumulation: agreement with the fp32 CPU kernels.
constexpr double kBf16Tol = 2e-2;

TEST_F(CudaKernels, MatmulBf16) {
  PrecisionGuard bf16(cu::Precision::Bf16);
  struct Case {
    Shape a, b, out;
    bool ta, tb;
  };
  const Case cases[] = {
      {{3, 5, 7}, {7, 4}, {3, 5, 4}, false, false},
      {{3, 7, 5}, {7, 4}, {3, 5, 4}, true, false},
      {{2, 3, 6, 5}, {3, 4, 6}, {2, 3, 5, 4}, true, true},
      {{4, 64, 512}, {512, 96}, {4, 64, 96}, false, false},
      {{256, 384}, {256, 200}, {384, 200}, true, false},
      {{300, 1024}, {640, 1024}, {300, 640}, false, true},
  };
  for (const Case &c : cases)
    for (int acc = 0; acc < 2; ++acc) {
      Tensor a = uniform(c.a), b = uniform(c.b), init = uniform(c.out);
      Tensor ref = init;
      cpu::matmul(a.cv(), b.cv(), ref.v(), c.ta, c.tb, acc != 0);
      Dev da(a), db(b);
      std::string what = "bf16 matmul " + str(c.a) + "x" + str(c.b) +
                         (acc ? " accumulate" : "");
      auto got = runTwice({{c.out, acc ? init.data : std::vector<float>{}}},
                          [&](const std::vector<FView> &o) {
                            cu::matmul(da.cv(), db.cv(), o[0], c.ta, c.tb,
                                       acc != 0);
                          },
                          what);
      expectClose(got[0], ref, what, kBf16Tol);
    }
}

struct AttnCase {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
};

std::string attnName(const AttnCase &c) {
  return "B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" +
         std::to_string(c.Hkv) + " T" + std::to_string(c.T) + " S" +
         std::to_string(c.S) + " D" + std::to_string(c.D) +
         (c.causal ? " causal" : "");
}

/// Rows (over [B, Hq, T]) that see no key: causal with i + S - T < 0.
bool rowSeesNoKey(const AttnCase &c, int64_t row) {
  int64_t i = row % c.T;
  return c.causal && i + c.S - c.T < 0;
}

// The Precision::Bf16 path (FlashAttention.cu) against the fp32 CPU kernels:
// head dims 64 and 128, MHA and GQA, causal and not, tails of the 64-row
// tiles, S > T and S < T (rows with no key: out = 0 and lse = -inf, dQ = 0,
// exactly). Each run is also done twice and compared bit for bit.
TEST_F(CudaKernels, AttentionBf16) {
  PrecisionGuard guard(cu::Precision::Bf16);
  const AttnCase cases[] = {
      {1, 2, 2, 1, 1, 64, true},       {1, 2, 2, 77, 77, 64, true},
      {2, 2, 2, 200, 200, 128, true},  {1, 8, 2, 257, 257, 64, true},
      {1, 8, 2, 257, 257, 128, true},  {1, 8, 2, 200, 200, 128, false},
      {2, 4, 4, 77, 77, 64, false},    {1, 8, 2, 64, 64, 128, true},
      {1, 8, 2, 50, 130, 128, true},   {1, 8, 2, 50, 130, 64, false},
      {1, 4, 2, 130, 50, 64, true},    {1, 4, 2, 130, 50, 128, true},
      {1, 2, 1, 1, 77, 128, true},     {1, 2, 2, 128, 192, 64, false},
      {1, 2, 1, 333, 333, 128, false}, {1, 2, 1, 300, 100, 64, true},
  };
  for (const AttnCase &c : cases) {
    Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.S, c.D};
    Shape ls{c.B, c.Hq, c.T};
    Tensor q = uniform(qs, -2.0f, 2.0f), k = uniform(ks, -2.0f, 2.0f);
    Tensor v = uniform(ks), g = uniform(qs);
    float scale = 1.0f / std::sqrt(float(c.D));
    Tensor out(qs), lse(ls), dq(qs), dk(ks), dv(ks);
    cpu::attention(q.cv(), k.cv(), v.cv(), c.causal, scale, out.v(), lse.v());
    cpu::attentionBackward(q.cv(), k.cv(), v.cv(), out.cv(), lse.cv(), g.cv(),
                           c.causal, scale, dq.v(), dk.v(), dv.v());
    Dev dQ(q), dK(k), dV(v), dG(g), dO(out), dL(lse);
    std::string what = "attention bf16 " + attnName(c);
    auto got = runTwice(
        {{qs, {}}, {ls, {}}, {qs, {}}, {ks, {}}, {ks, {}}},
        [&](const std::vector<FView> &o) {
          cu::attention(dQ.cv(), dK.cv(), dV.cv(), c.causal, scale, o[0], o[1]);
          cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                                dG.cv(), c.causal, scale, o[2], o[3], o[4]);
        },
        what);
    const char *names[] = {"out", "lse", "dQ", "dK", "dV"};
    const Tensor *refs[] = {&out, &lse, &dq, &dk, &dv};
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
      for (float x : dv.data)
        dvMax = std::max(dvMax, double(std::fabs(x)));
      if (refMax < 1e-6 * dvMax)
        e = gotMax / dvMax;
      EXPECT_LE(e, kBf16Tol)
          << what << " " << names[i] << " " << str(refs[i]->shape);
      char buf[48];
      std::snprintf(buf, sizeof(buf), " %s %.2e", names[i], e);
      line += buf;
    }
    std::printf("[ bf16 ] %s:%s\n", what.c_str(), line.c_str());
    // Rows with no key to attend: exact zeros and -inf.
    for (int64_t row = 0; row < c.B * c.Hq * c.T; ++row) {
      if (!rowSeesNoKey(c, row))
        continue;
      EXPECT_EQ(got[1][size_t(row)], -INFINITY) << what << " lse row " << row;
      for (int64_t d = 0; d < c.D; ++d) {
        size_t at = size_t(row * c.D + d);
        ASSERT_EQ(got[0][at], 0.0f) << what << " out row " << row;
        ASSERT_EQ(got[2][at], 0.0f) << what << " dQ row " << row;
      }
    }
  }
}

// Forward then backward on the forward's own out/lse, twice, at a multi-tile
// GQA shape: bit-identical results; and the backward with some gradients
// skipped (null data) gives the same bits for the others.
TEST_F(CudaKernels, AttentionBf16Deterministic) {
  PrecisionGuard guard(cu::Precision::Bf16);
  const AttnCase c{2, 8, 2, 700, 700, 128, true};
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
        cu::attention(dQ.cv(), dK.cv(), dV.cv(), c.causal, scale, o[0], o[1]);
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(),
                              CFView{o[0].data, o[0].shape},
                              CFView{o[1].data, o[1].shape}, dG.cv(), c.causal,
                              scale, o[2], o[3], o[4]);
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
                              dG.cv(), c.causal, scale, o[0], noneK, noneK);
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                              dG.cv(), c.causal, scale, none, o[1], noneK);
        cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(), dO.cv(), dL.cv(),
                              dG.cv(), c.causal, scale, none, noneK, o[2]);
      },
      what + " partial");
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(0,
              std::memcmp(partial[size_t(i)].data(), full[size_t(i) + 2].data(),
                          full[size_t(i) + 2].size() * sizeof(float)))
        << what << ": gradient " << i << " differs when others are skipped";
}

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
    auto got = runTwice({{s, {}}},
                        [&](const std::vector<FView> &o) {
                          cu::crossEntropyBackward(dl.cv(), dlab.v(), -100,
                                                   0.03f, o[0]);
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
/// the current precision.
void CudaKernels::checkLinearCrossEntropy(const char *label, double tol) {
  const int64_t N = 33, D = 48, V = 301;
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
      std::string what = std::string(label) + " transW=" +
                         std::to_string(transW) + " chunk=" +
                         std::to_string(chunk);
      Tensor refT(Shape{1}, float(refSum));
      expectClose({sums[0]}, refT, what + " lossSum", tol);
      auto got = runTwice({{hs, {}}, {ws, {}}},
                          [&](const std::vector<FView> &o) {
                            cu::linearCrossEntropyBackward(
                                dH.cv(), dW.cv(), transW != 0, dlab.v(), -1,
                                chunk, 0.05f, o[0], o[1]);
                          },
                          what + " backward");
      expectClose(got[0], dh, what + " dH", tol);
      expectClose(got[1], dw, what + " dW", tol);
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

/// Milliseconds per call of fn (median of `reps` timed calls after a warm-up),
/// timed with events on the current stream.
double timeMs(const std::function<void()> &fn, int reps = 10) {
  cudaStream_t st = cu::currentStream();
  fn();
  ck(cudaStreamSynchronize(st), "warm-up");
  cudaEvent_t e0, e1;
  ck(cudaEventCreate(&e0), "event");
  ck(cudaEventCreate(&e1), "event");
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    ck(cudaEventRecord(e0, st), "record");
    fn();
    ck(cudaEventRecord(e1, st), "record");
    ck(cudaEventSynchronize(e1), "sync");
    float t = 0;
    ck(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
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

// Not a correctness test: rough timings of this first (fp32, simple) version
// at training sizes, for the record. Run with --gtest_also_run_disabled_tests.
TEST_F(CudaKernels, DISABLED_Timing) {
  {
    const int64_t n = 4096;
    DevBuf a(Shape{n, n}), b(Shape{n, n}), c(Shape{n, n});
    double ms = timeMs([&] { cu::matmul(a.cv(), b.cv(), c.v(), false, false); });
    std::printf("[ timing ] matmul fp32 4096^3: %.3f ms, %.1f TFLOP/s\n", ms,
                2.0 * n * n * n / ms / 1e9);
  }
  {
    const int64_t B = 1, Hq = 16, Hkv = 8, T = 2048, D = 128;
    DevBuf q(Shape{B, Hq, T, D}), k(Shape{B, Hkv, T, D}), v(Shape{B, Hkv, T, D});
    DevBuf o(Shape{B, Hq, T, D}), l(Shape{B, Hq, T}), g(Shape{B, Hq, T, D});
    DevBuf dq(Shape{B, Hq, T, D}, 0.0f, 0.0f), dk(Shape{B, Hkv, T, D}, 0.0f, 0.0f),
        dv(Shape{B, Hkv, T, D}, 0.0f, 0.0f);
    float scale = 1.0f / std::sqrt(float(D));
    double f = timeMs([&] {
      cu::attention(q.cv(), k.cv(), v.cv(), true, scale, o.v(), l.v());
    }, 5);
    double bw = timeMs([&] {
      cu::attentionBackward(q.cv(), k.cv(), v.cv(), o.cv(), l.cv(), g.cv(),
                            true, scale, dq.v(), dk.v(), dv.v());
    }, 5);
    double flops = 4.0 * B * Hq * T * T * D / 2; // causal: half the scores
    std::printf("[ timing ] attention causal B1 Hq16 Hkv8 T2048 D128: fwd "
                "%.3f ms (%.2f TFLOP/s), bwd %.3f ms (%.2f TFLOP/s)\n",
                f, flops / f / 1e9, bw, 2.5 * flops / bw / 1e9);
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
    double s = timeMs([&] {
      cu::binary(BinaryKind::Mul, x.cv(), g.cv(), y.v());
    });
    std::printf("[ timing ] binary Mul [16384, 2048]: %.3f ms (%.0f GB/s)\n",
                s, 3 * bytes / s / 1e6);
    double st = timeMs([&] { cu::sumToShape(x.cv(), dw.v()); });
    std::printf("[ timing ] sumToShape [16384, 2048] -> [2048]: %.3f ms "
                "(%.0f GB/s)\n", st, bytes / st / 1e6);
  }
  {
    const int64_t N = 4096, V = 151936;
    DevBuf logits(Shape{N, V}, -4.0f, 4.0f), dl(Shape{N, V}, 0.0f, 0.0f);
    std::vector<int64_t> labels = randomLabels(N, V, -100);
    DevIds lab(labels, Shape{N});
    LossDev ld;
    double f = timeMs([&] {
      cu::crossEntropy(logits.cv(), lab.v(), -100, ld.sum, ld.bad);
    }, 5);
    double bw = timeMs([&] {
      cu::crossEntropyBackward(logits.cv(), lab.v(), -100, 1e-3f, dl.v());
    }, 5);
    double bytes = double(N) * V * 4;
    std::printf("[ timing ] crossEntropy [4096, 151936]: fwd %.3f ms "
                "(%.0f GB/s), bwd %.3f ms\n", f, bytes / f / 1e6, bw);
  }
  {
    const int64_t rows = 151936, W = 2048, n = 16384;
    DevBuf table(Shape{rows, W}, 0.0f, 0.0f), g(Shape{n, W});
    std::uniform_int_distribution<int64_t> dist(0, rows - 1);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto &i : ids)
      i = dist(rng());
    DevIds di(ids, Shape{n});
    double bw = timeMs([&] { cu::gatherRowsBackward(di.v(), g.cv(), table.v()); });
    std::printf("[ timing ] gatherRowsBackward 16384 ids into [151936, 2048]: "
                "%.3f ms\n", bw);
  }
}

// The Precision::Bf16 attention at a training size. Run with
// --gtest_also_run_disabled_tests.
TEST_F(CudaKernels, DISABLED_FlashTiming) {
  PrecisionGuard guard(cu::Precision::Bf16);
  for (int64_t D : {128, 64}) {
    const int64_t B = 2, Hq = 16, Hkv = 8, T = 4096;
    DevBuf q(Shape{B, Hq, T, D}), k(Shape{B, Hkv, T, D}),
        v(Shape{B, Hkv, T, D});
    DevBuf o(Shape{B, Hq, T, D}), l(Shape{B, Hq, T}), g(Shape{B, Hq, T, D});
    DevBuf dq(Shape{B, Hq, T, D}, 0.0f, 0.0f),
        dk(Shape{B, Hkv, T, D}, 0.0f, 0.0f),
        dv(Shape{B, Hkv, T, D}, 0.0f, 0.0f);
    float scale = 1.0f / std::sqrt(float(D));
    double f = timeMs([&] {
      cu::attention(q.cv(), k.cv(), v.cv(), true, scale, o.v(), l.v());
    });
    double bw = timeMs([&] {
      cu::attentionBackward(q.cv(), k.cv(), v.cv(), o.cv(), l.cv(), g.cv(),
                            true, scale, dq.v(), dk.v(), dv.v());
    });
    double flops = 4.0 * B * Hq * T * T * D / 2; // causal: half the scores
    std::printf("[ timing ] attention bf16 causal B2 Hq16 Hkv8 T4096 D%lld: "
                "fwd %.3f ms (%.1f TFLOP/s), bwd %.3f ms (%.1f TFLOP/s)\n",
                (long long)D, f, flops / f / 1e9, bw, 2.5 * flops / bw / 1e9);
  }
}

TEST_F(CudaKernels, ReportWorstError) {
  // Runs last in file order: prints the largest error seen (for the record).
  std::printf("[ worst max-abs-normalised error so far: %.3g (%s) ]\n",
              worstErr(), worstWhat().c_str());
}

} // namespace
