//===- Shape.cpp - Layout ONNX ops ------------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Ops that move or reinterpret elements without computing: Identity,
// Dropout (inference), Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze,
// Expand, Slice, Split, Concat and Transpose. A conversion that changes the
// shape takes the result shape from the op's folding function
// (Conversion::foldedShape).
//
//===----------------------------------------------------------------------===//

#include "Common.h"

namespace rondo::import::ops {
namespace {

/// ONNX Slice (any opset) normalised against an input shape: in-range
/// starts, nonzero steps and the result shape.
struct SliceParams {
  SmallVector<int64_t> starts, steps, shape;
};

llvm::Expected<SliceParams> sliceParams(const onnx::NodeProto &node,
                                        int64_t opset,
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
      shape[*a] =
          e > s ? int64_t((uint64_t(e - s) - 1) / uint64_t(step) + 1) : 0;
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

Folded foldIdentity(const Fold &f) {
  NEED(x, 0);
  return Tensors{x};
}

Converted convertIdentity(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  StringRef op = c.node.op_type();
  if (in.empty() || !in[0])
    return c.error() << "input 0 is required", failure();
  if (op == "Dropout" && node.input_size() > 2 && !node.input(2).empty()) {
    auto mode = constInts(in[2]);
    if (failed(mode) || mode->size() != 1 || (*mode)[0] != 0)
      return c.error() << "dropout in training mode is not supported",
             failure();
  }
  if (op == "Dropout" && node.output_size() > 1 && !node.output(1).empty())
    return c.error() << "the dropout mask output is not supported", failure();
  return SmallVector<Val>{Val{false, {}, in[0]->value}};
}

Folded foldShape(const Fold &f) {
  const onnx::NodeProto &node = f.node;
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

Folded foldSize(const Fold &f) {
  NEED(x, 0);
  return Tensors{HostTensor::scalarI64(x.numel())};
}

Folded foldSqueeze(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  ArrayRef<const HostTensor *> in = f.in;
  StringRef op = f.node.op_type();
  int64_t opset = f.opset;
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

Folded foldReshape(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  StringRef op = f.node.op_type();
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

/// Converts an op whose result is input 0 laid out in its folded shape
/// (reshapes and broadcasts): `OpT` of that type.
template <typename OpT> Converted convertToFoldedShape(const Conversion &c) {
  auto x = c.need(0);
  auto shape = c.foldedShape();
  if (failed(x) || failed(shape))
    return failure();
  return wrap(OpT::create(
      c.builder, c.loc,
      RankedTensorType::get(*shape, typeOf(*x).getElementType()), *x));
}

Folded foldExpand(const Fold &f) {
  int64_t maxElements = f.maxElements;
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

Folded foldSlice(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  ArrayRef<const HostTensor *> in = f.in;
  int64_t opset = f.opset;
  int64_t maxElements = f.maxElements;
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

Converted convertSlice(const Conversion &c) {
  auto x = c.need(0);
  if (failed(x))
    return failure();
  SmallVector<const HostTensor *> hosts{nullptr};
  for (size_t k = 1; k < c.in.size(); ++k)
    hosts.push_back(c.in[k] && c.in[k]->isConst ? &c.in[k]->host : nullptr);
  auto p = sliceParams(c.node, c.opset, hosts, typeOf(*x).getShape());
  if (!p)
    return c.error() << llvm::toString(p.takeError()), failure();
  return wrap(tg::SliceOp::create(
      c.builder, c.loc,
      RankedTensorType::get(p->shape, typeOf(*x).getElementType()), *x,
      c.builder.getDenseI64ArrayAttr(p->starts),
      c.builder.getDenseI64ArrayAttr(p->steps)));
}

Converted convertSplit(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  int64_t opset = c.opset;
  auto x = c.need(0);
  if (failed(x))
    return failure();
  auto xt = typeOf(*x);
  int64_t axis = attrInt(node, "axis", 0);
  if (axis < 0)
    axis += xt.getRank();
  if (axis < 0 || axis >= xt.getRank())
    return c.error() << "axis out of range", failure();
  int64_t dim = xt.getDimSize(axis), n = node.output_size();
  SmallVector<int64_t> sizes;
  if (in.size() > 1 && in[1]) {
    auto s = constInts(in[1]);
    if (failed(s))
      return c.error() << "split sizes must be compile-time constants",
             failure();
    sizes = *s;
  } else if (auto *a = findAttr(node, "split")) {
    sizes.assign(a->ints().begin(), a->ints().end());
  } else {
    int64_t parts = opset >= 18 ? attrInt(node, "num_outputs", n) : n;
    if (parts <= 0 || parts != n)
      return c.error() << "splits into " << parts << " parts but has " << n
                       << " outputs",
             failure();
    int64_t chunk = (dim + parts - 1) / parts;
    for (int64_t k = 0; k < parts; ++k)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - k * chunk)));
  }
  int64_t total = 0;
  for (int64_t size : sizes)
    if (size < 0 || __builtin_add_overflow(total, size, &total))
      return c.error() << "split size " << size << " is invalid", failure();
  if ((int64_t)sizes.size() != n || total != dim)
    return c.error() << "split sizes do not add up to dimension " << dim,
           failure();
  SmallVector<Val> outs;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    SmallVector<int64_t> starts(xt.getRank(), 0), steps(xt.getRank(), 1),
        shape(xt.getShape());
    starts[axis] = offset;
    shape[axis] = size;
    outs.push_back(Val{
        false,
        {},
        tg::SliceOp::create(c.builder, c.loc,
                            RankedTensorType::get(shape, xt.getElementType()),
                            *x, c.builder.getDenseI64ArrayAttr(starts),
                            c.builder.getDenseI64ArrayAttr(steps))});
    offset += size;
  }
  return outs;
}

Folded foldConcat(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  ArrayRef<const HostTensor *> in = f.in;
  int64_t maxElements = f.maxElements;
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

Converted convertConcat(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  SmallVector<Value> xs;
  for (size_t k = 0; k < in.size(); ++k) {
    auto x = c.need(k);
    if (failed(x))
      return failure();
    xs.push_back(*x);
  }
  if (xs.empty())
    return c.error() << "needs at least one input", failure();
  auto first = typeOf(xs.front());
  int64_t rank = first.getRank(), axis = attrInt(node, "axis", 0);
  if (axis < -rank || axis >= rank)
    return c.error() << "axis " << axis << " is out of range for rank " << rank,
           failure();
  if (axis < 0)
    axis += rank;
  for (Value x : xs) {
    auto t = typeOf(x);
    bool same =
        t.getRank() == rank && t.getElementType() == first.getElementType();
    for (int64_t d = 0; same && d < rank; ++d)
      same = d == axis || t.getDimSize(d) == first.getDimSize(d);
    if (!same)
      return c.error() << "inputs " << first << " and " << t
                       << " do not concatenate along axis " << axis,
             failure();
  }
  return wrap(tg::ConcatOp::create(c.builder, c.loc, xs, axis));
}

Folded foldTranspose(const Fold &f) {
  const onnx::NodeProto &node = f.node;
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

Converted convertTranspose(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  auto x = c.need(0);
  if (failed(x))
    return failure();
  int64_t rank = typeOf(*x).getRank();
  SmallVector<int64_t> perm;
  if (auto *a = findAttr(node, "perm"))
    perm.assign(a->ints().begin(), a->ints().end());
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  if ((int64_t)perm.size() != rank)
    return c.error() << "perm has " << perm.size() << " entries for rank "
                     << rank,
           failure();
  SmallVector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return c.error() << "perm entry " << p
                       << " is out of range or repeated for rank " << rank,
             failure();
    seen[p] = true;
  }
  return wrap(tg::TransposeOp::create(c.builder, c.loc, *x,
                                      c.builder.getDenseI64ArrayAttr(perm)));
}

} // namespace

void registerShapeOps(OpTable &t) {
  t.add("Identity", foldIdentity, convertIdentity);
  t.add("Dropout", nullptr, convertIdentity);
  t.add("Shape", foldShape, nullptr);
  t.add("Size", foldSize, nullptr);
  ConvertFn convertReshape = convertToFoldedShape<tg::ReshapeOp>;
  t.add("Reshape", foldReshape, convertReshape);
  t.add("Flatten", foldReshape, convertReshape);
  t.add("Squeeze", foldSqueeze, convertReshape);
  t.add("Unsqueeze", foldSqueeze, convertReshape);
  t.add("Expand", foldExpand, convertToFoldedShape<tg::BroadcastOp>);
  t.add("Slice", foldSlice, convertSlice);
  t.add("Split", nullptr, convertSplit);
  t.add("Concat", foldConcat, convertConcat);
  t.add("Transpose", foldTranspose, convertTranspose);
}

} // namespace rondo::import::ops
