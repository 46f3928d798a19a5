//===- Passes.h - Transformations of kernel calls ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_KERN_TRANSFORMS_PASSES_H
#define RONDO_DIALECTS_KERN_TRANSFORMS_PASSES_H

#include "Kern/IR/KernOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace rondo::kern {

#define GEN_PASS_DECL
#include "Kern/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Kern/Transforms/Passes.h.inc"

} // namespace rondo::kern

#endif // RONDO_DIALECTS_KERN_TRANSFORMS_PASSES_H
