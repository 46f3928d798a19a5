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

#include "KernelsTestUtil.h"
#include "ScalarOps.h"

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

/// Checks `fn` (from -> to) by finite differences with `gradFn` (to ->
/// from), its gradient, giving the analytic one.
void checkAdjoint(const char *what, const Shape &from, const Shape &to,
                  void (*fn)(CFView, FView), void (*gradFn)(CFView, FView)) {
  Tensor x = uniform(from);
  Tensor dOut = uniform(to);
  Tensor dX(from);
  gradFn(dOut.cv(), dX.v());
  Tensor out(to);
  checkGradient(what, x, dX.data, [&] {
    fn(x.cv(), out.v());
    return dotObjective(dOut, out);
  });
}

TEST(KernelBroadcast, BackwardFiniteDifferences) {
  // broadcastTo and sumToShape are each other's gradient.
  for (const ReduceCase &c : kReduceCases) {
    checkAdjoint("broadcastTo", c.small, c.big, broadcastTo, sumToShape);
    checkAdjoint("sumToShape", c.big, c.small, sumToShape, broadcastTo);
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

} // namespace

// kern-fuse-product-scale's backward rewrite: a product reading bf16(x c)
// becomes one reading bf16(x) with alpha = c. For a power of two the bits
// are the same (rounding commutes with the scaling, and so does every fp32
// partial sum), in both product forms LoRA's gradients use.
TEST(KernelMisc, ScaledProductOfTheRoundedOperandIsTheProductOfTheScaledOne) {
  for (bool transA : {false, true}) {
    Shape xs = transA ? Shape{96, 64} : Shape{64, 96}, bs{96, 48}, os{64, 48};
    Tensor x = uniform(xs), b = uniform(bs);
    std::vector<uint16_t> x16(x.data.size()), x2_16(x.data.size()),
        b16(b.data.size());
    for (size_t i = 0; i < x16.size(); ++i) {
      x16[i] = rondo::kernels::floatToBf16Bits(x.data[i]);
      x2_16[i] = rondo::kernels::floatToBf16Bits(x.data[i] * 2.0f);
    }
    for (size_t i = 0; i < b16.size(); ++i)
      b16[i] = rondo::kernels::floatToBf16Bits(b.data[i]);
    Tensor scaledOperand(os), scaledProduct(os);
    matmulBf16(CBView{x2_16.data(), xs}, CBView{b16.data(), bs},
               scaledOperand.v(), transA, false, false);
    matmulBf16Scaled(CBView{x16.data(), xs}, CBView{b16.data(), bs}, 2.0f,
                     scaledProduct.v(), transA, false);
    EXPECT_EQ(0,
              std::memcmp(scaledOperand.data.data(), scaledProduct.data.data(),
                          scaledOperand.data.size() * sizeof(float)))
        << "transA " << transA;
  }
}
