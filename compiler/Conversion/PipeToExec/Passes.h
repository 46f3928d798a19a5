//===- Passes.h - Lowering pipe plans to exec programs ----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_CONVERSION_PIPETOEXEC_PASSES_H
#define RONDO_CONVERSION_PIPETOEXEC_PASSES_H

#include "Dialect/Exec/IR/ExecOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace rondo::exec {

#define GEN_PASS_DECL
#include "Conversion/PipeToExec/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Conversion/PipeToExec/Passes.h.inc"

} // namespace rondo::exec

#endif // RONDO_CONVERSION_PIPETOEXEC_PASSES_H
