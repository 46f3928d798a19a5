//===- FuseAttention.cpp - tg-fuse-attention --------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "PatternUtils.h"
#include "TG/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace rondo::tg {
#define GEN_PASS_DEF_TGFUSEATTENTIONPASS
#include "TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
/// softmax(scores + causal_mask): the row softmax of a causal score matrix,
/// banded when the mask has a window (returned in `window`, 0 for none).
SoftmaxOp causalSoftmax(Value p, Value &scores, int64_t &window) {
  auto sm = p.getDefiningOp<SoftmaxOp>();
  if (!sm)
    return nullptr;
  Value mask;
  if (!matchBinary(sm.getX(), BinaryKind::add, scores, mask,
                   [](Value, Value r) {
                     return r.getDefiningOp<CausalMaskOp>() != nullptr;
                   }))
    return nullptr;
  window = mask.getDefiningOp<CausalMaskOp>().getWindowSize();
  return sm;
}

/// select(is_nan(p), 0, p) -> p when p is a causal softmax: the diagonal is
/// never masked (a window keeps at least the diagonal), so no row is all
/// -inf and p has no NaN.
struct DropNanGuard : OpRewritePattern<SelectOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SelectOp op,
                                PatternRewriter &rewriter) const override {
    auto isNan = op.getCond().getDefiningOp<IsNanOp>();
    Value scores;
    int64_t window;
    if (!isNan || isNan.getX() != op.getB() ||
        !isScalarConstant(op.getA(), 0.0) ||
        !causalSoftmax(op.getB(), scores, window) ||
        op.getB().getType() != op.getType())
      return failure();
    rewriter.replaceOp(op, op.getB());
    return success();
  }
};

/// Strips the exporter's key/value head repetition
/// reshape(broadcast(reshape(x : [B, Hkv, T, D]) : [B, Hkv, 1, T, D]) :
/// [B, Hkv, G, T, D]) : [B, Hkv*G, T, D].
Value stripRepeatKv(Value v) {
  auto outer = v.getDefiningOp<ReshapeOp>();
  if (!outer)
    return v;
  auto bc = outer.getX().getDefiningOp<BroadcastOp>();
  if (!bc)
    return v;
  auto inner = bc.getX().getDefiningOp<ReshapeOp>();
  if (!inner)
    return v;
  auto src = cast<RankedTensorType>(inner.getX().getType());
  auto mid = cast<RankedTensorType>(bc.getType());
  auto out = cast<RankedTensorType>(outer.getType());
  if (src.getRank() != 4 || mid.getRank() != 5 || out.getRank() != 4)
    return v;
  int64_t b = src.getDimSize(0), hkv = src.getDimSize(1), t = src.getDimSize(2),
          d = src.getDimSize(3);
  auto unsq = cast<RankedTensorType>(inner.getType()).getShape();
  if (unsq != ArrayRef<int64_t>{b, hkv, 1, t, d})
    return v;
  int64_t g = mid.getDimSize(2);
  if (mid.getShape() != ArrayRef<int64_t>{b, hkv, g, t, d} ||
      out.getShape() != ArrayRef<int64_t>{b, hkv * g, t, d})
    return v;
  return inner.getX();
}

/// k^T for attention: `transpose(K, [0, 1, 3, 2])`, or the exporter's
/// `reshape(transpose(reshape(K : [B, H, S, D] -> [B*H, S, D]), [0, 2, 1])
/// -> [B, H, D, S])`, where K may still carry the key/value head repetition
/// in its 5-D form [B, Hkv, G, S, D]. Returns the unrepeated keys.
Value matchKeyTranspose(Value kT) {
  if (auto tr = kT.getDefiningOp<TransposeOp>())
    return tr.getPerm() == ArrayRef<int64_t>{0, 1, 3, 2}
               ? stripRepeatKv(tr.getX())
               : Value();
  auto outer = kT.getDefiningOp<ReshapeOp>();
  auto tr = outer ? outer.getX().getDefiningOp<TransposeOp>() : nullptr;
  auto inner = tr ? tr.getX().getDefiningOp<ReshapeOp>() : nullptr;
  if (!inner || tr.getPerm() != ArrayRef<int64_t>{0, 2, 1})
    return {};
  auto out = cast<RankedTensorType>(kT.getType());
  auto flat = cast<RankedTensorType>(inner.getType());
  if (out.getRank() != 4 || flat.getRank() != 3)
    return {};
  int64_t b = out.getDimSize(0), h = out.getDimSize(1), d = out.getDimSize(2),
          s = out.getDimSize(3);
  if (flat.getShape() != ArrayRef<int64_t>{b * h, s, d})
    return {};
  Value src = inner.getX();
  auto st = cast<RankedTensorType>(src.getType());
  if (st.getRank() == 4)
    return st.getShape() == ArrayRef<int64_t>{b, h, s, d} ? stripRepeatKv(src)
                                                          : Value();
  // [B, Hkv, G, S, D] = broadcast(reshape(k : [B, Hkv, S, D])).
  auto bc = src.getDefiningOp<BroadcastOp>();
  auto unsq = bc ? bc.getX().getDefiningOp<ReshapeOp>() : nullptr;
  if (!unsq || st.getRank() != 5)
    return {};
  Value k = unsq.getX();
  auto kt = cast<RankedTensorType>(k.getType());
  int64_t hkv = st.getDimSize(1), g = st.getDimSize(2);
  if (st.getShape() != ArrayRef<int64_t>{b, hkv, g, s, d} || hkv * g != h ||
      kt.getShape() != ArrayRef<int64_t>{b, hkv, s, d} ||
      cast<RankedTensorType>(unsq.getType()).getShape() !=
          ArrayRef<int64_t>{b, hkv, 1, s, d})
    return {};
  return k;
}

/// Peels `x * c` (c a scalar constant) and returns x, multiplying `scale`.
Value peelScale(Value v, double &scale) {
  Value x, c;
  if (matchBinary(v, BinaryKind::mul, x, c, [](Value, Value r) {
        return scalarConstant(r).has_value();
      })) {
    scale *= *scalarConstant(c);
    return x;
  }
  if (matchBinary(v, BinaryKind::div, x, c, [](Value, Value r) {
        return scalarConstant(r).has_value();
      })) {
    scale /= *scalarConstant(c);
    return x;
  }
  return v;
}

struct FuseCausalAttention : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatmulOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getTransposeA() || op.getTransposeB())
      return failure();
    Value scores;
    int64_t window;
    if (!causalSoftmax(op.getA(), scores, window))
      return failure();
    double scale = 1.0;
    Value raw = peelScale(scores, scale);
    auto qk = raw.getDefiningOp<MatmulOp>();
    if (!qk || qk.getTransposeA())
      return failure();
    Value q = peelScale(qk.getA(), scale);
    Value kT = peelScale(qk.getB(), scale);
    Value k = qk.getTransposeB() ? stripRepeatKv(kT) : matchKeyTranspose(kT);
    // k^T = transpose(x, p) after canonicalisation merged the head split and
    // the key transpose: k is transpose(x, p with its last two entries
    // swapped), created once the match is certain.
    TransposeOp mergedKeyTranspose;
    SmallVector<int64_t> keyPerm;
    if (!k && !qk.getTransposeB()) {
      mergedKeyTranspose = kT.getDefiningOp<TransposeOp>();
      if (!mergedKeyTranspose || mergedKeyTranspose.getPerm().size() != 4)
        return failure();
      keyPerm.assign(mergedKeyTranspose.getPerm().begin(),
                     mergedKeyTranspose.getPerm().end());
      std::swap(keyPerm[2], keyPerm[3]);
    } else if (!k) {
      return failure();
    }
    Value v = stripRepeatKv(op.getB());
    auto qt = cast<RankedTensorType>(q.getType());
    auto kt = k ? cast<RankedTensorType>(k.getType())
                : cast<RankedTensorType>(
                      inferTransposeType(mergedKeyTranspose.getX(), keyPerm));
    if (qt.getRank() != 4 || kt.getRank() != 4 || kt != v.getType() ||
        kt.getDimSize(1) == 0 || qt.getDimSize(1) % kt.getDimSize(1) ||
        op.getType() != q.getType())
      return failure();
    if (!k)
      k = TransposeOp::create(rewriter, op.getLoc(), mergedKeyTranspose.getX(),
                              rewriter.getDenseI64ArrayAttr(keyPerm));
    auto lseType =
        RankedTensorType::get(qt.getShape().drop_back(), qt.getElementType());
    auto attn = AttentionOp::create(
        rewriter, op.getLoc(), TypeRange{qt, lseType}, q, k, v,
        rewriter.getUnitAttr(), rewriter.getF32FloatAttr(float(scale)),
        window ? rewriter.getI64IntegerAttr(window) : IntegerAttr());
    rewriter.replaceOp(op, attn.getOut());
    return success();
  }
};

struct TGFuseAttentionPass
    : rondo::tg::impl::TGFuseAttentionPassBase<TGFuseAttentionPass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<DropNanGuard, FuseCausalAttention>(&getContext());
    // The layout chains around keys must be collapsed first.
    ReshapeOp::getCanonicalizationPatterns(patterns, &getContext());
    TransposeOp::getCanonicalizationPatterns(patterns, &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
