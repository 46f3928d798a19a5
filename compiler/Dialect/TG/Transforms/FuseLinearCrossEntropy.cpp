//===- FuseLinearCrossEntropy.cpp - tg-fuse-linear-cross-entropy -*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace rondo::tg {
#define GEN_PASS_DEF_TGFUSELINEARCROSSENTROPYPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
struct FuseHeadIntoLoss : OpRewritePattern<CrossEntropyOp> {
  FuseHeadIntoLoss(MLIRContext *ctx, int64_t chunkRows)
      : OpRewritePattern(ctx), chunkRows(chunkRows) {}

  LogicalResult matchAndRewrite(CrossEntropyOp op,
                                PatternRewriter &rewriter) const override {
    // cross_entropy(reshape(slice(matmul(h, W)))): the slice and reshape only
    // touch rows, so they can move onto h.
    auto flat = op.getLogits().getDefiningOp<ReshapeOp>();
    if (!flat)
      return failure();
    Value cur = flat.getX();
    auto slice = cur.getDefiningOp<SliceOp>();
    if (slice)
      cur = slice.getX();
    auto mm = cur.getDefiningOp<MatmulOp>();
    if (!mm || mm.getTransposeA())
      return failure();
    auto wt = cast<RankedTensorType>(mm.getB().getType());
    auto ht = cast<RankedTensorType>(mm.getA().getType());
    if (wt.getRank() != 2)
      return failure();
    int64_t rank = ht.getRank();
    if (slice) {
      if (slice.getStarts().back() != 0 || slice.getSteps().back() != 1)
        return failure();
    }
    Value w = mm.getB();
    bool transW = mm.getTransposeB();
    if (auto tr = w.getDefiningOp<TransposeOp>()) {
      w = tr.getX();
      transW = !transW;
    }
    Location loc = op.getLoc();
    Value h = mm.getA();
    int64_t d = ht.getShape().back();
    if (slice) {
      auto st = cast<RankedTensorType>(slice.getType());
      SmallVector<int64_t> shape(st.getShape());
      shape.back() = d;
      SmallVector<int64_t> starts(slice.getStarts()), steps(slice.getSteps());
      starts.back() = 0;
      steps.back() = 1;
      h = SliceOp::create(rewriter, loc,
                          RankedTensorType::get(shape, ht.getElementType()), h,
                          rewriter.getDenseI64ArrayAttr(starts),
                          rewriter.getDenseI64ArrayAttr(steps));
    }
    (void)rank;
    int64_t rows =
        cast<RankedTensorType>(op.getLogits().getType()).getDimSize(0);
    h = ReshapeOp::create(rewriter, loc,
                          RankedTensorType::get({rows, d}, ht.getElementType()),
                          h);
    rewriter.replaceOpWithNewOp<LinearCrossEntropyOp>(
        op, op.getType(), h, w, op.getLabels(), transW, op.getIgnoreIndex(),
        chunkRows);
    return success();
  }
  int64_t chunkRows;
};

struct TGFuseLinearCrossEntropyPass
    : rondo::tg::impl::TGFuseLinearCrossEntropyPassBase<
          TGFuseLinearCrossEntropyPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseHeadIntoLoss>(&getContext(), chunkRows);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
