//===- TGExpertOps.cpp - Mixture-of-experts ops: builders, verifiers ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// tg.top_k (the router's choice) and tg.expert_matmul (a product of each row
// with the matrix of the expert it was routed to), with their gradients'
// ops. Kept apart from TGOps.cpp so that file stays readable; the gradient
// rules and costs are with everyone else's (TGGradients.cpp, TGCost.cpp).
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/IR/TGOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace rondo::tg;

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

//===----------------------------------------------------------------------===//
// TopKOp
//===----------------------------------------------------------------------===//

void TopKOp::build(OpBuilder &b, OperationState &state, Value x, int64_t k) {
  auto xt = tensorType(x);
  SmallVector<int64_t> shape(xt.getShape());
  if (!shape.empty())
    shape.back() = k;
  build(b, state, RankedTensorType::get(shape, xt.getElementType()),
        RankedTensorType::get(shape, b.getI64Type()), x, k);
}

LogicalResult TopKOp::verify() {
  auto x = tensorType(getX()), v = tensorType(getValues()),
       i = tensorType(getIndices());
  if (x.getRank() < 1)
    return emitOpError("operand must have rank >= 1");
  int64_t k = getK();
  if (k < 1 || k > x.getShape().back())
    return emitOpError("k = ") << k << " must be in [1, " << x.getShape().back()
                               << "] (the last dimension of " << x << ")";
  SmallVector<int64_t> shape(x.getShape());
  shape.back() = k;
  if (v.getShape() != ArrayRef<int64_t>(shape) ||
      v.getElementType() != x.getElementType())
    return emitOpError("values must be ")
           << RankedTensorType::get(shape, x.getElementType()) << ", got " << v;
  if (i.getShape() != ArrayRef<int64_t>(shape) ||
      !i.getElementType().isInteger(64))
    return emitOpError("indices must be i64 of the values' shape, got ") << i;
  return success();
}

LogicalResult TopKGradOp::verify() {
  auto i = tensorType(getIndices()), d = tensorType(getDvalues()),
       r = tensorType(getResult());
  if (i.getShape() != d.getShape())
    return emitOpError("indices and dvalues shapes differ: ")
           << i << " vs " << d;
  if (r.getRank() != d.getRank() || r.getRank() < 1 ||
      r.getShape().drop_back() != d.getShape().drop_back() ||
      r.getShape().back() < d.getShape().back())
    return emitOpError("result ")
           << r << " must differ from dvalues " << d
           << " only in a last dimension at least as large";
  return success();
}

//===----------------------------------------------------------------------===//
// ExpertMatmulOp / ExpertMatmulWGradOp
//===----------------------------------------------------------------------===//

/// [N, M] from x [N, K] and w [E, K, M] ([E, M, K] when transposed); the
/// reason in `why` when the operands do not fit.
static FailureOr<SmallVector<int64_t>>
expertResultShape(RankedTensorType x, RankedTensorType w, RankedTensorType ids,
                  bool transW, std::string &why) {
  if (x.getRank() != 2 || w.getRank() != 3 || ids.getRank() != 1) {
    why = "expects x [N, K], w [E, K, M] (or [E, M, K]) and ids [N]";
    return failure();
  }
  if (ids.getDimSize(0) != x.getDimSize(0)) {
    why = "ids must have one entry per row of x";
    return failure();
  }
  int64_t k = transW ? w.getDimSize(2) : w.getDimSize(1);
  int64_t m = transW ? w.getDimSize(1) : w.getDimSize(2);
  if (k != x.getDimSize(1)) {
    why = "the rows of x have " + std::to_string(x.getDimSize(1)) +
          " elements but each expert's matrix contracts " + std::to_string(k);
    return failure();
  }
  return SmallVector<int64_t>{x.getDimSize(0), m};
}

void ExpertMatmulOp::build(OpBuilder &b, OperationState &state, Value x,
                           Value w, Value ids, bool transposeW) {
  std::string why;
  auto shape = expertResultShape(tensorType(x), tensorType(w), tensorType(ids),
                                 transposeW, why);
  Type result =
      succeeded(shape)
          ? RankedTensorType::get(*shape, tensorType(x).getElementType())
          : x.getType();
  build(b, state, result, x, w, ids, transposeW);
}

LogicalResult ExpertMatmulOp::verify() {
  std::string why;
  auto shape = expertResultShape(tensorType(getX()), tensorType(getW()),
                                 tensorType(getIds()), getTransposeW(), why);
  if (failed(shape))
    return emitOpError(why) << ", got " << getX().getType() << ", "
                            << getW().getType() << ", " << getIds().getType();
  if (tensorType(getResult()).getShape() != ArrayRef<int64_t>(*shape))
    return emitOpError("result must be [")
           << (*shape)[0] << ", " << (*shape)[1] << "], got "
           << getResult().getType();
  return success();
}

LogicalResult ExpertMatmulWGradOp::verify() {
  auto x = tensorType(getX()), dy = tensorType(getDy()),
       ids = tensorType(getIds()), w = tensorType(getResult());
  std::string why;
  auto shape = expertResultShape(x, w, ids, getTransposeW(), why);
  if (failed(shape))
    return emitOpError(why) << ", got " << x << ", " << w << ", " << ids;
  if (dy.getShape() != ArrayRef<int64_t>(*shape))
    return emitOpError("dy must be [")
           << (*shape)[0] << ", " << (*shape)[1] << "], got " << dy;
  return success();
}
