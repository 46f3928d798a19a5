//===- Passes.h - pipe passes -----------------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_PIPE_TRANSFORMS_PASSES_H
#define RONDO_DIALECTS_PIPE_TRANSFORMS_PASSES_H

#include "Dialect/Pipe/IR/PipeOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace rondo::pipe {

/// Tags ops that canonicalization created after pipe-layerize (folded
/// reshapes, CSE leaders) with the layer of their users, else of their
/// producers; side data stays untagged.
void tagOpsCreatedAfterLayerize(mlir::func::FuncOp func);

#define GEN_PASS_DECL
#include "Dialect/Pipe/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Dialect/Pipe/Transforms/Passes.h.inc"

} // namespace rondo::pipe

#endif // RONDO_DIALECTS_PIPE_TRANSFORMS_PASSES_H
