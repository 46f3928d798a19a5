//===- HostTensor.h - Compile-time tensors for ONNX folding -----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The importer folds every data-independent ONNX value (shape arithmetic,
// positions, rotary tables, masks) into a HostTensor, with the folding
// functions of its op table (OpTable.h). A value that would
// be too large to hold keeps only its shape ("shape-only"), so the importer
// still knows its type and can recognise what it is without building it.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_HOSTTENSOR_H
#define RONDO_LIB_IMPORT_HOSTTENSOR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace rondo::import {

enum class DType { F32, F64, I64, I32, Bool };

/// Converts a double to int64 the way a C cast would for in-range values,
/// saturating out-of-range ones and mapping NaN to 0 (a plain cast is UB).
inline int64_t toI64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 9223372036854775807.0)
    return INT64_MAX;
  if (v <= -9223372036854775808.0)
    return INT64_MIN;
  return int64_t(v);
}

/// The element count of `shape`, or -1 if a dimension is negative or the
/// product overflows int64.
int64_t checkedNumel(llvm::ArrayRef<int64_t> shape);

/// An error unless every dimension of `shape` is >= 0 and the element count
/// fits in int64; `what` names the tensor.
llvm::Error checkShape(llvm::ArrayRef<int64_t> shape, const llvm::Twine &what);

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

  /// The element count; shapes are checked (checkShape) before a tensor is
  /// built, so this does not overflow.
  int64_t numel() const;
  double getF(int64_t k) const { return isFloat(dtype) ? f[k] : double(i[k]); }
  int64_t getI(int64_t k) const { return isFloat(dtype) ? toI64(f[k]) : i[k]; }

  static HostTensor shapeOnly(DType t, llvm::ArrayRef<int64_t> shape);
  static HostTensor zeros(DType t, llvm::ArrayRef<int64_t> shape);
  static HostTensor scalarI64(int64_t v);
  static HostTensor vectorI64(llvm::ArrayRef<int64_t> v);
};

/// The DType an ONNX data type is folded in (ok = false: unsupported).
DType dtypeFromOnnx(int onnxType, bool &ok);

/// Converts an ONNX TensorProto with inline data; `what` names it in errors.
llvm::Expected<HostTensor> hostTensorFromProto(const onnx::TensorProto &proto,
                                               llvm::StringRef what);

/// Checks a TensorProto's header against its data without reading it: the
/// dimensions (non-negative, element count within int64), and raw_data's
/// byte length or the typed field's value count against the element count.
/// External data must name a file inside the model's directory (a relative
/// path with no `..` component; it need not exist) with numeric offset and
/// length, the length matching the shape. `what` names it in errors.
llvm::Error checkTensorProto(const onnx::TensorProto &proto,
                             llvm::StringRef what);

/// NumPy broadcast of two shapes.
llvm::Expected<llvm::SmallVector<int64_t>>
broadcastShape(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_HOSTTENSOR_H
