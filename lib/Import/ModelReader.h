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

#include <cstdint>
#include <limits>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace rondo::import {

/// Protobuf's hard limit on a serialized message (it counts sizes in int).
constexpr uint64_t kMaxProtobufBytes =
    uint64_t(std::numeric_limits<int>::max());

/// Parses `contents`, binary ONNX or ONNX text (recognised by a leading
/// '<'), into `model`; on failure, the error has been emitted at `fileLoc`.
mlir::LogicalResult readOnnxModel(mlir::Location fileLoc,
                                  llvm::StringRef contents,
                                  onnx::ModelProto &model);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_MODELREADER_H
