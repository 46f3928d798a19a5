//===- Passes.h - exec passes -----------------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_EXEC_TRANSFORMS_PASSES_H
#define RONDO_DIALECTS_EXEC_TRANSFORMS_PASSES_H

#include "Dialect/Exec/IR/ExecOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace rondo::exec {

#define GEN_PASS_DECL
#include "Dialect/Exec/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Dialect/Exec/Transforms/Passes.h.inc"

} // namespace rondo::exec

#endif // RONDO_DIALECTS_EXEC_TRANSFORMS_PASSES_H
