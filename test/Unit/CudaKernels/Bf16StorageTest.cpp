//===- Bf16StorageTest.cpp - The bf16-storage kernels on the GPU ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// kern-bf16-storage is meant to change no bit of a bf16 trainer: each
// `...ToBf16` kernel must store exactly the rounding of what its fp32
// namesake computes on the GPU, and `matmulBf16` on rounded operands must
// give exactly what `matmul` gives under Precision::Bf16 (which rounds its
// fp32 operands itself). Both are checked bitwise here, on the fast paths
// (aligned, multiple-of-4 shapes) and the general ones, and each kernel is
// also checked against its CPU twin (bf16 results to 2e-2 relative, the
// products to 1e-5).
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"
#include "ScalarOps.h"

using cpu::BView;
using cpu::CBView;

namespace {

using namespace cuda_test;

class CudaBf16Storage : public ::testing::Test {
protected:
  void SetUp() override {
    if (!gpuAvailable())
      GTEST_SKIP() << "no CUDA device";
    rondo::cpu::test::seededRng(20261126);
  }
  void TearDown() override { cu::setPrecision(cu::Precision::Fp32); }
};

// The host's rounding (ScalarOps.h), the reference of the device's.
uint16_t roundBits(float f) { return rondo::kernels::floatToBf16Bits(f); }
float widen(uint16_t h) { return rondo::kernels::bf16BitsToFloat(h); }

/// A device buffer of `n` bf16 words, read back with host().
struct Dev16 {
  uint16_t *p = nullptr;
  Shape shape;
  explicit Dev16(Shape s) : shape(s) {
    ck(cudaMalloc(&p, std::max<int64_t>(s.numel(), 1) * 2), "cudaMalloc");
  }
  explicit Dev16(const std::vector<uint16_t> &h, Shape s) : Dev16(s) {
    ck(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "upload");
  }
  ~Dev16() { cudaFree(p); }
  BView v() { return BView{p, shape}; }
  CBView cv() const { return CBView{p, shape}; }
  std::vector<uint16_t> host() const {
    ck(cudaDeviceSynchronize(), "sync");
    std::vector<uint16_t> h(size_t(shape.numel()));
    ck(cudaMemcpy(h.data(), p, h.size() * 2, cudaMemcpyDeviceToHost),
       "download");
    return h;
  }
};

/// fp32 device output, read back with host().
struct Out32 {
  Dev d;
  explicit Out32(Shape s) : d(Tensor(s)) {}
  FView v() { return FView{d.p, d.shape}; }
  std::vector<float> host() const {
    ck(cudaDeviceSynchronize(), "sync");
    std::vector<float> h(d.n);
    ck(cudaMemcpy(h.data(), d.p, d.n * 4, cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

/// The bf16 result equals the rounding of the fp32 result, bit for bit, and
/// is within bf16's precision of the CPU twin's.
void expectRoundingOf(const std::vector<uint16_t> &got,
                      const std::vector<float> &fp32,
                      const std::vector<uint16_t> &cpuTwin,
                      const std::string &what) {
  ASSERT_EQ(got.size(), fp32.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != roundBits(fp32[i]) && mismatches++ == 0)
      first = i;
  EXPECT_EQ(mismatches, 0u)
      << what << ": first at " << first << " (got " << got[first]
      << ", rounding of " << fp32[first] << ")";
  std::vector<float> g(got.size()), c(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    g[i] = widen(got[i]);
    c[i] = widen(cpuTwin[i]);
  }
  EXPECT_LE(normErr(g, c), 2e-2) << what << " against the CPU twin";
}

std::vector<uint16_t> cpuBf16(Shape s,
                              const std::function<void(BView)> &kernel) {
  std::vector<uint16_t> out(size_t(s.numel()));
  kernel(BView{out.data(), s});
  return out;
}

TEST_F(CudaBf16Storage, ToBf16) {
  for (Shape s : {Shape{64, 2048}, Shape{7, 13}}) {
    Tensor x = uniform(s, -3.0f, 3.0f);
    x[0] = INFINITY;
    x[1] = -0.0f;
    x[2] = 1.0f + 1.0f / 256.0f; // a tie: rounds to even
    Dev dx(x);
    Dev16 out(s);
    cu::toBf16(dx.cv(), out.v());
    std::vector<uint16_t> got = out.host();
    std::vector<uint16_t> twin =
        cpuBf16(s, [&](BView o) { cpu::toBf16(x.cv(), o); });
    EXPECT_EQ(got, twin) << str(s);
    EXPECT_EQ(got[2], roundBits(1.0f));
  }
}

TEST_F(CudaBf16Storage, RmsNormToBf16) {
  // [rows, 2048] and [rows, 128] take the vector kernels; width 72 is not a
  // vector width and 4098 is too wide: the general kernel.
  for (Shape s :
       {Shape{64, 2048}, Shape{4, 6, 128}, Shape{33, 72}, Shape{3, 4098}}) {
    int64_t width = s.dims[s.rank - 1];
    Tensor x = uniform(s, -2.0f, 2.0f), w = uniform(Shape{width}, 0.5f, 1.5f);
    Dev dx(x), dw(w);
    Out32 ref(s);
    cu::rmsNorm(dx.cv(), dw.cv(), 1e-6f, ref.v());
    Dev16 out(s);
    cu::rmsNormToBf16(dx.cv(), dw.cv(), 1e-6f, out.v());
    expectRoundingOf(
        out.host(), ref.host(),
        cpuBf16(s,
                [&](BView o) { cpu::rmsNormToBf16(x.cv(), w.cv(), 1e-6f, o); }),
        "rmsNormToBf16 " + str(s));
  }
}

TEST_F(CudaBf16Storage, BinaryToBf16) {
  struct Case {
    Shape a, b, out;
  };
  // Same shapes (the vector map), then a broadcast (the fp32 kernel and a
  // rounding pass).
  for (Case c : {Case{Shape{16, 4096}, Shape{16, 4096}, Shape{16, 4096}},
                 Case{Shape{5, 7}, Shape{5, 7}, Shape{5, 7}},
                 Case{Shape{8, 64}, Shape{64}, Shape{8, 64}}})
    for (BinaryKind kind : {BinaryKind::Mul, BinaryKind::Add}) {
      Tensor a = uniform(c.a), b = uniform(c.b);
      Dev da(a), db(b);
      Out32 ref(c.out);
      cu::binary(kind, da.cv(), db.cv(), ref.v());
      Dev16 out(c.out);
      cu::binaryToBf16(kind, da.cv(), db.cv(), out.v());
      expectRoundingOf(
          out.host(), ref.host(),
          cpuBf16(c.out,
                  [&](BView o) { cpu::binaryToBf16(kind, a.cv(), b.cv(), o); }),
          "binaryToBf16 " + str(c.out));
    }
}

TEST_F(CudaBf16Storage, UnaryBackwardToBf16) {
  for (Shape s : {Shape{16, 6144}, Shape{3, 5}}) {
    Tensor x = uniform(s, -4.0f, 4.0f), g = uniform(s);
    Dev dx(x), dg(g);
    Out32 ref(s);
    cu::unaryBackward(UnaryKind::Silu, dx.cv(), dg.cv(), ref.v());
    Dev16 out(s);
    cu::unaryBackwardToBf16(UnaryKind::Silu, dx.cv(), dg.cv(), out.v());
    expectRoundingOf(out.host(), ref.host(),
                     cpuBf16(s,
                             [&](BView o) {
                               cpu::unaryBackwardToBf16(UnaryKind::Silu, x.cv(),
                                                        g.cv(), o);
                             }),
                     "unaryBackwardToBf16 " + str(s));
  }
}

TEST_F(CudaBf16Storage, TransposeToBf16) {
  struct Case {
    Shape in;
    std::vector<int64_t> perm;
  };
  // [B,H,T,D] -> [B,T,H,D] keeps the inner run (vector path); the 2-D
  // transpose and the odd inner run take the element gather.
  for (Case c :
       {Case{Shape{2, 4, 32, 128}, {0, 2, 1, 3}}, Case{Shape{33, 17}, {1, 0}},
        Case{Shape{2, 3, 5, 6}, {0, 2, 1, 3}}}) {
    Shape outShape = c.in;
    for (int d = 0; d < c.in.rank; ++d)
      outShape.dims[d] = c.in.dims[c.perm[d]];
    Tensor x = uniform(c.in);
    Dev dx(x);
    Out32 ref(outShape);
    cu::transpose(dx.cv(), c.perm.data(), ref.v());
    Dev16 out(outShape);
    cu::transposeToBf16(dx.cv(), c.perm.data(), out.v());
    expectRoundingOf(out.host(), ref.host(),
                     cpuBf16(outShape,
                             [&](BView o) {
                               cpu::transposeToBf16(x.cv(), c.perm.data(), o);
                             }),
                     "transposeToBf16 " + str(outShape));
  }
}

TEST_F(CudaBf16Storage, GatedActIsItsCompositionAndItsTwinRoundsIt) {
  // The fused gated activation and its gradient against the unfused CUDA
  // kernels (bitwise: the same formulas, no contraction), against the CPU
  // (1e-5), and their bf16 twins against the rounding of their results.
  for (Shape s : {Shape{16, 6144}, Shape{5, 7}})
    for (UnaryKind kind : {UnaryKind::Silu, UnaryKind::GeluTanh}) {
      Tensor gate = uniform(s, -6.0f, 6.0f), up = uniform(s), dy = uniform(s);
      Dev dg(gate), du(up), ddy(dy);
      Out32 act(s), unfused(s), fused(s);
      cu::unary(kind, dg.cv(), act.v());
      cu::binary(BinaryKind::Mul, CFView{act.d.p, s}, du.cv(), unfused.v());
      cu::gatedAct(kind, dg.cv(), du.cv(), fused.v());
      std::vector<float> f = fused.host();
      EXPECT_EQ(f, unfused.host()) << "gatedAct " << str(s);
      Tensor cpuOut(s);
      cpu::gatedAct(kind, gate.cv(), up.cv(), cpuOut.v());
      expectClose(f, cpuOut, "gatedAct against the CPU " + str(s));
      Dev16 out16(s);
      cu::gatedActToBf16(kind, dg.cv(), du.cv(), out16.v());
      expectRoundingOf(out16.host(), f,
                       cpuBf16(s,
                               [&](BView o) {
                                 cpu::gatedActToBf16(kind, gate.cv(), up.cv(),
                                                     o);
                               }),
                       "gatedActToBf16 " + str(s));

      Out32 dyUp(s), wantGate(s), wantUp(s), gotGate(s), gotUp(s);
      cu::binary(BinaryKind::Mul, ddy.cv(), du.cv(), dyUp.v());
      cu::unaryBackward(kind, dg.cv(), CFView{dyUp.d.p, s}, wantGate.v());
      cu::binary(BinaryKind::Mul, ddy.cv(), CFView{act.d.p, s}, wantUp.v());
      cu::gatedActBackward(kind, dg.cv(), du.cv(), ddy.cv(), gotGate.v(),
                           gotUp.v());
      std::vector<float> gg = gotGate.host(), gu = gotUp.host();
      EXPECT_EQ(gg, wantGate.host()) << "gatedActBackward dGate " << str(s);
      EXPECT_EQ(gu, wantUp.host()) << "gatedActBackward dUp " << str(s);
      Tensor cpuGate(s), cpuUp(s);
      cpu::gatedActBackward(kind, gate.cv(), up.cv(), dy.cv(), cpuGate.v(),
                            cpuUp.v());
      expectClose(gg, cpuGate, "gatedActBackward dGate against the CPU");
      expectClose(gu, cpuUp, "gatedActBackward dUp against the CPU");
      Dev16 g16(s), u16(s);
      cu::gatedActBackwardToBf16(kind, dg.cv(), du.cv(), ddy.cv(), g16.v(),
                                 u16.v());
      std::vector<uint16_t> twinGate(size_t(s.numel())),
          twinUp(size_t(s.numel()));
      cpu::gatedActBackwardToBf16(kind, gate.cv(), up.cv(), dy.cv(),
                                  BView{twinGate.data(), s},
                                  BView{twinUp.data(), s});
      expectRoundingOf(g16.host(), gg, twinGate, "dGate bf16 " + str(s));
      expectRoundingOf(u16.host(), gu, twinUp, "dUp bf16 " + str(s));
      // A skipped result is not written.
      Dev16 only(s);
      cu::gatedActBackwardToBf16(kind, dg.cv(), du.cv(), ddy.cv(), only.v(),
                                 BView{nullptr, s});
      expectRoundingOf(only.host(), gg, twinGate, "dGate alone " + str(s));
    }
}

TEST_F(CudaBf16Storage, MatmulBf16IsMatmulOfRoundedOperands) {
  struct Case {
    Shape a, b, out;
    bool transA, transB, accumulate;
  };
  for (Case c :
       {Case{Shape{2, 64, 96}, Shape{96, 48}, Shape{2, 64, 48}, false, false,
             false},
        Case{Shape{128, 96}, Shape{80, 96}, Shape{128, 80}, false, true, false},
        Case{Shape{96, 64}, Shape{96, 40}, Shape{64, 40}, true, false, true},
        Case{Shape{2, 3, 16, 8}, Shape{3, 8, 12}, Shape{2, 3, 16, 12}, false,
             false, false}}) {
    Tensor a = uniform(c.a), b = uniform(c.b), init = uniform(c.out);
    Dev da(a), db(b);
    std::vector<uint16_t> a16(a.data.size()), b16(b.data.size());
    for (size_t i = 0; i < a16.size(); ++i)
      a16[i] = roundBits(a.data[i]);
    for (size_t i = 0; i < b16.size(); ++i)
      b16[i] = roundBits(b.data[i]);
    Dev16 da16(a16, c.a), db16(b16, c.b);

    cu::setPrecision(cu::Precision::Bf16);
    Dev ref(init), got(init);
    cu::matmul(da.cv(), db.cv(), FView{ref.p, c.out}, c.transA, c.transB,
               c.accumulate);
    cu::matmulBf16(da16.cv(), db16.cv(), FView{got.p, c.out}, c.transA,
                   c.transB, c.accumulate);
    cu::setPrecision(cu::Precision::Fp32);
    std::vector<float> r(ref.n), g(got.n);
    ck(cudaDeviceSynchronize(), "sync");
    ck(cudaMemcpy(r.data(), ref.p, r.size() * 4, cudaMemcpyDeviceToHost), "r");
    ck(cudaMemcpy(g.data(), got.p, g.size() * 4, cudaMemcpyDeviceToHost), "g");
    EXPECT_EQ(0, std::memcmp(r.data(), g.data(), r.size() * 4))
        << "matmulBf16 " << str(c.out);

    Tensor twin = init;
    cpu::matmulBf16(CBView{a16.data(), c.a}, CBView{b16.data(), c.b}, twin.v(),
                    c.transA, c.transB, c.accumulate);
    expectClose(g, twin, "matmulBf16 against the CPU twin " + str(c.out));
  }
}

/// kern-fuse-product-scale: the product scaled in cuBLAS's epilogue is the
/// product times alpha in fp32 (the binary Mul it replaces), bit for bit at
/// a power of two (LoRA's usual alpha / rank) and within an fp32 rounding
/// otherwise, and matches its CPU twin.
TEST_F(CudaBf16Storage, MatmulBf16ScaledIsTheProductTimesAlpha) {
  for (float alpha : {2.0f, 0.3f})
    for (bool transB : {false, true}) {
      Shape as{2, 64, 96}, bs = transB ? Shape{48, 96} : Shape{96, 48},
                           os{2, 64, 48};
      Tensor a = uniform(as), b = uniform(bs);
      std::vector<uint16_t> a16(a.data.size()), b16(b.data.size());
      for (size_t i = 0; i < a16.size(); ++i)
        a16[i] = roundBits(a.data[i]);
      for (size_t i = 0; i < b16.size(); ++i)
        b16[i] = roundBits(b.data[i]);
      Dev16 da16(a16, as), db16(b16, bs);
      Out32 plain(os), scaled(os);
      cu::matmulBf16(da16.cv(), db16.cv(), plain.v(), false, transB, false);
      cu::matmulBf16Scaled(da16.cv(), db16.cv(), alpha, scaled.v(), false,
                           transB);
      std::vector<float> p = plain.host(), g = scaled.host();
      size_t mismatches = 0;
      float worst = 0;
      for (size_t i = 0; i < p.size(); ++i) {
        float want = p[i] * alpha;
        mismatches += std::memcmp(&want, &g[i], 4) != 0;
        worst = std::max(worst, std::fabs(want - g[i]) /
                                    std::max(std::fabs(want), 1e-6f));
      }
      if (alpha == 2.0f)
        EXPECT_EQ(mismatches, 0u) << "alpha 2, transB " << transB;
      EXPECT_LE(worst, 2e-7f) << "alpha " << alpha << ", transB " << transB;
      Tensor twin(os);
      cpu::matmulBf16Scaled(CBView{a16.data(), as}, CBView{b16.data(), bs},
                            alpha, twin.v(), false, transB);
      expectClose(g, twin, "matmulBf16Scaled against the CPU twin");
    }
}

/// kern-fuse-product-scale's backward rewrite on cuBLAS: the product of
/// bf16(x) with alpha = 2 is the product of bf16(2 x), bit for bit, in the
/// input-gradient and weight-gradient forms of LoRA's A and B gradients.
TEST_F(CudaBf16Storage,
       ScaledProductOfTheRoundedOperandIsTheProductOfTheScaledOne) {
  for (bool transA : {false, true}) {
    Shape xs = transA ? Shape{96, 64} : Shape{64, 96}, bs{96, 48}, os{64, 48};
    Tensor x = uniform(xs), b = uniform(bs);
    std::vector<uint16_t> x16(x.data.size()), x2_16(x.data.size()),
        b16(b.data.size());
    for (size_t i = 0; i < x16.size(); ++i) {
      x16[i] = roundBits(x.data[i]);
      x2_16[i] = roundBits(x.data[i] * 2.0f);
    }
    for (size_t i = 0; i < b16.size(); ++i)
      b16[i] = roundBits(b.data[i]);
    Dev16 dx16(x16, xs), dx2(x2_16, xs), db16(b16, bs);
    Out32 scaledOperand(os), scaledProduct(os);
    cu::matmulBf16(dx2.cv(), db16.cv(), scaledOperand.v(), transA, false,
                   false);
    cu::matmulBf16Scaled(dx16.cv(), db16.cv(), 2.0f, scaledProduct.v(), transA,
                         false);
    std::vector<float> want = scaledOperand.host(), got = scaledProduct.host();
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
        << "transA " << transA;
  }
}

/// bf16 activations: the gated activation and its gradient of bf16
/// operands are the fp32 kernels' on the widened operands, rounded (bit for
/// bit), and the product stored in bf16 is the rounding of the fp32
/// product's, within bf16's precision of the CPU twins.
TEST_F(CudaBf16Storage, Bf16OperandKernelsRoundTheirFp32Namesakes) {
  // Eight elements a thread (16 x 6144), eight then a tail (3 x 12), and
  // the general kernels (5 x 7).
  for (Shape s : {Shape{16, 6144}, Shape{3, 12}, Shape{5, 7}}) {
    UnaryKind kind = UnaryKind::Silu;
    auto rounded = [&](const Tensor &t) {
      std::vector<uint16_t> h(t.data.size());
      for (size_t i = 0; i < h.size(); ++i)
        h[i] = roundBits(t.data[i]);
      return h;
    };
    auto widened = [&](const std::vector<uint16_t> &h) {
      Tensor t(s);
      for (size_t i = 0; i < h.size(); ++i)
        t.data[i] = widen(h[i]);
      return t;
    };
    std::vector<uint16_t> g16 = rounded(uniform(s, -6.0f, 6.0f)),
                          u16 = rounded(uniform(s)), d16 = rounded(uniform(s));
    Tensor gate = widened(g16), up = widened(u16), dy = widened(d16);
    Dev dg(gate), du(up), ddy(dy);
    Dev16 dg16(g16, s), du16(u16, s), dd16(d16, s);
    Out32 fwd(s), wantGate(s), wantUp(s);
    cu::gatedAct(kind, dg.cv(), du.cv(), fwd.v());
    cu::gatedActBackward(kind, dg.cv(), du.cv(), ddy.cv(), wantGate.v(),
                         wantUp.v());
    Dev16 out(s), outGate(s), outUp(s);
    cu::gatedActBf16(kind, dg16.cv(), du16.cv(), out.v());
    cu::gatedActBackwardBf16(kind, dg16.cv(), du16.cv(), dd16.cv(), outGate.v(),
                             outUp.v());
    CBView cg{g16.data(), s}, cu16{u16.data(), s}, cd{d16.data(), s};
    expectRoundingOf(
        out.host(), fwd.host(),
        cpuBf16(s, [&](BView o) { cpu::gatedActBf16(kind, cg, cu16, o); }),
        "gatedActBf16 " + str(s));
    std::vector<uint16_t> twinGate(size_t(s.numel())),
        twinUp(size_t(s.numel()));
    cpu::gatedActBackwardBf16(kind, cg, cu16, cd, BView{twinGate.data(), s},
                              BView{twinUp.data(), s});
    expectRoundingOf(outGate.host(), wantGate.host(), twinGate,
                     "gatedActBackwardBf16 dGate " + str(s));
    expectRoundingOf(outUp.host(), wantUp.host(), twinUp,
                     "gatedActBackwardBf16 dUp " + str(s));
  }
  // matmulBf16ToBf16: batched with a shared weight, and transposed.
  struct Case {
    Shape a, b, out;
    bool transA, transB;
  };
  for (Case c :
       {Case{Shape{2, 64, 96}, Shape{96, 48}, Shape{2, 64, 48}, false, false},
        Case{Shape{128, 96}, Shape{80, 96}, Shape{128, 80}, false, true}}) {
    std::vector<uint16_t> a16(size_t(c.a.numel())), b16(size_t(c.b.numel()));
    Tensor a = uniform(c.a), b = uniform(c.b);
    for (size_t i = 0; i < a16.size(); ++i)
      a16[i] = roundBits(a.data[i]);
    for (size_t i = 0; i < b16.size(); ++i)
      b16[i] = roundBits(b.data[i]);
    Dev16 da(a16, c.a), db(b16, c.b), got(c.out);
    Out32 want(c.out);
    cu::matmulBf16(da.cv(), db.cv(), want.v(), c.transA, c.transB, false);
    cu::matmulBf16ToBf16(da.cv(), db.cv(), got.v(), c.transA, c.transB, false);
    // cuBLAS may pick another kernel for a bf16 result, so the fp32 sums
    // it rounds may differ in their last bits: within bf16's precision of
    // the fp32 product and of the CPU twin.
    std::vector<uint16_t> twin = cpuBf16(c.out, [&](BView o) {
      cpu::matmulBf16ToBf16(CBView{a16.data(), c.a}, CBView{b16.data(), c.b}, o,
                            c.transA, c.transB, false);
    });
    std::vector<uint16_t> g = got.host();
    std::vector<float> gw(g.size()), tw(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      gw[i] = widen(g[i]);
      tw[i] = widen(twin[i]);
    }
    EXPECT_LE(normErr(gw, want.host()), 1e-2)
        << "matmulBf16ToBf16 " << str(c.out);
    EXPECT_LE(normErr(gw, tw), 2e-2) << "matmulBf16ToBf16 twin " << str(c.out);
    // accumulate: bf16(a·b + out) with out's bf16 values (the sums of the
    // input gradients of q, k and v): within bf16's precision of the fp32
    // sum, and of the CPU twin.
    std::vector<uint16_t> c16(size_t(c.out.numel()));
    Tensor cIn = uniform(c.out, -4.0f, 4.0f);
    for (size_t i = 0; i < c16.size(); ++i)
      c16[i] = roundBits(cIn.data[i]);
    Dev16 acc(c16, c.out);
    cu::matmulBf16ToBf16(da.cv(), db.cv(), acc.v(), c.transA, c.transB, true);
    std::vector<uint16_t> accTwin = c16;
    cpu::matmulBf16ToBf16(CBView{a16.data(), c.a}, CBView{b16.data(), c.b},
                          BView{accTwin.data(), c.out}, c.transA, c.transB,
                          true);
    std::vector<uint16_t> ga = acc.host();
    std::vector<float> gaw(ga.size()), taw(ga.size()), sum(ga.size());
    std::vector<float> product = want.host();
    for (size_t i = 0; i < ga.size(); ++i) {
      gaw[i] = widen(ga[i]);
      taw[i] = widen(accTwin[i]);
      sum[i] = product[i] + widen(c16[i]);
    }
    EXPECT_LE(normErr(gaw, sum), 1e-2)
        << "matmulBf16ToBf16 accumulate " << str(c.out);
    EXPECT_LE(normErr(gaw, taw), 2e-2)
        << "matmulBf16ToBf16 accumulate twin " << str(c.out);
  }
}

} // namespace

// The query and key heads attention reads in bf16: the fused kernel's
// (head width 128, and 64) and the three-kernel fallback's (width 12) fp32
// results, rounded.
TEST_F(CudaBf16Storage, RmsNormRotaryToBf16) {
  for (int64_t D : {128, 64, 12}) {
    Shape x{2, 9, 3, D}, y{2, 3, 9, D}, table{9, D};
    Tensor tx = uniform(x, -2.0f, 2.0f), w = uniform(Shape{D}, 0.5f, 1.5f),
           cos = uniform(table), sin = uniform(table);
    Dev dx(tx), dw(w), dc(cos), ds(sin);
    Out32 ref(y);
    cu::rmsNormRotary(dx.cv(), dw.cv(), 1e-6f, dc.cv(), ds.cv(), ref.v());
    Dev16 out(y);
    cu::rmsNormRotaryToBf16(dx.cv(), dw.cv(), 1e-6f, dc.cv(), ds.cv(), out.v());
    expectRoundingOf(out.host(), ref.host(),
                     cpuBf16(y,
                             [&](BView o) {
                               cpu::rmsNormRotaryToBf16(tx.cv(), w.cv(), 1e-6f,
                                                        cos.cv(), sin.cv(), o);
                             }),
                     "rmsNormRotaryToBf16 D=" + std::to_string(D));
  }
}

/// The attention shapes and paths of the bf16-interface tests: cuDNN at
/// head widths 128 and 64, Rondo's kernels (RONDO_ATTENTION=flash), and
/// D = 256, which only Rondo's kernels take.
namespace {
struct AttentionCase {
  int64_t B, Hq, Hkv, T, D;
  const char *path;
};
const AttentionCase kAttentionCases[] = {{2, 8, 2, 200, 128, "cudnn"},
                                         {1, 4, 4, 77, 64, "cudnn"},
                                         {2, 8, 2, 200, 128, "flash"},
                                         {1, 2, 1, 65, 256, "cudnn"}};
} // namespace

// attentionBf16 and attentionBackwardBf16 on bf16 q, k and v give exactly
// what attention and attentionBackward give under Precision::Bf16 on their
// fp32 values (which those round to the same bf16 themselves): on cuDNN
// where it serves, on Rondo's kernels (RONDO_ATTENTION=flash), and at
// D = 256, which only Rondo's kernels take. So kern-bf16-storage changes no
// bit of a trainer's attention.
TEST_F(CudaBf16Storage, AttentionBf16IsAttentionOfRoundedOperands) {
  for (const AttentionCase &c : kAttentionCases) {
    AttentionSwitch path(c.path);
    cu::setPrecision(cu::Precision::Bf16);
    Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.T, c.D}, ls{c.B, c.Hq, c.T};
    std::string what = std::string(c.path) + " D=" + std::to_string(c.D);
    // Values already on the bf16 grid, and their bits.
    auto rounded = [](Shape s, std::vector<uint16_t> &bits) {
      Tensor t = uniform(s, -2.0f, 2.0f);
      bits.resize(t.data.size());
      for (size_t i = 0; i < bits.size(); ++i) {
        bits[i] = roundBits(t.data[i]);
        t.data[i] = widen(bits[i]);
      }
      return t;
    };
    std::vector<uint16_t> qb, kb, vb;
    Tensor q = rounded(qs, qb), k = rounded(ks, kb), v = rounded(ks, vb),
           dOut = uniform(qs);
    Dev dq(q), dk(k), dv(v), ddo(dOut);
    Dev16 q16(qb, qs), k16(kb, ks), v16(vb, ks);
    const float scale = 1.0f / std::sqrt(float(c.D));
    Out32 o32(qs), l32(ls), o16(qs), l16(ls);
    cu::attention(dq.cv(), dk.cv(), dv.cv(), true, 0, scale, o32.v(), l32.v());
    cu::attentionBf16(q16.cv(), k16.cv(), v16.cv(), true, 0, scale, o16.v(),
                      l16.v());
    std::vector<float> out = o32.host(), lse = l32.host();
    EXPECT_EQ(o16.host(), out) << what << " out";
    EXPECT_EQ(l16.host(), lse) << what << " lse";
    CFView oView{o32.d.p, qs}, lView{l32.d.p, ls};
    Out32 gq(qs), gk(ks), gv(ks), hq(qs), hk(ks), hv(ks);
    cu::attentionBackward(dq.cv(), dk.cv(), dv.cv(), oView, lView, ddo.cv(),
                          true, 0, scale, gq.v(), gk.v(), gv.v());
    cu::attentionBackwardBf16(q16.cv(), k16.cv(), v16.cv(), oView, lView,
                              ddo.cv(), true, 0, scale, hq.v(), hk.v(), hv.v());
    EXPECT_EQ(hq.host(), gq.host()) << what << " dQ";
    EXPECT_EQ(hk.host(), gk.host()) << what << " dK";
    EXPECT_EQ(hv.host(), gv.host()) << what << " dV";
    cu::setPrecision(cu::Precision::Fp32);
  }
}

namespace {

/// Uniform values on the bf16 grid, with their bits.
/// t rounded to bf16: the bits into `bits`, the widened values returned.
Tensor roundedCopy(Tensor t, std::vector<uint16_t> &bits) {
  bits.resize(t.data.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    bits[i] = roundBits(t.data[i]);
    t.data[i] = widen(bits[i]);
  }
  return t;
}

Tensor roundedUniform(Shape s, std::vector<uint16_t> &bits, float lo = -2.0f,
                      float hi = 2.0f) {
  return roundedCopy(uniform(s, lo, hi), bits);
}

} // namespace

// attentionBf16ToBf16 and attentionBackwardBf16ToBf16 store exactly the
// rounding of what attentionBf16 and attentionBackwardBf16 compute from the
// same (widened) out and dOut: on cuDNN, which writes these tensors in bf16
// itself (so kern-bf16-storage storing them changes no bit of a trainer),
// on Rondo's kernels, and at D = 256. The CPU twins agree to bf16's
// precision.
TEST_F(CudaBf16Storage, AttentionResultsInBf16AreTheRoundedResults) {
  for (const AttentionCase &c : kAttentionCases) {
    AttentionSwitch path(c.path);
    cu::setPrecision(cu::Precision::Bf16);
    Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.T, c.D}, ls{c.B, c.Hq, c.T};
    std::string what = std::string(c.path) + " D=" + std::to_string(c.D);
    std::vector<uint16_t> qb, kb, vb, gb;
    Tensor q = roundedUniform(qs, qb), k = roundedUniform(ks, kb),
           v = roundedUniform(ks, vb), dOut = roundedUniform(qs, gb);
    Dev16 q16(qb, qs), k16(kb, ks), v16(vb, ks), g16(gb, qs);
    const float scale = 1.0f / std::sqrt(float(c.D));
    // Forward: the bf16 output is the rounded fp32 one; lse is the same.
    Out32 o32(qs), l32(ls), l16(ls);
    Dev16 o16(qs);
    cu::attentionBf16(q16.cv(), k16.cv(), v16.cv(), true, 0, scale, o32.v(),
                      l32.v());
    cu::attentionBf16ToBf16(q16.cv(), k16.cv(), v16.cv(), true, 0, scale,
                            o16.v(), l16.v());
    std::vector<uint16_t> outBits = o16.host();
    std::vector<float> lse = l32.host();
    EXPECT_EQ(l16.host(), lse) << what << " lse";
    expectRoundingOf(outBits, o32.host(),
                     cpuBf16(qs,
                             [&](BView o) {
                               std::vector<float> l(lse.size());
                               cpu::attentionBf16ToBf16(
                                   CBView{qb.data(), qs}, CBView{kb.data(), ks},
                                   CBView{vb.data(), ks}, true, 0, scale, o,
                                   FView{l.data(), ls});
                             }),
                     what + " out");
    // Backward from the stored out and dOut.
    std::vector<float> outWide(outBits.size());
    for (size_t i = 0; i < outBits.size(); ++i)
      outWide[i] = widen(outBits[i]);
    Tensor ow(qs);
    ow.data = outWide;
    Dev dow(ow), ddo(dOut);
    CFView lView{l32.d.p, ls};
    Out32 gq(qs), gk(ks), gv(ks);
    cu::attentionBackwardBf16(q16.cv(), k16.cv(), v16.cv(), dow.cv(), lView,
                              ddo.cv(), true, 0, scale, gq.v(), gk.v(), gv.v());
    Dev16 hq(qs), hk(ks), hv(ks);
    cu::attentionBackwardBf16ToBf16(q16.cv(), k16.cv(), v16.cv(), o16.cv(),
                                    lView, g16.cv(), true, 0, scale, hq.v(),
                                    hk.v(), hv.v());
    std::vector<uint16_t> cpuQ(qb.size()), cpuK(kb.size()), cpuV(kb.size());
    cpu::attentionBackwardBf16ToBf16(
        CBView{qb.data(), qs}, CBView{kb.data(), ks}, CBView{vb.data(), ks},
        CBView{outBits.data(), qs}, CFView{lse.data(), ls},
        CBView{gb.data(), qs}, true, 0, scale, BView{cpuQ.data(), qs},
        BView{cpuK.data(), ks}, BView{cpuV.data(), ks});
    expectRoundingOf(hq.host(), gq.host(), cpuQ, what + " dQ");
    expectRoundingOf(hk.host(), gk.host(), cpuK, what + " dK");
    expectRoundingOf(hv.host(), gv.host(), cpuV, what + " dV");
    // A skipped gradient is not written and the others are unchanged.
    Dev16 sq(qs), sv(ks);
    cu::attentionBackwardBf16ToBf16(q16.cv(), k16.cv(), v16.cv(), o16.cv(),
                                    lView, g16.cv(), true, 0, scale, sq.v(),
                                    BView{nullptr, ks}, sv.v());
    EXPECT_EQ(sq.host(), hq.host()) << what << " dQ with dK skipped";
    EXPECT_EQ(sv.host(), hv.host()) << what << " dV with dK skipped";
    cu::setPrecision(cu::Precision::Fp32);
  }
}

// kern-fuse-attention-layout's kernels: v, out, dOut and dV token-major
// ([B, T, H, D]). They give the bits of the heads-major kernels between
// the transposes they replace (cuDNN through strides at head widths 128
// and 64, Rondo's kernels moving the tensors at D = 256 and under
// RONDO_ATTENTION=flash); the CPU twins within bf16's precision.
TEST_F(CudaBf16Storage, TokenMajorAttentionIsAttentionBetweenTransposes) {
  const int64_t perm[] = {0, 2, 1, 3};
  for (const AttentionCase &c : kAttentionCases) {
    AttentionSwitch path(c.path);
    cu::setPrecision(cu::Precision::Bf16);
    Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.T, c.D}, ls{c.B, c.Hq, c.T};
    Shape qt{c.B, c.T, c.Hq, c.D}, kt{c.B, c.T, c.Hkv, c.D};
    std::string what = std::string(c.path) + " D=" + std::to_string(c.D);
    std::vector<uint16_t> qb, kb, vb, gb;
    roundedUniform(qs, qb);
    roundedUniform(ks, kb);
    roundedUniform(kt, vb);
    roundedUniform(qt, gb);
    Dev16 q16(qb, qs), k16(kb, ks), vTok(vb, kt), gTok(gb, qt);
    const float scale = 1.0f / std::sqrt(float(c.D));
    // The heads-major reference: v and dOut moved, out and dV moved back.
    Dev16 vHeads(ks), gHeads(qs), oHeads(qs), oWant(qt);
    cu::transposeBf16(vTok.cv(), perm, vHeads.v());
    cu::transposeBf16(gTok.cv(), perm, gHeads.v());
    Out32 lWant(ls), lGot(ls);
    cu::attentionBf16ToBf16(q16.cv(), k16.cv(), vHeads.cv(), true, 0, scale,
                            oHeads.v(), lWant.v());
    cu::transposeBf16(oHeads.cv(), perm, oWant.v());
    Dev16 oGot(qt);
    cu::attentionBf16ToBf16Tokens(q16.cv(), k16.cv(), vTok.cv(), true, 0, scale,
                                  oGot.v(), lGot.v());
    std::vector<uint16_t> outBits = oGot.host();
    EXPECT_EQ(outBits, oWant.host()) << what << " out";
    EXPECT_EQ(lGot.host(), lWant.host()) << what << " lse";
    std::vector<float> lse = lWant.host();
    std::vector<uint16_t> cpuOut = cpuBf16(qt, [&](BView o) {
      std::vector<float> l(lse.size());
      cpu::attentionBf16ToBf16Tokens(
          CBView{qb.data(), qs}, CBView{kb.data(), ks}, CBView{vb.data(), kt},
          true, 0, scale, o, FView{l.data(), ls});
    });
    std::vector<float> g(outBits.size()), t(outBits.size());
    for (size_t i = 0; i < outBits.size(); ++i) {
      g[i] = widen(outBits[i]);
      t[i] = widen(cpuOut[i]);
    }
    EXPECT_LE(normErr(g, t), 2e-2) << what << " out against the CPU twin";

    CFView lView{lWant.d.p, ls};
    Dev16 hq(qs), hk(ks), hvHeads(ks), hvWant(kt);
    cu::attentionBackwardBf16ToBf16(q16.cv(), k16.cv(), vHeads.cv(),
                                    oHeads.cv(), lView, gHeads.cv(), true, 0,
                                    scale, hq.v(), hk.v(), hvHeads.v());
    cu::transposeBf16(hvHeads.cv(), perm, hvWant.v());
    Dev16 tq(qs), tk(ks), tv(kt);
    cu::attentionBackwardBf16ToBf16Tokens(q16.cv(), k16.cv(), vTok.cv(),
                                          oGot.cv(), lView, gTok.cv(), true, 0,
                                          scale, tq.v(), tk.v(), tv.v());
    EXPECT_EQ(tq.host(), hq.host()) << what << " dQ";
    EXPECT_EQ(tk.host(), hk.host()) << what << " dK";
    EXPECT_EQ(tv.host(), hvWant.host()) << what << " dV";
    std::vector<uint16_t> cpuQ(qb.size()), cpuK(kb.size()), cpuV(vb.size());
    cpu::attentionBackwardBf16ToBf16Tokens(
        CBView{qb.data(), qs}, CBView{kb.data(), ks}, CBView{vb.data(), kt},
        CBView{outBits.data(), qt}, CFView{lse.data(), ls},
        CBView{gb.data(), qt}, true, 0, scale, BView{cpuQ.data(), qs},
        BView{cpuK.data(), ks}, BView{cpuV.data(), kt});
    auto near = [&](const std::vector<uint16_t> &a,
                    const std::vector<uint16_t> &b, const char *name) {
      std::vector<float> x(a.size()), y(b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        x[i] = widen(a[i]);
        y[i] = widen(b[i]);
      }
      EXPECT_LE(normErr(x, y), 2e-2) << what << " " << name << " CPU twin";
    };
    near(tq.host(), cpuQ, "dQ");
    near(tk.host(), cpuK, "dK");
    near(tv.host(), cpuV, "dV");
    cu::setPrecision(cu::Precision::Fp32);
  }
}

/// Rounded random operands of the token-major attention the trainer calls
/// (attention*Tokens): q and k heads-major, v and dOut token-major, with
/// room for out and lse, on the device.
struct TokenMajorAttention {
  static std::vector<uint16_t> bits(Shape s) {
    std::vector<uint16_t> b;
    roundedUniform(s, b);
    return b;
  }
  Shape qs, ks, ls, qt, kt;
  Dev16 q16, k16, vTok, gTok, oTok;
  Out32 lse;
  float scale;
  TokenMajorAttention(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t D)
      : qs{B, Hq, T, D}, ks{B, Hkv, T, D}, ls{B, Hq, T}, qt{B, T, Hq, D},
        kt{B, T, Hkv, D}, q16(bits(qs), qs), k16(bits(ks), ks),
        vTok(bits(kt), kt), gTok(bits(qt), qt), oTok(qt), lse(ls),
        scale(1.0f / std::sqrt(float(D))) {}
  void forward() {
    cu::attentionBf16ToBf16Tokens(q16.cv(), k16.cv(), vTok.cv(), true, 0, scale,
                                  oTok.v(), lse.v());
  }
  void backward(Dev16 &dq, Dev16 &dk, Dev16 &dv) {
    cu::attentionBackwardBf16ToBf16Tokens(
        q16.cv(), k16.cv(), vTok.cv(), oTok.cv(), CFView{lse.d.p, ls},
        gTok.cv(), true, 0, scale, dq.v(), dk.v(), dv.v());
  }
};

// The deterministic cuDNN backward keeps B * Hq * T * S bf16 of dP in its
// workspace; over RONDO_CUDNN_WORKSPACE_MB it runs in head groups
// (CudnnAttention.cu's headGroupPlan), still on cuDNN, on token-major v,
// out, dOut and dV (8 query heads, T 1024: dP 16 MiB a row, the plan 20
// MiB). Over 4 kv heads: four rows at 48 MiB in two calls of two rows, at
// 24 MiB all heads of one row a call, at 12 MiB groups of 4 query heads of
// a row (two kv heads each), at 6 MiB groups of 2 (one kv head); over 2 kv
// heads at 6 MiB, each kv head's dK and dV summed from the parts of its
// two groups; one, two and four rows. Each split is the same bits twice
// and within bf16's precision of the single call over all heads.
TEST_F(CudaBf16Storage, AttentionBackwardInHeadGroups) {
  if (const char *why = cu::cudnnAttentionUnavailable())
    GTEST_SKIP() << "cuDNN attention unavailable: " << why;
  AttentionSwitch path("cudnn");
  cu::setPrecision(cu::Precision::Bf16);
  struct Case {
    int64_t B, Hkv;
    std::vector<const char *> limitsMb;
  };
  const Case cases[] = {{2, 4, {"24", "12", "6"}},
                        {1, 4, {"12", "6"}},
                        {2, 2, {"6"}},
                        {4, 4, {"48", "24"}}};
  for (const Case &c : cases) {
    const int64_t B = c.B, Hkv = c.Hkv;
    TokenMajorAttention a(B, /*Hq=*/8, Hkv, /*T=*/1024, /*D=*/128);
    a.forward();
    using Grads = std::vector<std::vector<uint16_t>>;
    auto backward = [&](const char *limitMb) {
      if (limitMb)
        setenv("RONDO_CUDNN_WORKSPACE_MB", limitMb, 1);
      Dev16 dq(a.qs), dk(a.ks), dv(a.kt);
      a.backward(dq, dk, dv);
      unsetenv("RONDO_CUDNN_WORKSPACE_MB");
      EXPECT_EQ(std::string(implName(cu::lastAttentionImpl())), "cudnn")
          << "B " << B << " Hkv " << Hkv << " limit "
          << (limitMb ? limitMb : "default");
      return Grads{dq.host(), dk.host(), dv.host()};
    };
    const Grads whole = backward(nullptr);
    for (const char *limitMb : c.limitsMb) {
      const Grads split = backward(limitMb), again = backward(limitMb);
      const char *names[] = {"dQ", "dK", "dV"};
      for (size_t i = 0; i < 3; ++i) {
        std::string what = std::string(names[i]) + " B " + std::to_string(B) +
                           " Hkv " + std::to_string(Hkv) + " limit " + limitMb +
                           " MiB";
        EXPECT_EQ(split[i], again[i]) << what << ": not the same bits twice";
        std::vector<float> x(split[i].size()), y(whole[i].size());
        for (size_t j = 0; j < x.size(); ++j) {
          x[j] = widen(split[i][j]);
          y[j] = widen(whole[i][j]);
        }
        EXPECT_LE(normErr(x, y), 1e-2) << what << " against one call";
      }
    }
  }
  cu::setPrecision(cu::Precision::Fp32);
}

// The bf16 attention at the Qwen3-8B shape of the LoRA benchmark (one row,
// 32 query heads, 8 kv heads, D 128, causal) at T 16K and 32K, token-major
// as the trainer calls it: the forward, the backward as it runs by default
// (cuDNN in head groups where its plan for all heads is over the workspace
// limit) and on Rondo's kernels (RONDO_ATTENTION=flash). Run with
// --gtest_also_run_disabled_tests --gtest_filter='*LongAttentionTiming'.
TEST_F(CudaBf16Storage, DISABLED_LongAttentionTiming) {
  cu::setPrecision(cu::Precision::Bf16);
  for (int64_t T : {16384, 32768}) {
    TokenMajorAttention a(/*B=*/1, /*Hq=*/32, /*Hkv=*/8, T, /*D=*/128);
    Dev16 dq(a.qs), dk(a.ks), dv(a.kt);
    const double flops = 2.0 * 2.0 * 32 * double(T) * double(T) * 128 / 2;
    for (const char *impl : {"cudnn", "flash"}) {
      AttentionSwitch path(impl);
      const double fwd = timeMs([&] { a.forward(); }, 3);
      const std::string fwdImpl = implName(cu::lastAttentionImpl());
      const double bwd = timeMs([&] { a.backward(dq, dk, dv); }, 3);
      std::printf("[ long ] B=1 Hq=32 Hkv=8 T=%lld D=128 causal asked=%s "
                  "fwd=%s %.2f ms (%.1f TFLOP/s) bwd=%s %.2f ms (%.1f "
                  "TFLOP/s)\n",
                  (long long)T, impl, fwdImpl.c_str(), fwd, flops / fwd / 1e9,
                  implName(cu::lastAttentionImpl()), bwd,
                  2.5 * flops / bwd / 1e9);
    }
  }
  cu::setPrecision(cu::Precision::Fp32);
}

// transposeBf16 moves bf16 values exactly (the vectorised path and the
// gather), fromBf16 widens them exactly, and rmsNormRotaryBackwardBf16 is
// rmsNormRotaryBackward of the widened gradient, bit for bit (fused at head
// widths 128 and 64, the three-kernel fallback at 12).
TEST_F(CudaBf16Storage, Bf16GradientReaders) {
  for (Shape s : {Shape{2, 9, 3, 128}, Shape{2, 5, 3, 6}}) {
    std::vector<uint16_t> bits;
    Tensor x = roundedUniform(s, bits);
    Shape t{s.dims[0], s.dims[2], s.dims[1], s.dims[3]};
    const int64_t perm[] = {0, 2, 1, 3};
    Dev16 in(bits, s), moved(t);
    cu::transposeBf16(in.cv(), perm, moved.v());
    std::vector<uint16_t> twin = cpuBf16(t, [&](BView o) {
      cpu::transposeBf16(CBView{bits.data(), s}, perm, o);
    });
    EXPECT_EQ(moved.host(), twin) << "transposeBf16 " << str(s);
    Out32 wide(s);
    cu::fromBf16(in.cv(), wide.v());
    EXPECT_EQ(wide.host(), x.data) << "fromBf16 " << str(s);
  }
  for (int64_t D : {128, 64, 12}) {
    Shape xs{2, 9, 3, D}, ys{2, 3, 9, D}, table{9, D};
    Tensor tx = uniform(xs, -2.0f, 2.0f), w = uniform(Shape{D}, 0.5f, 1.5f),
           cos = uniform(table), sin = uniform(table);
    std::vector<uint16_t> dyBits;
    Tensor dy = roundedUniform(ys, dyBits);
    Dev dx(tx), dw(w), dc(cos), ds(sin), ddy(dy);
    Dev16 dy16(dyBits, ys);
    Out32 gx(xs), gw(Shape{D}), hx(xs), hw(Shape{D});
    cu::rmsNormRotaryBackward(dx.cv(), dw.cv(), 1e-6f, dc.cv(), ds.cv(),
                              ddy.cv(), gx.v(), gw.v());
    cu::rmsNormRotaryBackwardBf16(dx.cv(), dw.cv(), 1e-6f, dc.cv(), ds.cv(),
                                  dy16.cv(), hx.v(), hw.v());
    std::string what = "rmsNormRotaryBackwardBf16 D=" + std::to_string(D);
    EXPECT_EQ(hx.host(), gx.host()) << what << " dX";
    EXPECT_EQ(hw.host(), gw.host()) << what << " dW";
    std::vector<float> cx(size_t(xs.numel())), cw(static_cast<size_t>(D));
    cpu::rmsNormRotaryBackwardBf16(
        tx.cv(), w.cv(), 1e-6f, cos.cv(), sin.cv(), CBView{dyBits.data(), ys},
        FView{cx.data(), xs}, FView{cw.data(), Shape{D}});
    EXPECT_LE(normErr(hx.host(), cx), 1e-5) << what << " dX against the CPU";
    EXPECT_LE(normErr(hw.host(), cw), 1e-5) << what << " dW against the CPU";
    // dX stored in bf16: the rounding of the fp32 dX, dW unchanged, from an
    // fp32 and from a bf16 dY.
    Dev16 bx(xs), cx16(xs);
    Out32 bw(Shape{D}), cw16(Shape{D});
    cu::rmsNormRotaryBackwardToBf16(dx.cv(), dw.cv(), 1e-6f, dc.cv(), ds.cv(),
                                    ddy.cv(), bx.v(), bw.v());
    cu::rmsNormRotaryBackwardBf16ToBf16(dx.cv(), dw.cv(), 1e-6f, dc.cv(),
                                        ds.cv(), dy16.cv(), cx16.v(), cw16.v());
    std::vector<uint16_t> twinX(size_t(xs.numel()));
    std::vector<float> twinW(static_cast<size_t>(D));
    cpu::rmsNormRotaryBackwardToBf16(tx.cv(), w.cv(), 1e-6f, cos.cv(), sin.cv(),
                                     dy.cv(), BView{twinX.data(), xs},
                                     FView{twinW.data(), Shape{D}});
    expectRoundingOf(bx.host(), gx.host(), twinX, what + " ToBf16 dX");
    expectRoundingOf(cx16.host(), gx.host(), twinX, what + " Bf16ToBf16 dX");
    EXPECT_EQ(bw.host(), gw.host()) << what << " ToBf16 dW";
    EXPECT_EQ(cw16.host(), gw.host()) << what << " Bf16ToBf16 dW";
  }
}

// The query and key projections stored in bf16 by their products: the
// norm-and-rotary forward and backward read them widened, with the bits of
// the fp32-x kernels given the widened values (fused at head widths 128 and
// 64, the general kernels at 12).
TEST_F(CudaBf16Storage, NormRotaryOfBf16Projections) {
  for (int64_t D : {128, 64, 12}) {
    Shape xs{2, 9, 3, D}, ys{2, 3, 9, D}, table{9, D};
    std::vector<uint16_t> xBits, dyBits;
    Tensor x = roundedUniform(xs, xBits), dy = roundedUniform(ys, dyBits);
    Tensor w = uniform(Shape{D}, 0.5f, 1.5f), cos = uniform(table),
           sin = uniform(table);
    Dev dx(x), dw(w), dc(cos), ds(sin);
    Dev16 x16(xBits, xs), dy16(dyBits, ys);
    std::string what = "D=" + std::to_string(D);
    Dev16 want(ys), got(ys);
    cu::rmsNormRotaryToBf16(dx.cv(), dw.cv(), 1e-6f, dc.cv(), ds.cv(),
                            want.v());
    cu::rmsNormRotaryBf16ToBf16(x16.cv(), dw.cv(), 1e-6f, dc.cv(), ds.cv(),
                                got.v());
    EXPECT_EQ(got.host(), want.host()) << "rmsNormRotaryBf16ToBf16 " << what;
    std::vector<uint16_t> twin = cpuBf16(ys, [&](BView o) {
      cpu::rmsNormRotaryBf16ToBf16(CBView{xBits.data(), xs}, w.cv(), 1e-6f,
                                   cos.cv(), sin.cv(), o);
    });
    std::vector<float> g(twin.size()), t(twin.size());
    std::vector<uint16_t> gotBits = got.host();
    for (size_t i = 0; i < twin.size(); ++i) {
      g[i] = widen(gotBits[i]);
      t[i] = widen(twin[i]);
    }
    EXPECT_LE(normErr(g, t), 2e-2) << "rmsNormRotaryBf16ToBf16 CPU " << what;
    Dev16 wantDx(xs), gotDx(xs);
    Out32 wantDw(Shape{D}), gotDw(Shape{D});
    cu::rmsNormRotaryBackwardBf16ToBf16(dx.cv(), dw.cv(), 1e-6f, dc.cv(),
                                        ds.cv(), dy16.cv(), wantDx.v(),
                                        wantDw.v());
    cu::rmsNormRotaryBf16BackwardBf16ToBf16(x16.cv(), dw.cv(), 1e-6f, dc.cv(),
                                            ds.cv(), dy16.cv(), gotDx.v(),
                                            gotDw.v());
    EXPECT_EQ(gotDx.host(), wantDx.host())
        << "rmsNormRotaryBf16BackwardBf16ToBf16 dX " << what;
    EXPECT_EQ(gotDw.host(), wantDw.host())
        << "rmsNormRotaryBf16BackwardBf16ToBf16 dW " << what;
    std::vector<uint16_t> twinDx(size_t(xs.numel()));
    std::vector<float> twinDw(static_cast<size_t>(D));
    cpu::rmsNormRotaryBf16BackwardBf16ToBf16(
        CBView{xBits.data(), xs}, w.cv(), 1e-6f, cos.cv(), sin.cv(),
        CBView{dyBits.data(), ys}, BView{twinDx.data(), xs},
        FView{twinDw.data(), Shape{D}});
    EXPECT_LE(normErr(gotDw.host(), twinDw), 1e-5)
        << "rmsNormRotaryBf16BackwardBf16ToBf16 dW CPU " << what;
    std::vector<uint16_t> gd = gotDx.host();
    std::vector<float> gdw(gd.size()), tdw(gd.size());
    for (size_t i = 0; i < gd.size(); ++i) {
      gdw[i] = widen(gd[i]);
      tdw[i] = widen(twinDx[i]);
    }
    EXPECT_LE(normErr(gdw, tdw), 2e-2)
        << "rmsNormRotaryBf16BackwardBf16ToBf16 dX CPU " << what;
  }
}

// kern-fuse-norm-rotary's heads without a norm: transposeRotary is transpose
// then rotary, and transposeRotaryBackward rotaryBackward then transpose,
// bit for bit (four pairs a thread at head widths 128 and 64, one at 12),
// with tables longer than the sequence as a shorter row's are; the bf16
// forms are the roundings of those results, from fp32 operands and from
// their bf16 forms; the CPU twins to 1e-5 (fp32) and 2e-2 (bf16).
TEST_F(CudaBf16Storage, TransposeRotaryIsTransposeThenRotary) {
  const int64_t perm[] = {0, 2, 1, 3};
  for (int64_t D : {128, 64, 12}) {
    Shape xs{2, 9, 3, D}, ys{2, 3, 9, D}, table{11, D};
    std::string what = "D=" + std::to_string(D);
    std::vector<uint16_t> xBits, dyBits;
    Tensor x = roundedUniform(xs, xBits), dy = roundedUniform(ys, dyBits);
    Tensor cos = uniform(table), sin = uniform(table);
    Dev dx(x), ddy(dy), dc(cos), ds(sin);
    Dev16 x16(xBits, xs), dy16(dyBits, ys);

    Out32 moved(ys), want(ys), got(ys);
    cu::transpose(dx.cv(), perm, moved.v());
    cu::rotary(CFView{moved.d.p, ys}, dc.cv(), ds.cv(), want.v());
    cu::transposeRotary(dx.cv(), dc.cv(), ds.cv(), got.v());
    EXPECT_EQ(got.host(), want.host()) << "transposeRotary " << what;
    std::vector<float> twin(size_t(ys.numel()));
    cpu::transposeRotary(x.cv(), cos.cv(), sin.cv(), FView{twin.data(), ys});
    EXPECT_LE(normErr(got.host(), twin), 1e-5)
        << "transposeRotary CPU " << what;
    Dev16 y16(ys), yb16(ys);
    cu::transposeRotaryToBf16(dx.cv(), dc.cv(), ds.cv(), y16.v());
    cu::transposeRotaryBf16ToBf16(x16.cv(), dc.cv(), ds.cv(), yb16.v());
    std::vector<uint16_t> twin16 = cpuBf16(ys, [&](BView o) {
      cpu::transposeRotaryBf16ToBf16(CBView{xBits.data(), xs}, cos.cv(),
                                     sin.cv(), o);
    });
    expectRoundingOf(y16.host(), want.host(), twin16,
                     "transposeRotaryToBf16 " + what);
    expectRoundingOf(yb16.host(), want.host(), twin16,
                     "transposeRotaryBf16ToBf16 " + what);

    Out32 rotated(ys), wantDx(xs), gotDx(xs), gotDxWide(xs);
    cu::rotaryBackward(ddy.cv(), dc.cv(), ds.cv(), rotated.v());
    cu::transpose(CFView{rotated.d.p, ys}, perm, wantDx.v());
    cu::transposeRotaryBackward(ddy.cv(), dc.cv(), ds.cv(), gotDx.v());
    cu::transposeRotaryBackwardBf16(dy16.cv(), dc.cv(), ds.cv(), gotDxWide.v());
    EXPECT_EQ(gotDx.host(), wantDx.host())
        << "transposeRotaryBackward " << what;
    EXPECT_EQ(gotDxWide.host(), wantDx.host())
        << "transposeRotaryBackwardBf16 " << what;
    std::vector<float> twinDx(size_t(xs.numel()));
    cpu::transposeRotaryBackward(dy.cv(), cos.cv(), sin.cv(),
                                 FView{twinDx.data(), xs});
    EXPECT_LE(normErr(gotDx.host(), twinDx), 1e-5)
        << "transposeRotaryBackward CPU " << what;
    Dev16 dx16(xs), dxb16(xs);
    cu::transposeRotaryBackwardToBf16(ddy.cv(), dc.cv(), ds.cv(), dx16.v());
    cu::transposeRotaryBackwardBf16ToBf16(dy16.cv(), dc.cv(), ds.cv(),
                                          dxb16.v());
    std::vector<uint16_t> twinDx16 = cpuBf16(xs, [&](BView o) {
      cpu::transposeRotaryBackwardBf16ToBf16(CBView{dyBits.data(), ys},
                                             cos.cv(), sin.cv(), o);
    });
    expectRoundingOf(dx16.host(), wantDx.host(), twinDx16,
                     "transposeRotaryBackwardToBf16 " + what);
    expectRoundingOf(dxb16.host(), wantDx.host(), twinDx16,
                     "transposeRotaryBackwardBf16ToBf16 " + what);
  }
}

// kern-fuse-residual-norm's kernels are the calls they replace, bit for bit:
// addRmsNorm[ToBf16] = binary Add then rmsNorm[ToBf16] of the sum, and
// addBf16 / addRmsNormBf16[ToBf16] = binary Add / addRmsNorm[ToBf16] of the
// widened bf16 b;
// rmsNormBackwardAdd[WithBf16] = rmsNormBackward, binary Add of r and dX
// (then toBf16). Fast paths (widths 2048, 64) and the general kernels (6);
// the CPU twins to 1e-5.
TEST_F(CudaBf16Storage, ResidualNormFusionsAreTheCallsTheyReplace) {
  for (int64_t D : {2048, 64, 6}) {
    Shape xs{3, 5, D}, ws{D};
    std::string what = "D=" + std::to_string(D);
    Tensor a = uniform(xs, -2.0f, 2.0f), b = uniform(xs, -2.0f, 2.0f),
           w = uniform(ws, 0.5f, 1.5f), dy = uniform(xs), r = uniform(xs);
    Dev da(a), db(b), dw(w), ddy(dy), dr(r);
    // Forward.
    Out32 sum(xs), y(xs), fusedSum(xs), fusedY(xs), fusedSum16(xs);
    cu::binary(BinaryKind::Add, da.cv(), db.cv(), sum.v());
    cu::rmsNorm(CFView{sum.d.p, xs}, dw.cv(), 1e-6f, y.v());
    cu::addRmsNorm(da.cv(), db.cv(), dw.cv(), 1e-6f, fusedSum.v(), fusedY.v());
    EXPECT_EQ(fusedSum.host(), sum.host()) << "addRmsNorm sum " << what;
    EXPECT_EQ(fusedY.host(), y.host()) << "addRmsNorm y " << what;
    Dev16 y16(xs), fusedY16(xs);
    cu::rmsNormToBf16(CFView{sum.d.p, xs}, dw.cv(), 1e-6f, y16.v());
    cu::addRmsNormToBf16(da.cv(), db.cv(), dw.cv(), 1e-6f, fusedSum16.v(),
                         fusedY16.v());
    EXPECT_EQ(fusedSum16.host(), sum.host()) << "addRmsNormToBf16 sum " << what;
    EXPECT_EQ(fusedY16.host(), y16.host()) << "addRmsNormToBf16 y " << what;
    std::vector<float> cs(size_t(xs.numel())), cy(size_t(xs.numel()));
    cpu::addRmsNorm(a.cv(), b.cv(), w.cv(), 1e-6f, FView{cs.data(), xs},
                    FView{cy.data(), xs});
    EXPECT_LE(normErr(fusedY.host(), cy), 1e-5) << "addRmsNorm CPU " << what;
    // b stored in bf16 by its product: the fused kernels widen it as they
    // add, the bits of the fp32 kernels given the widened values.
    std::vector<uint16_t> b16;
    Tensor bw = roundedCopy(b, b16);
    Dev16 db16(b16, xs);
    Dev dbw(bw);
    Out32 wSum(xs), wY(xs), bfSum(xs), bfY(xs), bfSum16(xs), added(xs),
        addedRef(xs);
    cu::binary(BinaryKind::Add, da.cv(), dbw.cv(), addedRef.v());
    cu::addBf16(da.cv(), db16.cv(), added.v());
    EXPECT_EQ(added.host(), addedRef.host()) << "addBf16 " << what;
    std::vector<float> ca(size_t(xs.numel()));
    cpu::addBf16(a.cv(), CBView{b16.data(), xs}, FView{ca.data(), xs});
    EXPECT_LE(normErr(added.host(), ca), 1e-6) << "addBf16 CPU " << what;
    cu::addRmsNorm(da.cv(), dbw.cv(), dw.cv(), 1e-6f, wSum.v(), wY.v());
    cu::addRmsNormBf16(da.cv(), db16.cv(), dw.cv(), 1e-6f, bfSum.v(), bfY.v());
    EXPECT_EQ(bfSum.host(), wSum.host()) << "addRmsNormBf16 sum " << what;
    EXPECT_EQ(bfY.host(), wY.host()) << "addRmsNormBf16 y " << what;
    Dev16 wY16(xs), bfY16(xs);
    cu::addRmsNormToBf16(da.cv(), dbw.cv(), dw.cv(), 1e-6f, wSum.v(), wY16.v());
    cu::addRmsNormBf16ToBf16(da.cv(), db16.cv(), dw.cv(), 1e-6f, bfSum16.v(),
                             bfY16.v());
    EXPECT_EQ(bfSum16.host(), wSum.host()) << "Bf16ToBf16 sum " << what;
    EXPECT_EQ(bfY16.host(), wY16.host()) << "Bf16ToBf16 y " << what;
    std::vector<float> ts(size_t(xs.numel())), ty(size_t(xs.numel()));
    cpu::addRmsNormBf16(a.cv(), CBView{b16.data(), xs}, w.cv(), 1e-6f,
                        FView{ts.data(), xs}, FView{ty.data(), xs});
    EXPECT_LE(normErr(bfY.host(), ty), 1e-5) << "addRmsNormBf16 CPU " << what;
    EXPECT_LE(normErr(bfSum.host(), ts), 1e-5)
        << "addRmsNormBf16 sum CPU " << what;
    expectRoundingOf(bfY16.host(), bfY.host(),
                     cpuBf16(xs,
                             [&](BView y) {
                               cpu::addRmsNormBf16ToBf16(
                                   a.cv(), CBView{b16.data(), xs}, w.cv(),
                                   1e-6f, FView{ts.data(), xs}, y);
                             }),
                     "addRmsNormBf16ToBf16 " + what);
    // Backward.
    Out32 dx(xs), dW(ws), bsum(xs), fusedB(xs), fusedW(ws), fusedB2(xs),
        fusedW2(ws);
    cu::rmsNormBackward(da.cv(), dw.cv(), 1e-6f, ddy.cv(), dx.v(), dW.v());
    cu::binary(BinaryKind::Add, dr.cv(), CFView{dx.d.p, xs}, bsum.v());
    cu::rmsNormBackwardAdd(da.cv(), dw.cv(), 1e-6f, ddy.cv(), dr.cv(),
                           fusedB.v(), fusedW.v());
    EXPECT_EQ(fusedB.host(), bsum.host()) << "rmsNormBackwardAdd sum " << what;
    EXPECT_EQ(fusedW.host(), dW.host()) << "rmsNormBackwardAdd dW " << what;
    Dev16 copy(xs), fusedCopy(xs);
    cu::toBf16(CFView{bsum.d.p, xs}, copy.v());
    cu::rmsNormBackwardAddWithBf16(da.cv(), dw.cv(), 1e-6f, ddy.cv(), dr.cv(),
                                   fusedB2.v(), fusedCopy.v(), fusedW2.v());
    EXPECT_EQ(fusedB2.host(), bsum.host()) << "WithBf16 sum " << what;
    EXPECT_EQ(fusedCopy.host(), copy.host()) << "WithBf16 copy " << what;
    EXPECT_EQ(fusedW2.host(), dW.host()) << "WithBf16 dW " << what;
    // dW skipped: the sum alone.
    Out32 onlySum(xs);
    cu::rmsNormBackwardAdd(da.cv(), dw.cv(), 1e-6f, ddy.cv(), dr.cv(),
                           onlySum.v(), FView{nullptr, ws});
    EXPECT_EQ(onlySum.host(), bsum.host()) << "dW skipped " << what;
    std::vector<float> cb(size_t(xs.numel())), cw(static_cast<size_t>(D));
    cpu::rmsNormBackwardAdd(a.cv(), w.cv(), 1e-6f, dy.cv(), r.cv(),
                            FView{cb.data(), xs}, FView{cw.data(), ws});
    EXPECT_LE(normErr(fusedB.host(), cb), 1e-5)
        << "rmsNormBackwardAdd CPU " << what;
    EXPECT_LE(normErr(fusedW.host(), cw), 1e-5)
        << "rmsNormBackwardAdd dW CPU " << what;
    // dY stored in bf16 by its products (the summed input gradients of the
    // projections that read the norm): the bits of the fp32 kernels given
    // the widened values.
    std::vector<uint16_t> dy16;
    Tensor dyw = roundedCopy(dy, dy16);
    Dev16 ddy16(dy16, xs);
    Dev ddyw(dyw);
    Out32 wDx(xs), wDw(ws), wSumB(xs), wSumW(ws), bDx(xs), bDw(ws), bSum(xs),
        bSumW(ws), bSum2(xs), bSumW2(ws);
    cu::rmsNormBackward(da.cv(), dw.cv(), 1e-6f, ddyw.cv(), wDx.v(), wDw.v());
    cu::rmsNormBackwardBf16(da.cv(), dw.cv(), 1e-6f, ddy16.cv(), bDx.v(),
                            bDw.v());
    EXPECT_EQ(bDx.host(), wDx.host()) << "rmsNormBackwardBf16 dX " << what;
    EXPECT_EQ(bDw.host(), wDw.host()) << "rmsNormBackwardBf16 dW " << what;
    cu::rmsNormBackwardAdd(da.cv(), dw.cv(), 1e-6f, ddyw.cv(), dr.cv(),
                           wSumB.v(), wSumW.v());
    cu::rmsNormBackwardBf16Add(da.cv(), dw.cv(), 1e-6f, ddy16.cv(), dr.cv(),
                               bSum.v(), bSumW.v());
    EXPECT_EQ(bSum.host(), wSumB.host()) << "rmsNormBackwardBf16Add " << what;
    EXPECT_EQ(bSumW.host(), wSumW.host())
        << "rmsNormBackwardBf16Add dW " << what;
    Dev16 wCopy(xs), bCopy(xs);
    cu::toBf16(CFView{wSumB.d.p, xs}, wCopy.v());
    cu::rmsNormBackwardBf16AddWithBf16(da.cv(), dw.cv(), 1e-6f, ddy16.cv(),
                                       dr.cv(), bSum2.v(), bCopy.v(),
                                       bSumW2.v());
    EXPECT_EQ(bSum2.host(), wSumB.host()) << "Bf16AddWithBf16 sum " << what;
    EXPECT_EQ(bCopy.host(), wCopy.host()) << "Bf16AddWithBf16 copy " << what;
    EXPECT_EQ(bSumW2.host(), wSumW.host()) << "Bf16AddWithBf16 dW " << what;
    std::vector<float> tb(size_t(xs.numel())), tbw(static_cast<size_t>(D));
    cpu::rmsNormBackwardBf16Add(a.cv(), w.cv(), 1e-6f, CBView{dy16.data(), xs},
                                r.cv(), FView{tb.data(), xs},
                                FView{tbw.data(), ws});
    EXPECT_LE(normErr(bSum.host(), tb), 1e-5)
        << "rmsNormBackwardBf16Add CPU " << what;
    EXPECT_LE(normErr(bSumW.host(), tbw), 1e-5)
        << "rmsNormBackwardBf16Add dW CPU " << what;
  }
}
