//===- Generators.cpp - Data-independent ONNX ops ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Ops that build values from attributes and shapes: Constant,
// ConstantOfShape, Range, CumSum (positions) and Trilu (masks). They only
// fold: on data they are not supported.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

namespace rondo::import::ops {
namespace {

Folded foldConstant(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  if (auto *a = findAttr(node, "value")) {
    auto t = hostTensorFromProto(a->t(), "Constant value");
    if (!t)
      return t.takeError();
    return Tensors{std::move(*t)};
  }
  if (auto *a = findAttr(node, "value_int"))
    return Tensors{HostTensor::scalarI64(a->i())};
  if (auto *a = findAttr(node, "value_ints"))
    return Tensors{HostTensor::vectorI64(
        SmallVector<int64_t>(a->ints().begin(), a->ints().end()))};
  if (auto *a = findAttr(node, "value_float")) {
    HostTensor r = withData(DType::F32, {});
    r.f[0] = a->f();
    return Tensors{std::move(r)};
  }
  if (auto *a = findAttr(node, "value_floats")) {
    HostTensor r = withData(DType::F32, {int64_t(a->floats_size())});
    for (int k = 0; k < a->floats_size(); ++k)
      r.f[k] = a->floats(k);
    return Tensors{std::move(r)};
  }
  return err("Constant without a supported value attribute");
}

Folded foldConstantOfShape(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  int64_t maxElements = f.maxElements;
  NEED(s, 0);
  auto shape = intsOf(&s, "shape");
  if (!shape)
    return shape.takeError();
  HostTensor fillV = withData(DType::F32, {});
  if (auto *a = findAttr(node, "value")) {
    auto t = hostTensorFromProto(a->t(), "ConstantOfShape value");
    if (!t)
      return t.takeError();
    fillV = std::move(*t);
    if (fillV.numel() != 1)
      return err(llvm::formatv(
          "ConstantOfShape value must hold one element, it holds {0}",
          fillV.numel()));
  }
  SmallVector<int64_t> dims(shape->begin(), shape->end());
  if (llvm::Error e = checkShape(dims, "ConstantOfShape shape"))
    return std::move(e);
  if (tooBig(dims, maxElements))
    return Tensors{HostTensor::shapeOnly(fillV.dtype, dims)};
  HostTensor r = withData(fillV.dtype, dims);
  if (isFloat(r.dtype))
    std::fill(r.f.begin(), r.f.end(), fillV.f[0]);
  else
    std::fill(r.i.begin(), r.i.end(), fillV.i[0]);
  return Tensors{std::move(r)};
}

Folded foldRange(const Fold &f) {
  int64_t maxElements = f.maxElements;
  NEED(s, 0);
  NEED(l, 1);
  NEED(d, 2);
  if (!s.hasData || !l.hasData || !d.hasData)
    return err("Range bounds must be compile-time constants");
  if (s.numel() != 1 || l.numel() != 1 || d.numel() != 1)
    return err("Range start, limit and delta must be scalars");
  double start = s.getF(0), limit = l.getF(0), delta = d.getF(0);
  if (delta == 0)
    return err("Range delta is zero");
  double count = std::ceil((limit - start) / delta);
  if (std::isnan(count) || count > 9.0e18)
    return err(llvm::formatv("Range({0:e}, {1:e}, {2:e}) has too many "
                             "elements",
                             start, limit, delta));
  int64_t n = count > 0 ? int64_t(count) : 0;
  if (n > maxElements)
    return Tensors{HostTensor::shapeOnly(s.dtype, {n})};
  HostTensor r = withData(s.dtype, {n});
  for (int64_t k = 0; k < n; ++k) {
    if (isFloat(s.dtype))
      r.f[k] = roundTo(s.dtype, start + k * delta);
    else
      r.i[k] = wrapAdd(s.getI(0), wrapMul(k, d.getI(0)));
  }
  return Tensors{std::move(r)};
}

Folded foldCumSum(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  NEED(x, 0);
  NEED(ax, 1);
  auto axv = intsOf(&ax, "CumSum axis");
  if (!axv)
    return axv.takeError();
  if (axv->size() != 1)
    return err("CumSum axis must hold one value");
  auto axis = axisOf((*axv)[0], x.shape.size(), "CumSum axis");
  if (!axis)
    return axis.takeError();
  if (!x.hasData)
    return Tensors{HostTensor::shapeOnly(x.dtype, x.shape)};
  bool exclusive = attrInt(node, "exclusive", 0),
       reverse = attrInt(node, "reverse", 0);
  HostTensor r = withData(x.dtype, x.shape);
  auto strides = contiguousStrides(x.shape);
  int64_t len = x.shape[*axis], stride = strides[*axis];
  for (int64_t k = 0, n = x.numel(); k < n; ++k) {
    if ((k / stride) % len != 0)
      continue; // visit each line once, from its first element
    double accF = 0;
    int64_t accI = 0;
    for (int64_t j = 0; j < len; ++j) {
      int64_t jj = reverse ? len - 1 - j : j;
      int64_t pos = k + jj * stride;
      if (isFloat(x.dtype)) {
        if (exclusive) {
          r.f[pos] = roundTo(x.dtype, accF);
          accF += x.f[pos];
        } else {
          accF += x.f[pos];
          r.f[pos] = roundTo(x.dtype, accF);
        }
      } else {
        if (exclusive) {
          r.i[pos] = accI;
          accI = wrapAdd(accI, x.i[pos]);
        } else {
          accI = wrapAdd(accI, x.i[pos]);
          r.i[pos] = accI;
        }
      }
    }
  }
  return Tensors{std::move(r)};
}

Folded foldTrilu(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  ArrayRef<const HostTensor *> in = f.in;
  NEED(x, 0);
  int64_t kDiag = 0;
  if (in.size() > 1 && in[1]) {
    auto kv = intsOf(in[1], "Trilu k");
    if (!kv)
      return kv.takeError();
    if (kv->size() != 1)
      return err("Trilu k must hold one value");
    kDiag = (*kv)[0];
  }
  if (x.shape.size() < 2)
    return err("Trilu needs an input of rank >= 2");
  if (!x.hasData)
    return Tensors{HostTensor::shapeOnly(x.dtype, x.shape)};
  bool upper = attrInt(node, "upper", 1);
  HostTensor r = x;
  int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
  for (int64_t k = 0, n = x.numel(); k < n; ++k) {
    int64_t i = (k / cols) % rows, j = k % cols;
    bool keep = upper ? j - i >= kDiag : j - i <= kDiag; // |j - i| < 2^63
    if (!keep) {
      if (isFloat(r.dtype))
        r.f[k] = 0;
      else
        r.i[k] = 0;
    }
  }
  return Tensors{std::move(r)};
}

} // namespace

void registerGeneratorOps(OpTable &t) {
  t.add("Constant", foldConstant, nullptr);
  t.add("ConstantOfShape", foldConstantOfShape, nullptr);
  t.add("Range", foldRange, nullptr);
  t.add("CumSum", foldCumSum, nullptr);
  t.add("Trilu", foldTrilu, nullptr);
}

} // namespace rondo::import::ops
