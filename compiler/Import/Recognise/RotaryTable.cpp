//===- RotaryTable.cpp - Recognising rotary tables --------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "RotaryTable.h"

#include "Dialect/TG/IR/TGOps.h"
#include "rondo/runtime/RotaryTable.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::import;

std::optional<RotarySource>
rondo::import::rotarySourceOf(const onnx::NodeProto &node,
                              ArrayRef<const Val *> inputs,
                              const HostTensor &result) {
  StringRef op = node.op_type();
  const Val *x = inputs.empty() ? nullptr : inputs[0];
  if (!x || !x->isConst || result.dtype != DType::F32 ||
      result.shape.size() < 2)
    return std::nullopt;
  if (op == "Cos" || op == "Sin") {
    const HostTensor &phase = x->host;
    if (!phase.hasData || phase.dtype != DType::F32 || phase.shape.size() < 2 ||
        phase.shape[phase.shape.size() - 2] < 2)
      return std::nullopt;
    // Position 1's phase is 1 * freq, exactly.
    int64_t dim = phase.shape.back();
    RotarySource src;
    src.sine = op == "Sin";
    for (int64_t j = 0; j < dim; ++j)
      src.freqs.push_back(float(phase.f[dim + j]));
    return src;
  }
  if (op == "Concat") {
    // Tables of half the head dimension, concatenated along the last axis
    // (cat(freqs, freqs) taken after the Cos rather than before).
    int64_t rank = int64_t(result.shape.size());
    int64_t axis = 0;
    for (const auto &a : node.attribute())
      if (a.name() == "axis")
        axis = a.i();
    if (axis != -1 && axis != rank - 1)
      return std::nullopt;
    RotarySource src;
    for (auto [k, in] : llvm::enumerate(inputs)) {
      if (!in || !in->rotary ||
          (k &&
           (in->rotary->sine != src.sine || in->rotary->scale != src.scale)))
        return std::nullopt;
      src.sine = in->rotary->sine;
      src.scale = in->rotary->scale;
      llvm::append_range(src.freqs, in->rotary->freqs);
    }
    return src;
  }
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
      op == "Identity" || op == "Expand" || op == "Slice" || op == "Cast")
    return x->rotary; // Casts to bf16/f16 fold as f32, like the training.
  if (op == "Mul" && inputs.size() == 2) {
    // attention_scaling * table, in either order.
    const Val *table = x, *scale = inputs[1];
    if (scale && scale->rotary)
      std::swap(table, scale);
    if (!table->rotary || table->rotary->scale != 1.0f || !scale ||
        !scale->isConst || !scale->host.hasData || scale->host.numel() != 1 ||
        !isFloat(scale->host.dtype))
      return std::nullopt;
    RotarySource src = *table->rotary;
    src.scale = float(scale->host.getF(0));
    return src;
  }
  return std::nullopt;
}

Value rondo::import::rotaryTable(OpBuilder &builder, Location loc, const Val &v,
                                 RotaryChecks &rotaryChecked) {
  const HostTensor &t = v.host;
  if (!v.rotary || !t.hasData || t.dtype != DType::F32 || t.shape.size() < 2)
    return {};
  const RotarySource &src = *v.rotary;
  int64_t positions = t.shape[t.shape.size() - 2], dim = t.shape.back();
  if (positions < 1 || dim != int64_t(src.freqs.size()))
    return {};
  // Leading dimensions must repeat one [T, D] table; the check compares
  // every element, so a table that differs anywhere stays a constant. Once
  // per value: every layer's q and k materialise the same tables.
  auto [checked, first] = rotaryChecked.try_emplace(&v, false);
  if (first) {
    bool same = true;
    for (int64_t k = 0, n = t.numel(); k < n && same; ++k)
      same =
          t.f[k] == double(rt::rotaryTableValue(src.sine, (k / dim) % positions,
                                                src.freqs[k % dim], src.scale));
    checked->second = same;
  }
  if (!checked->second)
    return {};
  SmallVector<int64_t> shape(t.shape.size(), 1);
  shape[shape.size() - 2] = positions;
  shape.back() = dim;
  Value table = tg::RotaryTableOp::create(
      builder, loc, RankedTensorType::get(shape, builder.getF32Type()),
      src.sine ? tg::UnaryKind::sin : tg::UnaryKind::cos, src.freqs,
      llvm::APFloat(src.scale));
  if (shape != ArrayRef<int64_t>(t.shape))
    table = tg::BroadcastOp::create(
        builder, loc, RankedTensorType::get(t.shape, builder.getF32Type()),
        table);
  return table;
}
