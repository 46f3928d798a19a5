//===- Structures.cpp - tg matmul, softmax, norms, rotary, attention -> kern
//===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A parameter gradient that nothing reads (a frozen norm weight) is skipped:
// the backward kernels document a null output as "not computed".
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;
using namespace rondo::kern::detail;

namespace {

LogicalResult lowerMatmul(tg::MatmulOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "matmul", op.getType(),
                        {op.getA(), op.getB()},
                        {arg(rw, "transA", rw.getBoolAttr(op.getTransposeA())),
                         arg(rw, "transB", rw.getBoolAttr(op.getTransposeB())),
                         arg(rw, "accumulate", rw.getBoolAttr(false))}));
  return success();
}

LogicalResult lowerSoftmax(tg::SoftmaxOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "softmax", op.getType(), op.getX()));
  return success();
}

LogicalResult lowerSoftmaxGrad(tg::SoftmaxGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "softmaxBackward", op.getType(),
                        {op.getY(), op.getDy()}));
  return success();
}

NamedAttribute epsArg(PatternRewriter &rw, APFloat eps) {
  return arg(rw, "eps", rw.getF32FloatAttr(eps.convertToFloat()));
}

LogicalResult lowerRmsNorm(tg::RmsNormOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "rmsNorm", op.getType(),
                        {op.getX(), op.getW()}, {epsArg(rw, op.getEps())}));
  return success();
}

LogicalResult lowerRmsNormGrad(tg::RmsNormGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "rmsNormBackward", op->getResultTypes(),
                    {op.getX(), op.getW(), op.getDy()},
                    {epsArg(rw, op.getEps())}, {}, unusedResults(op, {1}))
                   .getResults());
  return success();
}

LogicalResult lowerLayerNorm(tg::LayerNormOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "layerNorm", op.getType(),
                        {op.getX(), op.getW(), op.getB()},
                        {epsArg(rw, op.getEps())}));
  return success();
}

LogicalResult lowerLayerNormGrad(tg::LayerNormGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "layerNormBackward", op->getResultTypes(),
                    {op.getX(), op.getW(), op.getDy()},
                    {epsArg(rw, op.getEps())}, {}, unusedResults(op, {1, 2}))
                   .getResults());
  return success();
}

LogicalResult lowerRotary(tg::RotaryOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "rotary", op.getType(),
                        {op.getX(), op.getCos(), op.getSin()}));
  return success();
}

LogicalResult lowerRotaryGrad(tg::RotaryGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "rotaryBackward", op.getType(),
                        {op.getDy(), op.getCos(), op.getSin()}));
  return success();
}

SmallVector<NamedAttribute> attentionArgs(PatternRewriter &rw, bool causal,
                                          int64_t window, APFloat scale) {
  return {arg(rw, "causal", rw.getBoolAttr(causal)),
          arg(rw, "window", rw.getI64IntegerAttr(window)),
          arg(rw, "scale", rw.getF32FloatAttr(scale.convertToFloat()))};
}

/// Attention with sinks calls attentionSinks, with the sinks after v.
LogicalResult lowerAttention(tg::AttentionOp op, PatternRewriter &rw) {
  SmallVector<Value, 4> inputs{op.getQ(), op.getK(), op.getV()};
  if (op.getSinks())
    inputs.push_back(op.getSinks());
  rw.replaceOp(
      op,
      call(rw, op.getLoc(), op.getSinks() ? "attentionSinks" : "attention",
           op->getResultTypes(), inputs,
           attentionArgs(rw, op.getCausal(), op.getWindowSize(), op.getScale()))
          .getResults());
  return success();
}

/// With sinks: attentionSinksBackward, which skips dsinks when nothing reads
/// it (frozen sinks).
LogicalResult lowerAttentionGrad(tg::AttentionGradOp op, PatternRewriter &rw) {
  SmallVector<Value, 7> inputs{op.getQ(), op.getK(), op.getV()};
  if (op.getSinks())
    inputs.push_back(op.getSinks());
  inputs.append({op.getOut(), op.getLse(), op.getDout()});
  rw.replaceOp(
      op,
      call(rw, op.getLoc(),
           op.getSinks() ? "attentionSinksBackward" : "attentionBackward",
           op->getResultTypes(), inputs,
           attentionArgs(rw, op.getCausal(), op.getWindowSize(), op.getScale()),
           {}, op.getSinks() ? unusedResults(op, {3}) : SmallVector<int64_t>())
          .getResults());
  return success();
}

// Mixture of experts: the router's top-k and the grouped products.
LogicalResult lowerTopK(tg::TopKOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "topK", op->getResultTypes(), op.getX())
                   .getResults());
  return success();
}

LogicalResult lowerTopKGrad(tg::TopKGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "topKBackward", op.getType(),
                        {op.getIndices(), op.getDvalues()}));
  return success();
}

LogicalResult lowerExpertMatmul(tg::ExpertMatmulOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "expertMatmul", op.getType(),
                    {op.getX(), op.getW(), op.getIds()},
                    {arg(rw, "transW", rw.getBoolAttr(op.getTransposeW()))}));
  return success();
}

LogicalResult lowerExpertMatmulWGrad(tg::ExpertMatmulWGradOp op,
                                     PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "expertMatmulWeightGrad", op.getType(),
                    {op.getX(), op.getDy(), op.getIds()},
                    {arg(rw, "transW", rw.getBoolAttr(op.getTransposeW()))}));
  return success();
}

} // namespace

void rondo::kern::populateTGToKernStructurePatterns(
    RewritePatternSet &patterns) {
  add<tg::MatmulOp>(patterns, lowerMatmul);
  add<tg::SoftmaxOp>(patterns, lowerSoftmax);
  add<tg::SoftmaxGradOp>(patterns, lowerSoftmaxGrad);
  add<tg::RmsNormOp>(patterns, lowerRmsNorm);
  add<tg::RmsNormGradOp>(patterns, lowerRmsNormGrad);
  add<tg::LayerNormOp>(patterns, lowerLayerNorm);
  add<tg::LayerNormGradOp>(patterns, lowerLayerNormGrad);
  add<tg::RotaryOp>(patterns, lowerRotary);
  add<tg::RotaryGradOp>(patterns, lowerRotaryGrad);
  add<tg::AttentionOp>(patterns, lowerAttention);
  add<tg::AttentionGradOp>(patterns, lowerAttentionGrad);
  add<tg::TopKOp>(patterns, lowerTopK);
  add<tg::TopKGradOp>(patterns, lowerTopKGrad);
  add<tg::ExpertMatmulOp>(patterns, lowerExpertMatmul);
  add<tg::ExpertMatmulWGradOp>(patterns, lowerExpertMatmulWGrad);
}
