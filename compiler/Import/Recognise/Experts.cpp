//===- Experts.cpp - Recognising a mixture of experts -----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The exporter's batched_mm experts (Experts.h): GatherND of expert matrices
// stays symbolic and the batched MatMul that uses it becomes
// tg.expert_matmul. The two forms seen:
//   Qwen3-MoE: MatMul(gathered [N, A, B], x [N, B, 1]) -> [N, A, 1]
//              (each expert's matrix is an nn.Linear weight, [out, in])
//   GPT-OSS:   MatMul(x [N, 1, A], gathered [N, A, B]) -> [N, 1, B]
//              (each expert's matrix is [in, out])
// i.e. one row of activations per (token, slot) pair against the matrix of
// its expert, on either side.
//
//===----------------------------------------------------------------------===//

#include "Experts.h"

#include "Dialect/TG/IR/TGOps.h"

#include "onnx/onnx_pb.h"

#include <cmath>
#include <string>

using namespace mlir;

namespace rondo::import {
namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

Value reshape(const Conversion &c, Value v, ArrayRef<int64_t> shape) {
  if (typeOf(v).getShape() == shape)
    return v;
  return tg::ReshapeOp::create(
      c.builder, c.loc,
      RankedTensorType::get(shape, typeOf(v).getElementType()), v);
}

/// What the structure is called in every message.
constexpr const char *kStructure =
    "mixture of experts (the exporter's batched_mm form: GatherND of expert "
    "matrices by routing ids, then a batched MatMul with one row per token "
    "slot)";

} // namespace

Converted convertRoutedGather(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  if (c.in.size() != 2 || !c.in[0] || !c.in[1])
    return c.error() << "expects two inputs", failure();
  for (const auto &a : node.attribute())
    if (a.name() == "batch_dims" && a.i() != 0)
      return c.error() << "a data-dependent GatherND with batch_dims != 0 is "
                          "not supported",
             failure();
  auto data = c.need(0), idx = c.need(1);
  if (failed(data) || failed(idx) || failed(c.requireFloat(*data)))
    return failure();
  auto dt = typeOf(*data), it = typeOf(*idx);
  if (!it.getElementType().isInteger(64) || it.getRank() < 1 ||
      it.getShape().back() != 1 || (dt.getRank() != 2 && dt.getRank() != 3))
    return c.error() << "a data-dependent GatherND is supported only as the "
                     << kStructure
                     << ": data [E, A] or [E, A, B] indexed by i64 ids [..., "
                        "1], got "
                     << dt << " indexed by " << it,
           failure();
  int64_t n = it.getNumElements();
  Value ids = reshape(c, *idx, {n});
  if (dt.getRank() == 3) {
    Val v;
    // (Every node has a first output: Importer::run checks it.)
    std::string source = !node.name().empty()
                             ? "node '" + node.name() + "'"
                             : "the node producing '" + node.output(0) + "'";
    v.experts =
        std::make_shared<ExpertGather>(ExpertGather{*data, ids, source});
    return SmallVector<Val>{std::move(v)};
  }
  // Rows of a per-expert table (a bias): an ordinary row gather.
  SmallVector<int64_t> shape(it.getShape().drop_back());
  shape.push_back(dt.getDimSize(1));
  Value rows = tg::GatherOp::create(c.builder, c.loc, *data, ids);
  return wrap(reshape(c, rows, shape));
}

Converted convertExpertMatmul(const Conversion &c) {
  bool left = c.in[0] && c.in[0]->experts;
  bool right = c.in.size() > 1 && c.in[1] && c.in[1]->experts;
  if (left && right)
    return c.error() << kStructure
                     << ": both operands are gathered expert matrices",
           failure();
  const ExpertGather &g = left ? *c.in[0]->experts : *c.in[1]->experts;
  auto other = c.need(left ? 1 : 0);
  if (failed(other) || failed(c.requireFloat(*other)))
    return failure();
  auto w = typeOf(g.table), x = typeOf(*other);
  int64_t n = typeOf(g.ids).getDimSize(0), a = w.getDimSize(1),
          b = w.getDimSize(2);
  // Left:  [N, A, B] x [N, B, 1] -> [N, A, 1]; right: [N, 1, A] x [N, A, B].
  SmallVector<int64_t> want =
      left ? SmallVector<int64_t>{n, b, 1} : SmallVector<int64_t>{n, 1, a};
  if (x.getShape() != ArrayRef<int64_t>(want))
    return c.error() << kStructure << ": the expert matrices gathered by "
                     << g.source << " (" << n << " x [" << a << ", " << b
                     << "]) must be multiplied by one row per token slot, "
                     << "i.e. an operand [" << want[0] << ", " << want[1]
                     << ", " << want[2] << "], got " << x,
           failure();
  Value rows = reshape(c, *other, {n, left ? b : a});
  Value y = tg::ExpertMatmulOp::create(c.builder, c.loc, rows, g.table, g.ids,
                                       /*transpose_w=*/left);
  SmallVector<int64_t> shape =
      left ? SmallVector<int64_t>{n, a, 1} : SmallVector<int64_t>{n, 1, b};
  return wrap(reshape(c, y, shape));
}

LogicalResult rejectExpertUse(ImportContext &importer,
                              const onnx::NodeProto &user,
                              const ExpertGather &g) {
  return importer.nodeError(user)
         << kStructure << ": the expert matrices gathered by " << g.source
         << " may only be an operand of a batched MatMul (they "
         << "are never built as one copy per row), but this " << user.op_type()
         << " uses them";
}

Converted convertIndexClip(const Conversion &c, double lo, double hi) {
  // Follow layout ops back to the indices output of a TopK.
  std::string name = c.node.input(0);
  const onnx::NodeProto *p = c.importer.producerOf(name);
  while (p && (p->op_type() == "Reshape" || p->op_type() == "Squeeze" ||
               p->op_type() == "Unsqueeze" || p->op_type() == "Flatten" ||
               p->op_type() == "Identity")) {
    name = p->input(0);
    p = c.importer.producerOf(name);
  }
  const Val *scores = nullptr;
  if (p && p->op_type() == "TopK" && p->output_size() > 1 &&
      p->output(1) == name)
    scores = c.importer.valueOf(p->input(0));
  if (!scores || scores->isConst || !scores->value)
    return c.error() << "Clip of integer data is supported only on the "
                        "indices of a TopK (the routing ids of a "
                     << kStructure << "), where it changes nothing",
           failure();
  int64_t positions = typeOf(scores->value).getShape().back();
  auto bound = [](double v) {
    return std::isfinite(v) ? std::to_string(int64_t(v))
                            : std::string(v < 0 ? "-inf" : "inf");
  };
  if (lo > 0 || hi < double(positions - 1))
    return c.error() << "Clip of routing ids into [" << bound(lo) << ", "
                     << bound(hi) << "] would change ids of a TopK over "
                     << positions
                     << " experts; only a Clip that keeps every id in [0, "
                     << positions - 1 << "] is supported",
           failure();
  auto x = c.need(0);
  if (failed(x))
    return failure();
  return wrap(*x);
}

} // namespace rondo::import
