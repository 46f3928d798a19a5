//===- MatMul.cpp - Matrix products -----------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// MatMul (NumPy batch broadcasting and rank-1 promotion) and Gemm.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "Import/Recognise/Experts.h"

namespace rondo::import::ops {
namespace {

Folded foldMatMul(const Fold &f) {
  int64_t maxElements = f.maxElements;
  NEED(a, 0);
  NEED(b, 1);
  if (a.shape.size() < 2 || b.shape.size() < 2)
    return err("folding MatMul needs operands of rank >= 2");
  if (!isFloat(a.dtype) || !isFloat(b.dtype))
    return err("folding MatMul needs floating-point operands");
  int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back();
  int64_t k2 = b.shape[b.shape.size() - 2], n = b.shape.back();
  if (k != k2)
    return err("MatMul contraction sizes differ");
  auto batch = broadcastShape(ArrayRef<int64_t>(a.shape).drop_back(2),
                              ArrayRef<int64_t>(b.shape).drop_back(2));
  if (!batch)
    return batch.takeError();
  SmallVector<int64_t> shape(*batch);
  shape.push_back(m);
  shape.push_back(n);
  // The work, not only the result, is bounded.
  int64_t work = checkedNumel(shape);
  if (work < 0 || __builtin_mul_overflow(work, std::max<int64_t>(k, 1), &work))
    work = -1;
  if (!a.hasData || !b.hasData || tooBig(shape, maxElements) || work < 0 ||
      work > 4 * std::max<int64_t>(maxElements, 1))
    return Tensors{HostTensor::shapeOnly(a.dtype, shape)};
  HostTensor r = withData(a.dtype, shape);
  auto sa = broadcastStrides(ArrayRef<int64_t>(a.shape).drop_back(2), *batch);
  auto sb = broadcastStrides(ArrayRef<int64_t>(b.shape).drop_back(2), *batch);
  std::array<SmallVector<int64_t>, 2> st = {sa, sb};
  forEachBroadcast<2>(*batch, st,
                      [&](int64_t bi, const std::array<int64_t, 2> &o) {
                        for (int64_t i = 0; i < m; ++i)
                          for (int64_t j = 0; j < n; ++j) {
                            double acc = 0;
                            for (int64_t p = 0; p < k; ++p)
                              acc += a.getF(o[0] * m * k + i * k + p) *
                                     b.getF(o[1] * k * n + p * n + j);
                            r.f[bi * m * n + i * n + j] = roundTo(a.dtype, acc);
                          }
                      });
  return Tensors{std::move(r)};
}

Converted convertMatMul(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  StringRef op = c.node.op_type();
  if (op == "MatMul" &&
      llvm::any_of(in, [](const Val *v) { return v && v->experts; }))
    return convertExpertMatmul(c);
  auto a = c.need(0), b = c.need(1);
  if (failed(a) || failed(b) || failed(c.requireFloat(*a)) ||
      failed(c.requireFloat(*b)))
    return failure();
  bool ta = op == "Gemm" && attrInt(node, "transA", 0);
  bool tb = op == "Gemm" && attrInt(node, "transB", 0);
  Value x = *a, w = *b;
  auto xt = typeOf(x), wt = typeOf(w);
  if (op == "Gemm" && (xt.getRank() != 2 || wt.getRank() != 2))
    return c.error() << "Gemm needs rank-2 operands", failure();
  if (xt.getRank() == 0 || wt.getRank() == 0)
    return c.error() << "MatMul operands must have rank >= 1, got " << xt
                     << " and " << wt,
           failure();
  // Rank-1 operands follow NumPy: promote, multiply, drop the added dim.
  bool vecA = xt.getRank() == 1, vecB = wt.getRank() == 1;
  if (vecA)
    x = tg::ReshapeOp::create(
        c.builder, c.loc,
        RankedTensorType::get({1, xt.getDimSize(0)}, xt.getElementType()), x);
  if (vecB)
    w = tg::ReshapeOp::create(
        c.builder, c.loc,
        RankedTensorType::get({wt.getDimSize(0), 1}, wt.getElementType()), w);
  auto xs = typeOf(x).getShape(), ws = typeOf(w).getShape();
  int64_t ka = ta ? xs[xs.size() - 2] : xs.back(),
          kb = tb ? ws.back() : ws[ws.size() - 2];
  if (ka != kb)
    return c.error() << "contraction sizes differ: " << xt << " and " << wt,
           failure();
  if (failed(tg::broadcastShapes(xs.drop_back(2), ws.drop_back(2))))
    return c.error() << "batch dimensions do not broadcast: " << xt << " and "
                     << wt,
           failure();
  Value y = tg::MatmulOp::create(c.builder, c.loc, x, w, ta, tb);
  if (vecA || vecB) {
    SmallVector<int64_t> shape(typeOf(y).getShape());
    if (vecB)
      shape.pop_back();
    if (vecA)
      shape.erase(shape.end() - (vecB ? 1 : 2));
    y = tg::ReshapeOp::create(
        c.builder, c.loc,
        RankedTensorType::get(shape, typeOf(y).getElementType()), y);
  }
  if (op == "Gemm") {
    float alpha = attrFloat(node, "alpha", 1.0f),
          beta = attrFloat(node, "beta", 1.0f);
    auto scalar = [&](float v) {
      return tg::ConstantOp::create(
          c.builder, c.loc,
          DenseElementsAttr::get(
              RankedTensorType::get({}, c.builder.getF32Type()), v));
    };
    if (alpha != 1.0f)
      y = tg::BinaryOp::create(c.builder, c.loc, tg::BinaryKind::mul, y,
                               scalar(alpha));
    if (in.size() > 2 && in[2]) {
      auto biasIn = c.need(2);
      if (failed(biasIn))
        return failure();
      Value bias = *biasIn;
      if (failed(c.requireFloat(bias)))
        return failure();
      if (failed(tg::broadcastShapes(typeOf(bias).getShape(),
                                     typeOf(y).getShape())))
        return c.error() << "bias " << bias.getType()
                         << " does not broadcast to " << y.getType(),
               failure();
      if (beta != 1.0f)
        bias = tg::BinaryOp::create(c.builder, c.loc, tg::BinaryKind::mul, bias,
                                    scalar(beta));
      y = tg::BinaryOp::create(c.builder, c.loc, tg::BinaryKind::add, y, bias);
    }
  }
  return wrap(y);
}

} // namespace

void registerMatMulOps(OpTable &t) {
  t.add("MatMul", foldMatMul, convertMatMul);
  t.add("Gemm", nullptr, convertMatMul);
}

} // namespace rondo::import::ops
