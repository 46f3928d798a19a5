//===- Elementwise.cpp - tg elementwise and reduction ops -> kern ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;
using namespace rondo::kern::detail;

namespace {

StringRef kernelName(tg::UnaryKind k) {
  switch (k) {
  case tg::UnaryKind::neg:
    return "Neg";
  case tg::UnaryKind::exp:
    return "Exp";
  case tg::UnaryKind::log:
    return "Log";
  case tg::UnaryKind::sqrt:
    return "Sqrt";
  case tg::UnaryKind::rsqrt:
    return "Rsqrt";
  case tg::UnaryKind::reciprocal:
    return "Reciprocal";
  case tg::UnaryKind::sigmoid:
    return "Sigmoid";
  case tg::UnaryKind::tanh:
    return "Tanh";
  case tg::UnaryKind::relu:
    return "Relu";
  case tg::UnaryKind::silu:
    return "Silu";
  case tg::UnaryKind::gelu_tanh:
    return "GeluTanh";
  case tg::UnaryKind::gelu_erf:
    return "GeluErf";
  case tg::UnaryKind::abs:
    return "Abs";
  case tg::UnaryKind::sin:
    return "Sin";
  case tg::UnaryKind::cos:
    return "Cos";
  }
  llvm_unreachable("unknown tg unary kind");
}

StringRef kernelName(tg::BinaryKind k) {
  switch (k) {
  case tg::BinaryKind::add:
    return "Add";
  case tg::BinaryKind::sub:
    return "Sub";
  case tg::BinaryKind::mul:
    return "Mul";
  case tg::BinaryKind::div:
    return "Div";
  case tg::BinaryKind::pow:
    return "Pow";
  case tg::BinaryKind::max:
    return "Max";
  case tg::BinaryKind::min:
    return "Min";
  }
  llvm_unreachable("unknown tg binary kind");
}

NamedAttribute kindArg(PatternRewriter &rw, tg::UnaryKind k) {
  return arg(rw, "kind", rw.getStringAttr(kernelName(k)));
}
NamedAttribute kindArg(PatternRewriter &rw, tg::BinaryKind k) {
  return arg(rw, "kind", rw.getStringAttr(kernelName(k)));
}

LogicalResult lowerUnary(tg::UnaryOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "unary", op.getType(), op.getX(),
                        {kindArg(rw, op.getKind())}));
  return success();
}

LogicalResult lowerUnaryGrad(tg::UnaryGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "unaryBackward", op.getType(),
                        {op.getX(), op.getDy()}, {kindArg(rw, op.getKind())}));
  return success();
}

LogicalResult lowerBinary(tg::BinaryOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "binary", op.getType(),
                    {op.getLhs(), op.getRhs()}, {kindArg(rw, op.getKind())}));
  return success();
}

LogicalResult lowerBinaryGrad(tg::BinaryGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "binaryBackward", op->getResultTypes(),
                        {op.getLhs(), op.getRhs(), op.getDy()},
                        {kindArg(rw, op.getKind())})
                       .getResults());
  return success();
}

SmallVector<NamedAttribute> boundArgs(PatternRewriter &rw, APFloat min,
                                      APFloat max) {
  return {arg(rw, "lo", rw.getF32FloatAttr(min.convertToFloat())),
          arg(rw, "hi", rw.getF32FloatAttr(max.convertToFloat()))};
}

LogicalResult lowerClamp(tg::ClampOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "clamp", op.getType(), op.getX(),
                        boundArgs(rw, op.getMin(), op.getMax())));
  return success();
}

LogicalResult lowerClampGrad(tg::ClampGradOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "clampBackward", op.getType(),
                        {op.getX(), op.getDy()},
                        boundArgs(rw, op.getMin(), op.getMax())));
  return success();
}

/// act(gate) * up in one pass.
LogicalResult lowerGatedAct(tg::GatedActOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "gatedAct", op.getType(),
                    {op.getGate(), op.getUp()}, {kindArg(rw, op.getAct())}));
  return success();
}

/// Both gradients in one pass; one nothing reads is skipped.
LogicalResult lowerGatedActGrad(tg::GatedActGradOp op, PatternRewriter &rw) {
  SmallVector<int64_t> skip = unusedResults(op, {0, 1});
  rw.replaceOp(op,
               call(rw, op.getLoc(), "gatedActBackward", op->getResultTypes(),
                    {op.getGate(), op.getUp(), op.getDy()},
                    {kindArg(rw, op.getAct())}, {}, skip)
                   .getResults());
  return success();
}

LogicalResult lowerSelect(tg::SelectOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "select", op.getType(),
                        {op.getCond(), op.getA(), op.getB()}));
  return success();
}

LogicalResult lowerIsNan(tg::IsNanOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(), "isNan", op.getType(), op.getX()));
  return success();
}

/// sumToShape onto the operand's shape with the reduced axes kept as 1 (the
/// layout of the keepdims and the dropped-dims result is the same), 1/count
/// for a mean, then the result's shape.
LogicalResult lowerReduce(tg::ReduceOp op, PatternRewriter &rw) {
  auto xt = cast<RankedTensorType>(op.getX().getType());
  SmallVector<int64_t> kept(xt.getShape());
  double count = 1;
  for (int64_t a : op.getAxes()) {
    int64_t axis = a < 0 ? a + xt.getRank() : a;
    count *= double(kept[axis]);
    kept[axis] = 1;
  }
  auto keptType = RankedTensorType::get(kept, xt.getElementType());
  Value sum =
      call(rw, op.getLoc(), "sumToShape", keptType, op.getX()).getResult(0);
  if (op.getKind() == tg::ReduceKind::mean)
    sum = call(rw, op.getLoc(), "scale", keptType, sum,
               {arg(rw, "factor", rw.getF32FloatAttr(float(1.0 / count)))})
              .getResult(0);
  if (keptType != op.getType())
    sum = tg::ReshapeOp::create(rw, op.getLoc(), op.getType(), sum);
  rw.replaceOp(op, sum);
  return success();
}

LogicalResult lowerBroadcast(tg::BroadcastOp op, PatternRewriter &rw) {
  rw.replaceOp(op, call(rw, op.getLoc(),
                        isInteger(op.getX()) ? "broadcastInts" : "broadcastTo",
                        op.getType(), op.getX()));
  return success();
}

LogicalResult lowerSumToShape(tg::SumToShapeOp op, PatternRewriter &rw) {
  rw.replaceOp(op,
               call(rw, op.getLoc(), "sumToShape", op.getType(), op.getX()));
  return success();
}

} // namespace

void rondo::kern::populateTGToKernElementwisePatterns(
    RewritePatternSet &patterns) {
  add<tg::UnaryOp>(patterns, lowerUnary);
  add<tg::UnaryGradOp>(patterns, lowerUnaryGrad);
  add<tg::BinaryOp>(patterns, lowerBinary);
  add<tg::BinaryGradOp>(patterns, lowerBinaryGrad);
  add<tg::GatedActOp>(patterns, lowerGatedAct);
  add<tg::GatedActGradOp>(patterns, lowerGatedActGrad);
  add<tg::ClampOp>(patterns, lowerClamp);
  add<tg::ClampGradOp>(patterns, lowerClampGrad);
  add<tg::SelectOp>(patterns, lowerSelect);
  add<tg::IsNanOp>(patterns, lowerIsNan);
  add<tg::ReduceOp>(patterns, lowerReduce);
  add<tg::BroadcastOp>(patterns, lowerBroadcast);
  add<tg::SumToShapeOp>(patterns, lowerSumToShape);
}
