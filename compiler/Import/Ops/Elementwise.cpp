//===- Elementwise.cpp - Elementwise ONNX ops -------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Arithmetic, comparisons and logic (binary, NumPy broadcast), unary
// functions, Where and Cast. Folding computes floats in double and rounds to
// the declared type after every node, so folded fp32 tables (rotary cos/sin)
// equal what PyTorch computes in fp32 up to the last bit in almost every
// element.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "Import/Recognise/Experts.h"

#include "llvm/ADT/StringSwitch.h"

#include <cmath>
#include <type_traits>

namespace rondo::import::ops {
namespace {

//===----------------------------------------------------------------------===//
// Binary ops
//===----------------------------------------------------------------------===//

llvm::Expected<Tensors> binaryOp(llvm::StringRef op, const HostTensor &a,
                                 const HostTensor &b, int64_t maxElements) {
  auto shape = broadcastShape(a.shape, b.shape);
  if (!shape)
    return shape.takeError();
  bool compare = llvm::is_contained({"Equal", "Less", "LessOrEqual", "Greater",
                                     "GreaterOrEqual", "And", "Or", "Xor"},
                                    op);
  DType outT = compare ? DType::Bool : a.dtype;
  if (!compare && isFloat(a.dtype) != isFloat(b.dtype))
    return err(llvm::formatv("operand types differ: {0} and {1}",
                             dtypeName(a.dtype), dtypeName(b.dtype)));
  if (!a.hasData || !b.hasData || tooBig(*shape, maxElements))
    return Tensors{HostTensor::shapeOnly(outT, *shape)};
  HostTensor r = withData(outT, *shape);
  std::array<SmallVector<int64_t>, 2> strides = {
      broadcastStrides(a.shape, *shape), broadcastStrides(b.shape, *shape)};
  bool floatMath = isFloat(a.dtype) || isFloat(b.dtype);
  enum Fn {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Xor,
    Mod
  };
  Fn fn = llvm::StringSwitch<Fn>(op)
              .Case("Add", Add)
              .Case("Sub", Sub)
              .Case("Mul", Mul)
              .Case("Div", Div)
              .Case("Pow", Pow)
              .Case("Max", Max)
              .Case("Min", Min)
              .Case("Equal", Eq)
              .Case("Less", Lt)
              .Case("LessOrEqual", Le)
              .Case("Greater", Gt)
              .Case("GreaterOrEqual", Ge)
              .Case("And", And)
              .Case("Or", Or)
              .Case("Xor", Xor)
              .Default(Mod);
  // One rule for both element kinds; integers follow ONNX (Div truncates,
  // Mod takes the divisor's sign) and never trap on a zero divisor.
  auto apply = [fn](auto x, auto y) -> decltype(x) {
    using T = decltype(x);
    constexpr bool isInt = std::is_integral_v<T>;
    switch (fn) {
    case Add:
      if constexpr (isInt)
        return wrapAdd(x, y);
      return x + y;
    case Sub:
      if constexpr (isInt)
        return wrapSub(x, y);
      return x - y;
    case Mul:
      if constexpr (isInt)
        return wrapMul(x, y);
      return x * y;
    case Div:
      if constexpr (isInt)
        return y == 0 ? 0 : y == -1 ? wrapSub(0, x) : x / y;
      return x / y;
    case Pow:
      if constexpr (isInt)
        return toI64(std::pow(double(x), double(y)));
      return T(std::pow(double(x), double(y)));
    case Max:
      return std::max(x, y);
    case Min:
      return std::min(x, y);
    case Eq:
      return x == y;
    case Lt:
      return x < y;
    case Le:
      return x <= y;
    case Gt:
      return x > y;
    case Ge:
      return x >= y;
    case And:
      return x != 0 && y != 0;
    case Or:
      return x != 0 || y != 0;
    case Xor:
      return (x != 0) != (y != 0);
    case Mod:
      if constexpr (isInt) {
        if (y == 0 || y == -1)
          return 0;
        T m = x % y;
        return m != 0 && ((m < 0) != (y < 0)) ? m + y : m;
      }
      return std::fmod(x, y);
    }
    return 0;
  };
  forEachBroadcast<2>(*shape, strides,
                      [&](int64_t k, const std::array<int64_t, 2> &o) {
                        if (floatMath) {
                          double v = apply(a.getF(o[0]), b.getF(o[1]));
                          if (compare)
                            r.i[k] = int64_t(v);
                          else
                            r.f[k] = roundTo(outT, v);
                        } else {
                          r.i[k] = apply(a.i[o[0]], b.i[o[1]]);
                        }
                      });
  return Tensors{std::move(r)};
}

Folded foldBinary(const Fold &f) {
  NEED(a, 0);
  NEED(b, 1);
  StringRef op = f.node.op_type();
  if ((op == "Max" || op == "Min") && f.in.size() != 2)
    return err("variadic " + op +
               " with other than two inputs is not supported");
  return binaryOp(op, a, b, f.maxElements);
}

Converted convertBinary(const Conversion &c, tg::BinaryKind kind) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  if (in.size() != 2 || !in[0] || !in[1])
    return c.error() << "expects exactly two inputs", failure();
  // A data-independent operand that is the causal mask stays symbolic.
  if (kind == tg::BinaryKind::add)
    for (int k = 0; k < 2; ++k) {
      if (!in[k]->isConst || in[1 - k]->isConst)
        continue;
      MaskClass mask = c.importer.classifyMask(node.input(k), in[k]->host);
      if (mask.kind == MaskKind::Additive) {
        Value x = in[1 - k]->value;
        if (failed(c.requireFloat(x)))
          return failure();
        Value m = c.importer.causalMask(in[k]->host.shape, mask.window);
        if (failed(tg::broadcastShapes(typeOf(x).getShape(),
                                       typeOf(m).getShape())))
          return c.error() << "the causal mask " << m.getType()
                           << " does not broadcast with " << x.getType(),
                 failure();
        return wrap(
            tg::BinaryOp::create(c.builder, c.loc, tg::BinaryKind::add, x, m));
      }
    }
  auto a = c.need(0), b = c.need(1);
  if (failed(a) || failed(b) || failed(c.requireFloat(*a)) ||
      failed(c.requireFloat(*b)))
    return failure();
  auto shape = broadcastShape(typeOf(*a).getShape(), typeOf(*b).getShape());
  if (!shape)
    return c.error() << llvm::toString(shape.takeError()), failure();
  return wrap(tg::BinaryOp::create(c.builder, c.loc, kind, *a, *b));
}

ConvertFn binary(tg::BinaryKind kind) {
  return [kind](const Conversion &c) { return convertBinary(c, kind); };
}

//===----------------------------------------------------------------------===//
// Unary ops
//===----------------------------------------------------------------------===//

llvm::Expected<Tensors> unaryOp(llvm::StringRef op, const HostTensor &x,
                                int64_t maxElements) {
  DType outT = op == "Not" || op == "IsNaN" ? DType::Bool : x.dtype;
  if (!x.hasData)
    return Tensors{HostTensor::shapeOnly(outT, x.shape)};
  HostTensor r = withData(outT, x.shape);
  if (op == "Not" && x.dtype != DType::Bool)
    return err(
        llvm::formatv("'Not' needs a bool input, got {0}", dtypeName(x.dtype)));
  for (int64_t k = 0, n = x.numel(); k < n; ++k) {
    if (op == "Not") {
      r.i[k] = !x.i[k];
      continue;
    }
    if (op == "IsNaN") {
      r.i[k] = std::isnan(x.getF(k));
      continue;
    }
    if (!isFloat(x.dtype)) {
      int64_t v = x.i[k];
      if (op == "Neg")
        r.i[k] = wrapSub(0, v);
      else if (op == "Abs")
        r.i[k] = v < 0 ? wrapSub(0, v) : v;
      else if (op == "Sign")
        r.i[k] = (v > 0) - (v < 0);
      else
        return err("'" + op + "' needs a floating-point input, got " +
                   dtypeName(x.dtype));
      continue;
    }
    double v = x.f[k];
    double out = llvm::StringSwitch<double>(op)
                     .Case("Neg", -v)
                     .Case("Cos", std::cos(v))
                     .Case("Sin", std::sin(v))
                     .Case("Sqrt", std::sqrt(v))
                     .Case("Reciprocal", 1.0 / v)
                     .Case("Exp", std::exp(v))
                     .Case("Log", std::log(v))
                     .Case("Abs", std::fabs(v))
                     .Case("Floor", std::floor(v))
                     .Case("Ceil", std::ceil(v))
                     .Case("Sigmoid", 1.0 / (1.0 + std::exp(-v)))
                     .Case("Tanh", std::tanh(v))
                     .Case("Relu", v > 0 ? v : 0.0)
                     .Case("Sign", double((v > 0) - (v < 0)))
                     .Default(NAN);
    r.f[k] = roundTo(outT, out);
  }
  return Tensors{std::move(r)};
}

Folded foldUnary(const Fold &f) {
  NEED(x, 0);
  return unaryOp(f.node.op_type(), x, f.maxElements);
}

ConvertFn unary(tg::UnaryKind kind) {
  return [kind](const Conversion &c) -> Converted {
    auto x = c.need(0);
    if (failed(x) || failed(c.requireFloat(*x)))
      return failure();
    return wrap(tg::UnaryOp::create(c.builder, c.loc, kind, *x));
  };
}

/// A Clip bound: input `k` (one element, data-independent), or `absent`
/// when the optional input is left empty.
llvm::Expected<double> clipBound(ArrayRef<const HostTensor *> in, size_t k,
                                 double absent) {
  const HostTensor *t = k < in.size() ? in[k] : nullptr;
  if (!t)
    return absent;
  if (!t->hasData || t->numel() != 1)
    return err(llvm::formatv("Clip's {0} must be a one-element constant",
                             k == 1 ? "min" : "max"));
  return t->getF(0);
}

/// ONNX Clip: x < min ? min : (x > max ? max : x), so a NaN stays NaN.
Folded foldClip(const Fold &f) {
  NEED(x, 0);
  auto lo = clipBound(f.in, 1, -INFINITY), hi = clipBound(f.in, 2, INFINITY);
  if (!lo)
    return lo.takeError();
  if (!hi)
    return hi.takeError();
  if (!x.hasData)
    return Tensors{HostTensor::shapeOnly(x.dtype, x.shape)};
  HostTensor r = withData(x.dtype, x.shape);
  for (int64_t k = 0, n = x.numel(); k < n; ++k) {
    double v = x.getF(k), c = v < *lo ? *lo : (v > *hi ? *hi : v);
    if (isFloat(x.dtype))
      r.f[k] = roundTo(x.dtype, c);
    else
      r.i[k] = toI64(c);
  }
  return Tensors{std::move(r)};
}

Converted convertClip(const Conversion &c) {
  auto x = c.need(0);
  if (failed(x))
    return failure();
  bool ints = typeOf(*x).getElementType().isInteger();
  if (!ints && failed(c.requireFloat(*x)))
    return failure();
  // The folded bounds, indexed as the node's inputs.
  const HostTensor *in[3] = {nullptr, nullptr, nullptr};
  for (size_t k : {1, 2}) {
    const Val *v = k < c.in.size() ? c.in[k] : nullptr;
    if (v && !v->isConst)
      return c.error() << "Clip's " << (k == 1 ? "min" : "max")
                       << " must be data-independent",
             failure();
    in[k] = v ? &v->host : nullptr;
  }
  llvm::Expected<double> lo = clipBound(in, 1, -INFINITY);
  if (!lo)
    return c.error() << llvm::toString(lo.takeError()), failure();
  llvm::Expected<double> hi = clipBound(in, 2, INFINITY);
  if (!hi)
    return c.error() << llvm::toString(hi.takeError()), failure();
  if (std::isnan(*lo) || std::isnan(*hi) || *hi < *lo)
    return c.error() << "Clip's bounds [" << *lo << ", " << *hi
                     << "] are not ordered",
           failure();
  if (ints)
    return convertIndexClip(c, *lo, *hi);
  return wrap(tg::ClampOp::create(c.builder, c.loc, *x,
                                  c.builder.getF32FloatAttr(float(*lo)),
                                  c.builder.getF32FloatAttr(float(*hi))));
}

Converted convertGelu(const Conversion &c) {
  auto x = c.need(0);
  if (failed(x) || failed(c.requireFloat(*x)))
    return failure();
  auto *a = findAttr(c.node, "approximate");
  bool tanhApprox = a && a->s() == "tanh";
  return wrap(tg::UnaryOp::create(
      c.builder, c.loc,
      tanhApprox ? tg::UnaryKind::gelu_tanh : tg::UnaryKind::gelu_erf, *x));
}

Converted convertIsNan(const Conversion &c) {
  auto x = c.need(0);
  if (failed(x) || failed(c.requireFloat(*x)))
    return failure();
  return wrap(tg::IsNanOp::create(
      c.builder, c.loc,
      RankedTensorType::get(typeOf(*x).getShape(), c.builder.getI1Type()), *x));
}

//===----------------------------------------------------------------------===//
// Where
//===----------------------------------------------------------------------===//

Folded foldWhere(const Fold &f) {
  int64_t maxElements = f.maxElements;
  NEED(c, 0);
  NEED(a, 1);
  NEED(b, 2);
  auto ab = broadcastShape(a.shape, b.shape);
  if (!ab)
    return ab.takeError();
  auto shape = broadcastShape(*ab, c.shape);
  if (!shape)
    return shape.takeError();
  if (c.dtype != DType::Bool)
    return err(llvm::formatv("Where condition must be bool, got {0}",
                             dtypeName(c.dtype)));
  if (!c.hasData || !a.hasData || !b.hasData || tooBig(*shape, maxElements))
    return Tensors{HostTensor::shapeOnly(a.dtype, *shape)};
  HostTensor r = withData(a.dtype, *shape);
  std::array<SmallVector<int64_t>, 3> strides = {
      broadcastStrides(c.shape, *shape), broadcastStrides(a.shape, *shape),
      broadcastStrides(b.shape, *shape)};
  forEachBroadcast<3>(*shape, strides,
                      [&](int64_t k, const std::array<int64_t, 3> &o) {
                        bool pick = c.i[o[0]] != 0;
                        if (isFloat(a.dtype))
                          r.f[k] = pick ? a.f[o[1]] : b.getF(o[2]);
                        else
                          r.i[k] = pick ? a.i[o[1]] : b.getI(o[2]);
                      });
  return Tensors{std::move(r)};
}

Converted convertWhere(const Conversion &c) {
  ArrayRef<const Val *> in = c.in;
  // The exporter's masked attention: Where(causal, scores, -inf), the
  // causal mask possibly banded by a sliding window.
  MaskClass mask;
  if (in.size() == 3 && in[0] && in[0]->isConst && in[1] && !in[1]->isConst &&
      in[2] && in[2]->isConst && in[2]->host.hasData &&
      in[2]->host.numel() == 1 && in[2]->host.getF(0) <= -1e30)
    mask = c.importer.classifyMask(c.node.input(0), in[0]->host);
  if (mask.kind == MaskKind::Boolean) {
    Value m = c.importer.causalMask(in[0]->host.shape, mask.window);
    if (failed(c.requireFloat(in[1]->value)))
      return failure();
    if (failed(tg::broadcastShapes(typeOf(in[1]->value).getShape(),
                                   typeOf(m).getShape())))
      return c.error() << "the causal mask " << m.getType()
                       << " does not broadcast with " << in[1]->value.getType(),
             failure();
    return wrap(tg::BinaryOp::create(c.builder, c.loc, tg::BinaryKind::add,
                                     in[1]->value, m));
  }
  auto cond = c.need(0), a = c.need(1), b = c.need(2);
  if (failed(cond) || failed(a) || failed(b) || failed(c.requireFloat(*a)) ||
      failed(c.requireFloat(*b)))
    return failure();
  if (!typeOf(*cond).getElementType().isInteger(1))
    return c.error() << "condition must be boolean", failure();
  auto ab = tg::broadcastShapes(typeOf(*a).getShape(), typeOf(*b).getShape());
  if (failed(ab) || failed(tg::broadcastShapes(*ab, typeOf(*cond).getShape())))
    return c.error() << "shapes " << cond->getType() << ", " << a->getType()
                     << " and " << b->getType() << " do not broadcast",
           failure();
  return wrap(tg::SelectOp::create(c.builder, c.loc, *cond, *a, *b));
}

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

HostTensor castTo(const HostTensor &x, DType t) {
  if (!x.hasData)
    return HostTensor::shapeOnly(t, x.shape);
  HostTensor r = withData(t, x.shape);
  for (int64_t k = 0, n = x.numel(); k < n; ++k) {
    if (isFloat(t))
      r.f[k] = roundTo(t, x.getF(k));
    else if (t == DType::Bool)
      r.i[k] = x.getF(k) != 0;
    else
      r.i[k] = isFloat(x.dtype) ? toI64(std::trunc(x.f[k])) : x.i[k];
  }
  return r;
}

Folded foldCast(const Fold &f) {
  NEED(x, 0);
  bool ok;
  DType t = dtypeFromOnnx(attrInt(f.node, "to", 1), ok);
  if (!ok)
    return err(llvm::formatv("Cast to ONNX data type {0} is not supported",
                             attrInt(f.node, "to", 1)));
  return Tensors{castTo(x, t)};
}

Converted convertCast(const Conversion &c) {
  auto x = c.need(0);
  if (failed(x))
    return failure();
  int to = attrInt(c.node, "to", 0);
  bool toFloat =
      to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::FLOAT16 ||
      to == onnx::TensorProto::BFLOAT16 || to == onnx::TensorProto::DOUBLE;
  bool toInt = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
  Type elem = typeOf(*x).getElementType();
  // Host compute is fp32 everywhere: casts between float types, and
  // between integer types, are the identity here.
  if ((toFloat && isa<FloatType>(elem)) || (toInt && elem.isInteger(64)))
    return wrap(*x);
  return c.error() << "cast of data from " << elem << " to ONNX type " << to
                   << " is not supported",
         failure();
}

} // namespace

void registerElementwiseOps(OpTable &t) {
  using tg::BinaryKind;
  using tg::UnaryKind;
  t.add("Add", foldBinary, binary(BinaryKind::add));
  t.add("Sub", foldBinary, binary(BinaryKind::sub));
  t.add("Mul", foldBinary, binary(BinaryKind::mul));
  t.add("Div", foldBinary, binary(BinaryKind::div));
  t.add("Pow", foldBinary, binary(BinaryKind::pow));
  t.add("Max", foldBinary, binary(BinaryKind::max));
  t.add("Min", foldBinary, binary(BinaryKind::min));
  t.add("Mod", foldBinary, nullptr);
  t.add("Equal", foldBinary, nullptr);
  t.add("Less", foldBinary, nullptr);
  t.add("LessOrEqual", foldBinary, nullptr);
  t.add("Greater", foldBinary, nullptr);
  t.add("GreaterOrEqual", foldBinary, nullptr);
  t.add("And", foldBinary, nullptr);
  t.add("Or", foldBinary, nullptr);
  t.add("Xor", foldBinary, nullptr);

  t.add("Neg", foldUnary, unary(UnaryKind::neg));
  t.add("Exp", foldUnary, unary(UnaryKind::exp));
  t.add("Log", foldUnary, unary(UnaryKind::log));
  t.add("Sqrt", foldUnary, unary(UnaryKind::sqrt));
  t.add("Reciprocal", foldUnary, unary(UnaryKind::reciprocal));
  t.add("Sigmoid", foldUnary, unary(UnaryKind::sigmoid));
  t.add("Tanh", foldUnary, unary(UnaryKind::tanh));
  t.add("Relu", foldUnary, unary(UnaryKind::relu));
  t.add("Abs", foldUnary, unary(UnaryKind::abs));
  t.add("Sin", foldUnary, unary(UnaryKind::sin));
  t.add("Cos", foldUnary, unary(UnaryKind::cos));
  t.add("IsNaN", foldUnary, convertIsNan);
  t.add("Not", foldUnary, nullptr);
  t.add("Floor", foldUnary, nullptr);
  t.add("Ceil", foldUnary, nullptr);
  t.add("Sign", foldUnary, nullptr);
  t.add("Gelu", nullptr, convertGelu);
  t.add("Clip", foldClip, convertClip);

  t.add("Where", foldWhere, convertWhere);
  t.add("Cast", foldCast, convertCast);
}

} // namespace rondo::import::ops
