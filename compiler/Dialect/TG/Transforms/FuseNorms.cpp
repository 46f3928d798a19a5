//===- FuseNorms.cpp - tg-fuse-norms ----------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"
#include "PatternUtils.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace rondo::tg {
#define GEN_PASS_DEF_TGFUSENORMSPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
/// mean(x^2) over the last axis, kept: `pow(x, 2)` or `x * x`.
bool isMeanSquareOf(Value v, Value x) {
  auto mean = v.getDefiningOp<ReduceOp>();
  if (!mean || mean.getKind() != ReduceKind::mean || !mean.getKeepdims() ||
      mean.getAxes().size() != 1)
    return false;
  auto xt = cast<RankedTensorType>(x.getType());
  int64_t axis = mean.getAxes()[0];
  if (xt.getRank() == 0)
    return false;
  if (axis != xt.getRank() - 1 && axis != -1)
    return false;
  Value sq = mean.getX(), a, b;
  if (matchBinary(sq, BinaryKind::pow, a, b, [&](Value l, Value r) {
        return l == x && isScalarConstant(r, 2.0);
      }))
    return true;
  return matchBinary(sq, BinaryKind::mul, a, b,
                     [&](Value l, Value r) { return l == x && r == x; });
}

/// rsqrt(mean(x^2) + eps) in any of the exporter's spellings; sets eps.
bool isInvRms(Value v, Value x, double &eps) {
  Value inner;
  Value s;
  if (isUnary(v, UnaryKind::reciprocal, s)) {
    if (!isUnary(s, UnaryKind::sqrt, inner))
      return false;
  } else if (!isUnary(v, UnaryKind::rsqrt, inner)) {
    return false;
  }
  Value m, e;
  if (!matchBinary(inner, BinaryKind::add, m, e, [&](Value l, Value r) {
        return isMeanSquareOf(l, x) && scalarConstant(r).has_value();
      }))
    return false;
  eps = *scalarConstant(e);
  return true;
}

struct FuseRmsNorm : OpRewritePattern<BinaryOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BinaryOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getKind() != BinaryKind::mul)
      return failure();
    // op = w * (x * invrms(x))
    Value w, normed, x, inv;
    double eps = 0;
    auto isNormalized = [&](Value n) {
      return matchBinary(n, BinaryKind::mul, x, inv,
                         [&](Value l, Value r) { return isInvRms(r, l, eps); });
    };
    if (!matchBinary(op.getResult(), BinaryKind::mul, w, normed,
                     [&](Value l, Value r) {
                       auto wt = cast<RankedTensorType>(l.getType());
                       auto xt = cast<RankedTensorType>(r.getType());
                       return xt.getRank() >= 1 &&
                              wt.getNumElements() == xt.getShape().back() &&
                              isNormalized(r);
                     }))
      return failure();
    if (op.getType() != x.getType())
      return failure();
    auto wt = cast<RankedTensorType>(w.getType());
    if (wt.getRank() != 1)
      w = ReshapeOp::create(
          rewriter, op.getLoc(),
          RankedTensorType::get({wt.getNumElements()}, wt.getElementType()), w);
    rewriter.replaceOpWithNewOp<RmsNormOp>(
        op, op.getType(), x, w, rewriter.getF32FloatAttr(float(eps)));
    return success();
  }
};

struct TGFuseNormsPass : rondo::tg::impl::TGFuseNormsPassBase<TGFuseNormsPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseRmsNorm>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
