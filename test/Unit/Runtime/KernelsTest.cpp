//===- KernelsTest.cpp - Tests for the CPU reference kernels --------------===//
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

#include "Kernels.h"

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

namespace {

//===----------------------------------------------------------------------===//
// Test helpers
//===----------------------------------------------------------------------===//

struct Tensor {
  Shape shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(Shape s, float value = 0.0f)
      : shape(s), data(size_t(s.numel()), value) {}
  FView v() { return FView{data.data(), shape}; }
  CFView cv() const { return CFView{data.data(), shape}; }
  float &operator[](int64_t i) { return data[size_t(i)]; }
  float operator[](int64_t i) const { return data[size_t(i)]; }
  int64_t size() const { return int64_t(data.size()); }
};

struct Ids {
  Shape shape;
  std::vector<int64_t> data;
  IView v() const { return IView{data.data(), shape}; }
};

/// The random generator, reseeded at the start of every test so that a
/// test sees the same values whether it runs alone (as under ctest) or in
/// the full suite.
std::mt19937 &rng() {
  static std::mt19937 gen;
  static const testing::TestInfo *seededFor = nullptr;
  const testing::TestInfo *current =
      testing::UnitTest::GetInstance()->current_test_info();
  if (current != seededFor) {
    seededFor = current;
    gen.seed(12345);
  }
  return gen;
}

Tensor uniform(Shape s, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(s);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float &x : t.data)
    x = dist(rng());
  return t;
}

/// Uniform in [lo, hi] with |x| >= gap (values near 0 are pushed out).
Tensor uniformAwayFromZero(Shape s, float lo, float hi, float gap) {
  Tensor t = uniform(s, lo, hi);
  for (float &x : t.data)
    if (std::fabs(x) < gap)
      x = x < 0 ? x - gap : x + gap;
  return t;
}

std::vector<int64_t> unravel(int64_t index, const Shape &s) {
  std::vector<int64_t> idx(size_t(s.rank));
  for (int d = s.rank - 1; d >= 0; --d) {
    idx[size_t(d)] = index % s.dims[d];
    index /= s.dims[d];
  }
  return idx;
}

/// Linear index into `in` of the element that broadcasts to out[outIdx].
int64_t broadcastIndex(const Shape &in, const Shape &out,
                       const std::vector<int64_t> &outIdx) {
  int shift = out.rank - in.rank;
  int64_t lin = 0;
  for (int d = 0; d < in.rank; ++d) {
    int64_t i = in.dims[d] == 1 ? 0 : outIdx[size_t(d + shift)];
    lin = lin * in.dims[d] + i;
  }
  return lin;
}

Shape broadcastShapes(const Shape &a, const Shape &b) {
  Shape out;
  out.rank = std::max(a.rank, b.rank);
  for (int d = 0; d < out.rank; ++d) {
    int da = d - (out.rank - a.rank), db = d - (out.rank - b.rank);
    int64_t ea = da >= 0 ? a.dims[da] : 1, eb = db >= 0 ? b.dims[db] : 1;
    out.dims[d] = ea == 1 ? eb : ea;
  }
  return out;
}

double maxAbs(const std::vector<float> &v) {
  double m = 0.0;
  for (float x : v)
    m = std::max(m, double(std::fabs(x)));
  return m;
}

double dotObjective(const Tensor &dOut, const Tensor &out) {
  double s = 0.0;
  for (int64_t i = 0; i < out.size(); ++i)
    s += double(dOut[i]) * out[i];
  return s;
}

/// Compares the analytic gradient `grad` of `objective` w.r.t. `x` with
/// central differences, to rtol * max|grad| (plus a tiny absolute slack).
/// When `samples` > 0 only that many evenly spread elements are checked.
/// The many forward evaluations run on one thread: they are tiny, so on a
/// busy machine thread start-up would dominate, and threaded results equal
/// single-threaded ones bitwise (see KernelDeterminism).
void checkGradient(const std::string &what, Tensor &x,
                   const std::vector<float> &grad,
                   const std::function<double()> &objective, float eps = 1e-2f,
                   double rtol = 2e-3, int64_t samples = 0) {
  ASSERT_EQ(int64_t(grad.size()), x.size()) << what;
  double tol = rtol * maxAbs(grad) + 1e-6;
  int failures = 0;
  int64_t count = samples > 0 ? std::min(samples, x.size()) : x.size();
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (int64_t s = 0; s < count; ++s) {
    int64_t i = s * x.size() / count;
    float saved = x[i];
    float plus = saved + eps, minus = saved - eps;
    x[i] = plus;
    double fPlus = objective();
    x[i] = minus;
    double fMinus = objective();
    x[i] = saved;
    double numeric = (fPlus - fMinus) / (double(plus) - double(minus));
    if (std::fabs(numeric - grad[size_t(i)]) > tol && failures++ < 5)
      ADD_FAILURE() << what << ": element " << i << " analytic "
                    << grad[size_t(i)] << " numeric " << numeric << " (tol "
                    << tol << ")";
  }
  omp_set_num_threads(threads);
  EXPECT_EQ(failures, 0) << what;
}

void expectNear(const std::string &what, const std::vector<float> &got,
                const std::vector<double> &want, double rtol = 1e-5,
                double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = atol + rtol * std::fabs(want[i]);
    bool ok = std::fabs(double(got[i]) - want[i]) <= tol ||
              (std::isinf(want[i]) && double(got[i]) == want[i]);
    if (!ok && failures++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << got[i]
                    << " want " << want[i];
  }
  EXPECT_EQ(failures, 0) << what;
}

bool bitwiseEqual(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

TEST(KernelShape, Basics) {
  Shape scalar;
  EXPECT_EQ(scalar.rank, 0);
  EXPECT_EQ(scalar.numel(), 1);
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[1], 3);
  int64_t dims[] = {2, 3, 4};
  EXPECT_TRUE(Shape(dims, 3) == s);
  EXPECT_FALSE(Shape(dims, 2) == s);
  EXPECT_FALSE((Shape{2, 3, 5}) == s);
  EXPECT_EQ((Shape{4, 0, 2}).numel(), 0);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

const BinaryKind kAllBinary[] = {
    BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div,
    BinaryKind::Pow, BinaryKind::Max, BinaryKind::Min};

double refBinary(BinaryKind k, double a, double b) {
  switch (k) {
  case BinaryKind::Add:
    return a + b;
  case BinaryKind::Sub:
    return a - b;
  case BinaryKind::Mul:
    return a * b;
  case BinaryKind::Div:
    return a / b;
  case BinaryKind::Pow:
    return std::pow(a, b);
  case BinaryKind::Max:
    return std::max(a, b);
  case BinaryKind::Min:
    return std::min(a, b);
  }
  return 0.0;
}

struct ShapePair {
  Shape a, b;
};

const ShapePair kBroadcastCases[] = {
    {{3, 4}, {3, 4}},    {{2, 3, 5}, {5}},
    {{2, 1, 4}, {3, 1}}, {{}, {5}},
    {{7}, {}},           {{}, {}},
    {{4, 1}, {1, 6}},    {{2, 3, 1, 5}, {3, 4, 1}},
    {{1}, {2, 3}},       {{3, 1, 5}, {1, 1, 5}},
    {{2, 33}, {2, 33}},
};

/// Operand values for a binary kind: positive bases for Pow, denominators
/// away from zero for Div.
void binaryOperands(BinaryKind k, const ShapePair &c, Tensor &a, Tensor &b) {
  if (k == BinaryKind::Pow) {
    a = uniform(c.a, 0.8f, 2.0f);
    b = uniform(c.b, -2.0f, 2.0f);
  } else if (k == BinaryKind::Div) {
    a = uniform(c.a);
    b = uniformAwayFromZero(c.b, -2.0f, 2.0f, 0.5f);
  } else {
    a = uniform(c.a, -2.0f, 2.0f);
    b = uniform(c.b, -2.0f, 2.0f);
  }
}

TEST(KernelBinary, ForwardBroadcast) {
  for (BinaryKind k : kAllBinary) {
    for (const ShapePair &c : kBroadcastCases) {
      Tensor a, b;
      binaryOperands(k, c, a, b);
      Shape os = broadcastShapes(c.a, c.b);
      Tensor out(os, std::nanf(""));
      binary(k, a.cv(), b.cv(), out.v());
      std::vector<double> want(size_t(os.numel()));
      for (int64_t i = 0; i < os.numel(); ++i) {
        auto idx = unravel(i, os);
        want[size_t(i)] = refBinary(k, a[broadcastIndex(c.a, os, idx)],
                                    b[broadcastIndex(c.b, os, idx)]);
      }
      expectNear("binary kind " + std::to_string(int(k)), out.data, want);
    }
  }
}

TEST(KernelBinary, BackwardFiniteDifferences) {
  for (BinaryKind k : kAllBinary) {
    for (const ShapePair &c : kBroadcastCases) {
      Tensor a, b;
      binaryOperands(k, c, a, b);
      Shape os = broadcastShapes(c.a, c.b);
      if (k == BinaryKind::Max || k == BinaryKind::Min) {
        // a on the grid 0.1 Z + 0.05 and b on 0.1 Z: every compared pair is
        // at least 0.05 apart, so the finite difference never crosses the
        // kink.
        for (float &x : a.data)
          x = std::round(x * 10.0f) / 10.0f + 0.05f;
        for (float &x : b.data)
          x = std::round(x * 10.0f) / 10.0f;
      }
      Tensor dOut = uniform(os);
      Tensor dA(c.a, std::nanf("")), dB(c.b, std::nanf(""));
      binaryBackward(k, a.cv(), b.cv(), dOut.cv(), dA.v(), dB.v());
      Tensor out(os);
      auto objective = [&] {
        binary(k, a.cv(), b.cv(), out.v());
        return dotObjective(dOut, out);
      };
      std::string what = "binaryBackward kind " + std::to_string(int(k)) +
                         " a rank " + std::to_string(c.a.rank) + " b rank " +
                         std::to_string(c.b.rank);
      checkGradient(what + " dA", a, dA.data, objective);
      checkGradient(what + " dB", b, dB.data, objective);
      // Requesting only one gradient gives the same values.
      Tensor dA2(c.a);
      binaryBackward(k, a.cv(), b.cv(), dOut.cv(), dA2.v(), FView{});
      EXPECT_TRUE(bitwiseEqual(dA.data, dA2.data)) << what;
      Tensor dB2(c.b);
      binaryBackward(k, a.cv(), b.cv(), dOut.cv(), FView{}, dB2.v());
      EXPECT_TRUE(bitwiseEqual(dB.data, dB2.data)) << what;
    }
  }
}

TEST(KernelBinary, MaxMinTiesGoToA) {
  Tensor a(Shape{3}), b(Shape{3}), g(Shape{3}, 1.0f);
  a.data = {1.0f, 2.0f, -1.0f};
  b.data = {1.0f, 1.0f, 0.0f};
  for (BinaryKind k : {BinaryKind::Max, BinaryKind::Min}) {
    Tensor dA(Shape{3}), dB(Shape{3});
    binaryBackward(k, a.cv(), b.cv(), g.cv(), dA.v(), dB.v());
    EXPECT_EQ(dA[0], 1.0f);
    EXPECT_EQ(dB[0], 0.0f);
    bool maxKind = k == BinaryKind::Max;
    EXPECT_EQ(dA[1], maxKind ? 1.0f : 0.0f);
    EXPECT_EQ(dB[1], maxKind ? 0.0f : 1.0f);
    EXPECT_EQ(dA[2], maxKind ? 0.0f : 1.0f);
    EXPECT_EQ(dB[2], maxKind ? 1.0f : 0.0f);
  }
}

TEST(KernelBinary, PowNonPositiveBase) {
  Tensor a(Shape{3}), b(Shape{3}), g(Shape{3}, 1.0f);
  a.data = {0.0f, -2.0f, 3.0f};
  b.data = {2.0f, 2.0f, 0.0f};
  Tensor dA(Shape{3}), dB(Shape{3});
  binaryBackward(BinaryKind::Pow, a.cv(), b.cv(), g.cv(), dA.v(), dB.v());
  EXPECT_EQ(dA[0], 0.0f);  // 2 * 0^1
  EXPECT_EQ(dA[1], -4.0f); // 2 * (-2)^1
  EXPECT_EQ(dA[2], 0.0f);  // exponent 0
  EXPECT_EQ(dB[0], 0.0f);  // ln(0) undefined: 0
  EXPECT_EQ(dB[1], 0.0f);  // ln(-2) undefined: 0
  EXPECT_NEAR(dB[2], std::log(3.0f), 1e-6);
}

const UnaryKind kAllUnary[] = {
    UnaryKind::Neg,     UnaryKind::Exp,      UnaryKind::Log,
    UnaryKind::Sqrt,    UnaryKind::Rsqrt,    UnaryKind::Reciprocal,
    UnaryKind::Sigmoid, UnaryKind::Tanh,     UnaryKind::Relu,
    UnaryKind::Silu,    UnaryKind::GeluTanh, UnaryKind::GeluErf,
    UnaryKind::Abs,     UnaryKind::Sin,      UnaryKind::Cos};

double refUnary(UnaryKind k, double x) {
  switch (k) {
  case UnaryKind::Neg:
    return -x;
  case UnaryKind::Exp:
    return std::exp(x);
  case UnaryKind::Log:
    return std::log(x);
  case UnaryKind::Sqrt:
    return std::sqrt(x);
  case UnaryKind::Rsqrt:
    return 1.0 / std::sqrt(x);
  case UnaryKind::Reciprocal:
    return 1.0 / x;
  case UnaryKind::Sigmoid:
    return 1.0 / (1.0 + std::exp(-x));
  case UnaryKind::Tanh:
    return std::tanh(x);
  case UnaryKind::Relu:
    return x > 0 ? x : 0.0;
  case UnaryKind::Silu:
    return x / (1.0 + std::exp(-x));
  case UnaryKind::GeluTanh:
    return 0.5 * x *
           (1.0 +
            std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  case UnaryKind::GeluErf:
    return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  case UnaryKind::Abs:
    return std::fabs(x);
  case UnaryKind::Sin:
    return std::sin(x);
  case UnaryKind::Cos:
    return std::cos(x);
  }
  return 0.0;
}

Tensor unaryInput(UnaryKind k, Shape s) {
  switch (k) {
  case UnaryKind::Log:
  case UnaryKind::Sqrt:
  case UnaryKind::Rsqrt:
  case UnaryKind::Reciprocal:
    return uniform(s, 0.5f, 3.0f);
  case UnaryKind::Relu:
  case UnaryKind::Abs:
    return uniformAwayFromZero(s, -3.0f, 3.0f, 0.05f);
  default:
    return uniform(s, -3.0f, 3.0f);
  }
}

TEST(KernelUnary, Forward) {
  for (UnaryKind k : kAllUnary) {
    for (Shape s : {Shape{}, Shape{17}, Shape{3, 5, 7}}) {
      Tensor x = unaryInput(k, s);
      Tensor out(s, std::nanf(""));
      unary(k, x.cv(), out.v());
      std::vector<double> want;
      for (float v : x.data)
        want.push_back(refUnary(k, v));
      expectNear("unary kind " + std::to_string(int(k)), out.data, want, 2e-6);
    }
  }
}

TEST(KernelUnary, BackwardFiniteDifferences) {
  for (UnaryKind k : kAllUnary) {
    Shape s{4, 9};
    Tensor x = unaryInput(k, s);
    Tensor dOut = uniform(s);
    Tensor dX(s, std::nanf(""));
    unaryBackward(k, x.cv(), dOut.cv(), dX.v());
    Tensor out(s);
    checkGradient("unaryBackward kind " + std::to_string(int(k)), x, dX.data,
                  [&] {
                    unary(k, x.cv(), out.v());
                    return dotObjective(dOut, out);
                  });
  }
}

TEST(KernelUnary, GeluTanhMatchesPyTorchFormula) {
  // PyTorch's GeluBackward (approximate='tanh'), evaluated in double.
  Tensor x = uniform(Shape{64}, -5.0f, 5.0f);
  Tensor g = uniform(Shape{64});
  Tensor dX(Shape{64});
  unaryBackward(UnaryKind::GeluTanh, x.cv(), g.cv(), dX.v());
  std::vector<double> want;
  for (int64_t i = 0; i < 64; ++i) {
    double v = x[i], beta = std::sqrt(2.0) * (2.0 / std::sqrt(M_PI)) * 0.5;
    double kappa = 0.044715, inner = beta * (v + kappa * v * v * v);
    double t = std::tanh(inner);
    double left = 0.5 * v, right = 1.0 + t;
    double dl = 0.5 * right;
    double dr = left * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * v * v);
    want.push_back(g[i] * (dl + dr));
  }
  expectNear("gelu tanh backward", dX.data, want, 1e-5, 1e-6);
}

TEST(KernelMisc, ScaleFillCopyAccumulate) {
  Shape s{5, 7};
  Tensor x = uniform(s), out(s);
  scale(x.cv(), -2.5f, out.v());
  for (int64_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(out[i], x[i] * -2.5f);
  fill(out.v(), 3.25f);
  for (float v : out.data)
    EXPECT_EQ(v, 3.25f);
  copy(x.cv(), out.v());
  EXPECT_TRUE(bitwiseEqual(out.data, x.data));
  Tensor y = uniform(s);
  Tensor acc = y;
  accumulate(x.cv(), acc.v());
  for (int64_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(acc[i], y[i] + x[i]);
  // Rank 0.
  Tensor s0(Shape{}, 2.0f), o0(Shape{});
  scale(s0.cv(), 4.0f, o0.v());
  EXPECT_EQ(o0[0], 8.0f);
}

TEST(KernelMisc, RoundToBf16) {
  auto fromBits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  auto bitsOf = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  Tensor x(Shape{9});
  x.data = {1.0f,
            1.0f + 0x1p-8f,            // tie, even neighbour is 1
            1.0f + 0x1p-7f + 0x1p-8f,  // tie, even neighbour is 1 + 2^-6
            1.0f + 0x1p-8f + 0x1p-12f, // above the tie: rounds up
            -3.0f,
            std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::max(), // rounds to +inf
            std::nanf(""),
            fromBits(0x00000001u)}; // smallest denormal rounds to 0
  Tensor y(Shape{9});
  roundToBf16(x.cv(), y.v());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 1.0f + 0x1p-6f);
  EXPECT_EQ(y[3], 1.0f + 0x1p-7f);
  EXPECT_EQ(y[4], -3.0f);
  EXPECT_EQ(y[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[6], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[7]));
  EXPECT_EQ(bitsOf(y[8]), 0u);
  for (int i = 0; i < 9; ++i)
    EXPECT_EQ(bitsOf(y[i]) & 0xffffu, 0u) << i;
}

//===----------------------------------------------------------------------===//
// Broadcast / reduce
//===----------------------------------------------------------------------===//

struct ReduceCase {
  Shape big, small;
};

const ReduceCase kReduceCases[] = {
    {{6, 5}, {5}},
    {{6, 5}, {6, 1}},
    {{6, 5}, {1, 1}},
    {{6, 5}, {}},
    {{3, 4, 5}, {3, 1, 5}},
    {{3, 4, 5}, {4, 1}},
    {{2, 3, 4, 5}, {3, 1, 1}},
    {{2, 3, 4, 5}, {2, 1, 4, 1}},
    {{7}, {1}},
    {{1, 600}, {600}},
    {{300, 3}, {3}},
    {{4, 300}, {4, 1}},
    {{2, 3}, {2, 3}},
};

TEST(KernelBroadcast, BroadcastToAndSumToShape) {
  for (const ReduceCase &c : kReduceCases) {
    Tensor x = uniform(c.small);
    Tensor big(c.big, std::nanf(""));
    broadcastTo(x.cv(), big.v());
    std::vector<double> wantBig;
    for (int64_t i = 0; i < c.big.numel(); ++i)
      wantBig.push_back(x[broadcastIndex(c.small, c.big, unravel(i, c.big))]);
    expectNear("broadcastTo", big.data, wantBig, 0.0, 0.0);

    Tensor y = uniform(c.big);
    Tensor s(c.small, std::nanf(""));
    sumToShape(y.cv(), s.v());
    std::vector<double> want(size_t(c.small.numel()), 0.0);
    for (int64_t i = 0; i < c.big.numel(); ++i)
      want[size_t(broadcastIndex(c.small, c.big, unravel(i, c.big)))] += y[i];
    expectNear("sumToShape", s.data, want, 1e-6, 1e-6);
  }
}

TEST(KernelBroadcast, SumToShapeOrderIsAscending) {
  // 1 + 1e8 - 1e8 in ascending order is exact in double; a float
  // accumulator in that order would lose the 1.
  Tensor x(Shape{3, 2});
  x.data = {1.0f, 2.0f, 1e8f, 0.0f, -1e8f, 0.0f};
  Tensor out(Shape{2});
  sumToShape(x.cv(), out.v());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
}

TEST(KernelBroadcast, BackwardFiniteDifferences) {
  // broadcastTo and sumToShape are each other's gradient.
  for (const ReduceCase &c : kReduceCases) {
    Tensor x = uniform(c.small);
    Tensor dBig = uniform(c.big);
    Tensor dX(c.small);
    sumToShape(dBig.cv(), dX.v());
    Tensor big(c.big);
    checkGradient("broadcastTo", x, dX.data, [&] {
      broadcastTo(x.cv(), big.v());
      return dotObjective(dBig, big);
    });

    Tensor y = uniform(c.big);
    Tensor dSmall = uniform(c.small);
    Tensor dY(c.big);
    broadcastTo(dSmall.cv(), dY.v());
    Tensor small(c.small);
    checkGradient("sumToShape", y, dY.data, [&] {
      sumToShape(y.cv(), small.v());
      return dotObjective(dSmall, small);
    });
  }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST(KernelDataMovement, Transpose) {
  struct Case {
    Shape x;
    std::vector<int64_t> perm;
  };
  const Case cases[] = {{{3, 4}, {1, 0}},
                        {{2, 3, 4}, {0, 2, 1}},
                        {{2, 3, 4}, {2, 0, 1}},
                        {{2, 3, 4, 5}, {0, 2, 1, 3}},
                        {{2, 3, 4, 5}, {3, 2, 1, 0}},
                        {{2, 1, 4, 1}, {3, 2, 1, 0}},
                        {{5}, {0}},
                        {{}, {}},
                        {{40, 70}, {1, 0}},
                        {{3, 4, 5, 6}, {1, 3, 0, 2}},
                        {{2, 33, 40}, {0, 2, 1}}};
  for (const Case &c : cases) {
    Tensor x = uniform(c.x);
    Shape os;
    os.rank = c.x.rank;
    for (int i = 0; i < os.rank; ++i)
      os.dims[i] = c.x.dims[c.perm[size_t(i)]];
    Tensor out(os, std::nanf(""));
    transpose(x.cv(), c.perm.data(), out.v());
    std::vector<double> want;
    for (int64_t i = 0; i < os.numel(); ++i) {
      auto oi = unravel(i, os);
      std::vector<int64_t> xi(size_t(os.rank));
      for (int d = 0; d < os.rank; ++d)
        xi[size_t(c.perm[size_t(d)])] = oi[size_t(d)];
      int64_t lin = 0;
      for (int d = 0; d < os.rank; ++d)
        lin = lin * c.x.dims[d] + xi[size_t(d)];
      want.push_back(x[lin]);
    }
    expectNear("transpose", out.data, want, 0.0, 0.0);
  }
}

struct SliceCase {
  Shape x;
  std::vector<int64_t> starts, steps;
  Shape out;
};

const SliceCase kSliceCases[] = {
    {{10}, {2}, {3}, {3}},                         // 2, 5, 8
    {{10}, {9}, {-1}, {10}},                       // reversed
    {{10}, {8}, {-3}, {3}},                        // 8, 5, 2
    {{4, 6}, {1, 5}, {1, -2}, {3, 3}},             // rows 1..3, cols 5, 3, 1
    {{3, 4, 5}, {2, 0, 1}, {-1, 2, 1}, {3, 2, 3}}, // mixed
    {{3, 4, 5}, {0, 0, 0}, {1, 1, 1}, {3, 4, 5}},  // identity
    {{2, 8}, {0, 7}, {1, -1}, {2, 8}},             // reverse the inner dim
};

int64_t sliceSource(const SliceCase &c, int64_t outLinear) {
  auto oi = unravel(outLinear, c.out);
  int64_t lin = 0;
  for (int d = 0; d < c.x.rank; ++d)
    lin = lin * c.x.dims[d] + c.starts[size_t(d)] +
          oi[size_t(d)] * c.steps[size_t(d)];
  return lin;
}

TEST(KernelDataMovement, Slice) {
  for (const SliceCase &c : kSliceCases) {
    Tensor x = uniform(c.x);
    Tensor out(c.out, std::nanf(""));
    slice(x.cv(), c.starts.data(), c.steps.data(), out.v());
    std::vector<double> want;
    for (int64_t i = 0; i < c.out.numel(); ++i)
      want.push_back(x[sliceSource(c, i)]);
    expectNear("slice", out.data, want, 0.0, 0.0);
  }
}

TEST(KernelDataMovement, SliceBackwardFiniteDifferences) {
  for (const SliceCase &c : kSliceCases) {
    Tensor x = uniform(c.x);
    Tensor dOut = uniform(c.out);
    Tensor dX(c.x, std::nanf(""));
    sliceBackward(dOut.cv(), c.starts.data(), c.steps.data(), dX.v());
    Tensor out(c.out);
    checkGradient("sliceBackward", x, dX.data, [&] {
      slice(x.cv(), c.starts.data(), c.steps.data(), out.v());
      return dotObjective(dOut, out);
    });
    // Positions not read by the slice get exactly 0.
    std::vector<bool> hit(size_t(c.x.numel()), false);
    for (int64_t i = 0; i < c.out.numel(); ++i)
      hit[size_t(sliceSource(c, i))] = true;
    for (int64_t i = 0; i < c.x.numel(); ++i)
      if (!hit[size_t(i)]) {
        EXPECT_EQ(dX[i], 0.0f);
      }
  }
}

TEST(KernelDataMovement, Concat) {
  for (int axis : {0, 1, 2, -1}) {
    int a = axis < 0 ? axis + 3 : axis;
    std::vector<Tensor> ins;
    Shape os{2, 3, 4};
    os.dims[a] = 0;
    for (int64_t extent : {1, 3, 2}) {
      Shape s{2, 3, 4};
      s.dims[a] = extent;
      ins.push_back(uniform(s));
      os.dims[a] += extent;
    }
    std::vector<CFView> views;
    for (const Tensor &t : ins)
      views.push_back(t.cv());
    Tensor out(os, std::nanf(""));
    concat(views.data(), int(views.size()), axis, out.v());
    std::vector<double> want;
    for (int64_t i = 0; i < os.numel(); ++i) {
      auto oi = unravel(i, os);
      int64_t pos = oi[size_t(a)];
      size_t which = 0;
      while (pos >= ins[which].shape.dims[a])
        pos -= ins[which++].shape.dims[a];
      oi[size_t(a)] = pos;
      int64_t lin = 0;
      for (int d = 0; d < 3; ++d)
        lin = lin * ins[which].shape.dims[d] + oi[size_t(d)];
      want.push_back(ins[which][lin]);
    }
    expectNear("concat axis " + std::to_string(axis), out.data, want, 0, 0);
  }
}

TEST(KernelDataMovement, GatherRows) {
  Tensor table = uniform(Shape{7, 5});
  Ids ids{Shape{2, 3}, {0, 6, -1, 3, 3, -7}};
  Tensor out(Shape{2, 3, 5}, std::nanf(""));
  gatherRows(table.cv(), ids.v(), out.v());
  std::vector<double> want;
  for (int64_t id : ids.data)
    for (int64_t c = 0; c < 5; ++c)
      want.push_back(table[(id < 0 ? id + 7 : id) * 5 + c]);
  expectNear("gatherRows", out.data, want, 0, 0);
  // Rank-0 ids.
  Ids one{Shape{}, {-2}};
  Tensor row(Shape{5});
  gatherRows(table.cv(), one.v(), row.v());
  for (int64_t c = 0; c < 5; ++c)
    EXPECT_EQ(row[c], table[5 * 5 + c]);
}

TEST(KernelDataMovement, GatherRowsBackwardAccumulates) {
  Tensor table = uniform(Shape{6, 5});
  Ids ids{Shape{2, 4}, {1, 4, -2, 0, 1, 1, 5, -6}};
  Tensor dOut = uniform(Shape{2, 4, 5});
  Tensor dTable(Shape{6, 5});
  gatherRowsBackward(ids.v(), dOut.cv(), dTable.v());
  Tensor out(Shape{2, 4, 5});
  checkGradient("gatherRowsBackward", table, dTable.data, [&] {
    gatherRows(table.cv(), ids.v(), out.v());
    return dotObjective(dOut, out);
  });
  // It adds to what is there.
  Tensor prior = uniform(Shape{6, 5});
  Tensor acc = prior;
  gatherRowsBackward(ids.v(), dOut.cv(), acc.v());
  for (int64_t i = 0; i < acc.size(); ++i)
    EXPECT_NEAR(acc[i], prior[i] + dTable[i], 1e-6) << i;
  // Row 3 is never gathered: unchanged.
  for (int64_t c = 0; c < 5; ++c)
    EXPECT_EQ(acc[3 * 5 + c], prior[3 * 5 + c]);
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

struct MatmulCase {
  Shape a, b, out;
  bool transA, transB;
};

const MatmulCase kMatmulCases[] = {
    {{3, 5}, {5, 4}, {3, 4}, false, false},
    {{5, 3}, {5, 4}, {3, 4}, true, false},
    {{3, 5}, {4, 5}, {3, 4}, false, true},
    {{5, 3}, {4, 5}, {3, 4}, true, true},
    {{2, 3, 5}, {5, 4}, {2, 3, 4}, false, false}, // folded into one sgemm
    {{2, 3, 5}, {4, 5}, {2, 3, 4}, false, true},  // folded, transB
    {{2, 5, 3}, {5, 4}, {2, 3, 4}, true, false},  // not foldable
    {{3, 5}, {2, 5, 4}, {2, 3, 4}, false, false}, // a broadcast
    {{2, 1, 3, 5}, {4, 5, 6}, {2, 4, 3, 6}, false, false},
    {{2, 1, 5, 3}, {1, 4, 6, 5}, {2, 4, 3, 6}, true, true},
    {{5}, {5, 4}, {4}, false, false}, // vector . matrix
    {{3, 5}, {5}, {3}, false, false}, // matrix . vector
    {{2, 3, 5}, {5}, {2, 3}, false, false},
    {{5}, {2, 5, 4}, {2, 4}, false, false},
    {{7, 33}, {33, 9}, {7, 9}, false, false},
};

std::vector<double> refMatmul(const MatmulCase &c, const Tensor &a,
                              const Tensor &b) {
  int ra = c.a.rank, rb = c.b.rank;
  int64_t M = ra == 1 ? 1 : (c.transA ? c.a.dims[ra - 1] : c.a.dims[ra - 2]);
  int64_t K =
      ra == 1 ? c.a.dims[0] : (c.transA ? c.a.dims[ra - 2] : c.a.dims[ra - 1]);
  int64_t N = rb == 1 ? 1 : (c.transB ? c.b.dims[rb - 2] : c.b.dims[rb - 1]);
  Shape ab(c.a.dims, std::max(ra - 2, 0)), bb(c.b.dims, std::max(rb - 2, 0));
  int matDims = (ra > 1) + (rb > 1);
  Shape ob(c.out.dims, c.out.rank - matDims);
  std::vector<double> out;
  for (int64_t bi = 0; bi < ob.numel(); ++bi) {
    auto idx = unravel(bi, ob);
    const float *pa = a.data.data() + broadcastIndex(ab, ob, idx) * M * K;
    const float *pb = b.data.data() + broadcastIndex(bb, ob, idx) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          double av = c.transA ? pa[k * M + m] : pa[m * K + k];
          double bv = c.transB ? pb[n * K + k] : pb[k * N + n];
          s += av * bv;
        }
        out.push_back(s);
      }
  }
  return out;
}

TEST(KernelMatmul, MatchesReference) {
  for (const MatmulCase &c : kMatmulCases) {
    Tensor a = uniform(c.a), b = uniform(c.b);
    std::vector<double> want = refMatmul(c, a, b);
    // Overwrite: NaNs already in out must not leak through.
    Tensor out(c.out, std::nanf(""));
    matmul(a.cv(), b.cv(), out.v(), c.transA, c.transB);
    std::string what = "matmul a rank " + std::to_string(c.a.rank) +
                       " b rank " + std::to_string(c.b.rank) + " tA " +
                       std::to_string(c.transA) + " tB " +
                       std::to_string(c.transB);
    expectNear(what, out.data, want, 1e-5, 1e-5);
    // Accumulate.
    Tensor prior = uniform(c.out);
    Tensor acc = prior;
    matmul(a.cv(), b.cv(), acc.v(), c.transA, c.transB, /*accumulate=*/true);
    for (size_t i = 0; i < want.size(); ++i)
      want[i] += prior.data[i];
    expectNear(what + " accumulate", acc.data, want, 1e-5, 1e-5);
  }
}

TEST(KernelMatmul, EmptyContraction) {
  Tensor a(Shape{3, 0}), b(Shape{0, 4});
  Tensor out(Shape{3, 4}, std::nanf(""));
  matmul(a.cv(), b.cv(), out.v(), false, false);
  for (float v : out.data)
    EXPECT_EQ(v, 0.0f);
}

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

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

struct AttnCase {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
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
    attention(q.cv(), k.cv(), v.cv(), c.causal, scale, out.v(), lse.v());
    std::vector<double> wantOut, wantLse;
    refAttention(c, q, k, v, scale, wantOut, wantLse);
    std::string what = "attention T " + std::to_string(c.T) + " S " +
                       std::to_string(c.S) + " causal " +
                       std::to_string(c.causal);
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
    attention(q.cv(), k.cv(), v.cv(), c.causal, scale, out.v(), lse.v());
    Tensor dQ(q.shape, std::nanf("")), dK(k.shape, std::nanf("")),
        dV(v.shape, std::nanf(""));
    attentionBackward(q.cv(), k.cv(), v.cv(), out.cv(), lse.cv(), dOut.cv(),
                      c.causal, scale, dQ.v(), dK.v(), dV.v());
    Tensor o(q.shape), l(lse.shape);
    auto objective = [&] {
      attention(q.cv(), k.cv(), v.cv(), c.causal, scale, o.v(), l.v());
      return dotObjective(dOut, o);
    };
    std::string what = "attentionBackward T " + std::to_string(c.T) + " S " +
                       std::to_string(c.S) + " causal " +
                       std::to_string(c.causal);
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

TEST(KernelLoss, LinearCrossEntropyBackwardFiniteDifferences) {
  for (const LinearCeCase &c : kLinearCeCases) {
    Tensor h = uniform(Shape{c.N, c.D}, -2.0f, 2.0f);
    Tensor w = uniform(c.transW ? Shape{c.V, c.D} : Shape{c.D, c.V});
    Ids labels{Shape{c.N}, {}};
    for (int64_t r = 0; r < c.N; ++r)
      labels.data.push_back(r % 3 == 1 ? -100 : (r * 5 + 1) % c.V);
    if (c.chunk == 3) // a chunk with only ignored rows
      labels.data[3] = labels.data[4] = labels.data[5] = -100;
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
  attention(q.cv(), k.cv(), v.cv(), true, 0.2f, out.v(), lse.v());
  keep(out);
  keep(lse);
  Tensor dQ(q.shape), dK(k.shape), dV(v.shape);
  attentionBackward(q.cv(), k.cv(), v.cv(), out.cv(), lse.cv(), dO.cv(), true,
                    0.2f, dQ.v(), dK.v(), dV.v());
  keep(dQ);
  keep(dK);
  keep(dV);
  // Large heads (threaded rows rather than threaded heads), GQA, S != T.
  Tensor q2 = rand(Shape{2, 4, 100, 32}), k2 = rand(Shape{2, 2, 90, 32});
  Tensor v2 = rand(k2.shape), dO2 = rand(q2.shape);
  Tensor out2(q2.shape), lse2(Shape{2, 4, 100});
  attention(q2.cv(), k2.cv(), v2.cv(), true, 0.2f, out2.v(), lse2.v());
  keep(out2);
  keep(lse2);
  Tensor dQ2(q2.shape), dK2(k2.shape), dV2(v2.shape);
  attentionBackward(q2.cv(), k2.cv(), v2.cv(), out2.cv(), lse2.cv(), dO2.cv(),
                    true, 0.2f, dQ2.v(), dK2.v(), dV2.v());
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
