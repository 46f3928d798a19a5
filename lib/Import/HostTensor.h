//===- HostTensor.h - Compile-time tensors for ONNX folding -----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The importer folds every data-independent ONNX value (shape arithmetic,
// positions, rotary tables, masks) by evaluating it here. A value that would
// be too large to hold keeps only its shape ("shape-only"), so the importer
// still knows its type and can recognise what it is without building it.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_HOSTTENSOR_H
#define RONDO_LIB_IMPORT_HOSTTENSOR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace onnx {
class NodeProto;
class TensorProto;
} // namespace onnx

namespace rondo::import {

enum class DType { F32, F64, I64, I32, Bool };

bool isFloat(DType t);
const char *dtypeName(DType t);

struct HostTensor {
  DType dtype = DType::F32;
  llvm::SmallVector<int64_t> shape;
  /// Exactly one of these holds the data (floats in double precision, ints
  /// and bools in int64), unless the tensor is shape-only.
  std::vector<double> f;
  std::vector<int64_t> i;
  bool hasData = false;

  int64_t numel() const;
  double getF(int64_t k) const { return isFloat(dtype) ? f[k] : double(i[k]); }
  int64_t getI(int64_t k) const {
    return isFloat(dtype) ? int64_t(f[k]) : i[k];
  }

  static HostTensor shapeOnly(DType t, llvm::ArrayRef<int64_t> shape);
  static HostTensor zeros(DType t, llvm::ArrayRef<int64_t> shape);
  static HostTensor scalarI64(int64_t v);
  static HostTensor vectorI64(llvm::ArrayRef<int64_t> v);
};

/// Evaluates one ONNX node on host tensors. Inputs that are absent (optional
/// ONNX inputs left empty) are null. `maxElements` bounds the size of any
/// output computed with data; a larger output becomes shape-only. Errors
/// explain which input or attribute is wrong.
llvm::Expected<std::vector<HostTensor>>
evaluateNode(const onnx::NodeProto &node, int64_t opset,
             llvm::ArrayRef<const HostTensor *> inputs, int64_t maxElements);

/// Converts an ONNX TensorProto with inline data; `what` names it in errors.
llvm::Expected<HostTensor> hostTensorFromProto(const onnx::TensorProto &proto,
                                               llvm::StringRef what);

/// ONNX Slice (any opset) normalised against an input shape: in-range
/// starts, nonzero steps and the result shape.
struct SliceParams {
  llvm::SmallVector<int64_t> starts, steps, shape;
};
llvm::Expected<SliceParams>
sliceParams(const onnx::NodeProto &node, int64_t opset,
            llvm::ArrayRef<const HostTensor *> inputs,
            llvm::ArrayRef<int64_t> inputShape);

/// Whether the evaluator knows `opType` (default domain).
bool canEvaluate(llvm::StringRef opType);

/// NumPy broadcast of two shapes.
llvm::Expected<llvm::SmallVector<int64_t>>
broadcastShape(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_HOSTTENSOR_H
