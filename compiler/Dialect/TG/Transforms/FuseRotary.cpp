//===- FuseRotary.cpp - tg-fuse-rotary --------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"
#include "PatternUtils.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace rondo::tg {
#define GEN_PASS_DEF_TGFUSEROTARYPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
/// A table broadcastable to [B, H, T, D] that varies only over T and D: a
/// constant or a tg.rotary_table, rebuilt as [T, D] by `make`.
struct Table {
  Operation *def = nullptr;
  Value make(PatternRewriter &rewriter, Location loc, int64_t t,
             int64_t d) const {
    auto type =
        RankedTensorType::get({t, d}, Float32Type::get(loc.getContext()));
    if (auto r = dyn_cast<RotaryTableOp>(def))
      return RotaryTableOp::create(rewriter, loc, type, r.getKindAttr(),
                                   r.getFreqsAttr(), r.getScaleAttr());
    auto dense = cast<DenseElementsAttr>(cast<ConstantOp>(def).getValue());
    return ConstantOp::create(
        rewriter, loc,
        dense.reshape(RankedTensorType::get({t, d}, dense.getElementType())));
  }
};

std::optional<Table> tableOf(Value v, int64_t t, int64_t d) {
  while (auto b = v.getDefiningOp<BroadcastOp>())
    v = b.getX();
  auto type = cast<RankedTensorType>(v.getType());
  auto shape = type.getShape();
  if (!type.getElementType().isF32() || shape.size() < 2 ||
      shape[shape.size() - 2] != t || shape.back() != d ||
      type.getNumElements() != t * d)
    return std::nullopt;
  if (auto r = v.getDefiningOp<RotaryTableOp>())
    return Table{r};
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c || !isa<DenseElementsAttr>(c.getValue()))
    return std::nullopt;
  return Table{c};
}

/// Whether `v` = concat(-x[..., D/2:], x[..., :D/2]) along the last axis.
bool isRotateHalf(Value v, Value x) {
  auto cat = v.getDefiningOp<ConcatOp>();
  auto xt = cast<RankedTensorType>(x.getType());
  int64_t rank = xt.getRank(), d = xt.getShape().back();
  int64_t axis = static_cast<int64_t>(cat ? cat.getAxis() : 0);
  if (!cat || cat.getInputs().size() != 2 || (axis != rank - 1 && axis != -1))
    return false;
  Value negated;
  if (!isUnary(cat.getInputs()[0], UnaryKind::neg, negated))
    return false;
  auto isHalf = [&](Value s, int64_t start) {
    auto slice = s.getDefiningOp<SliceOp>();
    if (!slice || slice.getX() != x)
      return false;
    for (int64_t k = 0; k < rank; ++k) {
      int64_t want = k == rank - 1 ? start : 0;
      if (slice.getStarts()[k] != want || slice.getSteps()[k] != 1)
        return false;
    }
    return cast<RankedTensorType>(s.getType()).getShape().back() == d / 2;
  };
  return isHalf(negated, d / 2) && isHalf(cat.getInputs()[1], 0);
}

struct FuseRotaryPattern : OpRewritePattern<BinaryOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BinaryOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getKind() != BinaryKind::add)
      return failure();
    auto type = cast<RankedTensorType>(op.getType());
    if (type.getRank() != 4 || type.getShape().back() % 2)
      return failure();
    int64_t t = type.getDimSize(2), d = type.getDimSize(3);
    Value cosTerm, sinTerm, x, cosV, rot, sinV;
    std::optional<Table> cosT, sinT;
    bool matched = matchBinary(
        op.getResult(), BinaryKind::add, cosTerm, sinTerm,
        [&](Value l, Value r) {
          return matchBinary(l, BinaryKind::mul, x, cosV,
                             [&](Value p, Value q) {
                               return p.getType() == type &&
                                      (cosT = tableOf(q, t, d)).has_value();
                             }) &&
                 matchBinary(r, BinaryKind::mul, rot, sinV,
                             [&](Value p, Value q) {
                               return isRotateHalf(p, x) &&
                                      (sinT = tableOf(q, t, d)).has_value();
                             });
        });
    if (!matched)
      return failure();
    Value c = cosT->make(rewriter, op.getLoc(), t, d);
    Value s = sinT->make(rewriter, op.getLoc(), t, d);
    rewriter.replaceOpWithNewOp<RotaryOp>(op, type, x, c, s);
    return success();
  }
};

struct TGFuseRotaryPass
    : rondo::tg::impl::TGFuseRotaryPassBase<TGFuseRotaryPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseRotaryPattern>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
