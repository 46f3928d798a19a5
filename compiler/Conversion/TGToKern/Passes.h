//===- Passes.h - Conversions into kern -------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_CONVERSION_TGTOKERN_PASSES_H
#define RONDO_CONVERSION_TGTOKERN_PASSES_H

#include "Dialect/Kern/IR/KernOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace rondo::kern {

#define GEN_PASS_DECL
#include "Conversion/TGToKern/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Conversion/TGToKern/Passes.h.inc"

/// The TG -> kern patterns, by op family.
void populateTGToKernElementwisePatterns(mlir::RewritePatternSet &patterns);
void populateTGToKernDataMovementPatterns(mlir::RewritePatternSet &patterns);
void populateTGToKernStructurePatterns(mlir::RewritePatternSet &patterns);
void populateTGToKernLossPatterns(mlir::RewritePatternSet &patterns);
void populateTGToKernPatterns(mlir::RewritePatternSet &patterns);

/// Lowers one function to kernel calls and checks the contract (every op a
/// kern.call or a storage op); errors name the op. The interpreter runs
/// functions through this.
mlir::LogicalResult convertToKernelCalls(mlir::func::FuncOp func);

} // namespace rondo::kern

#endif // RONDO_CONVERSION_TGTOKERN_PASSES_H
