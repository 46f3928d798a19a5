//===- Indexing.cpp - Indexing ONNX ops -------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Gather (embedding lookups, constant-index slices), GatherND (folded, or
// routed rows and expert matrices: Recognise/Experts.cpp), TopK (a mixture
// of experts' router), and the data-dependent routing ops the importer
// recognises only to reject.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "Import/Recognise/Experts.h"

namespace rondo::import::ops {
namespace {

Folded foldGather(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  int64_t maxElements = f.maxElements;
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
      return err(llvm::formatv(
          "Gather index {0} is out of range for dimension {1}", idx.i[k], dim));
  HostTensor r = gatherElements(x, shape, [&](int64_t k) {
    int64_t in_ = k % inner, j = (k / inner) % nIdx, o = k / (inner * nIdx);
    int64_t i = idx.i[j] < 0 ? idx.i[j] + dim : idx.i[j];
    return (o * dim + i) * inner + in_;
  });
  return Tensors{std::move(r)};
}

Converted convertGather(const Conversion &c) {
  const onnx::NodeProto &node = c.node;
  ArrayRef<const Val *> in = c.in;
  int64_t axis = attrInt(node, "axis", 0);
  if (in.size() < 2 || !in[0] || !in[1])
    return c.error() << "expects two inputs", failure();
  if (!in[1]->isConst) {
    // Embedding lookup: a table indexed by token data.
    auto table = c.need(0), ids = c.need(1);
    if (failed(table) || failed(ids))
      return failure();
    if (typeOf(*table).getRank() != 2 || (axis != 0 && axis != -2))
      return c.error()
                 << "a data-dependent Gather must index the rows of a rank-2 "
                    "table (an embedding), got "
                 << typeOf(*table) << " axis " << axis,
             failure();
    if (!typeOf(*ids).getElementType().isInteger(64))
      return c.error() << "Gather indices must be integers, got "
                       << typeOf(*ids),
             failure();
    return wrap(tg::GatherOp::create(c.builder, c.loc, *table, *ids));
  }
  // Constant indices into data: a slice (a single index also drops the
  // axis), or a row lookup with constant ids (learned positions).
  auto x = c.need(0);
  auto idx = constInts(in[1]);
  if (failed(x) || failed(idx))
    return failure();
  auto xt = typeOf(*x);
  if (axis < -xt.getRank() || axis >= xt.getRank())
    return c.error() << "axis " << axis << " is out of range for rank "
                     << xt.getRank(),
           failure();
  if (axis < 0)
    axis += xt.getRank();
  if (isFloat(in[1]->host.dtype))
    return c.error() << "Gather indices must be integers", failure();
  int64_t dim = xt.getDimSize(axis);
  SmallVector<int64_t> ids;
  for (int64_t v : *idx)
    ids.push_back(v < 0 ? v + dim : v);
  bool arithmetic = !ids.empty() && ids[0] >= 0 && ids[0] < dim;
  int64_t step = ids.size() > 1 ? ids[1] - ids[0] : 1;
  for (size_t k = 1; k < ids.size() && arithmetic; ++k)
    arithmetic =
        ids[k] - ids[k - 1] == step && step != 0 && ids[k] >= 0 && ids[k] < dim;
  for (int64_t v : ids)
    if (v < 0 || v >= dim)
      return c.error() << "Gather index " << v
                       << " is out of range for dimension " << dim,
             failure();
  bool rowLookup = xt.getRank() == 2 && axis == 0;
  if (rowLookup && (!arithmetic || in[1]->host.shape.size() > 1)) {
    auto ids = c.need(1);
    if (failed(ids))
      return failure();
    return wrap(tg::GatherOp::create(c.builder, c.loc, *x, *ids));
  }
  if (!arithmetic)
    return c.error()
               << "constant Gather indices must be an arithmetic sequence in "
                  "range",
           failure();
  SmallVector<int64_t> starts(xt.getRank(), 0), steps(xt.getRank(), 1),
      shape(xt.getShape());
  starts[axis] = ids[0];
  steps[axis] = step;
  shape[axis] = ids.size();
  Value s = tg::SliceOp::create(
      c.builder, c.loc, RankedTensorType::get(shape, xt.getElementType()), *x,
      c.builder.getDenseI64ArrayAttr(starts),
      c.builder.getDenseI64ArrayAttr(steps));
  auto outShape = c.foldedShape();
  if (failed(outShape))
    return failure();
  return wrap(tg::ReshapeOp::create(
      c.builder, c.loc, RankedTensorType::get(*outShape, xt.getElementType()),
      s));
}

Folded foldGatherND(const Fold &f) {
  const onnx::NodeProto &node = f.node;
  int64_t maxElements = f.maxElements;
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
      return err(
          llvm::formatv("GatherND index {0} is out of range for dimension {1}",
                        idx.i[k], dim));
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

/// The router's choice: the k largest along the last axis, sorted.
Converted convertTopK(const Conversion &c) {
  auto x = c.need(0);
  if (failed(x) || failed(c.requireFloat(*x)))
    return failure();
  int64_t rank = typeOf(*x).getRank();
  auto k = constInts(c.in.size() > 1 ? c.in[1] : nullptr);
  if (failed(k) || k->size() != 1)
    return c.error() << "TopK's k must be a data-independent one-element "
                        "tensor",
           failure();
  int64_t axis = attrInt(c.node, "axis", -1);
  if (rank == 0 || (axis != -1 && axis != rank - 1))
    return c.error() << "TopK is supported along the last axis only, got axis "
                     << axis << " of rank " << rank,
           failure();
  if (attrInt(c.node, "largest", 1) != 1)
    return c.error() << "TopK with largest = 0 is not supported", failure();
  int64_t d = typeOf(*x).getShape().back();
  if ((*k)[0] < 1 || (*k)[0] > d)
    return c.error() << "TopK's k = " << (*k)[0] << " must be in [1, " << d
                     << "]",
           failure();
  // sorted = 0 leaves the order open; the sorted order is one of them.
  auto op = tg::TopKOp::create(c.builder, c.loc, *x, (*k)[0]);
  return SmallVector<Val>{Val{false, {}, op.getValues()},
                          Val{false, {}, op.getIndices()}};
}

Converted rejectRouting(const Conversion &c) {
  return c.error() << "data-dependent routing (" << c.node.op_type()
                   << " on activations, as in a mixture-of-experts router) is "
                      "recognised but not supported",
         failure();
}

} // namespace

void registerIndexingOps(OpTable &t) {
  t.add("Gather", foldGather, convertGather);
  t.add("GatherND", foldGatherND, convertRoutedGather);
  t.add("TopK", nullptr, convertTopK);
  t.add("NonZero", nullptr, rejectRouting);
  t.add("ScatterND", nullptr, rejectRouting);
  t.add("ScatterElements", nullptr, rejectRouting);
}

} // namespace rondo::import::ops
