//===- PipeOps.h - The pipeline plan dialect --------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_PIPE_IR_PIPEOPS_H
#define RONDO_DIALECTS_PIPE_IR_PIPEOPS_H

#include "Planner/Planner.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/SymbolTable.h"

#include "Dialect/Pipe/IR/PipeDialect.h.inc"
#include "Dialect/Pipe/IR/PipeEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "Dialect/Pipe/IR/PipeAttrs.h.inc"

namespace rondo::pipe {
/// The layer an op of the training function belongs to (an i64 attribute
/// on `tg` ops, set by pipe-layerize and kept by tg-autodiff on the
/// gradient ops it builds). Ops without it compute broadcast side data
/// (masks, positions, labels) that every stage may recompute.
inline constexpr llvm::StringLiteral kLayerAttr = "pipe.layer";
/// On the training function: the kinds of its layers, in order
/// (an array of strings "prefix" | "block" | "tail").
inline constexpr llvm::StringLiteral kLayerKindsAttr = "pipe.layer_kinds";

/// The shortest decimal that reads back as `value` exactly (the printer of
/// #pipe.bound's numbers: MLIR's float printer falls back to hexadecimal
/// bits for large byte counts).
std::string formatExact(double value);

/// The layer `op` belongs to, or nullopt for side data (and for no op).
inline std::optional<int64_t> getLayer(mlir::Operation *op) {
  if (auto tag = op ? op->getAttrOfType<mlir::IntegerAttr>(kLayerAttr)
                    : mlir::IntegerAttr())
    return tag.getInt();
  return std::nullopt;
}
} // namespace rondo::pipe

#define GET_OP_CLASSES
#include "Dialect/Pipe/IR/PipeOps.h.inc"

#endif // RONDO_DIALECTS_PIPE_IR_PIPEOPS_H
