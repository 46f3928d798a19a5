//===- PipeOps.h - The pipeline plan dialect --------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_PIPE_IR_PIPEOPS_H
#define RONDO_DIALECTS_PIPE_IR_PIPEOPS_H

#include "rondo/Planner/Planner.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "Pipe/IR/PipeDialect.h.inc"
#include "Pipe/IR/PipeEnums.h.inc"

namespace rondo::pipe {
/// The layer an op of the training function belongs to (an i64 attribute
/// on `tg` ops, set by pipe-layerize and kept by tg-autodiff on the
/// gradient ops it builds). Ops without it compute broadcast side data
/// (masks, positions, labels) that every stage may recompute.
inline constexpr llvm::StringLiteral kLayerAttr = "pipe.layer";
/// On the training function: the kinds of its layers, in order
/// (an array of strings "prefix" | "block" | "tail").
inline constexpr llvm::StringLiteral kLayerKindsAttr = "pipe.layer_kinds";
} // namespace rondo::pipe

#define GET_OP_CLASSES
#include "Pipe/IR/PipeOps.h.inc"

#endif // RONDO_DIALECTS_PIPE_IR_PIPEOPS_H
