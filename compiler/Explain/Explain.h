//===- Explain.h - Human-readable plans -------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_EXPLAIN_EXPLAIN_H
#define RONDO_EXPLAIN_EXPLAIN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace rondo {
/// The explanation of every `pipe.plan` in `module`: the layer table, the
/// stages and job order, memory per worker and on the host, the predicted
/// step time, tokens/s and bubble fraction, and what bound the plan.
void printExplanation(mlir::ModuleOp module, llvm::raw_ostream &os);

/// Writes into `dir` (created if needed) for every plan `PLAN.txt` (the
/// explanation) and `PLAN.svg` (the predicted timeline, one row per
/// worker), plus `plan.mlir` (the plans). Files are written to temporary
/// names and renamed, so a failure leaves no partial file.
mlir::LogicalResult writeExplainDir(mlir::ModuleOp module, llvm::StringRef dir,
                                    std::string &error);
/// One line for --explain: what trains, and the LoRA adapters when there
/// are any (the plan's memory and optimizer costs follow from it).
void printParameterLine(mlir::ModuleOp module, llvm::raw_ostream &os);

/// Writes `dir/op-timings.json`, the template of a measured profile for
/// this model on the module's target (`rondo.target`: its device spec, at
/// its precision); nothing without a target or a @main.
mlir::LogicalResult writeOpTimingsFile(mlir::ModuleOp module,
                                       llvm::StringRef dir, std::string &error);

/// Writes `contents` to `path` through a temporary file in the same folder,
/// so a failure leaves no partial file; `error` says what went wrong.
mlir::LogicalResult writeFileAtomically(llvm::StringRef path,
                                        llvm::StringRef contents,
                                        std::string &error);
} // namespace rondo

#endif // RONDO_EXPLAIN_EXPLAIN_H
