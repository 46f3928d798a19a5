//===- TGCost.cpp - CostOpInterface for every tg op -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// FLOP counts follow the usual conventions (a multiply-add is 2 FLOPs; a
// transcendental counts as one), so that MFU computed from them is
// comparable with the 6N + 12LHQS figure in ARCHITECTURE.md. Activation bytes
// are exactly the values each gradient rule in TGGradients.cpp reads from the
// forward pass, which is what a stage that does not recompute must keep.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/IR/TGOps.h"

#include <algorithm>

using namespace mlir;
using namespace rondo::tg;

static double numel(Value v) {
  return double(cast<RankedTensorType>(v.getType()).getNumElements());
}
static double bytes(Value v) {
  return rondo::tg::detail::sumTensorBytes(ValueRange(v));
}
static double bytes(std::initializer_list<Value> vs) {
  double total = 0;
  for (Value v : vs)
    total += bytes(v);
  return total;
}

/// FLOPs of q·kᵀ and p·v for [B, H, T, D] x [B, H, S, D], halved when causal.
/// Two GEMM-sized products over the score pairs attended: all T x S, the
/// causal triangle (T*S/2, as flash-attention counts it), or with a window
/// the band, whose rows see min(window, visible keys) keys each.
static double attentionCoreFlops(Value q, Value k, bool causal,
                                 int64_t window) {
  auto qt = cast<RankedTensorType>(q.getType());
  auto kt = cast<RankedTensorType>(k.getType());
  double b = qt.getDimSize(0), h = qt.getDimSize(1), t = qt.getDimSize(2),
         d = qt.getDimSize(3), s = kt.getDimSize(2);
  if (!causal)
    return 4.0 * b * h * t * s * d;
  if (window <= 0 || window >= s)
    return 4.0 * b * h * t * s * d / 2;
  // Row i sees min(window, i + s - t + 1) keys (clamped at 0).
  double pairs = 0;
  for (int64_t i = 0, n = qt.getDimSize(2); i < n; ++i)
    pairs += double(std::clamp<int64_t>(i + int64_t(s) - n + 1, 0, window));
  return 4.0 * b * h * pairs * d;
}

static double linearCEFlops(Value h, Value w, bool transW) {
  auto ht = cast<RankedTensorType>(h.getType());
  auto wt = cast<RankedTensorType>(w.getType());
  double n = ht.getDimSize(0), d = ht.getDimSize(1);
  double v = transW ? wt.getDimSize(0) : wt.getDimSize(1);
  return 2 * n * d * v + 4 * n * v;
}

double ConstantOp::getFlops() { return 0; }
double ConstantOp::getActivationBytes() { return 0; }

double UnaryOp::getFlops() { return numel(getResult()); }
double UnaryOp::getActivationBytes() {
  return getKind() == UnaryKind::neg ? 0 : bytes(getX());
}

double BinaryOp::getFlops() { return numel(getResult()); }
double BinaryOp::getActivationBytes() {
  switch (getKind()) {
  case BinaryKind::add:
  case BinaryKind::sub:
    return 0;
  default:
    return bytes({getLhs(), getRhs()});
  }
}

double GatedActOp::getFlops() { return 2 * numel(getResult()); }
double GatedActOp::getActivationBytes() { return bytes({getGate(), getUp()}); }

double MatmulOp::getFlops() {
  auto a = cast<RankedTensorType>(getA().getType());
  double k =
      getTransposeA() ? a.getShape()[a.getRank() - 2] : a.getShape().back();
  return 2 * numel(getResult()) * k;
}
double MatmulOp::getActivationBytes() { return bytes({getA(), getB()}); }

double ReduceOp::getFlops() { return numel(getX()); }
double ReduceOp::getActivationBytes() { return 0; }

double SelectOp::getFlops() { return numel(getResult()); }
double SelectOp::getActivationBytes() { return bytes(getCond()); }

double IsNanOp::getFlops() { return numel(getX()); }
double IsNanOp::getActivationBytes() { return 0; }

double ReshapeOp::getFlops() { return 0; }
double ReshapeOp::getActivationBytes() { return 0; }
double TransposeOp::getFlops() { return 0; }
double TransposeOp::getActivationBytes() { return 0; }
double BroadcastOp::getFlops() { return 0; }
double BroadcastOp::getActivationBytes() { return 0; }
double SumToShapeOp::getFlops() { return numel(getX()); }
double SumToShapeOp::getActivationBytes() { return 0; }
double SliceOp::getFlops() { return 0; }
double SliceOp::getActivationBytes() { return 0; }
double SliceGradOp::getFlops() { return 0; }
double SliceGradOp::getActivationBytes() { return 0; }
double ConcatOp::getFlops() { return 0; }
double ConcatOp::getActivationBytes() { return 0; }
double GatherOp::getFlops() { return 0; }
double GatherOp::getActivationBytes() { return bytes(getIds()); }
double GatherGradOp::getFlops() { return numel(getDy()); }
double GatherGradOp::getActivationBytes() { return 0; }

double ClampOp::getFlops() { return 2 * numel(getX()); }
// The gradient reads x.
double ClampOp::getActivationBytes() { return bytes(getX()); }
double ClampGradOp::getFlops() { return 2 * numel(getX()); }
double ClampGradOp::getActivationBytes() { return 0; }
double SoftmaxOp::getFlops() { return 5 * numel(getX()); }
double SoftmaxOp::getActivationBytes() { return bytes(getResult()); }
double SoftmaxGradOp::getFlops() { return 4 * numel(getY()); }
double SoftmaxGradOp::getActivationBytes() { return 0; }

double CausalMaskOp::getFlops() { return 0; }
double CausalMaskOp::getActivationBytes() { return 0; }

double RotaryTableOp::getFlops() { return 0; }
double RotaryTableOp::getActivationBytes() { return 0; }

double RmsNormOp::getFlops() { return 4 * numel(getX()); }
double RmsNormOp::getActivationBytes() { return bytes(getX()); }
double RmsNormGradOp::getFlops() { return 8 * numel(getX()); }
double RmsNormGradOp::getActivationBytes() { return 0; }

double LayerNormOp::getFlops() { return 6 * numel(getX()); }
double LayerNormOp::getActivationBytes() { return bytes(getX()); }
double LayerNormGradOp::getFlops() { return 10 * numel(getX()); }
double LayerNormGradOp::getActivationBytes() { return 0; }

double RotaryOp::getFlops() { return 3 * numel(getX()); }
double RotaryOp::getActivationBytes() { return 0; }
double RotaryGradOp::getFlops() { return 3 * numel(getDy()); }
double RotaryGradOp::getActivationBytes() { return 0; }

double AttentionOp::getFlops() {
  return attentionCoreFlops(getQ(), getK(), getCausal(), getWindowSize());
}
double AttentionOp::getActivationBytes() {
  return bytes({getQ(), getK(), getV(), getOut(), getLse()});
}
// The backward recomputes the scores (1x) and forms dV, dP, dQ, dK (4 more
// GEMM-sized products, i.e. 2.5x the forward's two).
double AttentionGradOp::getFlops() {
  return 2.5 * attentionCoreFlops(getQ(), getK(), getCausal(), getWindowSize());
}
double AttentionGradOp::getActivationBytes() { return 0; }

double CrossEntropyOp::getFlops() { return 4 * numel(getLogits()); }
double CrossEntropyOp::getActivationBytes() {
  return bytes({getLogits(), getLabels()});
}
double CrossEntropyGradOp::getFlops() { return 4 * numel(getLogits()); }
double CrossEntropyGradOp::getActivationBytes() { return 0; }

double LinearCrossEntropyOp::getFlops() {
  return linearCEFlops(getH(), getW(), getTransposeW());
}
double LinearCrossEntropyOp::getActivationBytes() {
  return bytes({getH(), getLabels()});
}
// The dH and dW products: the tail stage computes the loss and its gradient
// in one call (kern-fuse-linear-cross-entropy), each chunk's logits once, so
// the gradient adds no recomputed logits.
double LinearCrossEntropyGradOp::getFlops() {
  // dW unless nothing reads it (a frozen head: the kernels then skip it).
  return (getDw().use_empty() ? 1 : 2) *
         linearCEFlops(getH(), getW(), getTransposeW());
}
double LinearCrossEntropyGradOp::getActivationBytes() { return 0; }

double GatedActGradOp::getFlops() { return 4 * numel(getDy()); }
double GatedActGradOp::getActivationBytes() { return 0; }
double UnaryGradOp::getFlops() { return 2 * numel(getX()); }
double UnaryGradOp::getActivationBytes() { return 0; }
double BinaryGradOp::getFlops() { return 3 * numel(getDy()); }
double BinaryGradOp::getActivationBytes() { return 0; }

// Mixture of experts. FLOPs are the routed ones (each row meets one expert's
// matrix); the experts' weights are parameters, so the cost model holds and
// streams all of them whatever the routing.
static double expertMatmulFlops(Value x, Value dy) {
  auto xt = cast<RankedTensorType>(x.getType());
  return 2 * numel(dy) * double(xt.getDimSize(1));
}
double TopKOp::getFlops() { return numel(getX()) * double(getK()); }
// The gradient reads the indices.
double TopKOp::getActivationBytes() { return bytes(getIndices()); }
double TopKGradOp::getFlops() { return numel(getDvalues()); }
double TopKGradOp::getActivationBytes() { return 0; }
double ExpertMatmulOp::getFlops() {
  return expertMatmulFlops(getX(), getResult());
}
// dx reads w and ids, dw reads x and ids.
double ExpertMatmulOp::getActivationBytes() {
  return bytes({getX(), getW(), getIds()});
}
double ExpertMatmulWGradOp::getFlops() {
  return expertMatmulFlops(getX(), getDy());
}
double ExpertMatmulWGradOp::getActivationBytes() { return 0; }
