//===- OnnxImporter.h - ONNX to tg translation ------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_IMPORT_ONNXIMPORTER_H
#define RONDO_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <string>

namespace rondo {

struct ImportOptions {
  /// Values for the dynamic batch and sequence dimensions of token inputs
  /// (-1: not given).
  int64_t batch = -1;
  int64_t seqLen = -1;
  /// Explicit shapes by input name; they win over batch/seqLen.
  llvm::StringMap<llvm::SmallVector<int64_t>> inputShapes;
  /// Data-independent values with more elements than this (or than 512 per
  /// position of --seq-len, for tables linear in the sequence) are kept
  /// shape-only and must be recognised (the causal mask) rather than built.
  int64_t maxFoldElements = int64_t(1) << 24;
};

/// Adds one `--input-shape NAME=d0,d1,...` to `options` (an empty list is a
/// scalar); the error names the specification and the bad entry.
llvm::Error addInputShape(ImportOptions &options, llvm::StringRef spec);

/// Imports a binary ONNX model or ONNX text (recognised by a leading '<')
/// into a module holding `func.func @main` in the tg dialect. On failure,
/// diagnostics have been emitted (naming the node, op, domain and opset) and
/// the result is null.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxFile(mlir::MLIRContext *context,
                                                 llvm::StringRef path,
                                                 const ImportOptions &options);

/// The same from bytes already in memory; `bufferName` is used in
/// diagnostics and to resolve external data.
mlir::OwningOpRef<mlir::ModuleOp>
importOnnxBuffer(mlir::MLIRContext *context, llvm::StringRef contents,
                 llvm::StringRef bufferName, const ImportOptions &options);

} // namespace rondo

#endif // RONDO_IMPORT_ONNXIMPORTER_H
