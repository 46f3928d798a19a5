//===- Passes.h - tg passes -------------------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_TG_TRANSFORMS_PASSES_H
#define RONDO_DIALECTS_TG_TRANSFORMS_PASSES_H

#include "Dialect/TG/IR/TGOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace rondo::tg {

#define GEN_PASS_DECL
#include "Dialect/TG/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Dialect/TG/Transforms/Passes.h.inc"

} // namespace rondo::tg

#endif // RONDO_DIALECTS_TG_TRANSFORMS_PASSES_H
