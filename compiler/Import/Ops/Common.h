//===- Common.h - Helpers shared by the op families -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Private to compiler/Import/Ops: the names its code uses, attribute access,
// broadcasting and element arithmetic for folding functions, type access for
// conversion functions.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_OPS_COMMON_H
#define RONDO_LIB_IMPORT_OPS_COMMON_H

#include "Import/OpTable.h"

#include "Dialect/TG/IR/TGOps.h"

#include "onnx/onnx_pb.h"
#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <optional>

namespace rondo::import::ops {

// The family files' code lives in this namespace and names MLIR's types, and
// the LLVM ones MLIR re-exports (ArrayRef, SmallVector, StringRef),
// unqualified: declared here once for all of them.
using namespace mlir;

using Tensors = std::vector<HostTensor>;

/// Binds `var` to input `k` of the Fold `f`, or returns its error.
#define NEED(var, k)                                                           \
  auto var##OrErr = f.need(k);                                                 \
  if (!var##OrErr)                                                             \
    return var##OrErr.takeError();                                             \
  const HostTensor &var = **var##OrErr;

inline llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

inline const onnx::AttributeProto *findAttr(const onnx::NodeProto &n,
                                            llvm::StringRef name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
inline int64_t attrInt(const onnx::NodeProto &n, llvm::StringRef name,
                       int64_t dflt) {
  auto *a = findAttr(n, name);
  return a ? a->i() : dflt;
}
inline float attrFloat(const onnx::NodeProto &n, llvm::StringRef name,
                       float dflt) {
  auto *a = findAttr(n, name);
  return a ? a->f() : dflt;
}
inline std::optional<llvm::SmallVector<int64_t>>
attrInts(const onnx::NodeProto &n, llvm::StringRef name) {
  auto *a = findAttr(n, name);
  if (!a)
    return std::nullopt;
  return llvm::SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

/// Strides of `shape` laid out in a broadcast output of rank `rank`; 0 for
/// broadcast dimensions.
inline llvm::SmallVector<int64_t>
broadcastStrides(llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> out) {
  llvm::SmallVector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (int64_t k = shape.size() - 1; k >= 0; --k) {
    size_t o = out.size() - shape.size() + k;
    strides[o] = shape[k] == 1 ? 0 : s;
    s *= shape[k];
  }
  return strides;
}

/// Calls fn(outIndex, offsets...) for every element of `out`, where offsets
/// are the linear positions in each broadcast input.
template <size_t N, typename Fn>
void forEachBroadcast(llvm::ArrayRef<int64_t> out,
                      const std::array<llvm::SmallVector<int64_t>, N> &strides,
                      Fn fn) {
  int64_t total = 1;
  for (int64_t d : out)
    total *= d;
  llvm::SmallVector<int64_t> idx(out.size(), 0);
  std::array<int64_t, N> off{};
  for (int64_t k = 0; k < total; ++k) {
    fn(k, off);
    for (int64_t d = out.size() - 1; d >= 0; --d) {
      ++idx[d];
      for (size_t j = 0; j < N; ++j)
        off[j] += strides[j][d];
      if (idx[d] < out[d])
        break;
      for (size_t j = 0; j < N; ++j)
        off[j] -= strides[j][d] * idx[d];
      idx[d] = 0;
    }
  }
}

inline double roundTo(DType t, double v) {
  return t == DType::F32 ? double(float(v)) : v;
}

inline HostTensor withData(DType t, llvm::ArrayRef<int64_t> shape) {
  return HostTensor::zeros(t, shape);
}

/// Whether a result of `shape` is too large to compute with data (or not a
/// valid shape at all: evaluateNode rejects those afterwards).
inline bool tooBig(llvm::ArrayRef<int64_t> shape, int64_t maxElements) {
  int64_t n = checkedNumel(shape);
  return n < 0 || n > maxElements;
}

/// Wrapping int64 arithmetic (ONNX leaves overflow undefined; C++ UB is not
/// an option here).
inline int64_t wrapAdd(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) + uint64_t(b));
}
inline int64_t wrapSub(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) - uint64_t(b));
}
inline int64_t wrapMul(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) * uint64_t(b));
}

/// Normalises an axis against `rank`, or errors.
inline llvm::Expected<int64_t> axisOf(int64_t axis, int64_t rank,
                                      llvm::StringRef what) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return err(llvm::formatv("{0} {1} is out of range for rank {2}", what, axis,
                             rank));
  return a;
}

/// Copies elements of `x` (contiguous) into a new tensor of `shape` in the
/// order given by `srcIndex(k)`.
template <typename IndexFn>
HostTensor gatherElements(const HostTensor &x, llvm::ArrayRef<int64_t> shape,
                          IndexFn srcIndex) {
  HostTensor r = withData(x.dtype, shape);
  for (int64_t k = 0, n = r.numel(); k < n; ++k) {
    int64_t s = srcIndex(k);
    if (isFloat(x.dtype))
      r.f[k] = x.f[s];
    else
      r.i[k] = x.i[s];
  }
  return r;
}

inline llvm::SmallVector<int64_t>
contiguousStrides(llvm::ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// The integers of a folded input that must be a compile-time constant.
inline llvm::Expected<std::vector<int64_t>> intsOf(const HostTensor *t,
                                                   const llvm::Twine &what) {
  if (!t || !t->hasData)
    return err(what + " must be a compile-time constant");
  std::vector<int64_t> v(t->numel());
  for (int64_t k = 0; k < t->numel(); ++k)
    v[k] = t->getI(k);
  return v;
}

inline mlir::RankedTensorType typeOf(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType());
}

/// Constant integer list from an input (axes, shapes, splits).
inline mlir::FailureOr<llvm::SmallVector<int64_t>> constInts(const Val *v) {
  if (!v || !v->isConst || !v->host.hasData)
    return mlir::failure();
  llvm::SmallVector<int64_t> r;
  for (int64_t k = 0; k < v->host.numel(); ++k)
    r.push_back(v->host.getI(k));
  return r;
}

} // namespace rondo::import::ops

#endif // RONDO_LIB_IMPORT_OPS_COMMON_H
