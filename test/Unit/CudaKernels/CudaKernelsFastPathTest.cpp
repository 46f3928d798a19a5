//===- CudaKernelsFastPathTest.cpp - Memory-bound fast paths --------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The vectorised / tiled fast paths of the CUDA kernels (Elementwise.cu,
// Norms.cu, DataMovement.cu) against the CPU library, on the shapes that
// select them and on their edges: pointers offset by one float (which must
// fall back to the general kernels), sizes not divisible by 4, row-vector and
// column broadcasts, transposes with the inner dim kept and 2-D tiles with
// ragged edges, and the row-norm shapes of a real model. Where a kernel is
// bitwise equal to the CPU the comparison is bitwise; elsewhere 1e-5 in
// max-abs-normalised error, plus bitwise equality of the fast path and the
// general path (offset pointers) or of two runs.
//
// Without a GPU every test skips itself.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

namespace {

using cuda_test::ck;
using cuda_test::kTol;

class CudaFastPath : public testing::Test {
protected:
  void SetUp() override {
    if (!cuda_test::gpuAvailable())
      GTEST_SKIP() << "no CUDA device";
    gen.seed(20261123);
  }

  std::vector<float> random(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(n > 0 ? n : 0));
    for (float &x : v)
      x = dist(gen);
    return v;
  }

  std::mt19937 gen;
};

/// A device buffer of n floats starting `offset` floats into a 256-byte
/// aligned allocation (offset 1: misaligned for float4), poisoned with NaN.
class Dev {
public:
  Dev(int64_t n, int offset = 0) : n_(n), offset_(offset) {
    ck(cudaMalloc(&base_, size_t(n + 8) * sizeof(float)), "cudaMalloc");
    ck(cudaMemset(base_, 0xff, size_t(n + 8) * sizeof(float)), "memset");
  }
  Dev(const std::vector<float> &v, int offset = 0)
      : Dev(int64_t(v.size()), offset) {
    ck(cudaMemcpy(ptr(), v.data(), v.size() * sizeof(float),
                  cudaMemcpyHostToDevice),
       "upload");
  }
  ~Dev() { cudaFree(base_); }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;
  float *ptr() const { return base_ + offset_; }
  CFView cv(const Shape &s) const { return CFView{ptr(), s}; }
  FView v(const Shape &s) const { return FView{ptr(), s}; }
  std::vector<float> get() const {
    ck(cudaDeviceSynchronize(), "sync");
    std::vector<float> h(static_cast<size_t>(n_));
    ck(cudaMemcpy(h.data(), ptr(), h.size() * sizeof(float),
                  cudaMemcpyDeviceToHost),
       "download");
    return h;
  }

private:
  float *base_ = nullptr;
  int64_t n_;
  int offset_;
};

CFView hv(const std::vector<float> &v, const Shape &s) {
  return CFView{v.data(), s};
}
FView hm(std::vector<float> &v, const Shape &s) { return FView{v.data(), s}; }

void expectBitwise(const std::vector<float> &got,
                   const std::vector<float> &want, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i]
                    << ", want " << want[i] << " (bitwise)";
      return;
    }
  }
}

void expectClose(const std::vector<float> &got, const std::vector<float> &want,
                 const std::string &what, double tol = kTol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double maxRef = 0.0, maxErr = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i];
      return;
    }
    maxRef = std::max(maxRef, std::fabs(double(want[i])));
    maxErr = std::max(maxErr, std::fabs(double(got[i]) - double(want[i])));
  }
  double err = maxErr / (maxRef > 0.0 ? maxRef : 1.0);
  EXPECT_LE(err, tol) << what << " (max-abs-normalised error)";
}

/// A kernel's forward and backward results against the CPU's, run on aligned
/// (off 0: the fast path) and then misaligned buffers (off 1: the general
/// kernels), whose results must equal the fast path's bitwise.
struct FastVsGeneral {
  std::vector<float> fastF, fastB;
  void check(int off, const std::vector<float> &f, const std::vector<float> &b,
             const std::vector<float> &ref, const std::vector<float> &refB,
             const std::string &what) {
    expectClose(f, ref, what);
    expectClose(b, refB, what + " backward");
    if (off == 0) {
      fastF = f;
      fastB = b;
      return;
    }
    expectBitwise(f, fastF, what + " fast vs general");
    expectBitwise(b, fastB, what + " backward fast vs general");
  }
};

int64_t numel(const Shape &s) { return s.numel(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(CudaFastPath, BinaryFlatAlignedAndMisaligned) {
  const BinaryKind kinds[] = {BinaryKind::Add, BinaryKind::Sub,
                              BinaryKind::Mul, BinaryKind::Div,
                              BinaryKind::Max, BinaryKind::Min};
  for (int64_t n : {1, 3, 4, 5, 1000, 1023, 4097, 65536 + 3}) {
    Shape s{n};
    auto a = random(n), b = random(n, 0.5f, 2.0f);
    for (BinaryKind k : kinds) {
      std::vector<float> ref(static_cast<size_t>(n));
      cpu::binary(k, hv(a, s), hv(b, s), hm(ref, s));
      for (int off : {0, 1}) {
        Dev da(a, off), db(b, 0), dout(n, off);
        cu::binary(k, da.cv(s), db.cv(s), dout.v(s));
        expectBitwise(dout.get(), ref,
                      "binary n=" + std::to_string(n) +
                          " off=" + std::to_string(off));
      }
    }
  }
}

TEST_F(CudaFastPath, BinaryBroadcasts) {
  struct Case {
    Shape a, b, out;
  };
  std::vector<Case> cases;
  for (int64_t R : {1, 3, 64})
    for (int64_t C : {1, 7, 8, 1024, 1030}) {
      cases.push_back({Shape{R, C}, Shape{C}, Shape{R, C}});    // row vector
      cases.push_back({Shape{R, C}, Shape{R, 1}, Shape{R, C}}); // column
      cases.push_back({Shape{1}, Shape{R, C}, Shape{R, C}});    // scalar
      cases.push_back({Shape{C}, Shape{R, C}, Shape{R, C}});    // a row
      cases.push_back({Shape{2, R, C}, Shape{R, C}, Shape{2, R, C}});
    }
  cases.push_back({Shape{2, 3, 8}, Shape{2, 1, 8}, Shape{2, 3, 8}}); // rank 3
  for (const Case &c : cases) {
    auto a = random(numel(c.a)), b = random(numel(c.b), 0.5f, 2.0f);
    for (BinaryKind k : {BinaryKind::Add, BinaryKind::Mul, BinaryKind::Div}) {
      std::vector<float> ref(static_cast<size_t>(numel(c.out)));
      cpu::binary(k, hv(a, c.a), hv(b, c.b), hm(ref, c.out));
      for (int off : {0, 1}) {
        Dev da(a, off), db(b, off), dout(numel(c.out), 0);
        cu::binary(k, da.cv(c.a), db.cv(c.b), dout.v(c.out));
        expectBitwise(dout.get(), ref,
                      "binary bcast out " + std::to_string(numel(c.out)) +
                          " off=" + std::to_string(off));
      }
    }
  }
}

TEST_F(CudaFastPath, BinaryBackwardBroadcasts) {
  struct Case {
    Shape a, b, out;
  };
  std::vector<Case> cases = {
      {Shape{64, 1024}, Shape{1024}, Shape{64, 1024}},
      {Shape{64, 1024}, Shape{64, 1}, Shape{64, 1024}},
      {Shape{5, 7}, Shape{7}, Shape{5, 7}},
      {Shape{5, 7}, Shape{5, 1}, Shape{5, 7}},
      {Shape{4097}, Shape{4097}, Shape{4097}},
      {Shape{2, 300, 128}, Shape{128}, Shape{2, 300, 128}},
  };
  for (const Case &c : cases) {
    int64_t n = numel(c.out);
    auto a = random(numel(c.a)), b = random(numel(c.b), 0.5f, 2.0f);
    auto g = random(n);
    for (BinaryKind k : {BinaryKind::Mul, BinaryKind::Div, BinaryKind::Add}) {
      std::vector<float> ra(static_cast<size_t>(numel(c.a))),
          rb(static_cast<size_t>(numel(c.b)));
      cpu::binaryBackward(k, hv(a, c.a), hv(b, c.b), hv(g, c.out), hm(ra, c.a),
                          hm(rb, c.b));
      std::vector<float> first;
      for (int off : {0, 1}) {
        Dev da(a, off), db(b, off), dg(g, off);
        Dev ga(numel(c.a), off), gb(numel(c.b), off);
        cu::binaryBackward(k, da.cv(c.a), db.cv(c.b), dg.cv(c.out), ga.v(c.a),
                           gb.v(c.b));
        std::string what = "binaryBackward n=" + std::to_string(n) +
                           " off=" + std::to_string(off);
        auto gotA = ga.get(), gotB = gb.get();
        expectClose(gotA, ra, what + " dA");
        expectClose(gotB, rb, what + " dB");
        if (numel(c.a) == n)
          expectBitwise(gotA, ra, what + " dA");
        if (off == 0)
          first = gotB;
        else
          expectBitwise(gotB, first, what + " dB fast vs general");
      }
    }
  }
}

TEST_F(CudaFastPath, UnaryFamilyFlat) {
  const UnaryKind kinds[] = {UnaryKind::Neg,      UnaryKind::Exp,
                             UnaryKind::Relu,     UnaryKind::Silu,
                             UnaryKind::GeluTanh, UnaryKind::Sigmoid};
  for (int64_t n : {1, 6, 8, 1001, 65536 + 2}) {
    Shape s{n};
    auto x = random(n, -3.0f, 3.0f), g = random(n);
    for (UnaryKind k : kinds) {
      std::vector<float> ref(static_cast<size_t>(n)),
          refB(static_cast<size_t>(n));
      cpu::unary(k, hv(x, s), hm(ref, s));
      cpu::unaryBackward(k, hv(x, s), hv(g, s), hm(refB, s));
      FastVsGeneral runs;
      for (int off : {0, 1}) {
        Dev dx(x, off), dg(g, off), out(n, off), outB(n, off);
        cu::unary(k, dx.cv(s), out.v(s));
        cu::unaryBackward(k, dx.cv(s), dg.cv(s), outB.v(s));
        runs.check(off, out.get(), outB.get(), ref, refB,
                   "unary kind " + std::to_string(int(k)) +
                       " n=" + std::to_string(n));
      }
    }
    // scale, accumulate, roundToBf16: bitwise equal to the CPU.
    for (int off : {0, 1}) {
      std::string what =
          "n=" + std::to_string(n) + " off=" + std::to_string(off);
      std::vector<float> ref(static_cast<size_t>(n));
      cpu::scale(hv(x, s), 0.37f, hm(ref, s));
      Dev dx(x, off), out(n, off);
      cu::scale(dx.cv(s), 0.37f, out.v(s));
      expectBitwise(out.get(), ref, "scale " + what);

      std::vector<float> acc = g;
      cpu::accumulate(hv(x, s), hm(acc, s));
      Dev dacc(g, off);
      cu::accumulate(dx.cv(s), dacc.v(s));
      expectBitwise(dacc.get(), acc, "accumulate " + what);

      cpu::roundToBf16(hv(x, s), hm(ref, s));
      Dev rout(n, off);
      cu::roundToBf16(dx.cv(s), rout.v(s));
      expectBitwise(rout.get(), ref, "roundToBf16 " + what);
    }
  }
}

TEST_F(CudaFastPath, BroadcastToRowAndColumn) {
  for (int64_t R : {1, 5, 64})
    for (int64_t C : {3, 8, 1024}) {
      Shape out{R, C};
      for (Shape in : {Shape{C}, Shape{R, 1}, Shape{1}}) {
        auto x = random(numel(in));
        std::vector<float> ref(static_cast<size_t>(R * C));
        cpu::broadcastTo(hv(x, in), hm(ref, out));
        for (int off : {0, 1}) {
          Dev dx(x, off), dout(R * C, off);
          cu::broadcastTo(dx.cv(in), dout.v(out));
          expectBitwise(dout.get(), ref,
                        "broadcastTo R=" + std::to_string(R) +
                            " C=" + std::to_string(C));
        }
      }
    }
}

TEST_F(CudaFastPath, SumToShapeColumnsAndRows) {
  struct Case {
    Shape in, out;
  };
  std::vector<Case> cases = {
      {Shape{16384, 2048}, Shape{2048}},
      {Shape{2, 1024, 128}, Shape{128}},
      {Shape{37, 5}, Shape{5}},
      {Shape{100000, 3}, Shape{1, 3}},
      {Shape{8192, 1024}, Shape{8192, 1}},
      {Shape{7, 33}, Shape{7, 1}},
      {Shape{3, 100000}, Shape{3, 1}},
  };
  for (const Case &c : cases) {
    auto x = random(numel(c.in));
    std::vector<float> ref(static_cast<size_t>(numel(c.out)));
    cpu::sumToShape(hv(x, c.in), hm(ref, c.out));
    Dev dx(x);
    Dev o1(numel(c.out)), o2(numel(c.out));
    cu::sumToShape(dx.cv(c.in), o1.v(c.out));
    cu::sumToShape(dx.cv(c.in), o2.v(c.out));
    std::string what = "sumToShape " + std::to_string(numel(c.in)) + " -> " +
                       std::to_string(numel(c.out));
    auto got = o1.get();
    expectClose(got, ref, what);
    expectBitwise(o2.get(), got, what + " run to run");
  }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST_F(CudaFastPath, TransposeInnerKeptAndTiles) {
  struct Case {
    Shape in;
    std::vector<int64_t> perm;
  };
  std::vector<Case> cases = {
      {Shape{2, 5, 3, 8}, {0, 2, 1, 3}},     // inner kept, vectorised
      {Shape{2, 64, 16, 128}, {0, 2, 1, 3}}, // [B,T,H,D] -> [B,H,T,D]
      {Shape{2, 16, 64, 128}, {0, 2, 1, 3}}, // and back
      {Shape{2, 5, 3, 6}, {0, 2, 1, 3}},     // inner 6: scalar fallback
      {Shape{37, 45}, {1, 0}},               // 2-D tiles, ragged edges
      {Shape{1024, 3072}, {1, 0}},
      {Shape{3, 33, 65}, {0, 2, 1}},     // batched 2-D
      {Shape{2, 7, 3, 8}, {0, 2, 3, 1}}, // merges to [B, 24, 7]
      {Shape{4, 1, 9}, {2, 1, 0}},
      {Shape{3, 4, 5, 6}, {3, 1, 0, 2}}, // general
  };
  for (const Case &c : cases) {
    Shape out = c.in;
    for (int d = 0; d < c.in.rank; ++d)
      out.dims[d] = c.in.dims[c.perm[size_t(d)]];
    auto x = random(numel(c.in));
    std::vector<float> ref(static_cast<size_t>(numel(out)));
    cpu::transpose(hv(x, c.in), c.perm.data(), hm(ref, out));
    for (int off : {0, 1}) {
      Dev dx(x, off), dout(numel(out), 0);
      cu::transpose(dx.cv(c.in), c.perm.data(), dout.v(out));
      expectBitwise(dout.get(), ref,
                    "transpose numel " + std::to_string(numel(out)) +
                        " off=" + std::to_string(off));
    }
  }
}

TEST_F(CudaFastPath, SliceInnerRuns) {
  Shape in{6, 10, 16};
  int64_t starts[] = {1, 2, 4}, steps[] = {2, 3, 1};
  Shape out{3, 3, 8};
  auto x = random(numel(in)), g = random(numel(out));
  std::vector<float> ref(static_cast<size_t>(numel(out))),
      refB(static_cast<size_t>(numel(in)));
  cpu::slice(hv(x, in), starts, steps, hm(ref, out));
  cpu::sliceBackward(hv(g, out), starts, steps, hm(refB, in));
  for (int off : {0, 1}) {
    Dev dx(x, off), dout(numel(out), off), dg(g, off), dback(numel(in), off);
    cu::slice(dx.cv(in), starts, steps, dout.v(out));
    cu::sliceBackward(dg.cv(out), starts, steps, dback.v(in));
    expectBitwise(dout.get(), ref, "slice off=" + std::to_string(off));
    expectBitwise(dback.get(), refB,
                  "sliceBackward off=" + std::to_string(off));
  }
}

//===----------------------------------------------------------------------===//
// Norms and rotary
//===----------------------------------------------------------------------===//

TEST_F(CudaFastPath, Rotary) {
  for (Shape s : {Shape{2, 3, 5, 16}, Shape{1, 4, 33, 128}, Shape{2, 3, 5, 12},
                  Shape{2, 2, 7, 6}}) {
    int64_t T = s.dims[2], D = s.dims[3];
    Shape cs{T, D};
    auto x = random(numel(s)), c = random(T * D), sn = random(T * D);
    std::vector<float> ref(static_cast<size_t>(numel(s))),
        refB(static_cast<size_t>(numel(s)));
    cpu::rotary(hv(x, s), hv(c, cs), hv(sn, cs), hm(ref, s));
    cpu::rotaryBackward(hv(x, s), hv(c, cs), hv(sn, cs), hm(refB, s));
    FastVsGeneral runs;
    for (int off : {0, 1}) {
      Dev dx(x, off), dc(c), ds(sn), y(numel(s), off), yb(numel(s), off);
      cu::rotary(dx.cv(s), dc.cv(cs), ds.cv(cs), y.v(s));
      cu::rotaryBackward(dx.cv(s), dc.cv(cs), ds.cv(cs), yb.v(s));
      runs.check(off, y.get(), yb.get(), ref, refB,
                 "rotary D=" + std::to_string(D) +
                     " off=" + std::to_string(off));
    }
  }
}

void runRmsNorm(std::mt19937 &gen, const Shape &s, bool withW, bool withDx,
                int off) {
  int64_t n = s.numel(), D = s.dims[s.rank - 1];
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n)), g(static_cast<size_t>(n)),
      w(static_cast<size_t>(D));
  for (float &v : x)
    v = dist(gen);
  for (float &v : g)
    v = dist(gen);
  for (float &v : w)
    v = 1.0f + 0.5f * dist(gen);
  Shape ws{D};
  std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n)),
      dw(static_cast<size_t>(D));
  CFView wv = withW ? hv(w, ws) : CFView{nullptr, ws};
  cpu::rmsNorm(hv(x, s), wv, 1e-6f, hm(y, s));
  cpu::rmsNormBackward(hv(x, s), wv, 1e-6f, hv(g, s),
                       withDx ? hm(dx, s) : FView{nullptr, s}, hm(dw, ws));
  Dev dX(x, off), dG(g, off), dW(w, off);
  CFView dwv = withW ? dW.cv(ws) : CFView{nullptr, ws};
  std::string what = "rmsNorm numel " + std::to_string(n) +
                     " D=" + std::to_string(D) + (withW ? " w" : " no-w") +
                     (withDx ? "" : " no-dX") + " off=" + std::to_string(off);
  std::vector<float> firstDx, firstDw;
  for (int run = 0; run < 2; ++run) {
    Dev oy(n, off), odx(n, off), odw(D, off);
    cu::rmsNorm(dX.cv(s), dwv, 1e-6f, oy.v(s));
    cu::rmsNormBackward(dX.cv(s), dwv, 1e-6f, dG.cv(s),
                        withDx ? odx.v(s) : FView{nullptr, s}, odw.v(ws));
    auto gotY = oy.get(), gotDw = odw.get();
    if (run == 0) {
      expectClose(gotY, y, what + " y");
      expectClose(gotDw, dw, what + " dW");
      if (withDx) {
        firstDx = odx.get();
        expectClose(firstDx, dx, what + " dX");
      }
      firstDw = gotDw;
    } else {
      expectBitwise(gotDw, firstDw, what + " dW run to run");
      if (withDx)
        expectBitwise(odx.get(), firstDx, what + " dX run to run");
    }
  }
}

TEST_F(CudaFastPath, RmsNormModelShapes) {
  runRmsNorm(gen, Shape{8192, 2048}, true, true, 0);
  runRmsNorm(gen, Shape{2048, 1024}, true, true, 0);
  runRmsNorm(gen, Shape{2, 16, 1024, 128}, true, true, 0);
}

TEST_F(CudaFastPath, RmsNormEdges) {
  // Widths for each configuration (warp rows V = 1, 2, 4; block rows V = 1,
  // 2, 4), widths not divisible by 4 and misaligned pointers (general path),
  // no weight, no dX, a single tile.
  for (int64_t D : {4, 12, 128, 200, 256, 500, 1000, 1024, 2048, 3000, 6000,
                    8192, 8196, 127, 1030})
    for (int64_t R : {1, 3, 257})
      runRmsNorm(gen, Shape{R, D}, true, true, 0);
  runRmsNorm(gen, Shape{300, 128}, false, true, 0);
  runRmsNorm(gen, Shape{300, 1024}, true, false, 0);
  runRmsNorm(gen, Shape{300, 1024}, true, true, 1);
  runRmsNorm(gen, Shape{300, 128}, true, true, 1);
}

/// rmsNormRotary and its backward equal the three kernels they replace bit
/// for bit (the same arithmetic, rows and tiles), fused (D % 8 == 0 and D <=
/// 128) or not (other widths, misaligned pointers), and the CPU definition
/// to 1e-5.
TEST_F(CudaFastPath, RmsNormRotaryIsTheComposition) {
  const int64_t heads[4] = {0, 2, 1, 3};
  for (Shape s : {Shape{2, 33, 4, 128}, Shape{1, 9, 3, 64}, Shape{2, 7, 3, 24},
                  Shape{2, 5, 3, 12}, Shape{1, 6, 2, 256}})
    for (int off : {0, 1}) {
      int64_t B = s.dims[0], T = s.dims[1], H = s.dims[2], D = s.dims[3];
      int64_t n = s.numel();
      Shape ts{B, H, T, D}, cs{T, D}, ws{D};
      auto x = random(n, -2.0f, 2.0f), w = random(D, 0.5f, 1.5f),
           c = random(T * D), sn = random(T * D), g = random(n);
      std::string what = "rmsNormRotary D=" + std::to_string(D) +
                         " off=" + std::to_string(off);
      Dev dx(x, off), dw(w), dc(c), ds(sn), dg(g, off);
      // The separate kernels.
      Dev normed(n), moved(n), y(n), rotated(n), back(n), gx(n), gw(D);
      cu::rmsNorm(dx.cv(s), dw.cv(ws), 1e-6f, normed.v(s));
      cu::transpose(normed.cv(s), heads, moved.v(ts));
      cu::rotary(moved.cv(ts), dc.cv(cs), ds.cv(cs), y.v(ts));
      cu::rotaryBackward(dg.cv(ts), dc.cv(cs), ds.cv(cs), rotated.v(ts));
      cu::transpose(rotated.cv(ts), heads, back.v(s));
      cu::rmsNormBackward(dx.cv(s), dw.cv(ws), 1e-6f, back.cv(s), gx.v(s),
                          gw.v(ws));
      // Fused.
      Dev fy(n, off), fgx(n, off), fgw(D);
      cu::rmsNormRotary(dx.cv(s), dw.cv(ws), 1e-6f, dc.cv(cs), ds.cv(cs),
                        fy.v(ts));
      cu::rmsNormRotaryBackward(dx.cv(s), dw.cv(ws), 1e-6f, dc.cv(cs),
                                ds.cv(cs), dg.cv(ts), fgx.v(s), fgw.v(ws));
      expectBitwise(fy.get(), y.get(), what + " y");
      expectBitwise(fgx.get(), gx.get(), what + " dX");
      expectBitwise(fgw.get(), gw.get(), what + " dW");
      std::vector<float> ref(static_cast<size_t>(n)),
          refX(static_cast<size_t>(n)), refW(static_cast<size_t>(D));
      cpu::rmsNormRotary(hv(x, s), hv(w, ws), 1e-6f, hv(c, cs), hv(sn, cs),
                         hm(ref, ts));
      cpu::rmsNormRotaryBackward(hv(x, s), hv(w, ws), 1e-6f, hv(c, cs),
                                 hv(sn, cs), hv(g, ts), hm(refX, s),
                                 hm(refW, ws));
      expectClose(fy.get(), ref, what + " y vs CPU");
      expectClose(fgx.get(), refX, what + " dX vs CPU");
      expectClose(fgw.get(), refW, what + " dW vs CPU");
    }
}

TEST_F(CudaFastPath, LayerNormBackward) {
  for (Shape s : {Shape{64, 1024}, Shape{33, 128}, Shape{5, 6000},
                  Shape{4096, 2048}, Shape{9, 252}, Shape{7, 30}}) {
    int64_t n = s.numel(), D = s.dims[s.rank - 1];
    Shape ws{D};
    auto x = random(n, -2.0f, 3.0f), g = random(n), w = random(D, 0.5f, 1.5f);
    auto b = random(D);
    std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n)),
        dw(static_cast<size_t>(D)), db(static_cast<size_t>(D));
    cpu::layerNorm(hv(x, s), hv(w, ws), hv(b, ws), 1e-5f, hm(y, s));
    cpu::layerNormBackward(hv(x, s), hv(w, ws), 1e-5f, hv(g, s), hm(dx, s),
                           hm(dw, ws), hm(db, ws));
    Dev dX(x), dG(g), dW(w), dB(b);
    std::string what = "layerNorm numel " + std::to_string(n);
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
      Dev oy(n), odx(n), odw(D), odb(D);
      cu::layerNorm(dX.cv(s), dW.cv(ws), dB.cv(ws), 1e-5f, oy.v(s));
      cu::layerNormBackward(dX.cv(s), dW.cv(ws), 1e-5f, dG.cv(s), odx.v(s),
                            odw.v(ws), odb.v(ws));
      std::vector<float> got[3] = {odx.get(), odw.get(), odb.get()};
      if (run == 0) {
        expectClose(oy.get(), y, what + " y");
        expectClose(got[0], dx, what + " dX");
        expectClose(got[1], dw, what + " dW");
        expectClose(got[2], db, what + " dB");
        for (int i = 0; i < 3; ++i)
          first[i] = got[i];
      } else {
        for (int i = 0; i < 3; ++i)
          expectBitwise(got[i], first[i], what + " run to run");
      }
    }
  }
}

} // namespace
