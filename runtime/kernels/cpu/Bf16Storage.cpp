//===- Bf16Storage.cpp - Kernels with bf16 operands or results ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host twins of the bf16-storage kernels (KernelList.def): each runs its
// fp32 namesake and rounds what it stores, or widens its bf16 operands and
// runs the fp32 kernel, so they define exactly what the CUDA kernels must
// compute. Only GPU trainers store tensors in bf16; these exist so that
// every kernel has a reference (test/Unit/CudaKernels) and an interpreter
// entry.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <vector>

namespace rondo::cpu {

using namespace detail;

namespace {

using kernels::bf16BitsToFloat;
using kernels::floatToBf16Bits;

void store(const std::vector<float> &values, BView out) {
  parallelBlocks(int64_t(values.size()), 1 << 16, 1,
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t i = lo; i < hi; ++i)
                     out.data[i] = floatToBf16Bits(values[i]);
                 });
}

void widenInto(CBView x, float *out) {
  parallelBlocks(x.shape.numel(), 1 << 16, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out[i] = bf16BitsToFloat(x.data[i]);
  });
}

std::vector<float> widen(CBView x) {
  std::vector<float> values(size_t(x.shape.numel()));
  widenInto(x, values.data());
  return values;
}

/// The fp32 form of a bf16 result that may be skipped (null data): the
/// fp32 kernel writes view(), store() rounds it into the result.
struct Fp32Result {
  BView result;
  std::vector<float> values;
  explicit Fp32Result(BView r)
      : result(r), values(r.data ? size_t(r.shape.numel()) : 0) {}
  FView view() {
    return FView{result.data ? values.data() : nullptr, result.shape};
  }
  void storeRounded() const {
    if (result.data)
      store(values, result);
  }
};

/// Runs `compute` into an fp32 temporary of out's shape, then rounds it
/// into out.
template <typename Compute> void viaFp32(BView out, Compute &&compute) {
  std::vector<float> tmp(size_t(out.shape.numel()));
  compute(FView{tmp.data(), out.shape});
  store(tmp, out);
}

} // namespace

void toBf16(CFView x, BView out) {
  if (x.shape.numel() != out.shape.numel())
    contract("toBf16", "input and output sizes differ");
  parallelBlocks(out.shape.numel(), 1 << 16, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out.data[i] = floatToBf16Bits(x.data[i]);
  });
}

void matmulBf16(CBView a, CBView b, FView out, bool transA, bool transB,
                bool accumulate) {
  std::vector<float> wa = widen(a), wb = widen(b);
  matmul(CFView{wa.data(), a.shape}, CFView{wb.data(), b.shape}, out, transA,
         transB, accumulate);
}

void matmulBf16Scaled(CBView a, CBView b, float alpha, FView out, bool transA,
                      bool transB) {
  matmulBf16(a, b, out, transA, transB, /*accumulate=*/false);
  // binary Mul's arithmetic: one fp32 product per element.
  parallelBlocks(out.shape.numel(), 1 << 16, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out.data[i] = out.data[i] * alpha;
  });
}

void expertMatmulBf16(CBView x, CBView w, IView ids, FView out, bool transW) {
  std::vector<float> wx = widen(x), ww = widen(w);
  expertMatmul(CFView{wx.data(), x.shape}, CFView{ww.data(), w.shape}, ids, out,
               transW);
}

void expertMatmulWeightGradBf16(CBView x, CBView dY, IView ids, FView dW,
                                bool transW) {
  std::vector<float> wx = widen(x), wy = widen(dY);
  expertMatmulWeightGrad(CFView{wx.data(), x.shape},
                         CFView{wy.data(), dY.shape}, ids, dW, transW);
}

void rmsNormToBf16(CFView x, CFView w, float eps, BView y) {
  viaFp32(y, [&](FView t) { rmsNorm(x, w, eps, t); });
}

void binaryToBf16(BinaryKind kind, CFView a, CFView b, BView out) {
  viaFp32(out, [&](FView t) { binary(kind, a, b, t); });
}

void unaryBackwardToBf16(UnaryKind kind, CFView x, CFView dOut, BView dX) {
  viaFp32(dX, [&](FView t) { unaryBackward(kind, x, dOut, t); });
}

void transposeToBf16(CFView x, const int64_t *perm, BView out) {
  viaFp32(out, [&](FView t) { transpose(x, perm, t); });
}

void gatedActToBf16(UnaryKind kind, CFView gate, CFView up, BView out) {
  viaFp32(out, [&](FView t) { gatedAct(kind, gate, up, t); });
}

void gatedActBackwardToBf16(UnaryKind kind, CFView gate, CFView up, CFView dOut,
                            BView dGate, BView dUp) {
  Fp32Result g(dGate), u(dUp);
  gatedActBackward(kind, gate, up, dOut, g.view(), u.view());
  g.storeRounded();
  u.storeRounded();
}

void matmulBf16ToBf16(CBView a, CBView b, BView out, bool transA, bool transB,
                      bool accumulate) {
  // With accumulate the fp32 temporary starts from out's values.
  std::vector<float> tmp = accumulate
                               ? widen(CBView{out.data, out.shape})
                               : std::vector<float>(size_t(out.shape.numel()));
  matmulBf16(a, b, FView{tmp.data(), out.shape}, transA, transB, accumulate);
  store(tmp, out);
}

void gatedActBf16(UnaryKind kind, CBView gate, CBView up, BView out) {
  std::vector<float> g = widen(gate), u = widen(up);
  gatedActToBf16(kind, CFView{g.data(), gate.shape}, CFView{u.data(), up.shape},
                 out);
}

void gatedActBackwardBf16(UnaryKind kind, CBView gate, CBView up, CBView dOut,
                          BView dGate, BView dUp) {
  std::vector<float> g = widen(gate), u = widen(up), d = widen(dOut);
  gatedActBackwardToBf16(kind, CFView{g.data(), gate.shape},
                         CFView{u.data(), up.shape},
                         CFView{d.data(), dOut.shape}, dGate, dUp);
}

void rmsNormRotaryToBf16(CFView x, CFView w, float eps, CFView cos, CFView sin,
                         BView y) {
  viaFp32(y, [&](FView t) { rmsNormRotary(x, w, eps, cos, sin, t); });
}

void attentionBf16(CBView q, CBView k, CBView v, bool causal, int64_t window,
                   float scale, FView out, FView lse) {
  std::vector<float> wq = widen(q), wk = widen(k), wv = widen(v);
  attention(CFView{wq.data(), q.shape}, CFView{wk.data(), k.shape},
            CFView{wv.data(), v.shape}, causal, window, scale, out, lse);
}

void attentionBackwardBf16(CBView q, CBView k, CBView v, CFView out, CFView lse,
                           CFView dOut, bool causal, int64_t window,
                           float scale, FView dQ, FView dK, FView dV) {
  std::vector<float> wq = widen(q), wk = widen(k), wv = widen(v);
  attentionBackward(CFView{wq.data(), q.shape}, CFView{wk.data(), k.shape},
                    CFView{wv.data(), v.shape}, out, lse, dOut, causal, window,
                    scale, dQ, dK, dV);
}

void attentionBf16ToBf16(CBView q, CBView k, CBView v, bool causal,
                         int64_t window, float scale, BView out, FView lse) {
  viaFp32(out, [&](FView t) {
    attentionBf16(q, k, v, causal, window, scale, t, lse);
  });
}

void attentionBackwardBf16ToBf16(CBView q, CBView k, CBView v, CBView out,
                                 CFView lse, CBView dOut, bool causal,
                                 int64_t window, float scale, BView dQ,
                                 BView dK, BView dV) {
  std::vector<float> wo = widen(out), wd = widen(dOut);
  Fp32Result gq(dQ), gk(dK), gv(dV);
  attentionBackwardBf16(q, k, v, CFView{wo.data(), out.shape}, lse,
                        CFView{wd.data(), dOut.shape}, causal, window, scale,
                        gq.view(), gk.view(), gv.view());
  gq.storeRounded();
  gk.storeRounded();
  gv.storeRounded();
}

namespace {
constexpr int64_t kSwapHeadsAndTokens[4] = {0, 2, 1, 3};

/// [B, L, H, D] as [B, H, L, D] (or back).
Shape swappedShape(const Shape &s) {
  if (s.rank != 4)
    contract("attention*Tokens", "token-major operands must be rank 4");
  return Shape{s.dims[0], s.dims[2], s.dims[1], s.dims[3]};
}

/// x moved to the other layout, as bf16 bits.
std::vector<uint16_t> swappedHeads(CBView x, Shape &moved) {
  moved = swappedShape(x.shape);
  std::vector<uint16_t> out(size_t(x.shape.numel()));
  transposeBf16(x, kSwapHeadsAndTokens, BView{out.data(), moved});
  return out;
}
} // namespace

// The token-major attention kernels: the heads-major ones between the
// transposes they replace.
void attentionBf16ToBf16Tokens(CBView q, CBView k, CBView v, bool causal,
                               int64_t window, float scale, BView out,
                               FView lse) {
  Shape vs, os = swappedShape(out.shape);
  std::vector<uint16_t> vh = swappedHeads(v, vs);
  std::vector<uint16_t> oh(size_t(out.shape.numel()));
  attentionBf16ToBf16(q, k, CBView{vh.data(), vs}, causal, window, scale,
                      BView{oh.data(), os}, lse);
  transposeBf16(CBView{oh.data(), os}, kSwapHeadsAndTokens, out);
}

void attentionBackwardBf16ToBf16Tokens(CBView q, CBView k, CBView v, CBView out,
                                       CFView lse, CBView dOut, bool causal,
                                       int64_t window, float scale, BView dQ,
                                       BView dK, BView dV) {
  Shape vs, os, gs;
  std::vector<uint16_t> vh = swappedHeads(v, vs), oh = swappedHeads(out, os),
                        gh = swappedHeads(dOut, gs);
  std::vector<uint16_t> dvh(dV.data ? size_t(dV.shape.numel()) : 0);
  attentionBackwardBf16ToBf16(q, k, CBView{vh.data(), vs},
                              CBView{oh.data(), os}, lse, CBView{gh.data(), gs},
                              causal, window, scale, dQ, dK,
                              BView{dV.data ? dvh.data() : nullptr, vs});
  if (dV.data)
    transposeBf16(CBView{dvh.data(), vs}, kSwapHeadsAndTokens, dV);
}

void transposeBf16(CBView x, const int64_t *perm, BView out) {
  std::vector<float> wx = widen(x);
  transposeToBf16(CFView{wx.data(), x.shape}, perm, out);
}

void rmsNormRotaryBackwardBf16(CFView x, CFView w, float eps, CFView cos,
                               CFView sin, CBView dY, FView dX, FView dW) {
  std::vector<float> wy = widen(dY);
  rmsNormRotaryBackward(x, w, eps, cos, sin, CFView{wy.data(), dY.shape}, dX,
                        dW);
}

void rmsNormRotaryBackwardToBf16(CFView x, CFView w, float eps, CFView cos,
                                 CFView sin, CFView dY, BView dX, FView dW) {
  Fp32Result gx(dX);
  rmsNormRotaryBackward(x, w, eps, cos, sin, dY, gx.view(), dW);
  gx.storeRounded();
}

void rmsNormRotaryBackwardBf16ToBf16(CFView x, CFView w, float eps, CFView cos,
                                     CFView sin, CBView dY, BView dX,
                                     FView dW) {
  std::vector<float> wy = widen(dY);
  rmsNormRotaryBackwardToBf16(x, w, eps, cos, sin, CFView{wy.data(), dY.shape},
                              dX, dW);
}

void fromBf16(CBView x, FView out) {
  if (x.shape.numel() != out.shape.numel())
    contract("fromBf16", "input and output sizes differ");
  widenInto(x, out.data);
}

void addRmsNormToBf16(CFView a, CFView b, CFView w, float eps, FView sum,
                      BView y) {
  viaFp32(y, [&](FView t) { addRmsNorm(a, b, w, eps, sum, t); });
}

void addBf16(CFView a, CBView b, FView out) {
  if (a.shape.numel() != out.shape.numel() ||
      b.shape.numel() != out.shape.numel())
    contract("addBf16", "a, b and out differ in size");
  std::vector<float> wb = widen(b);
  binary(BinaryKind::Add, CFView{a.data, out.shape},
         CFView{wb.data(), out.shape}, out);
}

void addRmsNormBf16(CFView a, CBView b, CFView w, float eps, FView sum,
                    FView y) {
  std::vector<float> wb = widen(b);
  addRmsNorm(a, CFView{wb.data(), b.shape}, w, eps, sum, y);
}

void addRmsNormBf16ToBf16(CFView a, CBView b, CFView w, float eps, FView sum,
                          BView y) {
  std::vector<float> wb = widen(b);
  addRmsNormToBf16(a, CFView{wb.data(), b.shape}, w, eps, sum, y);
}

void rmsNormBackwardAddWithBf16(CFView x, CFView w, float eps, CFView dY,
                                CFView r, FView sum, BView sumBf16, FView dW) {
  rmsNormBackwardAdd(x, w, eps, dY, r, sum, dW);
  toBf16(CFView{sum.data, sum.shape}, sumBf16);
}

void rmsNormBackwardBf16(CFView x, CFView w, float eps, CBView dY, FView dX,
                         FView dW) {
  std::vector<float> wy = widen(dY);
  rmsNormBackward(x, w, eps, CFView{wy.data(), dY.shape}, dX, dW);
}

void rmsNormBackwardBf16Add(CFView x, CFView w, float eps, CBView dY, CFView r,
                            FView sum, FView dW) {
  std::vector<float> wy = widen(dY);
  rmsNormBackwardAdd(x, w, eps, CFView{wy.data(), dY.shape}, r, sum, dW);
}

void rmsNormBackwardBf16AddWithBf16(CFView x, CFView w, float eps, CBView dY,
                                    CFView r, FView sum, BView sumBf16,
                                    FView dW) {
  std::vector<float> wy = widen(dY);
  rmsNormBackwardAddWithBf16(x, w, eps, CFView{wy.data(), dY.shape}, r, sum,
                             sumBf16, dW);
}

void rmsNormRotaryBf16ToBf16(CBView x, CFView w, float eps, CFView cos,
                             CFView sin, BView y) {
  std::vector<float> wx = widen(x);
  rmsNormRotaryToBf16(CFView{wx.data(), x.shape}, w, eps, cos, sin, y);
}

void rmsNormRotaryBf16BackwardBf16ToBf16(CBView x, CFView w, float eps,
                                         CFView cos, CFView sin, CBView dY,
                                         BView dX, FView dW) {
  std::vector<float> wx = widen(x);
  rmsNormRotaryBackwardBf16ToBf16(CFView{wx.data(), x.shape}, w, eps, cos, sin,
                                  dY, dX, dW);
}

void transposeRotaryToBf16(CFView x, CFView cos, CFView sin, BView y) {
  viaFp32(y, [&](FView t) { transposeRotary(x, cos, sin, t); });
}

void transposeRotaryBf16ToBf16(CBView x, CFView cos, CFView sin, BView y) {
  std::vector<float> wx = widen(x);
  transposeRotaryToBf16(CFView{wx.data(), x.shape}, cos, sin, y);
}

void transposeRotaryBackwardBf16(CBView dY, CFView cos, CFView sin, FView dX) {
  std::vector<float> wy = widen(dY);
  transposeRotaryBackward(CFView{wy.data(), dY.shape}, cos, sin, dX);
}

void transposeRotaryBackwardToBf16(CFView dY, CFView cos, CFView sin,
                                   BView dX) {
  viaFp32(dX, [&](FView t) { transposeRotaryBackward(dY, cos, sin, t); });
}

void transposeRotaryBackwardBf16ToBf16(CBView dY, CFView cos, CFView sin,
                                       BView dX) {
  std::vector<float> wy = widen(dY);
  transposeRotaryBackwardToBf16(CFView{wy.data(), dY.shape}, cos, sin, dX);
}

void linearCrossEntropyBf16W(CFView h, CBView w, bool transW, IView labels,
                             int64_t ignoreIndex, int64_t chunkRows,
                             float *lossSum, int *badLabel) {
  std::vector<float> ww = widen(w);
  linearCrossEntropy(h, CFView{ww.data(), w.shape}, transW, labels, ignoreIndex,
                     chunkRows, lossSum, badLabel);
}

void linearCrossEntropyBackwardBf16W(CFView h, CBView w, bool transW,
                                     IView labels, int64_t ignoreIndex,
                                     int64_t chunkRows, float gradScale,
                                     FView dH, FView dW) {
  std::vector<float> ww = widen(w);
  linearCrossEntropyBackward(h, CFView{ww.data(), w.shape}, transW, labels,
                             ignoreIndex, chunkRows, gradScale, dH, dW);
}

void linearCrossEntropyWithGradBf16W(CFView h, CBView w, bool transW,
                                     IView labels, int64_t ignoreIndex,
                                     int64_t chunkRows, float gradScale,
                                     float *lossSum, int *badLabel, FView dH,
                                     FView dW) {
  std::vector<float> ww = widen(w);
  linearCrossEntropyWithGrad(h, CFView{ww.data(), w.shape}, transW, labels,
                             ignoreIndex, chunkRows, gradScale, lossSum,
                             badLabel, dH, dW);
}

void linearCrossEntropyWithGradBf16WAdd(CFView h, CBView w, bool transW,
                                        IView labels, int64_t ignoreIndex,
                                        int64_t chunkRows, float gradScale,
                                        float *lossSum, int *badLabel, FView dH,
                                        FView dW) {
  std::vector<float> ww = widen(w);
  linearCrossEntropyWithGradAdd(h, CFView{ww.data(), w.shape}, transW, labels,
                                ignoreIndex, chunkRows, gradScale, lossSum,
                                badLabel, dH, dW);
}

} // namespace rondo::cpu
