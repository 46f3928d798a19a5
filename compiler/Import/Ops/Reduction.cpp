//===- Reduction.cpp - Reduction ONNX ops -----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// ReduceMean and ReduceSum over constant axes. ReduceMean's axes moved from
// an attribute to an input at opset 18: one row per form. ReduceSum's moved
// at opset 13, the oldest the importer accepts, so it has one row.
// ReduceMax (axes an input since opset 18 too) only as a softmax's max
// shift.
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

/// ReduceMax only as the exporter's max shift before a softmax (GPT-OSS's
/// attention sinks: Softmax(Sub(x, ReduceMax(x, [-1], keepdims)))). Softmax
/// is invariant to that shift, and the softmax kernels and fused attention
/// subtract the row max themselves, so the shift becomes x - 0, which
/// tg-fuse-attention drops. Any other use is refused, naming the reader.
/// "node 'name' (Op)", or by its first output when it has no name.
std::string describeNode(const onnx::NodeProto &n) {
  std::string who =
      n.name().empty()
          ? "node producing '" + (n.output_size() ? n.output(0) : "") + "'"
          : "node '" + n.name() + "'";
  return who + " (" + n.op_type() + ")";
}

Converted convertSoftmaxShift(const Conversion &c, bool axesAsInput) {
  const onnx::NodeProto &node = c.node;
  auto x = c.need(0);
  if (failed(x) || failed(c.requireFloat(*x)))
    return failure();
  auto refuse = [&]() {
    return std::move(c.error()
                     << "ReduceMax is supported only as the max shift of a "
                        "softmax, Softmax(Sub(x, ReduceMax(x, axes = [-1], "
                        "keepdims = 1))) over the last axis: ");
  };
  auto xt = typeOf(*x);
  int64_t rank = xt.getRank();
  SmallVector<int64_t> axes;
  if (axesAsInput && c.in.size() > 1 && c.in[1]) {
    auto a = constInts(c.in[1]);
    if (failed(a))
      return c.error() << "axes must be compile-time constants", failure();
    axes = *a;
  } else if (auto a = attrInts(node, "axes"); !axesAsInput && a) {
    axes = *a;
  }
  if (axes.size() != 1 || (axes[0] != -1 && axes[0] != rank - 1))
    return refuse() << "it reduces other axes than the last", failure();
  if (!attrInt(node, "keepdims", 1))
    return refuse() << "it drops the reduced axis (keepdims = 0)", failure();
  bool returned = false;
  auto users = c.importer.consumers(node.output(0), returned);
  if (returned || users.empty())
    return refuse() << "the graph " << (returned ? "returns" : "never reads")
                    << " its result '" << node.output(0) << "'",
           failure();
  for (const onnx::NodeProto *sub : users) {
    if (sub->op_type() != "Sub" || sub->input_size() != 2 ||
        sub->input(0) != node.input(0) || sub->input(1) != node.output(0))
      return refuse() << describeNode(*sub)
                      << " reads it other than as Sub(x, max)",
             failure();
    auto softmaxes = c.importer.consumers(sub->output(0), returned);
    if (returned || softmaxes.empty())
      return refuse() << "the shifted value '" << sub->output(0)
                      << "' does not only feed softmaxes",
             failure();
    for (const onnx::NodeProto *sm : softmaxes) {
      int64_t axis = attrInt(*sm, "axis", -1);
      if (sm->op_type() != "Softmax" || (axis != -1 && axis != rank - 1))
        return refuse() << describeNode(*sm)
                        << " reads the shifted value other than as a "
                           "softmax over the last axis",
               failure();
    }
  }
  SmallVector<int64_t> shape(xt.getShape());
  shape.back() = 1;
  return SmallVector<Val>{Val{true, HostTensor::zeros(DType::F32, shape)}};
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
  t.add("ReduceMax", nullptr, [](const Conversion &c) {
    return convertSoftmaxShift(c, /*axesAsInput=*/false);
  });
  t.add(
      "ReduceMax", nullptr,
      [](const Conversion &c) {
        return convertSoftmaxShift(c, /*axesAsInput=*/true);
      },
      /*sinceOpset=*/18);
}

} // namespace rondo::import::ops
