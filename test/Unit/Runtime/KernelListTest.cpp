//===- KernelListTest.cpp - The list's kernels that tg lowering added -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The kernels the kernel-call layer needs beyond the original per-op set:
// integer data movement, select / isNan, the causal mask, and the losses'
// and gather's flag contract that the CUDA library shares. Each is checked
// against the composition or the loop it replaces.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace rondo::cpu;

namespace {

TEST(KernelListTest, IntegerMovementMatchesTheFloatKernels) {
  // The same index arithmetic as transpose/slice/broadcastTo/concat on
  // floats, so integers that are exact in float must come out the same.
  Shape s{2, 3, 4};
  std::vector<int64_t> x(24);
  std::vector<float> xf(24);
  for (int k = 0; k < 24; ++k) {
    x[k] = 100 + k;
    xf[k] = float(100 + k);
  }
  auto sameAsFloat = [](const std::vector<int64_t> &ints,
                        const std::vector<float> &floats) {
    ASSERT_EQ(ints.size(), floats.size());
    for (size_t k = 0; k < ints.size(); ++k)
      EXPECT_EQ(float(ints[k]), floats[k]) << "element " << k;
  };

  const int64_t perm[] = {2, 0, 1};
  Shape ts{4, 2, 3};
  std::vector<int64_t> ti(24);
  std::vector<float> tf(24);
  transposeInts({x.data(), s}, perm, {ti.data(), ts});
  transpose({xf.data(), s}, perm, {tf.data(), ts});
  sameAsFloat(ti, tf);

  const int64_t starts[] = {1, 2, 3}, steps[] = {1, -1, -2};
  Shape ss{1, 2, 2};
  std::vector<int64_t> si(4);
  std::vector<float> sf(4);
  sliceInts({x.data(), s}, starts, steps, {si.data(), ss});
  slice({xf.data(), s}, starts, steps, {sf.data(), ss});
  sameAsFloat(si, sf);

  Shape bs{2, 2, 3, 4};
  std::vector<int64_t> bi(48);
  std::vector<float> bf(48);
  broadcastInts({x.data(), s}, {bi.data(), bs});
  broadcastTo({xf.data(), s}, {bf.data(), bs});
  sameAsFloat(bi, bf);
  // A broadcast inner dimension.
  Shape col{2, 1};
  std::vector<int64_t> ci(6);
  std::vector<float> cf(6);
  broadcastInts({x.data(), col}, {ci.data(), Shape{2, 3}});
  broadcastTo({xf.data(), col}, {cf.data(), Shape{2, 3}});
  sameAsFloat(ci, cf);

  IView parts[] = {{x.data(), Shape{2, 3, 1}}, {x.data() + 6, Shape{2, 3, 3}}};
  CFView fparts[] = {{xf.data(), Shape{2, 3, 1}},
                     {xf.data() + 6, Shape{2, 3, 3}}};
  std::vector<int64_t> ki(24);
  std::vector<float> kf(24);
  concatInts(parts, 2, -1, {ki.data(), s});
  concat(fparts, 2, -1, {kf.data(), s});
  sameAsFloat(ki, kf);
}

TEST(KernelListTest, GatedActIsTheUnaryThenBinaryComposition) {
  // tg.gated_act and its gradient in one pass each: the bits of the unary
  // and binary kernels they replace, and a skipped result stays untouched.
  Shape s{3, 37};
  int64_t n = s.numel();
  std::vector<float> gate(n), up(n), dy(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = -6.0f + 12.0f * float(i) / float(n) + 1e-3f * float(i % 7);
    up[i] = std::sin(0.37f * float(i));
    dy[i] = std::cos(0.11f * float(i)) * 0.5f;
  }
  CFView g{gate.data(), s}, u{up.data(), s}, d{dy.data(), s};
  for (UnaryKind kind : {UnaryKind::Silu, UnaryKind::GeluTanh,
                         UnaryKind::GeluErf, UnaryKind::Sigmoid,
                         UnaryKind::Relu}) {
    std::vector<float> act(n), want(n), got(n);
    unary(kind, g, {act.data(), s});
    binary(BinaryKind::Mul, {act.data(), s}, u, {want.data(), s});
    gatedAct(kind, g, u, {got.data(), s});
    EXPECT_EQ(got, want);

    std::vector<float> dyUp(n), wantGate(n), wantUp(n), gotGate(n), gotUp(n);
    binary(BinaryKind::Mul, d, u, {dyUp.data(), s});
    unaryBackward(kind, g, {dyUp.data(), s}, {wantGate.data(), s});
    binary(BinaryKind::Mul, d, {act.data(), s}, {wantUp.data(), s});
    gatedActBackward(kind, g, u, d, {gotGate.data(), s}, {gotUp.data(), s});
    EXPECT_EQ(gotGate, wantGate);
    EXPECT_EQ(gotUp, wantUp);

    std::vector<float> only(n, 42.0f);
    gatedActBackward(kind, g, u, d, {only.data(), s}, {nullptr, s});
    EXPECT_EQ(only, wantGate);
  }
}

TEST(KernelListTest, SelectBroadcastsLikeBinary) {
  std::vector<int64_t> cond = {1, 0, 0, 1};
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {-1, -2};
  std::vector<float> out(8);
  // cond [4] against a [2, 4] and b [2, 1].
  select({cond.data(), Shape{4}}, {a.data(), Shape{2, 4}},
         {b.data(), Shape{2, 1}}, {out.data(), Shape{2, 4}});
  std::vector<float> want = {1, -1, -1, 4, 5, -2, -2, 8};
  EXPECT_EQ(out, want);
}

TEST(KernelListTest, IsNanMarksOnlyNaN) {
  float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, std::nanf(""), inf,
                          -inf, -0.0f,         -std::nanf("")};
  std::vector<int64_t> out(6, 7);
  isNan({x.data(), Shape{6}}, {out.data(), Shape{6}});
  EXPECT_EQ(out, (std::vector<int64_t>{0, 1, 0, 0, 0, 1}));
}

TEST(KernelListTest, ClampAndItsGradientFollowPyTorch) {
  float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::vector<float> x = {-9.0f, -7.0f, -1.5f, 0.0f, 7.0f, 8.0f, inf, nan};
  std::vector<float> dy = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> y(8), dx(8);
  clamp({x.data(), Shape{8}}, -7.0f, 7.0f, {y.data(), Shape{8}});
  clampBackward({x.data(), Shape{8}}, {dy.data(), Shape{8}}, -7.0f, 7.0f,
                {dx.data(), Shape{8}});
  // torch.clamp: NaN stays NaN; the gradient passes at the bounds too.
  std::vector<float> wantY = {-7, -7, -1.5f, 0, 7, 7, 7};
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ(y[i], wantY[i]) << i;
  EXPECT_TRUE(std::isnan(y[7]));
  EXPECT_EQ(dx, (std::vector<float>{0, 2, 3, 4, 5, 0, 0, 0}));
}

TEST(KernelListTest, CausalMaskAlignsTheDiagonalBottomRight) {
  // 2 queries against 3 keys: query i sees keys j <= i + 1.
  std::vector<float> m(2 * 2 * 3, 5.0f);
  causalMask({m.data(), Shape{2, 2, 3}}, 0);
  float inf = std::numeric_limits<float>::infinity();
  std::vector<float> one = {0, 0, -inf, 0, 0, 0};
  for (int o = 0; o < 2; ++o)
    for (int k = 0; k < 6; ++k)
      EXPECT_EQ(m[o * 6 + k], one[k]) << o << "," << k;
}

TEST(KernelListTest, LossSumIsTheHostFormsSum) {
  std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 3.0f};
  std::vector<int64_t> labels = {2, -100};
  double sum = 0;
  int64_t count = 0;
  ASSERT_TRUE(crossEntropy({logits.data(), Shape{2, 3}},
                           {labels.data(), Shape{2}}, -100, &sum, &count));
  float listed = -1;
  int flag = 0;
  crossEntropy({logits.data(), Shape{2, 3}}, {labels.data(), Shape{2}}, -100,
               &listed, &flag);
  EXPECT_EQ(listed, float(sum));
  EXPECT_EQ(flag, 0);

  // The linear form: h [2, 2] times W [2, 3] gives the same logits rows.
  std::vector<float> h = {1, 0, 0, 1},
                     w = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 3.0f};
  float linear = -1;
  linearCrossEntropy({h.data(), Shape{2, 2}}, {w.data(), Shape{2, 3}}, false,
                     {labels.data(), Shape{2}}, -100, 1, &linear, &flag);
  EXPECT_EQ(linear, listed);
  EXPECT_EQ(flag, 0);
}

TEST(KernelListTest, InvalidDataSetsTheFlag) {
  std::vector<float> logits(6, 0.0f);
  std::vector<int64_t> labels = {3, 0}; // 3 is outside a vocabulary of 3
  float sum = -1;
  int flag = 0;
  crossEntropy({logits.data(), Shape{2, 3}}, {labels.data(), Shape{2}}, -100,
               &sum, &flag);
  EXPECT_EQ(sum, 0.0f);
  EXPECT_EQ(flag, 1);

  std::vector<float> table = {1, 2, 3, 4};
  std::vector<int64_t> ids = {1, 2, -2};
  std::vector<float> out(6);
  int bad = 0;
  gatherRows({table.data(), Shape{2, 2}}, {ids.data(), Shape{3}},
             {out.data(), Shape{3, 2}}, &bad);
  EXPECT_EQ(bad, 1);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_TRUE(std::isnan(out[2]) && std::isnan(out[3]));
  EXPECT_EQ(out[4], 1.0f);
}

TEST(KernelListTest, InvalidLabelWithoutAFlagStopsWithAMessage) {
  std::vector<float> logits(3, 0.0f);
  std::vector<int64_t> labels = {7};
  float sum = 0;
  EXPECT_EXIT(crossEntropy({logits.data(), Shape{1, 3}},
                           {labels.data(), Shape{1}}, -100, &sum, nullptr),
              testing::ExitedWithCode(1),
              "error: a label is outside the vocabulary");
}

} // namespace

// gatherRowsBackwardAdd is a zero fill, gatherRowsBackward into it and
// accumulate into the table, bit for bit: each touched row gets its own
// sum added once; untouched rows keep their values (also -0.0, which adding
// the fill's +0.0 would have turned into +0.0: the slot it serves starts at
// +0.0, so the two never differ there).
TEST(KernelListTest, GatherRowsBackwardAddIsFillScatterAccumulate) {
  const int64_t rows = 7, width = 5;
  std::vector<int64_t> ids = {3, 1, 3, -1, 3, 0, 1};
  std::vector<float> dOut(ids.size() * width), table(rows * width);
  for (size_t k = 0; k < dOut.size(); ++k)
    dOut[k] = std::sin(0.37f * float(k)) * 1e3f + 1e-3f * float(k);
  for (size_t k = 0; k < table.size(); ++k)
    table[k] = std::cos(0.11f * float(k)) * 7.0f;
  Shape is{int64_t(ids.size())}, ds{int64_t(ids.size()), width},
      ts{rows, width};
  std::vector<float> zero(table.size(), 0.0f), want = table, got = table;
  gatherRowsBackward({ids.data(), is}, {dOut.data(), ds}, {zero.data(), ts});
  accumulate({zero.data(), ts}, {want.data(), ts});
  gatherRowsBackwardAdd({ids.data(), is}, {dOut.data(), ds}, {got.data(), ts});
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_EQ(got[k], want[k]) << "element " << k;
  // Row 2 and 4 (no id lands there) are untouched.
  for (int64_t c = 0; c < width; ++c)
    EXPECT_EQ(got[2 * width + c], table[2 * width + c]);
}
