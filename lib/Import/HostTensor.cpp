//===- HostTensor.cpp - Evaluating data-independent ONNX nodes --*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Float values are computed in double and rounded to the declared type after
// every node, so folded fp32 tables (rotary cos/sin) equal what PyTorch
// computes in fp32 up to the last bit in almost every element.
//
//===----------------------------------------------------------------------===//

#include "HostTensor.h"

#include "TG/IR/TGOps.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

using namespace rondo::import;
using llvm::ArrayRef;
using llvm::SmallVector;

bool rondo::import::isFloat(DType t) {
  return t == DType::F32 || t == DType::F64;
}

const char *rondo::import::dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "float32";
  case DType::F64:
    return "float64";
  case DType::I64:
    return "int64";
  case DType::I32:
    return "int32";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

int64_t rondo::import::checkedNumel(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
  return n;
}

llvm::Error rondo::import::checkShape(ArrayRef<int64_t> shape,
                                      const llvm::Twine &what) {
  for (int64_t d : shape)
    if (d < 0)
      return llvm::createStringError(llvm::formatv(
          "{0} has negative dimension {1} (shape [{2}])", what.str(), d,
          llvm::make_range(shape.begin(), shape.end())));
  if (checkedNumel(shape) < 0)
    return llvm::createStringError(llvm::formatv(
        "{0} has shape [{1}], whose element count overflows int64",
        what.str(), llvm::make_range(shape.begin(), shape.end())));
  return llvm::Error::success();
}

int64_t HostTensor::numel() const { return std::max<int64_t>(checkedNumel(shape), 0); }

HostTensor HostTensor::shapeOnly(DType t, ArrayRef<int64_t> shape) {
  HostTensor r;
  r.dtype = t;
  r.shape.assign(shape.begin(), shape.end());
  return r;
}

HostTensor HostTensor::zeros(DType t, ArrayRef<int64_t> shape) {
  HostTensor r = shapeOnly(t, shape);
  r.hasData = true;
  if (isFloat(t))
    r.f.assign(r.numel(), 0.0);
  else
    r.i.assign(r.numel(), 0);
  return r;
}

HostTensor HostTensor::scalarI64(int64_t v) {
  HostTensor r = zeros(DType::I64, {});
  r.i[0] = v;
  return r;
}

HostTensor HostTensor::vectorI64(ArrayRef<int64_t> v) {
  HostTensor r = zeros(DType::I64, {int64_t(v.size())});
  llvm::copy(v, r.i.begin());
  return r;
}

llvm::Expected<SmallVector<int64_t>>
rondo::import::broadcastShape(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  auto shape = rondo::tg::broadcastShapes(a, b);
  if (failed(shape))
    return llvm::createStringError(
        llvm::formatv("shapes [{0}] and [{1}] do not broadcast",
                      llvm::make_range(a.begin(), a.end()),
                      llvm::make_range(b.begin(), b.end())));
  return *shape;
}

namespace {
using Tensors = std::vector<HostTensor>;

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const onnx::AttributeProto *findAttr(const onnx::NodeProto &n,
                                     llvm::StringRef name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
int64_t attrInt(const onnx::NodeProto &n, llvm::StringRef name, int64_t dflt) {
  auto *a = findAttr(n, name);
  return a ? a->i() : dflt;
}
std::optional<SmallVector<int64_t>> attrInts(const onnx::NodeProto &n,
                                             llvm::StringRef name) {
  auto *a = findAttr(n, name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

/// Strides of `shape` laid out in a broadcast output of rank `rank`; 0 for
/// broadcast dimensions.
SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> shape,
                                      ArrayRef<int64_t> out) {
  SmallVector<int64_t> strides(out.size(), 0);
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
void forEachBroadcast(ArrayRef<int64_t> out,
                      const std::array<SmallVector<int64_t>, N> &strides,
                      Fn fn) {
  int64_t total = 1;
  for (int64_t d : out)
    total *= d;
  SmallVector<int64_t> idx(out.size(), 0);
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

double roundTo(DType t, double v) {
  return t == DType::F32 ? double(float(v)) : v;
}

HostTensor withData(DType t, ArrayRef<int64_t> shape) {
  return HostTensor::zeros(t, shape);
}

/// Whether a result of `shape` is too large to compute with data (or not a
/// valid shape at all: evaluateNode rejects those afterwards).
bool tooBig(ArrayRef<int64_t> shape, int64_t maxElements) {
  int64_t n = checkedNumel(shape);
  return n < 0 || n > maxElements;
}

/// Wrapping int64 arithmetic (ONNX leaves overflow undefined; C++ UB is not
/// an option here).
int64_t wrapAdd(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
int64_t wrapSub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
int64_t wrapMul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }

/// Normalises an axis against `rank`, or errors.
llvm::Expected<int64_t> axisOf(int64_t axis, int64_t rank,
                               llvm::StringRef what) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return err(llvm::formatv("{0} {1} is out of range for rank {2}", what, axis,
                             rank));
  return a;
}

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

llvm::Expected<Tensors> unaryOp(llvm::StringRef op, const HostTensor &x,
                                int64_t maxElements) {
  DType outT = op == "Not" || op == "IsNaN" ? DType::Bool : x.dtype;
  if (!x.hasData)
    return Tensors{HostTensor::shapeOnly(outT, x.shape)};
  HostTensor r = withData(outT, x.shape);
  if (op == "Not" && x.dtype != DType::Bool)
    return err(llvm::formatv("'Not' needs a bool input, got {0}",
                             dtypeName(x.dtype)));
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

DType dtypeFromOnnx(int t, bool &ok) {
  ok = true;
  switch (t) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
    return DType::F32;
  case onnx::TensorProto::DOUBLE:
    return DType::F64;
  case onnx::TensorProto::INT64:
    return DType::I64;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
    return DType::I32;
  case onnx::TensorProto::BOOL:
    return DType::Bool;
  default:
    ok = false;
    return DType::F32;
  }
}

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

/// Copies elements of `x` (contiguous) into a new tensor of `shape` in the
/// order given by `srcIndex(k)`.
template <typename IndexFn>
HostTensor gatherElements(const HostTensor &x, ArrayRef<int64_t> shape,
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

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

llvm::Expected<std::vector<int64_t>> intsOf(const HostTensor *t,
                                            const llvm::Twine &what) {
  if (!t || !t->hasData)
    return err(what + " must be a compile-time constant");
  std::vector<int64_t> v(t->numel());
  for (int64_t k = 0; k < t->numel(); ++k)
    v[k] = t->getI(k);
  return v;
}
} // namespace

llvm::Expected<SliceParams>
rondo::import::sliceParams(const onnx::NodeProto &node, int64_t opset,
                           ArrayRef<const HostTensor *> in,
                           ArrayRef<int64_t> xShape) {
  int64_t rank = xShape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset >= 10) {
    auto s = intsOf(in.size() > 1 ? in[1] : nullptr, "Slice starts");
    auto e = intsOf(in.size() > 2 ? in[2] : nullptr, "Slice ends");
    if (!s)
      return s.takeError();
    if (!e)
      return e.takeError();
    starts = *s;
    ends = *e;
    if (in.size() > 3 && in[3]) {
      auto a = intsOf(in[3], "Slice axes");
      if (!a)
        return a.takeError();
      axes = *a;
    }
    if (in.size() > 4 && in[4]) {
      auto st = intsOf(in[4], "Slice steps");
      if (!st)
        return st.takeError();
      steps = *st;
    }
  } else {
    auto s = attrInts(node, "starts"), e = attrInts(node, "ends");
    if (!s || !e)
      return err("Slice needs starts and ends");
    starts.assign(s->begin(), s->end());
    ends.assign(e->begin(), e->end());
    if (auto a = attrInts(node, "axes"))
      axes.assign(a->begin(), a->end());
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(k);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return err("Slice starts, ends, axes and steps differ in length");
  SmallVector<int64_t> st(rank, 0), sp(rank, 1),
      shape(xShape.begin(), xShape.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    auto a = axisOf(axes[k], rank, "Slice axis");
    if (!a)
      return a.takeError();
    int64_t dim = xShape[*a], step = steps[k];
    if (step == 0)
      return err("Slice step is zero");
    int64_t s = starts[k], e = ends[k];
    if (s < 0)
      s += dim; // no overflow: dim >= 0
    if (e < 0)
      e += dim;
    // Lengths in unsigned arithmetic: steps may be as large as INT64_MIN.
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      shape[*a] = e > s ? int64_t((uint64_t(e - s) - 1) / uint64_t(step) + 1) : 0;
    } else if (dim == 0) {
      s = 0;
      shape[*a] = 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      uint64_t mag = uint64_t(0) - uint64_t(step);
      shape[*a] = s > e ? int64_t((uint64_t(s - e) - 1) / mag + 1) : 0;
    }
    st[*a] = s;
    sp[*a] = step;
  }
  return SliceParams{st, sp, shape};
}

bool rondo::import::canEvaluate(llvm::StringRef op) {
  return llvm::is_contained({"Add",         "Sub",      "Mul",
                             "Div",         "Pow",      "Max",
                             "Min",         "Equal",    "Less",
                             "LessOrEqual", "Greater",  "GreaterOrEqual",
                             "And",         "Or",       "Xor",
                             "Mod",         "Neg",      "Not",
                             "Cos",         "Sin",      "Sqrt",
                             "Reciprocal",  "Exp",      "Log",
                             "Abs",         "Floor",    "Ceil",
                             "IsNaN",       "Sigmoid",  "Tanh",
                             "Relu",        "Sign",     "Where",
                             "Shape",       "Size",     "Identity",
                             "Cast",        "Constant", "ConstantOfShape",
                             "Range",       "CumSum",   "Unsqueeze",
                             "Squeeze",     "Reshape",  "Flatten",
                             "Expand",      "Slice",    "Concat",
                             "Gather",      "GatherND", "Transpose",
                             "MatMul",      "Trilu"},
                            op);
}

static llvm::Expected<std::vector<HostTensor>>
evaluateNodeImpl(const onnx::NodeProto &node, int64_t opset,
                 ArrayRef<const HostTensor *> in, int64_t maxElements) {
  llvm::StringRef op = node.op_type();
  auto need = [&](size_t k) -> llvm::Expected<const HostTensor *> {
    if (k >= in.size() || !in[k])
      return err(llvm::formatv("input {0} is required", k));
    return in[k];
  };
#define NEED(var, k)                                                           \
  auto var##OrErr = need(k);                                                   \
  if (!var##OrErr)                                                             \
    return var##OrErr.takeError();                                             \
  const HostTensor &var = **var##OrErr;

  if (llvm::is_contained({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min",
                          "Equal", "Less", "LessOrEqual", "Greater",
                          "GreaterOrEqual", "And", "Or", "Xor", "Mod"},
                         op)) {
    NEED(a, 0);
    NEED(b, 1);
    if ((op == "Max" || op == "Min") && in.size() != 2)
      return err("variadic " + op +
                 " with other than two inputs is not supported");
    return binaryOp(op, a, b, maxElements);
  }
  if (llvm::is_contained({"Neg", "Not", "Cos", "Sin", "Sqrt", "Reciprocal",
                          "Exp", "Log", "Abs", "Floor", "Ceil", "IsNaN",
                          "Sigmoid", "Tanh", "Relu", "Sign"},
                         op)) {
    NEED(x, 0);
    return unaryOp(op, x, maxElements);
  }
  if (op == "Identity") {
    NEED(x, 0);
    return Tensors{x};
  }
  if (op == "Where") {
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
  if (op == "Shape") {
    NEED(x, 0);
    int64_t rank = x.shape.size();
    int64_t start = attrInt(node, "start", 0), end = attrInt(node, "end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    SmallVector<int64_t> dims;
    for (int64_t k = start; k < end; ++k)
      dims.push_back(x.shape[k]);
    return Tensors{HostTensor::vectorI64(dims)};
  }
  if (op == "Size") {
    NEED(x, 0);
    return Tensors{HostTensor::scalarI64(x.numel())};
  }
  if (op == "Cast") {
    NEED(x, 0);
    bool ok;
    DType t = dtypeFromOnnx(attrInt(node, "to", 1), ok);
    if (!ok)
      return err(llvm::formatv("Cast to ONNX data type {0} is not supported",
                               attrInt(node, "to", 1)));
    return Tensors{castTo(x, t)};
  }
  if (op == "Constant") {
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
  if (op == "ConstantOfShape") {
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
  if (op == "Range") {
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
  if (op == "CumSum") {
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
  if (op == "Unsqueeze" || op == "Squeeze") {
    NEED(x, 0);
    std::vector<int64_t> axes;
    if (opset >= 13) {
      if (in.size() > 1 && in[1]) {
        auto a = intsOf(in[1], op + " axes");
        if (!a)
          return a.takeError();
        axes = *a;
      }
    } else if (auto a = attrInts(node, "axes")) {
      axes.assign(a->begin(), a->end());
    }
    SmallVector<int64_t> shape;
    if (op == "Unsqueeze") {
      int64_t rank = x.shape.size() + axes.size();
      SmallVector<bool> isNew(rank, false);
      for (int64_t a : axes) {
        auto n = axisOf(a, rank, "Unsqueeze axis");
        if (!n)
          return n.takeError();
        if (isNew[*n])
          return err(llvm::formatv("Unsqueeze axis {0} is repeated", a));
        isNew[*n] = true;
      }
      size_t src = 0;
      for (int64_t d = 0; d < rank; ++d)
        shape.push_back(isNew[d] ? 1 : x.shape[src++]);
    } else {
      int64_t rank = x.shape.size();
      SmallVector<bool> drop(rank, false);
      for (int64_t a : axes) {
        auto n = axisOf(a, rank, "Squeeze axis");
        if (!n)
          return n.takeError();
        if (x.shape[*n] != 1)
          return err(llvm::formatv("Squeeze axis {0} has size {1}, not 1", a,
                                   x.shape[*n]));
        drop[*n] = true;
      }
      for (int64_t d = 0; d < rank; ++d)
        if (!(axes.empty() ? x.shape[d] == 1 : drop[d]))
          shape.push_back(x.shape[d]);
    }
    HostTensor r = x;
    r.shape = shape;
    return Tensors{std::move(r)};
  }
  if (op == "Reshape" || op == "Flatten") {
    NEED(x, 0);
    SmallVector<int64_t> shape;
    if (op == "Flatten") {
      auto axis = attrInt(node, "axis", 1);
      int64_t a = axis < 0 ? axis + int64_t(x.shape.size()) : axis;
      if (a < 0 || a > int64_t(x.shape.size()))
        return err(llvm::formatv("Flatten axis {0} is out of range for rank {1}",
                                 axis, x.shape.size()));
      int64_t outer = 1;
      for (int64_t d = 0; d < a; ++d)
        outer *= x.shape[d];
      shape = {outer, x.numel() / std::max<int64_t>(outer, 1)};
    } else {
      NEED(s, 1);
      auto target = intsOf(&s, "Reshape shape");
      if (!target)
        return target.takeError();
      bool allowZero = attrInt(node, "allowzero", 0);
      int64_t known = 1, inferAt = -1;
      for (size_t d = 0; d < target->size(); ++d) {
        int64_t v = (*target)[d];
        if (v == 0 && !allowZero) {
          if (d >= x.shape.size())
            return err("Reshape copies dimension " + llvm::Twine(d) +
                       " that the input lacks");
          v = x.shape[d];
        }
        if (v == -1) {
          if (inferAt >= 0)
            return err("Reshape shape has more than one -1");
          inferAt = d;
          shape.push_back(1);
          continue;
        }
        if (v < 0)
          return err("Reshape shape has negative dimension " + llvm::Twine(v));
        shape.push_back(v);
        if (__builtin_mul_overflow(known, v, &known))
          return err("Reshape shape's element count overflows int64");
      }
      if (inferAt >= 0) {
        if (known == 0 || x.numel() % known)
          return err(llvm::formatv("cannot infer -1 in Reshape of {0} elements",
                                   x.numel()));
        shape[inferAt] = x.numel() / known;
      }
    }
    HostTensor r = x;
    r.shape = shape;
    if (r.numel() != x.numel())
      return err(
          llvm::formatv("Reshape changes the element count from {0} to {1}",
                        x.numel(), r.numel()));
    return Tensors{std::move(r)};
  }
  if (op == "Expand") {
    NEED(x, 0);
    NEED(s, 1);
    auto target = intsOf(&s, "Expand shape");
    if (!target)
      return target.takeError();
    auto shape = broadcastShape(
        x.shape, SmallVector<int64_t>(target->begin(), target->end()));
    if (!shape)
      return shape.takeError();
    if (!x.hasData || tooBig(*shape, maxElements))
      return Tensors{HostTensor::shapeOnly(x.dtype, *shape)};
    auto strides = broadcastStrides(x.shape, *shape);
    HostTensor r = withData(x.dtype, *shape);
    std::array<SmallVector<int64_t>, 1> st = {strides};
    forEachBroadcast<1>(*shape, st,
                        [&](int64_t k, const std::array<int64_t, 1> &o) {
                          if (isFloat(x.dtype))
                            r.f[k] = x.f[o[0]];
                          else
                            r.i[k] = x.i[o[0]];
                        });
    return Tensors{std::move(r)};
  }
  if (op == "Slice") {
    NEED(x, 0);
    int64_t rank = x.shape.size();
    auto params = sliceParams(node, opset, in, x.shape);
    if (!params)
      return params.takeError();
    SmallVector<int64_t> st = params->starts, sp = params->steps,
                         shape = params->shape;
    if (!x.hasData || tooBig(shape, maxElements))
      return Tensors{HostTensor::shapeOnly(x.dtype, shape)};
    auto inStrides = contiguousStrides(x.shape);
    auto outStrides = contiguousStrides(shape);
    HostTensor r = gatherElements(x, shape, [&](int64_t k) {
      int64_t src = 0;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t idx = (k / outStrides[d]) % shape[d];
        src += (st[d] + idx * sp[d]) * inStrides[d];
      }
      return src;
    });
    return Tensors{std::move(r)};
  }
  if (op == "Concat") {
    if (in.empty() || !in[0])
      return err("Concat needs inputs");
    int64_t rank = in[0]->shape.size();
    auto axis = axisOf(attrInt(node, "axis", 0), rank, "Concat axis");
    if (!axis)
      return axis.takeError();
    SmallVector<int64_t> shape(in[0]->shape);
    shape[*axis] = 0;
    bool allData = true;
    DType t = in[0]->dtype;
    for (const HostTensor *x : in) {
      if (!x || (int64_t)x->shape.size() != rank)
        return err("Concat inputs differ in rank");
      for (int64_t d = 0; d < rank; ++d)
        if (d != *axis && x->shape[d] != in[0]->shape[d])
          return err(llvm::formatv("Concat inputs differ in dimension {0}", d));
      if (__builtin_add_overflow(shape[*axis], x->shape[*axis], &shape[*axis]))
        return err("Concat result is too large");
      allData &= x->hasData;
    }
    if (!allData || tooBig(shape, maxElements))
      return Tensors{HostTensor::shapeOnly(t, shape)};
    HostTensor r = withData(t, shape);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < *axis; ++d)
      outer *= shape[d];
    for (int64_t d = *axis + 1; d < rank; ++d)
      inner *= shape[d];
    int64_t pos = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (const HostTensor *x : in) {
        int64_t chunk = x->shape[*axis] * inner;
        for (int64_t j = 0; j < chunk; ++j, ++pos) {
          if (isFloat(t))
            r.f[pos] = x->getF(o * chunk + j);
          else
            r.i[pos] = x->getI(o * chunk + j);
        }
      }
    return Tensors{std::move(r)};
  }
  if (op == "Gather") {
    NEED(x, 0);
    NEED(idx, 1);
    int64_t rank = x.shape.size();
    auto axis = axisOf(attrInt(node, "axis", 0), rank, "Gather axis");
    if (!axis)
      return axis.takeError();
    if (isFloat(idx.dtype))
      return err("Gather indices must be integers");
    SmallVector<int64_t> shape;
    for (int64_t d = 0; d < *axis; ++d)
      shape.push_back(x.shape[d]);
    shape.append(idx.shape.begin(), idx.shape.end());
    for (int64_t d = *axis + 1; d < rank; ++d)
      shape.push_back(x.shape[d]);
    if (!x.hasData || !idx.hasData || tooBig(shape, maxElements))
      return Tensors{HostTensor::shapeOnly(x.dtype, shape)};
    int64_t outer = 1, inner = 1, dim = x.shape[*axis], nIdx = idx.numel();
    for (int64_t d = 0; d < *axis; ++d)
      outer *= x.shape[d];
    for (int64_t d = *axis + 1; d < rank; ++d)
      inner *= x.shape[d];
    for (int64_t k = 0; k < nIdx; ++k)
      if (idx.i[k] < -dim || idx.i[k] >= dim)
        return err(
            llvm::formatv("Gather index {0} is out of range for dimension {1}",
                          idx.i[k], dim));
    HostTensor r = gatherElements(x, shape, [&](int64_t k) {
      int64_t in_ = k % inner, j = (k / inner) % nIdx, o = k / (inner * nIdx);
      int64_t i = idx.i[j] < 0 ? idx.i[j] + dim : idx.i[j];
      return (o * dim + i) * inner + in_;
    });
    return Tensors{std::move(r)};
  }
  if (op == "GatherND") {
    NEED(x, 0);
    NEED(idx, 1);
    if (attrInt(node, "batch_dims", 0) != 0)
      return err("GatherND with batch_dims != 0 is not supported");
    if (idx.shape.empty() || isFloat(idx.dtype))
      return err("GatherND indices must be integers of rank >= 1");
    int64_t last = idx.shape.back();
    if (last > (int64_t)x.shape.size())
      return err("GatherND index depth exceeds the data rank");
    SmallVector<int64_t> shape(idx.shape.begin(), idx.shape.end() - 1);
    for (size_t d = last; d < x.shape.size(); ++d)
      shape.push_back(x.shape[d]);
    if (!x.hasData || !idx.hasData || tooBig(shape, maxElements))
      return Tensors{HostTensor::shapeOnly(x.dtype, shape)};
    auto xStrides = contiguousStrides(x.shape);
    int64_t inner = 1;
    for (size_t d = last; d < x.shape.size(); ++d)
      inner *= x.shape[d];
    for (int64_t k = 0, n = idx.numel(); k < n; ++k) {
      int64_t dim = x.shape[k % last];
      if (idx.i[k] < -dim || idx.i[k] >= dim)
        return err(llvm::formatv(
            "GatherND index {0} is out of range for dimension {1}", idx.i[k],
            dim));
    }
    HostTensor r = gatherElements(x, shape, [&](int64_t k) {
      int64_t tuple = k / inner, off = 0;
      for (int64_t d = 0; d < last; ++d) {
        int64_t v = idx.i[tuple * last + d];
        if (v < 0)
          v += x.shape[d];
        off += v * xStrides[d];
      }
      return off + k % inner;
    });
    return Tensors{std::move(r)};
  }
  if (op == "Transpose") {
    NEED(x, 0);
    int64_t rank = x.shape.size();
    SmallVector<int64_t> perm;
    if (auto p = attrInts(node, "perm"))
      perm = *p;
    else
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    if ((int64_t)perm.size() != rank)
      return err("Transpose perm does not match the input rank");
    SmallVector<bool> seen(rank, false);
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || seen[p])
        return err(llvm::formatv("Transpose perm entry {0} is out of range or "
                                 "repeated for rank {1}",
                                 p, rank));
      seen[p] = true;
    }
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(x.shape[p]);
    if (!x.hasData)
      return Tensors{HostTensor::shapeOnly(x.dtype, shape)};
    auto inStrides = contiguousStrides(x.shape),
         outStrides = contiguousStrides(shape);
    return Tensors{gatherElements(x, shape, [&](int64_t k) {
      int64_t src = 0;
      for (int64_t d = 0; d < rank; ++d)
        src += ((k / outStrides[d]) % shape[d]) * inStrides[perm[d]];
      return src;
    })};
  }
  if (op == "MatMul") {
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
    forEachBroadcast<2>(
        *batch, st, [&](int64_t bi, const std::array<int64_t, 2> &o) {
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
  if (op == "Trilu") {
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
#undef NEED
  return err("the constant folder does not implement '" + op + "'");
}

llvm::Expected<std::vector<HostTensor>>
rondo::import::evaluateNode(const onnx::NodeProto &node, int64_t opset,
                            ArrayRef<const HostTensor *> in,
                            int64_t maxElements) {
  auto results = evaluateNodeImpl(node, opset, in, maxElements);
  if (!results)
    return results.takeError();
  // Shapes computed from data (Reshape, Expand, ConstantOfShape, Range) can
  // be absurd; results computed with data are bounded by maxElements.
  for (const HostTensor &t : *results)
    if (llvm::Error e = checkShape(t.shape, "the result"))
      return std::move(e);
  if (results->empty())
    return err("the node has no result");
  return results;
}

/// Bytes per element of an ONNX data type in raw_data (0: unknown or not a
/// fixed-size type).
static int64_t onnxElementBytes(int dt) {
  switch (dt) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
  case onnx::TensorProto::COMPLEX64:
    return 8;
  case onnx::TensorProto::COMPLEX128:
    return 16;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

static std::string onnxTypeName(int dt) {
  if (onnx::TensorProto::DataType_IsValid(dt))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(dt));
  return "type " + std::to_string(dt);
}

llvm::Error rondo::import::checkTensorProto(const onnx::TensorProto &proto,
                                            llvm::StringRef what) {
  SmallVector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  if (llvm::Error e = checkShape(shape, what))
    return e;
  int64_t n = checkedNumel(shape);
  int dt = proto.data_type();
  int64_t elem = onnxElementBytes(dt);
  auto shapeStr = [&] {
    return llvm::formatv("[{0}]", llvm::make_range(shape.begin(), shape.end()))
        .str();
  };
  int64_t bytes = -1; // what the shape needs, if it fits in int64
  if (elem && __builtin_mul_overflow(n, elem, &bytes))
    return err(llvm::formatv("{0} has shape {1} of {2}, whose size in bytes "
                             "overflows int64",
                             what, shapeStr(), onnxTypeName(dt)));
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    bool haveLocation = false;
    for (const auto &entry : proto.external_data()) {
      llvm::StringRef key = entry.key(), value = entry.value();
      if (key == "location") {
        location = value.str();
        haveLocation = true;
      } else if (key == "offset" || key == "length") {
        uint64_t v;
        if (value.getAsInteger(10, v) || int64_t(v) < 0)
          return err(llvm::formatv(
              "{0} has external data {1} '{2}', not a non-negative integer",
              what, key, value));
        if (key == "length" && bytes >= 0 && int64_t(v) != bytes)
          return err(llvm::formatv(
              "{0} has external data of length {1} bytes, but its shape {2} "
              "of {3} needs {4} bytes",
              what, v, shapeStr(), onnxTypeName(dt), bytes));
      }
    }
    if (!haveLocation || location.empty())
      return err(what + " is external data without a 'location' entry");
    if (location.find('\0') != std::string::npos)
      return err(what + " has an external data location with a NUL byte");
    namespace path = llvm::sys::path;
    if (path::is_absolute(location, path::Style::posix) ||
        path::is_absolute(location, path::Style::windows) ||
        path::has_root_name(location, path::Style::windows) ||
        llvm::StringRef(location).starts_with("~"))
      return err(llvm::formatv("{0} has external data location '{1}', an "
                               "absolute path; it must be relative to the "
                               "model's directory",
                               what, location));
    for (auto it = path::begin(location, path::Style::windows_slash),
              end = path::end(location);
         it != end; ++it)
      if (*it == "..")
        return err(llvm::formatv("{0} has external data location '{1}', "
                                 "which escapes the model's directory",
                                 what, location));
    return llvm::Error::success();
  }
  if (!proto.raw_data().empty()) {
    if (!elem)
      return err(llvm::formatv("{0} has raw_data of data type {1}, which has "
                               "no fixed element size",
                               what, onnxTypeName(dt)));
    if (int64_t(proto.raw_data().size()) != bytes)
      return err(llvm::formatv("{0} has raw_data of {1} bytes, but its shape "
                               "{2} of {3} needs {4} bytes",
                               what, proto.raw_data().size(), shapeStr(),
                               onnxTypeName(dt), bytes));
    return llvm::Error::success();
  }
  int64_t have;
  const char *field;
  switch (dt) {
  case onnx::TensorProto::FLOAT:
    have = proto.float_data_size(), field = "float_data";
    break;
  case onnx::TensorProto::COMPLEX64:
    have = proto.float_data_size() / 2, field = "float_data";
    break;
  case onnx::TensorProto::DOUBLE:
    have = proto.double_data_size(), field = "double_data";
    break;
  case onnx::TensorProto::COMPLEX128:
    have = proto.double_data_size() / 2, field = "double_data";
    break;
  case onnx::TensorProto::INT64:
    have = proto.int64_data_size(), field = "int64_data";
    break;
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64:
    have = proto.uint64_data_size(), field = "uint64_data";
    break;
  case onnx::TensorProto::STRING:
    have = proto.string_data_size(), field = "string_data";
    break;
  default:
    have = proto.int32_data_size(), field = "int32_data";
  }
  if (have != n)
    return err(llvm::formatv("{0} holds {1} values in {2}, but its shape {3} "
                             "needs {4}",
                             what, have, field, shapeStr(), n));
  return llvm::Error::success();
}

llvm::Expected<HostTensor>
rondo::import::hostTensorFromProto(const onnx::TensorProto &proto,
                                   llvm::StringRef what) {
  bool ok;
  DType t = dtypeFromOnnx(proto.data_type(), ok);
  if (!ok)
    return err(llvm::formatv("{0} has unsupported ONNX data type {1}", what,
                             proto.data_type()));
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    if (llvm::Error e = checkTensorProto(proto, what))
      return std::move(e);
    return err(what + " is stored as external data; constants must be inline");
  }
  // Header against data before anything is allocated.
  if (llvm::Error e = checkTensorProto(proto, what))
    return std::move(e);
  SmallVector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  HostTensor r = HostTensor::zeros(t, shape);
  int64_t n = r.numel();
  const std::string &raw = proto.raw_data();
  int dt = proto.data_type();
  auto sizeError = [&](size_t have) {
    return err(llvm::formatv("{0} holds {1} values but its shape needs {2}",
                             what, have, n));
  };
  auto halfToFloat = [&](uint16_t h, bool bf16) -> double {
    if (bf16) {
      uint32_t bits = uint32_t(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0    ? std::ldexp(double(mant), -24)
               : exp == 31 ? (mant ? NAN : INFINITY)
                           : std::ldexp(double(mant | 0x400), int(exp) - 25);
    return sign ? -v : v;
  };
  if (!raw.empty()) {
    size_t elem =
        dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::INT32    ? 4
        : dt == onnx::TensorProto::DOUBLE || dt == onnx::TensorProto::INT64 ? 8
        : dt == onnx::TensorProto::FLOAT16 ||
                dt == onnx::TensorProto::BFLOAT16 ||
                dt == onnx::TensorProto::INT16
            ? 2
            : 1;
    if (raw.size() != size_t(n) * elem)
      return sizeError(raw.size() / elem);
    const char *p = raw.data();
    for (int64_t k = 0; k < n; ++k, p += elem) {
      switch (dt) {
      case onnx::TensorProto::FLOAT: {
        float v;
        std::memcpy(&v, p, 4);
        r.f[k] = v;
        break;
      }
      case onnx::TensorProto::DOUBLE:
        std::memcpy(&r.f[k], p, 8);
        break;
      case onnx::TensorProto::FLOAT16:
      case onnx::TensorProto::BFLOAT16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        r.f[k] = halfToFloat(h, dt == onnx::TensorProto::BFLOAT16);
        break;
      }
      case onnx::TensorProto::INT64:
        std::memcpy(&r.i[k], p, 8);
        break;
      case onnx::TensorProto::INT32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        r.i[k] = v;
        break;
      }
      case onnx::TensorProto::INT16: {
        int16_t v;
        std::memcpy(&v, p, 2);
        r.i[k] = v;
        break;
      }
      case onnx::TensorProto::INT8:
        r.i[k] = int8_t(*p);
        break;
      default:
        r.i[k] = uint8_t(*p);
      }
    }
    return r;
  }
  switch (dt) {
  case onnx::TensorProto::FLOAT:
    if (proto.float_data_size() != n)
      return sizeError(proto.float_data_size());
    for (int64_t k = 0; k < n; ++k)
      r.f[k] = proto.float_data(k);
    break;
  case onnx::TensorProto::DOUBLE:
    if (proto.double_data_size() != n)
      return sizeError(proto.double_data_size());
    for (int64_t k = 0; k < n; ++k)
      r.f[k] = proto.double_data(k);
    break;
  case onnx::TensorProto::INT64:
    if (proto.int64_data_size() != n)
      return sizeError(proto.int64_data_size());
    for (int64_t k = 0; k < n; ++k)
      r.i[k] = proto.int64_data(k);
    break;
  default:
    if (proto.int32_data_size() != n)
      return sizeError(proto.int32_data_size());
    for (int64_t k = 0; k < n; ++k) {
      if (isFloat(t))
        r.f[k] = halfToFloat(uint16_t(proto.int32_data(k)),
                             dt == onnx::TensorProto::BFLOAT16);
      else
        r.i[k] = proto.int32_data(k);
    }
  }
  return r;
}
