//===- FuseActivations.cpp - tg-fuse-activations ----------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"
#include "PatternUtils.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace rondo::tg {
#define GEN_PASS_DEF_TGFUSEACTIVATIONSPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
/// x * sigmoid(x) -> silu(x)
struct FuseSilu : OpRewritePattern<BinaryOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BinaryOp op,
                                PatternRewriter &rewriter) const override {
    Value x, s, inner;
    if (!matchBinary(
            op.getResult(), BinaryKind::mul, x, s, [&](Value l, Value r) {
              return isUnary(r, UnaryKind::sigmoid, inner) && inner == l;
            }))
      return failure();
    if (x.getType() != op.getType())
      return failure();
    rewriter.replaceOpWithNewOp<UnaryOp>(op, UnaryKind::silu, x);
    return success();
  }
};

/// (0.5 * x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> gelu_tanh(x)
struct FuseGeluTanh : OpRewritePattern<BinaryOp> {
  using OpRewritePattern::OpRewritePattern;

  static bool isCubicArg(Value v, Value x) {
    Value a, b, c, d;
    return matchBinary(v, BinaryKind::add, a, b, [&](Value l, Value r) {
      return l == x &&
             matchBinary(r, BinaryKind::mul, c, d, [&](Value p, Value q) {
               Value e, f;
               return isScalarConstant(p, 0.044715, 1e-4) &&
                      matchBinary(
                          q, BinaryKind::pow, e, f, [&](Value base, Value exp) {
                            return base == x && isScalarConstant(exp, 3.0);
                          });
             });
    });
  }
  static bool isTanhFactor(Value v, Value x) {
    Value one, t, arg, k, cubic;
    return matchBinary(v, BinaryKind::add, one, t, [&](Value l, Value r) {
      return isScalarConstant(l, 1.0) && isUnary(r, UnaryKind::tanh, arg) &&
             matchBinary(arg, BinaryKind::mul, k, cubic, [&](Value p, Value q) {
               return isScalarConstant(p, std::sqrt(2.0 / M_PI), 1e-4) &&
                      isCubicArg(q, x);
             });
    });
  }

  LogicalResult matchAndRewrite(BinaryOp op,
                                PatternRewriter &rewriter) const override {
    Value half, factor, x, h;
    if (!matchBinary(op.getResult(), BinaryKind::mul, half, factor,
                     [&](Value l, Value r) {
                       return matchBinary(l, BinaryKind::mul, h, x,
                                          [&](Value p, Value q) {
                                            return isScalarConstant(p, 0.5);
                                          }) &&
                              isTanhFactor(r, x);
                     }))
      return failure();
    if (x.getType() != op.getType())
      return failure();
    rewriter.replaceOpWithNewOp<UnaryOp>(op, UnaryKind::gelu_tanh, x);
    return success();
  }
};

/// act(gate) * up -> gated_act(gate, up): the gated MLP's elementwise core.
struct FuseGatedAct : OpRewritePattern<BinaryOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BinaryOp op,
                                PatternRewriter &rewriter) const override {
    Value act, up;
    UnaryKind kind;
    if (!matchBinary(
            op.getResult(), BinaryKind::mul, act, up, [&](Value l, Value r) {
              auto u = l.getDefiningOp<UnaryOp>();
              if (!u || l.getType() != r.getType() ||
                  r.getType() != op.getType())
                return false;
              kind = u.getKind();
              return kind == UnaryKind::silu || kind == UnaryKind::gelu_tanh ||
                     kind == UnaryKind::gelu_erf;
            }))
      return failure();
    rewriter.replaceOpWithNewOp<GatedActOp>(
        op, kind, act.getDefiningOp<UnaryOp>().getX(), up);
    return success();
  }
};

struct TGFuseActivationsPass
    : rondo::tg::impl::TGFuseActivationsPassBase<TGFuseActivationsPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseSilu, FuseGeluTanh, FuseGatedAct>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
