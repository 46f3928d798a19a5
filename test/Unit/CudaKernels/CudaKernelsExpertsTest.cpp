//===- CudaKernelsExpertsTest.cpp - CUDA MoE kernels vs the CPU twins -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The router's top-k (values, and the chosen positions exactly) and the
// grouped expert products with their gradients, in both layouts of the
// expert matrices, against the CPU library; twice, bitwise. The device sort
// by expert against a host stable counting sort; the products under
// Precision::Bf16 (the wgmma kernels on a Hopper GPU and the mma.sync ones)
// and Precision::Fp32 on skewed routings, idle experts, ragged tiles and
// sizes that are not multiples of 4, and ids out of range.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"
#include "ScalarOps.h"

#include <cstdlib>
#include <cstring>

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

std::vector<int32_t> download32(const int32_t *p, size_t n) {
  std::vector<int32_t> h(n);
  ck(cudaMemcpy(h.data(), p, n * sizeof(int32_t), cudaMemcpyDeviceToHost),
     "download int32");
  return h;
}

/// n expert ids with Zipf-like weights 1 / (e + 1)^skew (skew 0: uniform),
/// never `idle` (pass -1 for none), shuffled over the experts so that the
/// heavy ones are not the low ids.
std::vector<int64_t> routing(int64_t n, int64_t e, double skew, int64_t idle) {
  std::vector<double> weight(size_t(e), 0.0);
  std::vector<int64_t> order(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i)
    order[size_t(i)] = i;
  std::shuffle(order.begin(), order.end(), rng());
  for (int64_t i = 0; i < e; ++i)
    if (order[size_t(i)] != idle)
      weight[size_t(order[size_t(i)])] = 1.0 / std::pow(double(i + 1), skew);
  std::discrete_distribution<int64_t> pick(weight.begin(), weight.end());
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto &i : ids)
    i = pick(rng());
  return ids;
}

TEST_F(CudaKernels, ExpertSortIsStableCountingSort) {
  struct Case {
    int64_t n, e;
    double skew;
    int outside; // rows given an id outside [0, e)
  } cases[] = {{1, 1, 0.0, 0},      {300, 4, 0.0, 0},  {5000, 37, 1.2, 0},
               {4096, 128, 0.0, 3}, {2500, 3, 2.0, 0}, {1030, 9, 0.5, 1030}};
  for (const Case &c : cases) {
    std::vector<int64_t> ids = routing(c.n, c.e, c.skew, c.e > 2 ? 1 : -1);
    for (int i = 0; i < c.outside; ++i)
      ids[size_t((i * 7919) % c.n)] = i % 2 ? c.e + i : -1 - i;
    // The host's stable counting sort.
    std::vector<int32_t> offsets(size_t(c.e + 1), 0), perm;
    int32_t bad = 0;
    for (int64_t id : ids)
      if (id >= 0 && id < c.e)
        ++offsets[size_t(id + 1)];
      else
        ++bad;
    for (int64_t i = 0; i < c.e; ++i)
      offsets[size_t(i + 1)] += offsets[size_t(i)];
    perm.resize(size_t(offsets[size_t(c.e)]));
    std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
    for (int64_t r = 0; r < c.n; ++r)
      if (ids[size_t(r)] >= 0 && ids[size_t(r)] < c.e)
        perm[size_t(next[size_t(ids[size_t(r)])]++)] = int32_t(r);

    DevIds di(ids, Shape{c.n});
    int32_t *d = nullptr;
    ck(cudaMalloc(&d, size_t(c.n + c.e + 2) * sizeof(int32_t)), "cudaMalloc");
    cu::expertSortForTesting(di.p, c.n, c.e, d, d + c.e + 1, d + c.e + 1 + c.n);
    ck(cudaStreamSynchronize(cu::currentStream()), "sort");
    std::string what =
        "sort n=" + std::to_string(c.n) + " e=" + std::to_string(c.e);
    EXPECT_EQ(download32(d, size_t(c.e + 1)), offsets) << what;
    EXPECT_EQ(download32(d + c.e + 1, perm.size()), perm) << what;
    EXPECT_EQ(download32(d + c.e + 1 + c.n, 1)[0], bad) << what;
    cudaFree(d);
  }
}

/// Sets an environment variable for its lifetime: RONDO_GROUPED_SM90=0 makes
/// the bf16 expert products take the mma.sync kernels even on a Hopper GPU,
/// RONDO_GROUPED_STAGING=smem the wgmma kernels with cp.async staging.
struct ScopedEnv {
  ScopedEnv(const char *name, const char *value) : name_(name) {
    setenv(name, value, 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  const char *name_;
};

struct ExpertCase {
  int64_t n, kk, m, e;
  double skew;
  int64_t idle;
};

/// The three products of a case (forward, input gradient, weight gradient)
/// in both layouts, against the CPU library at `tol`, twice bitwise.
void checkExperts(const ExpertCase &c, const std::string &label, double tol) {
  for (bool transW : {false, true}) {
    Shape wShape = transW ? Shape{c.e, c.m, c.kk} : Shape{c.e, c.kk, c.m};
    Tensor x = uniform(Shape{c.n, c.kk}), w = uniform(wShape),
           dy = uniform(Shape{c.n, c.m});
    std::vector<int64_t> ids = routing(c.n, c.e, c.skew, c.idle);
    IView hi{ids.data(), Shape{c.n}};
    Tensor refY(Shape{c.n, c.m}), refDx(Shape{c.n, c.kk}), refDw(wShape);
    cpu::expertMatmul(x.cv(), w.cv(), hi, refY.v(), transW);
    cpu::expertMatmul(dy.cv(), w.cv(), hi, refDx.v(), !transW);
    cpu::expertMatmulWeightGrad(x.cv(), dy.cv(), hi, refDw.v(), transW);
    Dev dx(x), dw(w), ddy(dy);
    DevIds di(ids, Shape{c.n});
    std::string what = label + " n" + std::to_string(c.n) + " k" +
                       std::to_string(c.kk) + " m" + std::to_string(c.m) +
                       " e" + std::to_string(c.e) + (transW ? " transW" : "");
    auto got = runTwice(
        {{refY.shape, {}}, {refDx.shape, {}}, {wShape, {}}},
        [&](const std::vector<FView> &o) {
          cu::expertMatmul(dx.cv(), dw.cv(), di.v(), o[0], transW);
          cu::expertMatmul(ddy.cv(), dw.cv(), di.v(), o[1], !transW);
          cu::expertMatmulWeightGrad(dx.cv(), ddy.cv(), di.v(), o[2], transW);
        },
        what);
    expectClose(got[0], refY, what + " out", tol);
    expectClose(got[1], refDx, what + " dx", tol);
    expectClose(got[2], refDw, what + " dW", tol);
  }
}

// Unbalanced routing with an idle expert, rows not a multiple of any tile,
// K and M multiples of 4 (16-byte staging) and not (4-byte staging), several
// column tiles and sort chunks, a long reduction.
const ExpertCase kExpertCases[] = {
    {1000, 96, 160, 7, 1.0, 3},   {777, 70, 42, 5, 0.0, 0},
    {3000, 256, 320, 16, 1.2, 5}, {200, 1024, 72, 3, 0.0, -1},
    {150, 1030, 36, 3, 0.0, -1},  {64, 33, 300, 130, 0.5, 7},
    {1, 8, 8, 2, 0.0, -1},
};

TEST_F(CudaKernels, ExpertMatmulBf16) {
  PrecisionGuard guard(cu::Precision::Bf16);
  for (const ExpertCase &c : kExpertCases)
    checkExperts(c, "experts bf16", kBf16Tol);
}

TEST_F(CudaKernels, ExpertMatmulBf16SmemStaging) {
  PrecisionGuard guard(cu::Precision::Bf16);
  ScopedEnv staging("RONDO_GROUPED_STAGING", "smem");
  for (const ExpertCase &c : kExpertCases)
    checkExperts(c, "experts bf16 cp.async staging", kBf16Tol);
}

TEST_F(CudaKernels, ExpertMatmulBf16MmaSync) {
  PrecisionGuard guard(cu::Precision::Bf16);
  ScopedEnv mmaSync("RONDO_GROUPED_SM90", "0");
  for (const ExpertCase &c : kExpertCases)
    checkExperts(c, "experts bf16 mma.sync", kBf16Tol);
}

TEST_F(CudaKernels, ExpertMatmulFp32Sorted) {
  PrecisionGuard guard(cu::Precision::Fp32);
  for (const ExpertCase &c : kExpertCases)
    checkExperts(c, "experts fp32", kTol);
}

/// A device copy of t rounded to bf16 (nearest even), and t replaced by the
/// rounded values widened back: what the bf16-operand kernels read.
struct DevBf16 {
  uint16_t *p = nullptr;
  Shape shape;
  std::vector<uint16_t> h; // the bits on the host, for the CPU twins
  explicit DevBf16(Tensor &t) : shape(t.shape), h(t.data.size()) {
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = rondo::kernels::floatToBf16Bits(t.data[i]);
      t.data[i] = rondo::kernels::bf16BitsToFloat(h[i]);
    }
    ck(cudaMalloc(&p, std::max<size_t>(h.size(), 1) * 2), "cudaMalloc");
    ck(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice),
       "upload bf16");
  }
  ~DevBf16() { cudaFree(p); }
  DevBf16(const DevBf16 &) = delete;
  DevBf16 &operator=(const DevBf16 &) = delete;
  cpu::CBView cv() const { return cpu::CBView{p, shape}; }
  cpu::CBView host() const { return cpu::CBView{h.data(), shape}; }
};

// expertMatmulBf16 / expertMatmulWeightGradBf16 (bf16 operands, as
// kern-bf16-storage hands them over) give exactly the bits of expertMatmul /
// expertMatmulWeightGrad under Precision::Bf16 on the same rounded values:
// on a Hopper GPU the bf16-operand wgmma kernels (K and M multiples of 8)
// against the fp32-staged ones, elsewhere and for other sizes the fallback
// that widens the operands. Also against the CPU twins, which sum the same
// products in another order, and twice bitwise; with out-of-range ids (NaN
// rows, all of dW NaN) against the fp32-staged results alone.
TEST_F(CudaKernels, ExpertMatmulBf16OperandsAreTheFp32StagedBits) {
  PrecisionGuard guard(cu::Precision::Bf16);
  const ExpertCase cases[] = {
      {1000, 96, 160, 7, 1.0, 3},  {3000, 256, 320, 16, 1.2, 5},
      {200, 1024, 72, 3, 0.0, -1}, {2048, 512, 768, 8, 0.0, -1},
      {64, 40, 264, 130, 0.5, 7},  {1, 8, 8, 2, 0.0, -1},
      {777, 70, 42, 5, 0.0, 0},    {150, 1030, 36, 3, 0.0, -1},
      {300, 64, 40, 4, 0.0, -1},
      // More tiles than an H100 has SMs: persistent blocks take several
      // (the weight gradient's 130 x 2 tiles above, too).
      {20000, 64, 520, 6, 0.8, 2}};
  for (const ExpertCase &c : cases)
    for (bool transW : {false, true})
      for (bool bad : {false, true}) {
        if (bad && c.n < 100)
          continue;
        Shape wShape = transW ? Shape{c.e, c.m, c.kk} : Shape{c.e, c.kk, c.m};
        Tensor x = uniform(Shape{c.n, c.kk}), w = uniform(wShape),
               dy = uniform(Shape{c.n, c.m});
        DevBf16 x16(x), w16(w), dy16(dy);
        Dev dx(x), dw(w), ddy(dy);
        std::vector<int64_t> ids = routing(c.n, c.e, c.skew, c.idle);
        if (bad) {
          ids[7] = -1;
          ids[60] = c.e;
        }
        DevIds di(ids, Shape{c.n});
        std::string what = "experts bf16 operands n" + std::to_string(c.n) +
                           " k" + std::to_string(c.kk) + " m" +
                           std::to_string(c.m) + " e" + std::to_string(c.e) +
                           (transW ? " transW" : "") + (bad ? " bad ids" : "");
        std::vector<OutSpec> outs = {
            {Shape{c.n, c.m}, {}}, {Shape{c.n, c.kk}, {}}, {wShape, {}}};
        auto staged = runTwice(
            outs,
            [&](const std::vector<FView> &o) {
              cu::expertMatmul(dx.cv(), dw.cv(), di.v(), o[0], transW);
              cu::expertMatmul(ddy.cv(), dw.cv(), di.v(), o[1], !transW);
              cu::expertMatmulWeightGrad(dx.cv(), ddy.cv(), di.v(), o[2],
                                         transW);
            },
            what + " fp32-staged");
        auto got = runTwice(
            outs,
            [&](const std::vector<FView> &o) {
              cu::expertMatmulBf16(x16.cv(), w16.cv(), di.v(), o[0], transW);
              cu::expertMatmulBf16(dy16.cv(), w16.cv(), di.v(), o[1], !transW);
              cu::expertMatmulWeightGradBf16(x16.cv(), dy16.cv(), di.v(), o[2],
                                             transW);
            },
            what);
        const char *names[] = {" out", " dx", " dW"};
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(0,
                    std::memcmp(got[size_t(i)].data(), staged[size_t(i)].data(),
                                got[size_t(i)].size() * sizeof(float)))
              << what << names[i]
              << ": not the bits of the fp32-staged kernels";
        if (bad)
          continue;
        IView hi{ids.data(), Shape{c.n}};
        Tensor refY(Shape{c.n, c.m}), refDx(Shape{c.n, c.kk}), refDw(wShape);
        cpu::expertMatmulBf16(x16.host(), w16.host(), hi, refY.v(), transW);
        cpu::expertMatmulBf16(dy16.host(), w16.host(), hi, refDx.v(), !transW);
        cpu::expertMatmulWeightGradBf16(x16.host(), dy16.host(), hi, refDw.v(),
                                        transW);
        expectClose(got[0], refY, what + " out against the CPU twin");
        expectClose(got[1], refDx, what + " dx against the CPU twin");
        // The weight gradient sums up to n products per element in fp32, in
        // another order than the CPU twin: its rounding error grows with the
        // square root of the sum's length (20,000 rows: 1.02e-5 measured).
        expectClose(got[2], refDw, what + " dW against the CPU twin",
                    kTol * std::max(1.0, std::sqrt(double(c.n) / 2048)));
      }
}

// Out-of-range ids: their rows of out are NaN and the rest as if they were
// absent; all of dW is NaN. No rows at all: dW is zero.
TEST_F(CudaKernels, ExpertMatmulOutOfRangeAndEmpty) {
  const int64_t n = 300, kk = 64, m = 40, e = 4;
  for (cu::Precision prec : {cu::Precision::Bf16, cu::Precision::Fp32}) {
    PrecisionGuard guard(prec);
    const double tol = prec == cu::Precision::Bf16 ? kBf16Tol : kTol;
    std::string what = prec == cu::Precision::Bf16 ? "experts bad ids bf16"
                                                   : "experts bad ids";
    Tensor x = uniform(Shape{n, kk}), w = uniform(Shape{e, kk, m}),
           dy = uniform(Shape{n, m});
    std::vector<int64_t> ids = routing(n, e, 0.0, -1), valid = ids;
    ids[7] = -1;
    ids[100] = e;
    valid[7] = valid[100] = 0;
    Tensor refY(Shape{n, m});
    cpu::expertMatmul(x.cv(), w.cv(), IView{valid.data(), Shape{n}}, refY.v(),
                      false);
    for (int64_t c = 0; c < m; ++c)
      refY[7 * m + c] = refY[100 * m + c] = NAN;
    Dev dx(x), dw(w), ddy(dy);
    DevIds di(ids, Shape{n});
    auto got = runTwice(
        {{refY.shape, {}}, {w.shape, {}}},
        [&](const std::vector<FView> &o) {
          cu::expertMatmul(dx.cv(), dw.cv(), di.v(), o[0], false);
          cu::expertMatmulWeightGrad(dx.cv(), ddy.cv(), di.v(), o[1], false);
        },
        what);
    expectClose(got[0], refY, what + " out", tol);
    EXPECT_TRUE(std::all_of(got[1].begin(), got[1].end(),
                            [](float v) { return std::isnan(v); }))
        << what << ": dW is not all NaN";

    Tensor none(Shape{0, kk}), noneDy(Shape{0, m});
    Dev dnone(none), dnoneDy(noneDy);
    std::vector<int64_t> noIds;
    DevIds dnoIds(noIds, Shape{0});
    auto zero = runTwice(
        {{w.shape, {}}},
        [&](const std::vector<FView> &o) {
          cu::expertMatmulWeightGrad(dnone.cv(), dnoneDy.cv(), dnoIds.v(), o[0],
                                     false);
        },
        what + " no rows");
    EXPECT_TRUE(std::all_of(zero[0].begin(), zero[0].end(),
                            [](float v) { return v == 0.0f; }))
        << what << ": dW of no rows is not zero";
  }
}

} // namespace
} // namespace cuda_test
