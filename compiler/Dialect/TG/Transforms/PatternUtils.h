//===- PatternUtils.h - Matching helpers for tg recognition -----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_TG_TRANSFORMS_PATTERNUTILS_H
#define RONDO_DIALECTS_TG_TRANSFORMS_PATTERNUTILS_H

#include "Dialect/TG/IR/TGOps.h"

#include <optional>

namespace rondo::tg {

/// The single value of a constant that holds one distinct element (a splat,
/// possibly broadcast or reshaped).
inline std::optional<double> scalarConstant(mlir::Value v) {
  while (mlir::Operation *def = v.getDefiningOp()) {
    if (mlir::isa<BroadcastOp, ReshapeOp>(def)) {
      v = def->getOperand(0);
      continue;
    }
    auto c = mlir::dyn_cast<ConstantOp>(def);
    if (!c)
      return std::nullopt;
    auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(c.getValue());
    if (!dense || !dense.isSplat() ||
        !mlir::isa<mlir::FloatType>(dense.getElementType()))
      return std::nullopt;
    return dense.getSplatValue<llvm::APFloat>().convertToDouble();
  }
  return std::nullopt;
}

inline bool isScalarConstant(mlir::Value v, double expected,
                             double tol = 1e-6) {
  auto c = scalarConstant(v);
  return c &&
         std::abs(*c - expected) <= tol * std::max(1.0, std::abs(expected));
}

/// Matches `v = tg.binary kind(a, b)`; for commutative kinds, `first`
/// decides which operand is returned first by trying both orders with
/// `pred(a, b)`.
template <typename Pred>
bool matchBinary(mlir::Value v, BinaryKind kind, mlir::Value &a, mlir::Value &b,
                 Pred pred) {
  auto op = v.getDefiningOp<BinaryOp>();
  if (!op || op.getKind() != kind)
    return false;
  if (pred(op.getLhs(), op.getRhs())) {
    a = op.getLhs();
    b = op.getRhs();
    return true;
  }
  bool commutative = kind == BinaryKind::add || kind == BinaryKind::mul;
  if (commutative && pred(op.getRhs(), op.getLhs())) {
    a = op.getRhs();
    b = op.getLhs();
    return true;
  }
  return false;
}

inline bool isUnary(mlir::Value v, UnaryKind kind, mlir::Value &x) {
  auto op = v.getDefiningOp<UnaryOp>();
  if (!op || op.getKind() != kind)
    return false;
  x = op.getX();
  return true;
}

} // namespace rondo::tg

#endif // RONDO_DIALECTS_TG_TRANSFORMS_PATTERNUTILS_H
