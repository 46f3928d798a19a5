//===- DataMovement.cpp - tg layout, gather and mask ops -> kern ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Integer tensors (ids, labels, masks) move through the *Ints kernels.
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;
using namespace rondo::kern::detail;

namespace {

LogicalResult lowerTranspose(tg::TransposeOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(),
                        isInteger(op.getX()) ? "transposeInts" : "transpose",
                        op.getType(), op.getX(),
                        {arg(rw, "perm", op.getPermAttr())}));
  return success();
}

LogicalResult lowerSlice(tg::SliceOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(),
                        isInteger(op.getX()) ? "sliceInts" : "slice",
                        op.getType(), op.getX(),
                        {arg(rw, "starts", op.getStartsAttr()),
                         arg(rw, "steps", op.getStepsAttr())}));
  return success();
}

LogicalResult lowerSliceGrad(tg::SliceGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "sliceBackward", op.getType(), op.getDy(),
                    {arg(rw, "starts", op.getStartsAttr()),
                     arg(rw, "steps", op.getStepsAttr())}));
  return success();
}

LogicalResult lowerConcat(tg::ConcatOp op, PatternRewriter &rw) {
  auto type = cast<RankedTensorType>(op.getType());
  int64_t axis = op.getAxis();
  if (axis < 0)
    axis += type.getRank();
  rw.replaceOp(op,
               call(rw, op.getLoc(),
                    type.getElementType().isInteger() ? "concatInts" : "concat",
                    type, op.getInputs(),
                    {arg(rw, "axis", rw.getI32IntegerAttr(int(axis)))}));
  return success();
}

LogicalResult lowerGather(tg::GatherOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "gatherRows", op.getType(),
                        {op.getTable(), op.getIds()}));
  return success();
}

/// A zeroed table that the scatter adds into.
LogicalResult lowerGatherGrad(tg::GatherGradOp op, PatternRewriter &rw) {
  Value zero = call(rw, op.getLoc(), "fill", op.getType(), {},
                    {arg(rw, "value", rw.getF32FloatAttr(0.0f))})
                   .getResult(0);
  rw.replaceOp(op, call(rw, op.getLoc(), "gatherRowsBackward", op.getType(),
                        {op.getIds(), op.getDy()}, {}, zero));
  return success();
}

LogicalResult lowerCausalMask(tg::CausalMaskOp op, PatternRewriter &rw) {
  rw.replaceOp(
      op, call(rw, op.getLoc(), "causalMask", op.getType(), {},
               {arg(rw, "window", rw.getI64IntegerAttr(op.getWindowSize()))}));
  return success();
}

} // namespace

void rondo::kern::populateTGToKernDataMovementPatterns(
    RewritePatternSet &patterns) {
  add<tg::TransposeOp>(patterns, lowerTranspose);
  add<tg::SliceOp>(patterns, lowerSlice);
  add<tg::SliceGradOp>(patterns, lowerSliceGrad);
  add<tg::ConcatOp>(patterns, lowerConcat);
  add<tg::GatherOp>(patterns, lowerGather);
  add<tg::GatherGradOp>(patterns, lowerGatherGrad);
  add<tg::CausalMaskOp>(patterns, lowerCausalMask);
}
