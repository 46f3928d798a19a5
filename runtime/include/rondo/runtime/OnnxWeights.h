//===- OnnxWeights.h - Reading and writing ONNX initializers ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Weights enter and leave a trainer as ONNX initializers: initial weights are
// read from the model file (inline raw_data / float_data, or external data
// files next to it; fp32, fp16, bf16 and fp64 are converted to fp32), trained
// weights are written back into a copy of the model in each initializer's own
// type, and gradients are dumped as a node-less model in the format of the
// PyTorch references (*.ref.onnx). Protobuf types stay out of this header.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_ONNXWEIGHTS_H
#define RONDO_RUNTIME_ONNXWEIGHTS_H

#include "rondo/runtime/Model.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rondo::rt {

/// Weights used where they lie in their external data files, never copied:
/// read-only mappings, paged in as the uploads read them and evictable, so
/// frozen weights may exceed the host's memory.
struct MappedWeights {
  /// Per parameter: its fp32 data inside a mapping, or null (load a copy).
  std::vector<const float *> data;
  int64_t bytes = 0; ///< Mapped parameter bytes.
  std::vector<std::shared_ptr<const void>> keepAlive;
};

/// Maps every params[i] with wanted[i] whose initializer in the model at
/// `path` is external FLOAT data at a 4-byte aligned offset (what the
/// exporters write); the others stay null. Throws rt::Error as
/// loadOnnxWeights does for a missing initializer, a wrong shape or a file
/// too short.
MappedWeights mapOnnxWeights(const std::string &path, const ParamSpec *params,
                             int numParams, const std::vector<bool> &wanted);

/// Loads, for every params[i] with dst[i] not null, the initializer of that
/// name from the model at `path` into dst[i] (fp32, product of
/// params[i].dims elements). Throws rt::Error naming the initializer and
/// file when one is missing, has another shape or a non-floating type, or
/// its external data cannot be read.
void loadOnnxWeights(const std::string &path, const ParamSpec *params,
                     int numParams, float *const *dst);

/// A fp32 initializer read back from a file (tests and tools).
struct FloatTensor {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<float> data;
};

/// Every floating-point initializer of the model at `path`, converted to
/// fp32, in file order. Initializers of other types are skipped.
std::vector<FloatTensor> readOnnxFloatInitializers(const std::string &path);

/// A tensor to write; `data` holds the product of `dims` elements.
template <typename T> struct TensorToWrite {
  std::string name;
  std::vector<int64_t> dims;
  const T *data = nullptr;
};

/// Writes a model without nodes (ir_version 10, default-domain opset 20)
/// whose graph initializers are `floats` then `ints`, as *.ref.onnx files are.
/// The file appears atomically (temporary file + rename).
void writeInitializerModel(
    const std::string &path, const std::vector<TensorToWrite<float>> &floats,
    const std::vector<TensorToWrite<int64_t>> &ints = {});

struct ExportOptions {
  /// When the initializers of the exported model together exceed this many
  /// bytes, their data goes to `<output>.data` next to it (external data), as
  /// protobuf cannot hold more than 2 GiB in one message.
  int64_t externalDataThreshold = int64_t(1) << 30;
};

/// Copies the model at `modelPath` to `outPath`, replacing the data of every
/// initializer named by `params` with `data[i]` converted to the
/// initializer's type. Other initializers keep their values; external data
/// they reference is read and written into the new model. Both files appear
/// atomically.
void exportOnnxWeights(const std::string &modelPath, const std::string &outPath,
                       const ParamSpec *params, int numParams,
                       const float *const *data,
                       const ExportOptions &options = {});

} // namespace rondo::rt

#endif // RONDO_RUNTIME_ONNXWEIGHTS_H
