//===- Safetensors.h - Reading and writing .safetensors files ---*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Hugging Face's safetensors format, which PEFT saves adapters in:
//
//   u64 N (little-endian)  N bytes of JSON  raw tensor bytes
//
// The JSON maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets into the bytes after the header, row-major,
// little-endian) and may hold "__metadata__", a map of strings. Files are
// written with fp32 tensors, a header padded with spaces to a multiple of 8
// bytes (so tensor data is aligned, as the reference implementation does),
// atomically (temporary file + rename). Reading accepts F32, F64, F16 and
// BF16 and converts to fp32.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_SAFETENSORS_H
#define RONDO_RUNTIME_SRC_SAFETENSORS_H

#include "rondo/runtime/OnnxWeights.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rondo::rt {

/// Writes `tensors` as F32, in the order given, with `metadata` as
/// "__metadata__" (omitted when empty). Throws rt::Error naming `path` when
/// it cannot be written; a previous file at `path` is then untouched.
void writeSafetensors(
    const std::string &path, const std::vector<TensorToWrite<float>> &tensors,
    const std::vector<std::pair<std::string, std::string>> &metadata = {});

/// Every tensor of the file at `path`, converted to fp32, in the order of
/// their data. Throws rt::Error naming the file (and the tensor) when it is
/// not a valid safetensors file or holds a tensor of another dtype.
std::vector<FloatTensor> readSafetensors(const std::string &path);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_SAFETENSORS_H
