//===- CudaKernelsExpertsTest.cpp - CUDA MoE kernels vs the CPU twins -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The router's top-k (values, and the chosen positions exactly) and the
// grouped expert products with their gradients, in both layouts of the
// expert matrices, against the CPU library; twice, bitwise.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

namespace cuda_test {
namespace {

std::vector<int64_t> download(const int64_t *p, size_t n) {
  std::vector<int64_t> h(n);
  ck(cudaMemcpy(h.data(), p, n * sizeof(int64_t), cudaMemcpyDeviceToHost),
     "download ids");
  return h;
}

TEST_F(CudaKernels, TopKAndBackward) {
  const int64_t rows = 300, d = 8, k = 2;
  Shape xs{rows, d}, vs{rows, k};
  Tensor x = uniform(xs);
  x[5] = x[6]; // a tie: the lower position first on both sides
  Tensor refV(vs), refDx(xs), dv = uniform(vs);
  std::vector<int64_t> refI(size_t(rows * k));
  cpu::topK(x.cv(), refV.v(), MIView{refI.data(), vs});
  cpu::topKBackward(IView{refI.data(), vs}, dv.cv(), refDx.v());
  Dev dx(x), ddv(dv);
  DevIds di(refI, vs);
  int64_t *idx = nullptr;
  ck(cudaMalloc(&idx, refI.size() * sizeof(int64_t)), "cudaMalloc");
  auto got = runTwice(
      {{vs, {}}, {xs, {}}},
      [&](const std::vector<FView> &o) {
        cu::topK(dx.cv(), o[0], MIView{idx, vs});
        cu::topKBackward(di.v(), ddv.cv(), o[1]);
      },
      "topK");
  ck(cudaStreamSynchronize(cu::currentStream()), "sync");
  EXPECT_EQ(download(idx, refI.size()), refI);
  cudaFree(idx);
  expectClose(got[0], refV, "topK values", 0.0);
  expectClose(got[1], refDx, "topKBackward", 0.0);
}

TEST_F(CudaKernels, ExpertMatmulAndWeightGrad) {
  const int64_t n = 256, kk = 64, m = 96, e = 4;
  for (bool transW : {true, false}) {
    Shape wShape = transW ? Shape{e, m, kk} : Shape{e, kk, m};
    Tensor x = uniform(Shape{n, kk}), w = uniform(wShape),
           dy = uniform(Shape{n, m});
    std::uniform_int_distribution<int64_t> pick(0, e - 2); // expert e-1 idle
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (auto &i : ids)
      i = pick(rng());
    IView hi{ids.data(), Shape{n}};
    Tensor refY(Shape{n, m}), refDx(Shape{n, kk}), refDw(wShape);
    cpu::expertMatmul(x.cv(), w.cv(), hi, refY.v(), transW);
    cpu::expertMatmul(dy.cv(), w.cv(), hi, refDx.v(), !transW);
    cpu::expertMatmulWeightGrad(x.cv(), dy.cv(), hi, refDw.v(), transW);
    Dev dx(x), dw(w), ddy(dy);
    DevIds di(ids, Shape{n});
    std::string what = transW ? "expertMatmul transW" : "expertMatmul";
    auto got = runTwice(
        {{refY.shape, {}}, {refDx.shape, {}}, {wShape, {}}},
        [&](const std::vector<FView> &o) {
          cu::expertMatmul(dx.cv(), dw.cv(), di.v(), o[0], transW);
          cu::expertMatmul(ddy.cv(), dw.cv(), di.v(), o[1], !transW);
          cu::expertMatmulWeightGrad(dx.cv(), ddy.cv(), di.v(), o[2], transW);
        },
        what);
    expectClose(got[0], refY, what);
    expectClose(got[1], refDx, what + " dx");
    expectClose(got[2], refDw, what + " dW");
  }
}

} // namespace
} // namespace cuda_test
