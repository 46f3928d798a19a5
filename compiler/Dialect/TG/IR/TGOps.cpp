//===- TGOps.cpp - tg op verifiers, type inference and folds ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

#include <numeric>

using namespace mlir;
using namespace rondo::tg;

#include "Dialect/TG/IR/TGInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "Dialect/TG/IR/TGOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

double rondo::tg::detail::sumTensorBytes(ValueRange values) {
  double bytes = 0;
  for (Value v : values)
    if (auto t = dyn_cast<RankedTensorType>(v.getType()))
      bytes += double(t.getNumElements()) *
               std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
  return bytes;
}

/// The matrix products: they round both float operands to bf16 under bf16
/// precision (the experts' grouped products as matmul does; their ids,
/// operand 2, are never a float value).
static bool isMatrixProduct(Operation *op) {
  return isa<rondo::tg::MatmulOp, rondo::tg::ExpertMatmulOp,
             rondo::tg::ExpertMatmulWGradOp>(op);
}

static bool readOnlyByProductsImpl(Value v, bool &used) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (auto reshape = dyn_cast<rondo::tg::ReshapeOp>(user)) {
      if (!readOnlyByProductsImpl(reshape.getResult(), used))
        return false;
      continue;
    }
    if (!isMatrixProduct(user))
      return false;
    used = true;
  }
  return true;
}

bool rondo::tg::readOnlyByProducts(Value v) {
  bool used = false;
  return readOnlyByProductsImpl(v, used) && used;
}

bool rondo::tg::readByBf16Products(Value v) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (auto reshape = dyn_cast<rondo::tg::ReshapeOp>(user)) {
      if (readByBf16Products(reshape.getResult()))
        return true;
      continue;
    }
    if (isMatrixProduct(user))
      return true;
    // The fused LM head's weight (operand 1): its kernels round it once per
    // call, or read a bf16 copy (kern-bf16-storage).
    if (isa<rondo::tg::LinearCrossEntropyOp,
            rondo::tg::LinearCrossEntropyGradOp>(user) &&
        use.getOperandNumber() == 1)
      return true;
  }
  return false;
}

bool rondo::tg::isFrozenProductWeight(func::FuncOp fn, unsigned i) {
  return fn.getArgAttr(i, kParamAttr) && !fn.getArgAttr(i, kTrainableAttr) &&
         cast<ShapedType>(fn.getArgumentTypes()[i]).getElementType().isF32() &&
         readOnlyByProducts(fn.getArgument(i));
}

FailureOr<SmallVector<int64_t>>
rondo::tg::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool rondo::tg::broadcastsTo(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i])
      return false;
  return true;
}

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

static int64_t normalizeAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

/// Verifies that an op's result types are the inferred ones.
template <typename OpTy> static LogicalResult verifyInferred(OpTy op) {
  SmallVector<Type> types;
  if (failed(OpTy::inferReturnTypes(op.getContext(), op.getLoc(),
                                    typename OpTy::Adaptor(op), types)))
    return failure();
  if (TypeRange(types) != op->getResultTypes())
    return op.emitOpError("result type ")
           << op->getResultTypes()[0] << " does not match the inferred "
           << types[0];
  return success();
}

LogicalResult BinaryOp::verify() { return verifyInferred(*this); }
LogicalResult MatmulOp::verify() { return verifyInferred(*this); }
LogicalResult SelectOp::verify() { return verifyInferred(*this); }
LogicalResult GatherOp::verify() { return verifyInferred(*this); }

static Type shaped(ArrayRef<int64_t> shape, Value like) {
  return RankedTensorType::get(shape, tensorType(like).getElementType());
}

Type rondo::tg::inferBinaryType(Value lhs, Value rhs) {
  auto shape =
      broadcastShapes(tensorType(lhs).getShape(), tensorType(rhs).getShape());
  return succeeded(shape) ? shaped(*shape, lhs) : lhs.getType();
}

Type rondo::tg::inferSelectType(Value cond, Value a, Value b) {
  auto ab = broadcastShapes(tensorType(a).getShape(), tensorType(b).getShape());
  if (failed(ab))
    return a.getType();
  auto all = broadcastShapes(*ab, tensorType(cond).getShape());
  return succeeded(all) ? shaped(*all, a) : a.getType();
}

Type rondo::tg::inferMatmulType(Value a, Value b, bool transA, bool transB) {
  ArrayRef<int64_t> as = tensorType(a).getShape(),
                    bs = tensorType(b).getShape();
  auto batch = broadcastShapes(as.drop_back(2), bs.drop_back(2));
  SmallVector<int64_t> shape =
      succeeded(batch) ? *batch : SmallVector<int64_t>();
  shape.push_back(transA ? as.back() : as[as.size() - 2]);
  shape.push_back(transB ? bs[bs.size() - 2] : bs.back());
  return shaped(shape, a);
}

Type rondo::tg::inferTransposeType(Value x, ArrayRef<int64_t> perm) {
  SmallVector<int64_t> shape;
  for (int64_t p : perm)
    shape.push_back(tensorType(x).getDimSize(p));
  return shaped(shape, x);
}

Type rondo::tg::inferConcatType(ValueRange inputs, int64_t axis) {
  auto first = tensorType(inputs.front());
  int64_t a = normalizeAxis(axis, first.getRank());
  SmallVector<int64_t> shape(first.getShape());
  shape[a] = 0;
  for (Value in : inputs)
    shape[a] += tensorType(in).getDimSize(a);
  return shaped(shape, inputs.front());
}

Type rondo::tg::inferGatherType(Value table, Value ids) {
  SmallVector<int64_t> shape(tensorType(ids).getShape());
  shape.push_back(tensorType(table).getShape().back());
  return shaped(shape, table);
}

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// BinaryOp / SelectOp / IsNanOp
//===----------------------------------------------------------------------===//

LogicalResult BinaryOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto lhs = tensorType(adaptor.getLhs());
  auto rhs = tensorType(adaptor.getRhs());
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "operand element types differ: ", lhs, " vs ",
                             rhs);
  auto shape = broadcastShapes(lhs.getShape(), rhs.getShape());
  if (failed(shape))
    return emitOptionalError(loc, "operand shapes do not broadcast: ", lhs,
                             " vs ", rhs);
  types.push_back(RankedTensorType::get(*shape, lhs.getElementType()));
  return success();
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto a = tensorType(adaptor.getA()), b = tensorType(adaptor.getB());
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "branch element types differ");
  auto ab = broadcastShapes(a.getShape(), b.getShape());
  if (failed(ab))
    return emitOptionalError(loc, "branch shapes do not broadcast");
  auto all = broadcastShapes(*ab, tensorType(adaptor.getCond()).getShape());
  if (failed(all))
    return emitOptionalError(loc, "condition shape does not broadcast");
  types.push_back(RankedTensorType::get(*all, a.getElementType()));
  return success();
}

LogicalResult IsNanOp::verify() {
  if (tensorType(getX()).getShape() != tensorType(getResult()).getShape())
    return emitOpError("result shape must equal operand shape");
  return success();
}

LogicalResult GatedActOp::verify() {
  switch (getAct()) {
  case UnaryKind::silu:
  case UnaryKind::gelu_tanh:
  case UnaryKind::gelu_erf:
  case UnaryKind::sigmoid:
  case UnaryKind::relu:
    return success();
  default:
    return emitOpError(
        "gate activation must be silu, gelu_tanh, gelu_erf, sigmoid or relu");
  }
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto a = tensorType(adaptor.getA()), b = tensorType(adaptor.getB());
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOptionalError(loc, "operands must have rank >= 2, got ", a,
                             " and ", b);
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "operand element types differ");
  ArrayRef<int64_t> as = a.getShape(), bs = b.getShape();
  int64_t m = adaptor.getTransposeA() ? as.back() : as[as.size() - 2];
  int64_t ka = adaptor.getTransposeA() ? as[as.size() - 2] : as.back();
  int64_t kb = adaptor.getTransposeB() ? bs.back() : bs[bs.size() - 2];
  int64_t n = adaptor.getTransposeB() ? bs[bs.size() - 2] : bs.back();
  if (ka != kb)
    return emitOptionalError(loc, "contraction sizes differ: ", ka, " vs ", kb);
  auto batch = broadcastShapes(as.drop_back(2), bs.drop_back(2));
  if (failed(batch))
    return emitOptionalError(loc, "batch dimensions do not broadcast");
  SmallVector<int64_t> shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  types.push_back(RankedTensorType::get(shape, a.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// ReduceOp
//===----------------------------------------------------------------------===//

static FailureOr<SmallVector<int64_t>>
reducedShape(ArrayRef<int64_t> shape, ArrayRef<int64_t> axes, bool keepdims,
             std::optional<Location> loc) {
  int64_t rank = shape.size();
  SmallVector<bool> reduced(rank, false);
  for (int64_t axis : axes) {
    int64_t a = normalizeAxis(axis, rank);
    if (a < 0 || a >= rank)
      return emitOptionalError(loc, "reduction axis ", axis,
                               " out of range for rank ", rank);
    if (reduced[a])
      return emitOptionalError(loc, "reduction axis ", axis, " repeated");
    reduced[a] = true;
  }
  SmallVector<int64_t> out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      out.push_back(shape[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

LogicalResult ReduceOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto x = tensorType(adaptor.getX());
  auto shape =
      reducedShape(x.getShape(), adaptor.getAxes(), adaptor.getKeepdims(), loc);
  if (failed(shape))
    return failure();
  types.push_back(RankedTensorType::get(*shape, x.getElementType()));
  return success();
}

LogicalResult ReduceOp::verify() {
  if (getAxes().empty())
    return emitOpError("needs at least one axis");
  return verifyInferred(*this);
}

Type rondo::tg::inferReduceType(Value x, ArrayRef<int64_t> axes,
                                bool keepdims) {
  auto shape =
      reducedShape(tensorType(x).getShape(), axes, keepdims, std::nullopt);
  return succeeded(shape) ? shaped(*shape, x) : x.getType();
}

//===----------------------------------------------------------------------===//
// ReshapeOp
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto x = tensorType(getX()), r = tensorType(getResult());
  if (x.getNumElements() != r.getNumElements())
    return emitOpError("element count changes: ") << x << " to " << r;
  if (x.getElementType() != r.getElementType())
    return emitOpError("element type changes");
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getX().getType() == getType())
    return getX();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getX()))
    return dense.reshape(getType());
  return {};
}

namespace {
/// A strided view of a contiguous tensor, the algebra behind collapsing
/// chains of reshapes and transposes (PyTorch's `view` stride rule).
struct StridedView {
  SmallVector<int64_t> shape, strides;

  static StridedView contiguous(ArrayRef<int64_t> shape) {
    StridedView v;
    v.shape.assign(shape.begin(), shape.end());
    v.strides.resize(shape.size());
    int64_t s = 1;
    for (int64_t i = shape.size() - 1; i >= 0; --i) {
      v.strides[i] = s;
      s *= shape[i];
    }
    return v;
  }

  void permute(ArrayRef<int64_t> perm) {
    StridedView v;
    for (int64_t p : perm) {
      v.shape.push_back(shape[p]);
      v.strides.push_back(strides[p]);
    }
    *this = v;
  }

  /// Reinterprets as `newShape` without copying; fails when the view's
  /// strides cannot express it.
  LogicalResult reshape(ArrayRef<int64_t> newShape) {
    SmallVector<int64_t> newStrides(newShape.size(), 1);
    if (shape.empty() || newShape.empty()) {
      shape.assign(newShape.begin(), newShape.end());
      strides = newStrides;
      return success();
    }
    int64_t viewD = newShape.size() - 1;
    int64_t chunkBase = strides.back();
    int64_t tensorNumel = 1, viewNumel = 1;
    for (int64_t d = shape.size() - 1; d >= 0; --d) {
      tensorNumel *= shape[d];
      if (d == 0 ||
          (shape[d - 1] != 1 && strides[d - 1] != tensorNumel * chunkBase)) {
        while (viewD >= 0 &&
               (viewNumel < tensorNumel || newShape[viewD] == 1)) {
          newStrides[viewD] = viewNumel * chunkBase;
          viewNumel *= newShape[viewD];
          --viewD;
        }
        if (viewNumel != tensorNumel)
          return failure();
        if (d > 0) {
          chunkBase = strides[d - 1];
          tensorNumel = viewNumel = 1;
        }
      }
    }
    if (viewD != -1)
      return failure();
    shape.assign(newShape.begin(), newShape.end());
    strides = newStrides;
    return success();
  }

  /// The permutation `perm` with this == transpose(contiguous(base), perm).
  std::optional<SmallVector<int64_t>>
  asTransposeOf(ArrayRef<int64_t> base) const {
    if (base.size() != shape.size())
      return std::nullopt;
    StridedView b = contiguous(base);
    SmallVector<int64_t> perm(shape.size(), -1);
    SmallVector<bool> used(base.size(), false);
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 1)
        continue;
      for (size_t j = 0; j < base.size(); ++j)
        if (!used[j] && b.shape[j] == shape[i] && b.strides[j] == strides[i]) {
          perm[i] = j;
          used[j] = true;
          break;
        }
      if (perm[i] < 0)
        return std::nullopt;
    }
    // Unit dimensions carry no data: pair them up in order.
    for (size_t i = 0; i < shape.size(); ++i) {
      if (perm[i] >= 0)
        continue;
      for (size_t j = 0; j < base.size(); ++j)
        if (!used[j] && b.shape[j] == 1) {
          perm[i] = j;
          used[j] = true;
          break;
        }
      if (perm[i] < 0)
        return std::nullopt;
    }
    return perm;
  }
};

/// Collapses a chain of tg.reshape / tg.transpose ops into one tg.transpose
/// (or nothing) when the chain only moves whole dimensions around. The
/// exporter routes attention keys through reshape -> transpose -> reshape
/// triples that are a single transpose; recognition needs them plain.
template <typename OpTy> struct CollapseLayoutChain : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    SmallVector<Operation *> chain;
    Value cursor = op.getResult();
    while (Operation *def = cursor.getDefiningOp()) {
      if (!isa<ReshapeOp, TransposeOp>(def))
        break;
      chain.push_back(def);
      cursor = def->getOperand(0);
    }
    // The longest prefix of the chain that is a plain transpose wins; a
    // longer chain may start at a reshape that changes the rank for good.
    for (size_t len = chain.size(); len >= 2; --len) {
      Value source = chain[len - 1]->getOperand(0);
      auto srcType = tensorType(source);
      StridedView view = StridedView::contiguous(srcType.getShape());
      bool ok = true;
      for (Operation *def :
           llvm::reverse(ArrayRef<Operation *>(chain).take_front(len))) {
        if (auto t = dyn_cast<TransposeOp>(def))
          view.permute(t.getPerm());
        else if (failed(view.reshape(tensorType(def->getResult(0)).getShape())))
          ok = false;
        if (!ok)
          break;
      }
      if (!ok)
        continue;
      auto perm = view.asTransposeOf(srcType.getShape());
      if (!perm)
        continue;
      if (llvm::equal(*perm, llvm::seq<int64_t>(0, perm->size()))) {
        rewriter.replaceOp(op, source);
        return success();
      }
      rewriter.replaceOpWithNewOp<TransposeOp>(
          op, op.getType(), source, rewriter.getDenseI64ArrayAttr(*perm));
      return success();
    }
    return failure();
  }
};

struct ReshapeOfReshape : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getX().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), inner.getX());
    return success();
  }
};

struct TransposeOfTranspose : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getX().getDefiningOp<TransposeOp>();
    if (!inner)
      return failure();
    SmallVector<int64_t> perm;
    for (int64_t p : op.getPerm())
      perm.push_back(inner.getPerm()[p]);
    rewriter.replaceOpWithNewOp<TransposeOp>(
        op, op.getType(), inner.getX(), rewriter.getDenseI64ArrayAttr(perm));
    return success();
  }
};
} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *ctx) {
  results.add<ReshapeOfReshape, CollapseLayoutChain<ReshapeOp>>(ctx);
}

//===----------------------------------------------------------------------===//
// TransposeOp
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto x = tensorType(adaptor.getX());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if ((int64_t)perm.size() != x.getRank())
    return emitOptionalError(loc, "permutation size ", perm.size(),
                             " does not match rank ", x.getRank());
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.getRank())
      return emitOptionalError(loc, "permutation entry ", p, " out of range");
    shape.push_back(x.getDimSize(p));
  }
  types.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

LogicalResult TransposeOp::verify() {
  SmallVector<bool> seen(getPerm().size(), false);
  for (int64_t p : getPerm()) {
    if (p < 0 || p >= (int64_t)seen.size())
      return emitOpError("permutation entry ") << p << " out of range";
    if (seen[p])
      return emitOpError("permutation repeats dimension ") << p;
    seen[p] = true;
  }
  return verifyInferred(*this);
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  if (llvm::equal(getPerm(), llvm::seq<int64_t>(0, getPerm().size())))
    return getX();
  return {};
}

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *ctx) {
  results.add<TransposeOfTranspose, CollapseLayoutChain<TransposeOp>>(ctx);
}

//===----------------------------------------------------------------------===//
// BroadcastOp / SumToShapeOp
//===----------------------------------------------------------------------===//

LogicalResult BroadcastOp::verify() {
  auto x = tensorType(getX()), r = tensorType(getResult());
  if (!broadcastsTo(x.getShape(), r.getShape()))
    return emitOpError("operand ") << x << " does not broadcast to " << r;
  if (x.getElementType() != r.getElementType())
    return emitOpError("element type changes");
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getX().getType() == getType())
    return getX();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getX()))
    if (dense.isSplat())
      return DenseElementsAttr::get(getType(),
                                    dense.getSplatValue<Attribute>());
  return {};
}

LogicalResult SumToShapeOp::verify() {
  auto x = tensorType(getX()), r = tensorType(getResult());
  if (!broadcastsTo(r.getShape(), x.getShape()))
    return emitOpError("result ")
           << r << " does not broadcast to operand " << x;
  return success();
}

OpFoldResult SumToShapeOp::fold(FoldAdaptor) {
  if (getX().getType() == getType())
    return getX();
  return {};
}

//===----------------------------------------------------------------------===//
// SliceOp / ConcatOp / GatherOp
//===----------------------------------------------------------------------===//

LogicalResult SliceOp::verify() {
  auto x = tensorType(getX()), r = tensorType(getResult());
  if (r.getRank() != x.getRank() ||
      (int64_t)getStarts().size() != x.getRank() ||
      (int64_t)getSteps().size() != x.getRank())
    return emitOpError("starts, steps and result must match the operand rank ")
           << x.getRank();
  for (int64_t d = 0; d < x.getRank(); ++d) {
    int64_t start = getStarts()[d], step = getSteps()[d], n = r.getDimSize(d);
    if (step == 0)
      return emitOpError("step of dimension ") << d << " is zero";
    if (n == 0)
      continue;
    int64_t last = start + (n - 1) * step;
    if (start < 0 || start >= x.getDimSize(d) || last < 0 ||
        last >= x.getDimSize(d))
      return emitOpError("dimension ")
             << d << " reads [" << start << ", " << last << "] outside [0, "
             << x.getDimSize(d) << ")";
  }
  return success();
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getX().getType() == getType() &&
      llvm::all_of(getStarts(), [](int64_t s) { return s == 0; }) &&
      llvm::all_of(getSteps(), [](int64_t s) { return s == 1; }))
    return getX();
  return {};
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "needs at least one input");
  auto first = tensorType(adaptor.getInputs().front());
  int64_t axis =
      normalizeAxis(static_cast<int64_t>(adaptor.getAxis()), first.getRank());
  if (axis < 0 || axis >= first.getRank())
    return emitOptionalError(loc, "axis ", adaptor.getAxis(), " out of range");
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value in : adaptor.getInputs()) {
    auto t = tensorType(in);
    if (t.getRank() != first.getRank() ||
        t.getElementType() != first.getElementType())
      return emitOptionalError(loc, "inputs differ in rank or element type");
    for (int64_t d = 0; d < t.getRank(); ++d)
      if (d != axis && t.getDimSize(d) != first.getDimSize(d))
        return emitOptionalError(loc, "inputs differ in dimension ", d);
    shape[axis] += t.getDimSize(axis);
  }
  types.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult ConcatOp::verify() {
  int64_t rank = tensorType(getResult()).getRank();
  int64_t axis = static_cast<int64_t>(getAxis());
  if (axis < -rank || axis >= rank)
    return emitOpError("axis out of range");
  return verifyInferred(*this);
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto table = tensorType(adaptor.getTable());
  if (table.getRank() != 2)
    return emitOptionalError(loc, "table must be rank 2, got ", table);
  SmallVector<int64_t> shape(tensorType(adaptor.getIds()).getShape());
  shape.push_back(table.getDimSize(1));
  types.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Structures
//===----------------------------------------------------------------------===//

/// A sliding window is positive; it narrows causal attention only.
static LogicalResult verifyWindow(Operation *op, IntegerAttr window,
                                  bool causal) {
  if (!window)
    return success();
  if (window.getInt() < 0)
    return op->emitOpError("window must be non-negative, got ")
           << window.getInt();
  if (window.getInt() > 0 && !causal)
    return op->emitOpError("a window needs causal attention");
  return success();
}

LogicalResult CausalMaskOp::verify() {
  if (tensorType(getResult()).getRank() < 2)
    return emitOpError("mask must have rank >= 2");
  return verifyWindow(*this, getWindowAttr(), /*causal=*/true);
}

LogicalResult RotaryTableOp::verify() {
  auto t = tensorType(getResult());
  if (getKind() != UnaryKind::cos && getKind() != UnaryKind::sin)
    return emitOpError("kind must be cos or sin, got ")
           << stringifyUnaryKind(getKind());
  if (!t.getElementType().isF32())
    return emitOpError("table must be f32, got ") << t;
  if (t.getRank() < 2 || t.getShape().back() != int64_t(getFreqs().size()))
    return emitOpError("table must be [..., T, D] with D = ")
           << getFreqs().size() << " frequencies, got " << t;
  return success();
}

static LogicalResult verifyNormWeight(Operation *op, Value x, Value w,
                                      StringRef name) {
  auto xt = tensorType(x), wt = tensorType(w);
  if (xt.getRank() < 1 || wt.getRank() != 1 ||
      wt.getDimSize(0) != xt.getShape().back())
    return op->emitOpError()
           << name << " must be rank 1 of the last dimension of " << xt
           << ", got " << wt;
  return success();
}

/// The bounds of a clamp: ordered, not NaN.
static LogicalResult verifyClampBounds(Operation *op, APFloat min,
                                       APFloat max) {
  if (min.isNaN() || max.isNaN() || max < min)
    return op->emitOpError("needs min <= max, got [")
           << min.convertToFloat() << ", " << max.convertToFloat() << "]";
  return success();
}

LogicalResult ClampOp::verify() {
  return verifyClampBounds(*this, getMin(), getMax());
}

LogicalResult ClampGradOp::verify() {
  return verifyClampBounds(*this, getMin(), getMax());
}

LogicalResult RmsNormOp::verify() {
  if (getX().getType() != getResult().getType())
    return emitOpError("result type must equal operand type");
  return verifyNormWeight(*this, getX(), getW(), "weight");
}

LogicalResult LayerNormOp::verify() {
  if (getX().getType() != getResult().getType())
    return emitOpError("result type must equal operand type");
  if (failed(verifyNormWeight(*this, getX(), getW(), "weight")))
    return failure();
  return verifyNormWeight(*this, getX(), getB(), "bias");
}

LogicalResult RotaryOp::verify() {
  auto x = tensorType(getX()), c = tensorType(getCos()),
       s = tensorType(getSin());
  if (x.getRank() != 4)
    return emitOpError("operand must be [B, H, T, D], got ") << x;
  if (c != s || c.getRank() != 2 || c.getDimSize(0) != x.getDimSize(2) ||
      c.getDimSize(1) != x.getDimSize(3))
    return emitOpError("cos/sin tables must both be [T, D] = [")
           << x.getDimSize(2) << ", " << x.getDimSize(3) << "], got " << c
           << " and " << s;
  if (x.getDimSize(3) % 2)
    return emitOpError("head dimension must be even");
  return success();
}

/// Attention sinks are one logit per query head: [Hq], of q's element type.
static LogicalResult verifySinks(Operation *op, Value sinks,
                                 RankedTensorType q) {
  if (!sinks)
    return success();
  auto s = tensorType(sinks);
  if (s.getRank() != 1 || q.getRank() != 4 ||
      s.getDimSize(0) != q.getDimSize(1))
    return op->emitOpError("sinks must be [Hq] = [")
           << (q.getRank() == 4 ? q.getDimSize(1) : ShapedType::kDynamic)
           << "], one per query head, got " << s;
  if (s.getElementType() != q.getElementType())
    return op->emitOpError("sinks element type must equal q's, got ") << s;
  return success();
}

LogicalResult AttentionOp::verify() {
  auto q = tensorType(getQ()), k = tensorType(getK()), v = tensorType(getV());
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOpError("q, k, v must be rank 4 [B, H, T, D]");
  if (k != v)
    return emitOpError("k and v types differ: ") << k << " vs " << v;
  if (q.getDimSize(0) != k.getDimSize(0) || q.getDimSize(3) != k.getDimSize(3))
    return emitOpError("batch or head dimension of q and k differ");
  if (k.getDimSize(1) == 0 || q.getDimSize(1) % k.getDimSize(1))
    return emitOpError("query heads (")
           << q.getDimSize(1) << ") must be a multiple of key/value heads ("
           << k.getDimSize(1) << ")";
  if (getOut().getType() != q)
    return emitOpError("output type must equal q's type");
  auto lse = tensorType(getLse());
  if (lse.getShape() != q.getShape().drop_back())
    return emitOpError("lse must be [B, Hq, T]");
  if (failed(verifySinks(*this, getSinks(), q)))
    return failure();
  return verifyWindow(*this, getWindowAttr(), getCausal());
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifySinks(*this, getSinks(), tensorType(getQ()))))
    return failure();
  if (bool(getSinks()) != bool(getDsinks()))
    return emitOpError("has sinks but no dsinks result, or the reverse");
  if (getDsinks() && getDsinks().getType() != getSinks().getType())
    return emitOpError("dsinks type must equal sinks' type");
  return verifyWindow(*this, getWindowAttr(), getCausal());
}

LogicalResult CrossEntropyOp::verify() {
  auto l = tensorType(getLogits()), y = tensorType(getLabels());
  if (l.getRank() != 2 || y.getRank() != 1 ||
      l.getDimSize(0) != y.getDimSize(0))
    return emitOpError("expects logits [N, V] and labels [N], got ")
           << l << " and " << y;
  return success();
}

LogicalResult LinearCrossEntropyOp::verify() {
  auto h = tensorType(getH()), w = tensorType(getW()),
       y = tensorType(getLabels());
  if (h.getRank() != 2 || w.getRank() != 2 || y.getRank() != 1 ||
      h.getDimSize(0) != y.getDimSize(0))
    return emitOpError("expects h [N, D], w 2-D and labels [N]");
  int64_t d = getTransposeW() ? w.getDimSize(1) : w.getDimSize(0);
  if (d != h.getDimSize(1))
    return emitOpError("hidden size ")
           << h.getDimSize(1) << " does not match w " << w;
  if (getChunkRows() <= 0)
    return emitOpError("chunk_rows must be positive");
  return success();
}
