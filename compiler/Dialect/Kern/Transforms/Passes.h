//===- Passes.h - Transformations of kernel calls ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_KERN_TRANSFORMS_PASSES_H
#define RONDO_DIALECTS_KERN_TRANSFORMS_PASSES_H

#include "Dialect/Kern/IR/KernOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace rondo::kern {

#define GEN_PASS_DECL
#include "Dialect/Kern/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Dialect/Kern/Transforms/Passes.h.inc"

/// kern-fuse-linear-cross-entropy's rewrite on any function of kernel calls
/// (the pass applies it to stage functions): each LM head loss whose
/// gradient follows in the same block becomes one call. The host cost
/// model times a training function's kernels as the trainer runs them.
void fuseLinearCrossEntropy(mlir::func::FuncOp fn);

} // namespace rondo::kern

#endif // RONDO_DIALECTS_KERN_TRANSFORMS_PASSES_H
