//===- TGGradients.cpp - GradientOpInterface for every tg op ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Reverse-mode rules. Each rule reads only what CostOpInterface's
// getActivationBytes declares, so the planner's memory model and the
// backward agree. Broadcasting ops reduce their operand gradients with
// tg.sum_to_shape, whose fixed summation order keeps results independent of
// how the batch is later split across workers.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/IR/TGOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace rondo::tg;

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Reduces a gradient computed at the broadcast shape to `target`'s shape.
static Value sumTo(OpBuilder &b, Location loc, Value grad, Value target) {
  if (grad.getType() == target.getType())
    return grad;
  return SumToShapeOp::create(b, loc, target.getType(), grad);
}

static Value scalarConstant(OpBuilder &b, Location loc, float value) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  return ConstantOp::create(b, loc, DenseElementsAttr::get(type, value));
}

LogicalResult UnaryOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     ArrayRef<bool>,
                                     SmallVectorImpl<Value> &grads) {
  Value dy = resultGrads[0];
  if (getKind() == UnaryKind::neg)
    grads.push_back(UnaryOp::create(b, getLoc(), UnaryKind::neg, dy));
  else
    grads.push_back(UnaryGradOp::create(b, getLoc(), getKind(), getX(), dy));
  return success();
}

// d up = dy * act(gate); d gate = act'(gate) * (dy * up), one op for both
// (tg.gated_act_grad). Recomputing act(gate) is cheaper than keeping it.
LogicalResult GatedActOp::buildGradient(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        ArrayRef<bool> needs,
                                        SmallVectorImpl<Value> &grads) {
  auto grad = GatedActGradOp::create(b, getLoc(), getAct(), getGate(), getUp(),
                                     resultGrads[0]);
  grads.push_back(needs[0] ? grad.getDgate() : Value());
  grads.push_back(needs[1] ? grad.getDup() : Value());
  return success();
}

LogicalResult BinaryOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      ArrayRef<bool> needs,
                                      SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = resultGrads[0], lhs = getLhs(), rhs = getRhs();
  Value dl, dr;
  switch (getKind()) {
  case BinaryKind::add:
    dl = needs[0] ? sumTo(b, loc, dy, lhs) : Value();
    dr = needs[1] ? sumTo(b, loc, dy, rhs) : Value();
    break;
  case BinaryKind::sub:
    dl = needs[0] ? sumTo(b, loc, dy, lhs) : Value();
    if (needs[1])
      dr = sumTo(b, loc, UnaryOp::create(b, loc, UnaryKind::neg, dy), rhs);
    break;
  case BinaryKind::mul:
    if (needs[0])
      dl = sumTo(b, loc, BinaryOp::create(b, loc, BinaryKind::mul, dy, rhs),
                 lhs);
    if (needs[1])
      dr = sumTo(b, loc, BinaryOp::create(b, loc, BinaryKind::mul, dy, lhs),
                 rhs);
    break;
  default: {
    auto g =
        BinaryGradOp::create(b, loc, TypeRange{lhs.getType(), rhs.getType()},
                             getKindAttr(), lhs, rhs, dy);
    dl = needs[0] ? g.getDlhs() : Value();
    dr = needs[1] ? g.getDrhs() : Value();
  }
  }
  grads.push_back(dl);
  grads.push_back(dr);
  return success();
}

LogicalResult MatmulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      ArrayRef<bool> needs,
                                      SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dc = resultGrads[0], a = getA(), w = getB();
  bool ta = getTransposeA(), tb = getTransposeB();
  auto mm = [&](Value x, Value y, bool tx, bool ty) -> Value {
    auto r = MatmulOp::create(b, loc, x, y, tx, ty);
    return r.getResult();
  };
  Value da, db;
  if (needs[0]) {
    if (!ta)
      da = mm(dc, w, false, !tb);
    else
      da = tb ? mm(w, dc, true, true) : mm(w, dc, false, true);
    da = sumTo(b, loc, da, a);
  }
  if (needs[1]) {
    auto wt = tensorType(w), at = tensorType(a);
    // A rank-2 weight shared by every batch entry: fold the batch into the
    // rows so the gradient is one GEMM rather than a per-entry product and
    // a reduction.
    if (wt.getRank() == 2 && at.getRank() > 2 && !ta) {
      int64_t k = at.getShape().back();
      int64_t rows = at.getNumElements() / k;
      auto ct = tensorType(dc);
      int64_t n = ct.getShape().back();
      Value a2 = ReshapeOp::create(
          b, loc, RankedTensorType::get({rows, k}, at.getElementType()), a);
      Value c2 = ReshapeOp::create(
          b, loc, RankedTensorType::get({rows, n}, ct.getElementType()), dc);
      db = tb ? mm(c2, a2, true, false) : mm(a2, c2, true, false);
    } else {
      if (!tb)
        db = ta ? mm(a, dc, false, false) : mm(a, dc, true, false);
      else
        db = ta ? mm(dc, a, true, true) : mm(dc, a, true, false);
      db = sumTo(b, loc, db, w);
    }
  }
  grads.push_back(da);
  grads.push_back(db);
  return success();
}

LogicalResult ReduceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      ArrayRef<bool>,
                                      SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  auto xt = tensorType(getX());
  SmallVector<int64_t> kept(xt.getShape());
  double count = 1;
  for (int64_t axis : getAxes()) {
    int64_t a = axis < 0 ? axis + xt.getRank() : axis;
    count *= kept[a];
    kept[a] = 1;
  }
  Value dy = resultGrads[0];
  auto keptType = RankedTensorType::get(kept, xt.getElementType());
  if (dy.getType() != keptType)
    dy = ReshapeOp::create(b, loc, keptType, dy);
  if (getKind() == ReduceKind::mean)
    dy = BinaryOp::create(b, loc, BinaryKind::mul, dy,
                          scalarConstant(b, loc, float(1.0 / count)));
  grads.push_back(BroadcastOp::create(b, loc, xt, dy));
  return success();
}

LogicalResult SelectOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      ArrayRef<bool> needs,
                                      SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = resultGrads[0], zero = scalarConstant(b, loc, 0.0f);
  grads.push_back(Value()); // the condition
  grads.push_back(
      needs[1]
          ? sumTo(b, loc, SelectOp::create(b, loc, getCond(), dy, zero), getA())
          : Value());
  grads.push_back(
      needs[2]
          ? sumTo(b, loc, SelectOp::create(b, loc, getCond(), zero, dy), getB())
          : Value());
  return success();
}

LogicalResult ReshapeOp::buildGradient(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       ArrayRef<bool>,
                                       SmallVectorImpl<Value> &grads) {
  grads.push_back(
      ReshapeOp::create(b, getLoc(), getX().getType(), resultGrads[0]));
  return success();
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b,
                                         ArrayRef<Value> resultGrads,
                                         ArrayRef<bool>,
                                         SmallVectorImpl<Value> &grads) {
  SmallVector<int64_t> inverse(getPerm().size());
  for (auto [i, p] : llvm::enumerate(getPerm()))
    inverse[p] = i;
  grads.push_back(TransposeOp::create(b, getLoc(), resultGrads[0],
                                      b.getDenseI64ArrayAttr(inverse)));
  return success();
}

LogicalResult BroadcastOp::buildGradient(OpBuilder &b,
                                         ArrayRef<Value> resultGrads,
                                         ArrayRef<bool>,
                                         SmallVectorImpl<Value> &grads) {
  grads.push_back(sumTo(b, getLoc(), resultGrads[0], getX()));
  return success();
}

LogicalResult SumToShapeOp::buildGradient(OpBuilder &b,
                                          ArrayRef<Value> resultGrads,
                                          ArrayRef<bool>,
                                          SmallVectorImpl<Value> &grads) {
  grads.push_back(
      BroadcastOp::create(b, getLoc(), getX().getType(), resultGrads[0]));
  return success();
}

LogicalResult SliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     ArrayRef<bool>,
                                     SmallVectorImpl<Value> &grads) {
  grads.push_back(SliceGradOp::create(b, getLoc(), getX().getType(),
                                      resultGrads[0], getStartsAttr(),
                                      getStepsAttr()));
  return success();
}

LogicalResult ConcatOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      ArrayRef<bool> needs,
                                      SmallVectorImpl<Value> &grads) {
  auto rt = tensorType(getResult());
  int64_t axis = static_cast<int64_t>(getAxis());
  if (axis < 0)
    axis += rt.getRank();
  int64_t offset = 0;
  for (auto [i, in] : llvm::enumerate(getInputs())) {
    int64_t size = tensorType(in).getDimSize(axis);
    if (needs[i]) {
      SmallVector<int64_t> starts(rt.getRank(), 0), steps(rt.getRank(), 1);
      starts[axis] = offset;
      grads.push_back(SliceOp::create(b, getLoc(), in.getType(), resultGrads[0],
                                      b.getDenseI64ArrayAttr(starts),
                                      b.getDenseI64ArrayAttr(steps)));
    } else {
      grads.push_back(Value());
    }
    offset += size;
  }
  return success();
}

LogicalResult GatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      ArrayRef<bool>,
                                      SmallVectorImpl<Value> &grads) {
  grads.push_back(GatherGradOp::create(b, getLoc(), getTable().getType(),
                                       getIds(), resultGrads[0]));
  grads.push_back(Value());
  return success();
}

LogicalResult ClampOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     ArrayRef<bool>,
                                     SmallVectorImpl<Value> &grads) {
  grads.push_back(ClampGradOp::create(b, getLoc(), getX().getType(), getX(),
                                      resultGrads[0], getMinAttr(),
                                      getMaxAttr()));
  return success();
}

LogicalResult SoftmaxOp::buildGradient(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       ArrayRef<bool>,
                                       SmallVectorImpl<Value> &grads) {
  grads.push_back(
      SoftmaxGradOp::create(b, getLoc(), getResult(), resultGrads[0]));
  return success();
}

LogicalResult RmsNormOp::buildGradient(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       ArrayRef<bool> needs,
                                       SmallVectorImpl<Value> &grads) {
  auto g = RmsNormGradOp::create(b, getLoc(),
                                 TypeRange{getX().getType(), getW().getType()},
                                 getX(), getW(), resultGrads[0], getEpsAttr());
  grads.push_back(needs[0] ? g.getDx() : Value());
  grads.push_back(needs[1] ? g.getDw() : Value());
  return success();
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b,
                                         ArrayRef<Value> resultGrads,
                                         ArrayRef<bool> needs,
                                         SmallVectorImpl<Value> &grads) {
  auto g = LayerNormGradOp::create(
      b, getLoc(),
      TypeRange{getX().getType(), getW().getType(), getB().getType()}, getX(),
      getW(), resultGrads[0], getEpsAttr());
  grads.push_back(needs[0] ? g.getDx() : Value());
  grads.push_back(needs[1] ? g.getDw() : Value());
  grads.push_back(needs[2] ? g.getDb() : Value());
  return success();
}

LogicalResult RotaryOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      ArrayRef<bool> needs,
                                      SmallVectorImpl<Value> &grads) {
  if (needs[1] || needs[2])
    return emitOpError("rotary tables are constants and have no gradient");
  grads.push_back(
      RotaryGradOp::create(b, getLoc(), resultGrads[0], getCos(), getSin()));
  grads.push_back(Value());
  grads.push_back(Value());
  return success();
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b,
                                         ArrayRef<Value> resultGrads,
                                         ArrayRef<bool> needs,
                                         SmallVectorImpl<Value> &grads) {
  if (resultGrads[1])
    return emitOpError(
        "the log-sum-exp result is internal and cannot be differentiated");
  SmallVector<Type, 4> types{getQ().getType(), getK().getType(),
                             getV().getType()};
  if (getSinks())
    types.push_back(getSinks().getType());
  auto g =
      AttentionGradOp::create(b, getLoc(), types, getQ(), getK(), getV(),
                              getOut(), getLse(), resultGrads[0], getSinks(),
                              getCausalAttr(), getScaleAttr(), getWindowAttr());
  grads.push_back(needs[0] ? g.getDq() : Value());
  grads.push_back(needs[1] ? g.getDk() : Value());
  grads.push_back(needs[2] ? g.getDv() : Value());
  if (getSinks())
    grads.push_back(needs[3] ? g.getDsinks() : Value());
  return success();
}

LogicalResult CrossEntropyOp::buildGradient(OpBuilder &b,
                                            ArrayRef<Value> resultGrads,
                                            ArrayRef<bool>,
                                            SmallVectorImpl<Value> &grads) {
  grads.push_back(CrossEntropyGradOp::create(
      b, getLoc(), getLogits().getType(), getLogits(), getLabels(),
      resultGrads[0], getIgnoreIndexAttr()));
  grads.push_back(Value());
  return success();
}

LogicalResult
LinearCrossEntropyOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    ArrayRef<bool> needs,
                                    SmallVectorImpl<Value> &grads) {
  auto g = LinearCrossEntropyGradOp::create(
      b, getLoc(), TypeRange{getH().getType(), getW().getType()}, getH(),
      getW(), getLabels(), resultGrads[0], getTransposeWAttr(),
      getIgnoreIndexAttr(), getChunkRowsAttr());
  grads.push_back(needs[0] ? g.getDh() : Value());
  grads.push_back(needs[1] ? g.getDw() : Value());
  grads.push_back(Value());
  return success();
}

// Mixture of experts. top_k: the values' gradient goes back to the chosen
// positions; the indices are not differentiable. expert_matmul: dx is the
// same grouped product with the other orientation of each expert's matrix,
// dw the per-expert sum of outer products; the ids have no gradient.
LogicalResult TopKOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    ArrayRef<bool>,
                                    SmallVectorImpl<Value> &grads) {
  if (resultGrads[1])
    return emitOpError("the indices of tg.top_k have no gradient");
  if (!resultGrads[0]) {
    grads.push_back(Value());
    return success();
  }
  grads.push_back(TopKGradOp::create(b, getLoc(), getX().getType(),
                                     getIndices(), resultGrads[0]));
  return success();
}

LogicalResult ExpertMatmulOp::buildGradient(OpBuilder &b,
                                            ArrayRef<Value> resultGrads,
                                            ArrayRef<bool> needs,
                                            SmallVectorImpl<Value> &grads) {
  Location loc = getLoc();
  Value dy = resultGrads[0];
  Value dx, dw;
  if (needs[0])
    dx = ExpertMatmulOp::create(b, loc, dy, getW(), getIds(), !getTransposeW());
  if (needs[1])
    dw = ExpertMatmulWGradOp::create(b, loc, getW().getType(), getX(), dy,
                                     getIds(), getTransposeWAttr());
  grads.push_back(dx);
  grads.push_back(dw);
  grads.push_back(Value());
  return success();
}
