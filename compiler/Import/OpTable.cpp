//===- OpTable.cpp - The ONNX ops the importer knows ------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "OpTable.h"

#include "mlir/IR/BuiltinTypes.h"
#include "onnx/onnx_pb.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace rondo::import;

ImportContext::~ImportContext() = default;

void OpTable::add(StringRef opType, FoldFn fold, ConvertFn convert,
                  int64_t sinceOpset) {
  auto &versions = rows[opType];
  auto at = llvm::find_if(
      versions, [&](const OpRow &r) { return r.sinceOpset > sinceOpset; });
  versions.insert(
      at, OpRow{opType.str(), sinceOpset, std::move(fold), std::move(convert)});
}

const OpRow *OpTable::lookup(StringRef opType, int64_t opset) const {
  auto it = rows.find(opType);
  if (it == rows.end())
    return nullptr;
  const OpRow *row = nullptr;
  for (const OpRow &r : it->second)
    if (r.sinceOpset <= opset)
      row = &r;
  return row;
}

const OpTable &OpTable::get() {
  static const OpTable table = [] {
    OpTable t;
    ops::registerElementwiseOps(t);
    ops::registerShapeOps(t);
    ops::registerIndexingOps(t);
    ops::registerGeneratorOps(t);
    ops::registerMatMulOps(t);
    ops::registerReductionOps(t);
    ops::registerNormalizationOps(t);
    return t;
  }();
  return table;
}

llvm::Expected<const HostTensor *> Fold::need(size_t k) const {
  if (k >= in.size() || !in[k])
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   llvm::formatv("input {0} is required", k));
  return in[k];
}

Folded rondo::import::evaluateNode(const onnx::NodeProto &node, int64_t opset,
                                   ArrayRef<const HostTensor *> in,
                                   int64_t maxElements) {
  const OpRow *row = OpTable::get().lookup(node.op_type(), opset);
  if (!row || !row->fold)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the constant folder does not implement '" +
                                       node.op_type() + "'");
  auto results = row->fold(Fold{node, opset, in, maxElements});
  if (!results)
    return results.takeError();
  // Shapes computed from data (Reshape, Expand, ConstantOfShape, Range) can
  // be absurd; results computed with data are bounded by maxElements.
  for (const HostTensor &t : *results)
    if (llvm::Error e = checkShape(t.shape, "the result"))
      return std::move(e);
  if (results->empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the node has no result");
  return results;
}

SmallVector<Val> rondo::import::wrap(Value v) {
  return SmallVector<Val>{Val{false, {}, v}};
}

FailureOr<Value> Conversion::need(size_t k) const {
  if (k >= in.size() || !in[k])
    return error() << "input " << k << " is required", failure();
  return importer.materialize(*in[k], node);
}

LogicalResult Conversion::requireFloat(Value v) const {
  if (!isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
    return error() << "this op is only supported on floating-point "
                      "data here, got "
                   << v.getType(),
           failure();
  return success();
}

FailureOr<SmallVector<int64_t>> Conversion::foldedShape() const {
  SmallVector<HostTensor> shapeOnly;
  shapeOnly.reserve(in.size());
  SmallVector<const HostTensor *> hosts;
  for (const Val *v : in) {
    if (!v)
      hosts.push_back(nullptr);
    else if (v->isConst)
      hosts.push_back(&v->host);
    else {
      shapeOnly.push_back(HostTensor::shapeOnly(
          DType::F32, cast<RankedTensorType>(v->value.getType()).getShape()));
      hosts.push_back(&shapeOnly.back());
    }
  }
  auto r = evaluateNode(node, opset, hosts, 0);
  if (!r)
    return error() << llvm::toString(r.takeError()), failure();
  return SmallVector<int64_t>((*r)[0].shape);
}
