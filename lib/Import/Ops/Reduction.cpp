//===- Reduction.cpp - Reduction ONNX ops -----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// ReduceMean and ReduceSum over constant axes. ReduceMean's axes moved from
// an attribute to an input at opset 18: one row per form. ReduceSum's moved
// at opset 13, the oldest the importer accepts, so it has one row.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

namespace rondo::import::ops {
namespace {

Converted convertReduce(const Conversion &c, tg::ReduceKind kind,
                        bool axesAsInput) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  auto x = c.need(0);
  if (failed(x) || failed(c.requireFloat(*x)))
    return failure();
  SmallVector<int64_t> axes;
  if (axesAsInput) {
    if (in.size() > 1 && in[1]) {
      auto a = constInts(in[1]);
      if (failed(a))
        return c.error() << "axes must be compile-time constants", failure();
      axes = *a;
    }
  } else if (auto *a = findAttr(node, "axes")) {
    axes.assign(a->ints().begin(), a->ints().end());
  }
  int64_t rank = typeOf(*x).getRank();
  if (axes.empty()) {
    if (attrInt(node, "noop_with_empty_axes", 0))
      return wrap(*x);
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
    if (axes.empty()) // reducing a scalar over all (no) axes
      return wrap(*x);
  }
  for (int64_t &a : axes) {
    if (a < -rank || a >= rank)
      return c.error() << "axis " << a << " out of range for rank " << rank,
             failure();
    if (a < 0)
      a += rank;
  }
  for (size_t k = 0; k < axes.size(); ++k)
    for (size_t j = 0; j < k; ++j)
      if (axes[j] == axes[k])
        return c.error() << "axis " << axes[k] << " is repeated", failure();
  return wrap(tg::ReduceOp::create(c.builder, c.loc, kind, *x,
                                   c.builder.getDenseI64ArrayAttr(axes),
                                   attrInt(node, "keepdims", 1) != 0));
}

ConvertFn reduce(tg::ReduceKind kind, bool axesAsInput) {
  return
      [=](const Conversion &c) { return convertReduce(c, kind, axesAsInput); };
}

} // namespace

void registerReductionOps(OpTable &t) {
  using tg::ReduceKind;
  t.add("ReduceMean", nullptr, reduce(ReduceKind::mean, /*axesAsInput=*/false));
  t.add("ReduceMean", nullptr, reduce(ReduceKind::mean, /*axesAsInput=*/true),
        /*sinceOpset=*/18);
  t.add("ReduceSum", nullptr, reduce(ReduceKind::sum, /*axesAsInput=*/true));
}

} // namespace rondo::import::ops
