//===- KernelsExpertsTest.cpp - CPU kernels: mixture of experts ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The router's top-k and the grouped expert products against the naive
// composition they replace: gather each row's expert matrix, multiply, in
// double precision. Both layouts of the expert matrices are covered (Qwen3's
// [E, out, in] read transposed, GPT-OSS's [E, in, out]), with an expert no
// row chose, and results are bitwise identical for 1 and 4 threads.
//
//===----------------------------------------------------------------------===//

#include "KernelsTestUtil.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <vector>

using namespace rondo::cpu;
using namespace rondo::cpu::test;

namespace {

TEST(KernelTopK, ForwardSortedWithTies) {
  Tensor x(Shape{3, 5});
  x.data = {0.1f,  0.7f,  0.2f, 0.7f, -1.0f, // a tie: lower position first
            3.0f,  2.0f,  1.0f, 0.0f, -1.0f, //
            -2.0f, -1.0f, 5.0f, 4.0f, 5.0f};
  Tensor values(Shape{3, 2}, -7.0f);
  std::vector<int64_t> idx(6, -1);
  topK(x.cv(), values.v(), MIView{idx.data(), Shape{3, 2}});
  EXPECT_EQ(idx, (std::vector<int64_t>{1, 3, 0, 1, 2, 4}));
  EXPECT_EQ(values.data,
            (std::vector<float>{0.7f, 0.7f, 3.0f, 2.0f, 5.0f, 5.0f}));
}

TEST(KernelTopK, ForwardAgainstSort) {
  Shape s{7, 11};
  Tensor x = uniform(s, -3.0f, 3.0f);
  int64_t k = 4;
  Tensor values(Shape{7, k});
  std::vector<int64_t> idx(7 * k);
  topK(x.cv(), values.v(), MIView{idx.data(), Shape{7, k}});
  for (int64_t r = 0; r < 7; ++r) {
    std::vector<int64_t> pos(11);
    std::iota(pos.begin(), pos.end(), 0);
    std::stable_sort(pos.begin(), pos.end(), [&](int64_t a, int64_t b) {
      return x[r * 11 + a] > x[r * 11 + b];
    });
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(idx[r * k + j], pos[j]) << "row " << r << " slot " << j;
      EXPECT_EQ(values[r * k + j], x[r * 11 + pos[j]]);
    }
  }
}

TEST(KernelTopK, BackwardScattersToChosenPositions) {
  std::vector<int64_t> idx = {3, 0, 1, 2};
  Tensor dv(Shape{2, 2});
  dv.data = {1.5f, -2.0f, 0.25f, 4.0f};
  Tensor dx(Shape{2, 4}, std::nanf(""));
  topKBackward(IView{idx.data(), Shape{2, 2}}, dv.cv(), dx.v());
  EXPECT_EQ(dx.data, (std::vector<float>{-2.0f, 0.0f, 0.0f, 1.5f, 0.0f, 0.25f,
                                         4.0f, 0.0f}));
}

/// Expert ids for n rows over e experts, leaving expert `unused` out.
std::vector<int64_t> routedIds(int64_t n, int64_t e, int64_t unused) {
  std::vector<int64_t> ids(n);
  std::uniform_int_distribution<int64_t> dist(0, e - 2);
  for (int64_t &id : ids) {
    id = dist(rng());
    if (id >= unused)
      ++id;
  }
  return ids;
}

/// w[e] as [K, M] (transW: stored [M, K]) at (k, m).
double weightAt(const Tensor &w, int64_t e, int64_t k, int64_t m, int64_t K,
                int64_t M, bool transW) {
  return transW ? w[(e * M + m) * K + k] : w[(e * K + k) * M + m];
}

Shape expertShape(int64_t E, int64_t K, int64_t M, bool transW) {
  return transW ? Shape{E, M, K} : Shape{E, K, M};
}

TEST(KernelExpertMatmul, ForwardAgainstGatheredProduct) {
  const int64_t N = 37, K = 9, M = 13, E = 5;
  for (bool transW : {true, false}) {
    Tensor x = uniform(Shape{N, K});
    Tensor w = uniform(expertShape(E, K, M, transW));
    std::vector<int64_t> ids = routedIds(N, E, /*unused=*/2);
    Tensor out(Shape{N, M}, std::nanf(""));
    expertMatmul(x.cv(), w.cv(), IView{ids.data(), Shape{N}}, out.v(), transW);
    std::vector<double> want(N * M, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k)
          want[n * M + m] +=
              double(x[n * K + k]) * weightAt(w, ids[n], k, m, K, M, transW);
    expectNear(transW ? "expertMatmul transW" : "expertMatmul", out.data, want,
               1e-5, 1e-6);
  }
}

TEST(KernelExpertMatmul, GradientsAgainstGatheredProduct) {
  const int64_t N = 29, K = 8, M = 6, E = 4;
  for (bool transW : {true, false}) {
    Tensor x = uniform(Shape{N, K});
    Tensor w = uniform(expertShape(E, K, M, transW));
    Tensor dy = uniform(Shape{N, M});
    std::vector<int64_t> ids = routedIds(N, E, /*unused=*/0);
    IView idv{ids.data(), Shape{N}};
    // dx: the same grouped product with the other orientation.
    Tensor dx(Shape{N, K}, std::nanf(""));
    expertMatmul(dy.cv(), w.cv(), idv, dx.v(), !transW);
    std::vector<double> wantDx(N * K, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t m = 0; m < M; ++m)
          wantDx[n * K + k] +=
              double(dy[n * M + m]) * weightAt(w, ids[n], k, m, K, M, transW);
    expectNear("expert dx", dx.data, wantDx, 1e-5, 1e-6);
    // dW: per-expert sums of outer products; the unused expert gets zeros.
    Tensor dw(w.shape, std::nanf(""));
    expertMatmulWeightGrad(x.cv(), dy.cv(), idv, dw.v(), transW);
    std::vector<double> wantDw(w.size(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t m = 0; m < M; ++m) {
          int64_t e = ids[n];
          int64_t at = transW ? (e * M + m) * K + k : (e * K + k) * M + m;
          wantDw[at] += double(x[n * K + k]) * dy[n * M + m];
        }
    expectNear("expert dW", dw.data, wantDw, 1e-5, 1e-6);
    for (int64_t i = 0; i < K * M; ++i)
      ASSERT_EQ(dw[i], 0.0f) << "expert 0 has no rows";
  }
}

TEST(KernelExpertMatmul, BitwiseAcrossThreads) {
  const int64_t N = 512, K = 64, M = 96, E = 4;
  Tensor x = uniform(Shape{N, K});
  Tensor w = uniform(Shape{E, M, K});
  Tensor dy = uniform(Shape{N, M});
  std::vector<int64_t> ids = routedIds(N, E, /*unused=*/3);
  IView idv{ids.data(), Shape{N}};
  auto run = [&](int threads) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor out(Shape{N, M}), dw(w.shape);
    expertMatmul(x.cv(), w.cv(), idv, out.v(), true);
    expertMatmulWeightGrad(x.cv(), dy.cv(), idv, dw.v(), true);
    omp_set_num_threads(saved);
    out.data.insert(out.data.end(), dw.data.begin(), dw.data.end());
    return out.data;
  };
  EXPECT_TRUE(bitwiseEqual(run(1), run(4)));
}

} // namespace
