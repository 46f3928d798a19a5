//===- Driver.h - One whole compilation -------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// import -> tg -> train -> plan -> lower every plan -> emit -> link, callable
// without rondo-compile (which only parses flags and calls compile()).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DRIVER_DRIVER_H
#define RONDO_DRIVER_DRIVER_H

#include "Driver/Options.h"
#include "Import/OnnxImporter.h"
#include "Pipelines/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"

namespace rondo {

/// Runs the compilation `options` describe and writes its output. Errors
/// go to stderr. Returns the exit status: 0, 1 when the compilation failed,
/// 2 when the options are wrong.
int compile(CompileOptions options);

/// Lowers every plan of `module` to exec programs. Stage functions take one
/// microbatch, so each group of plans with the same rows per microbatch gets
/// the training function rebuilt at that shape from `modelPath` (the
/// layering is the same: only the batch dimension differs); its stage
/// functions and programs are then moved into `module`.
mlir::LogicalResult lowerPlans(mlir::ModuleOp module, llvm::StringRef modelPath,
                               const ImportOptions &importOptions,
                               const TrainPipelineOptions &trainOptions,
                               bool peerHandoff);

/// Compiles the generated C++ at `cppPath` into the executable `exePath`
/// with the system compiler, linking the runtime of `backend`.
mlir::LogicalResult buildExecutable(llvm::StringRef cppPath,
                                    llvm::StringRef exePath,
                                    llvm::StringRef backend);

/// Whether this build can link trainers for `backend` ("cuda" needs
/// -DRONDO_ENABLE_CUDA=ON).
bool canLink(llvm::StringRef backend);

} // namespace rondo

#endif // RONDO_DRIVER_DRIVER_H
