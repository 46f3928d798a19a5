//===- Loss.cpp - tg cross-entropy ops -> kern ----------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The backward's gradient scale is an input (the loss-scale argument of the
// tail stage), not an attribute: the kernel's `gradScale` binds to it.
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;
using namespace rondo::kern::detail;

namespace {

NamedAttribute ignoreArg(PatternRewriter &rw, int64_t ignoreIndex) {
  return arg(rw, "ignoreIndex", rw.getI64IntegerAttr(ignoreIndex));
}

SmallVector<NamedAttribute> linearArgs(PatternRewriter &rw, bool transW,
                                       int64_t ignoreIndex, int64_t chunkRows) {
  return {arg(rw, "transW", rw.getBoolAttr(transW)), ignoreArg(rw, ignoreIndex),
          arg(rw, "chunkRows", rw.getI64IntegerAttr(chunkRows))};
}

LogicalResult lowerCrossEntropy(tg::CrossEntropyOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "crossEntropy", op.getType(),
                        {op.getLogits(), op.getLabels()},
                        {ignoreArg(rw, op.getIgnoreIndex())}));
  return success();
}

LogicalResult lowerCrossEntropyGrad(tg::CrossEntropyGradOp op,
                                    PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "crossEntropyBackward", op.getType(),
                        {op.getLogits(), op.getLabels(), op.getDloss()},
                        {ignoreArg(rw, op.getIgnoreIndex())}));
  return success();
}

LogicalResult lowerLinearCrossEntropy(tg::LinearCrossEntropyOp op,
                                      PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "linearCrossEntropy", op.getType(),
                        {op.getH(), op.getW(), op.getLabels()},
                        linearArgs(rw, op.getTransposeW(), op.getIgnoreIndex(),
                                   op.getChunkRows())));
  return success();
}

/// A frozen head (LoRA, --freeze) skips dW: as much work as the forward.
LogicalResult lowerLinearCrossEntropyGrad(tg::LinearCrossEntropyGradOp op,
                                          PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "linearCrossEntropyBackward",
                        op->getResultTypes(),
                        {op.getH(), op.getW(), op.getLabels(), op.getDloss()},
                        linearArgs(rw, op.getTransposeW(), op.getIgnoreIndex(),
                                   op.getChunkRows()),
                        {}, unusedResults(op, {1}))
                       .getResults());
  return success();
}

} // namespace

void rondo::kern::populateTGToKernLossPatterns(RewritePatternSet &patterns) {
  add<tg::CrossEntropyOp>(patterns, lowerCrossEntropy);
  add<tg::CrossEntropyGradOp>(patterns, lowerCrossEntropyGrad);
  add<tg::LinearCrossEntropyOp>(patterns, lowerLinearCrossEntropy);
  add<tg::LinearCrossEntropyGradOp>(patterns, lowerLinearCrossEntropyGrad);
}
