//===- ModelReader.h - Reading ONNX models ----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Parses binary ONNX or ONNX text into a ModelProto within limits that keep
// hostile files from exhausting the stack or protobuf's int sizes.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_MODELREADER_H
#define RONDO_LIB_IMPORT_MODELREADER_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <limits>
#include <memory>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace rondo::import {

/// Protobuf's hard limit on a serialized message (it counts sizes in int).
constexpr uint64_t kMaxProtobufBytes =
    uint64_t(std::numeric_limits<int>::max());

/// The bytes of the model file `path`, within kMaxProtobufBytes; null after
/// an error naming the file (missing, a directory, a device such as
/// /dev/zero, too large). A pipe is read only up to the limit.
std::unique_ptr<llvm::MemoryBuffer> readModelFile(mlir::MLIRContext *ctx,
                                                  llvm::StringRef path);

/// Parses `contents`, binary ONNX or ONNX text (recognised by a leading
/// '<'), into `model`; on failure, the error has been emitted at `fileLoc`.
mlir::LogicalResult readOnnxModel(mlir::Location fileLoc,
                                  llvm::StringRef contents,
                                  onnx::ModelProto &model);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_MODELREADER_H
