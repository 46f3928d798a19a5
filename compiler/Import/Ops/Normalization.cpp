//===- Normalization.cpp - Normalisation ONNX ops ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Softmax and LayerNormalization over the last axis.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

namespace rondo::import::ops {
namespace {

Converted convertSoftmax(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  auto x = c.need(0);
  if (failed(x) || failed(c.requireFloat(*x)))
    return failure();
  int64_t rank = typeOf(*x).getRank();
  int64_t axis = attrInt(node, "axis", -1);
  if (axis < 0)
    axis += rank;
  if (axis != rank - 1)
    return c.error() << "softmax over axis " << axis << " of " << rank
                     << " dimensions is not supported (only the last)",
           failure();
  return wrap(tg::SoftmaxOp::create(c.builder, c.loc, *x));
}

Converted convertLayerNorm(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  auto x = c.need(0), w = c.need(1);
  if (failed(x) || failed(w) || failed(c.requireFloat(*x)))
    return failure();
  int64_t rank = typeOf(*x).getRank(), axis = attrInt(node, "axis", -1);
  if (axis < 0)
    axis += rank;
  if (axis != rank - 1)
    return c.error()
               << "layer normalisation over more than the last axis is not "
                  "supported",
           failure();
  for (int k = 1; k < node.output_size(); ++k)
    if (!node.output(k).empty())
      return c.error() << "the mean and inverse-std outputs are not supported",
             failure();
  Value bias;
  if (in.size() > 2 && in[2]) {
    auto b = c.need(2);
    if (failed(b))
      return failure();
    bias = *b;
  } else {
    bias = tg::ConstantOp::create(
        c.builder, c.loc,
        DenseElementsAttr::get(typeOf(*w), c.builder.getF32FloatAttr(0)));
  }
  for (Value v : {*w, bias})
    if (typeOf(*x).getRank() < 1 || typeOf(v).getRank() != 1 ||
        typeOf(v).getDimSize(0) != typeOf(*x).getShape().back() ||
        typeOf(v).getElementType() != typeOf(*x).getElementType())
      return c.error()
                 << "scale and bias must be rank 1 of the last dimension of "
                 << x->getType() << ", got " << v.getType(),
             failure();
  return wrap(tg::LayerNormOp::create(
      c.builder, c.loc, x->getType(), *x, *w, bias,
      c.builder.getF32FloatAttr(attrFloat(node, "epsilon", 1e-5f))));
}

} // namespace

void registerNormalizationOps(OpTable &t) {
  t.add("Softmax", nullptr, convertSoftmax);
  t.add("LayerNormalization", nullptr, convertLayerNorm);
}

} // namespace rondo::import::ops
