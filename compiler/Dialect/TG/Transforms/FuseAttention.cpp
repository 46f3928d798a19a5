//===- FuseAttention.cpp - tg-fuse-attention --------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"
#include "PatternUtils.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <optional>
#include <string>

namespace rondo::tg {
#define GEN_PASS_DEF_TGFUSEATTENTIONPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
/// x for `x - c` with c a splat constant that does not widen x: a softmax of
/// it is softmax(x) (shift invariance). The importer turns the exporter's
/// max shift before a softmax, x - ReduceMax(x), into x - 0.
Value stripShift(Value v) {
  Value x, c;
  if (matchBinary(
          v, BinaryKind::sub, x, c,
          [](Value, Value r) { return scalarConstant(r).has_value(); }) &&
      x.getType() == v.getType())
    return x;
  return v;
}

/// scores + causal_mask: the scores and the mask's window (0 for none).
bool causallyMasked(Value x, Value &scores, int64_t &window) {
  Value mask;
  if (!matchBinary(x, BinaryKind::add, scores, mask, [](Value, Value r) {
        return r.getDefiningOp<CausalMaskOp>() != nullptr;
      }))
    return false;
  window = mask.getDefiningOp<CausalMaskOp>().getWindowSize();
  return true;
}

/// softmax(scores + causal_mask): the row softmax of a causal score matrix,
/// banded when the mask has a window (returned in `window`, 0 for none).
SoftmaxOp causalSoftmax(Value p, Value &scores, int64_t &window) {
  auto sm = p.getDefiningOp<SoftmaxOp>();
  if (!sm || !causallyMasked(stripShift(sm.getX()), scores, window))
    return nullptr;
  return sm;
}

/// The row of an attention-sinks softmax (GPT-OSS): concat(x, column) along
/// the last axis of a rank-4 tensor, the column one wide, possibly shifted.
ConcatOp sinkConcat(SoftmaxOp sm) {
  auto cat = stripShift(sm.getX()).getDefiningOp<ConcatOp>();
  if (!cat || cat.getInputs().size() != 2)
    return nullptr;
  auto t = cast<RankedTensorType>(cat.getType());
  auto col = cast<RankedTensorType>(cat.getInputs()[1].getType());
  // I64Attr's accessor is unsigned: -1 reads back through int64_t.
  int64_t axis = int64_t(cat.getAxis());
  if (axis < 0)
    axis += t.getRank();
  if (t.getRank() != 4 || axis != 3 || col.getDimSize(3) != 1)
    return nullptr;
  return cat;
}

/// A recognised attention-sinks softmax.
struct SinkSoftmax {
  Value scores;       ///< before the causal mask
  int64_t window = 0; ///< the mask's window, 0 for none
  Value sinks;        ///< the per-head logits before their broadcast
};

/// The exporter's attention with sinks, up to the product with v:
///   slice(softmax(concat(scores + causal_mask, broadcast(sinks))), the
///   sink column dropped)
/// with sinks [..., H, 1, 1] (one logit per head, broadcast over batch and
/// rows). `p` is the slice. Empty when `p` is no sink structure at all; when
/// it is one that differs, `why` says how.
std::optional<SinkSoftmax> matchSinkSoftmax(Value p, std::string &why) {
  auto slice = p.getDefiningOp<SliceOp>();
  auto sm = slice ? slice.getX().getDefiningOp<SoftmaxOp>() : nullptr;
  ConcatOp cat = sm ? sinkConcat(sm) : nullptr;
  if (!cat)
    return std::nullopt;
  auto full = cast<RankedTensorType>(cat.getType());
  auto kept = cast<RankedTensorType>(slice.getType());
  bool dropsSink =
      llvm::all_of(slice.getStarts(), [](int64_t s) { return s == 0; }) &&
      llvm::all_of(slice.getSteps(), [](int64_t s) { return s == 1; }) &&
      kept.getShape().drop_back() == full.getShape().drop_back() &&
      kept.getDimSize(3) == full.getDimSize(3) - 1;
  if (!dropsSink) {
    why = "the slice after the softmax must drop exactly the sink column";
    return std::nullopt;
  }
  SinkSoftmax m;
  if (!causallyMasked(cat.getInputs()[0], m.scores, m.window)) {
    why = "the scores before the sink column must be masked by the causal "
          "mask (scores + tg.causal_mask)";
    return std::nullopt;
  }
  Value col = cat.getInputs()[1];
  if (auto bc = col.getDefiningOp<BroadcastOp>())
    col = bc.getX();
  auto ct = cast<RankedTensorType>(col.getType());
  int64_t heads = full.getDimSize(1);
  SmallVector<int64_t> aligned(4 - std::min<int64_t>(ct.getRank(), 4), 1);
  aligned.append(ct.getShape().begin(), ct.getShape().end());
  if (ct.getRank() > 4 ||
      ArrayRef<int64_t>(aligned) != ArrayRef<int64_t>{1, heads, 1, 1}) {
    why = "the sink column must be one logit per head ([1, H, 1, 1]) "
          "broadcast over batch and query rows";
    return std::nullopt;
  }
  m.sinks = col;
  return m;
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

/// softmax(x - c) -> softmax(x) for a splat constant c (see stripShift).
struct DropSoftmaxShift : OpRewritePattern<SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SoftmaxOp op,
                                PatternRewriter &rewriter) const override {
    Value x = stripShift(op.getX());
    if (x == op.getX())
      return failure();
    rewriter.replaceOpWithNewOp<SoftmaxOp>(op, x);
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
    std::string why;
    std::optional<SinkSoftmax> sinks = matchSinkSoftmax(op.getA(), why);
    if (sinks) {
      scores = sinks->scores;
      window = sinks->window;
    } else if (!causalSoftmax(op.getA(), scores, window)) {
      return failure();
    }
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
    Value sinkLogits;
    if (sinks) {
      auto st = cast<RankedTensorType>(sinks->sinks.getType());
      if (st.getElementType() != qt.getElementType())
        return failure();
      // [1, H, 1, 1] -> [H]: one logit per query head.
      sinkLogits = sinks->sinks;
      auto flat =
          RankedTensorType::get({qt.getDimSize(1)}, st.getElementType());
      if (st != flat)
        sinkLogits =
            ReshapeOp::create(rewriter, op.getLoc(), flat, sinks->sinks);
    }
    if (!k)
      k = TransposeOp::create(rewriter, op.getLoc(), mergedKeyTranspose.getX(),
                              rewriter.getDenseI64ArrayAttr(keyPerm));
    auto lseType =
        RankedTensorType::get(qt.getShape().drop_back(), qt.getElementType());
    auto attn = AttentionOp::create(
        rewriter, op.getLoc(), TypeRange{qt, lseType}, q, k, v, sinkLogits,
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
    patterns.add<DropNanGuard, DropSoftmaxShift, FuseCausalAttention>(
        &getContext());
    // The layout chains around keys must be collapsed first.
    ReshapeOp::getCanonicalizationPatterns(patterns, &getContext());
    TransposeOp::getCanonicalizationPatterns(patterns, &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    // An attention-sinks softmax left over would materialise the [T, S + 1]
    // scores, and nothing downstream could fuse it: say which part of the
    // exporter's structure differs.
    WalkResult walk = getOperation().walk([&](SoftmaxOp sm) {
      // Once fused, only dead slices read it (the canonicaliser after this
      // pass removes them).
      bool live = llvm::any_of(sm->getUsers(), [](Operation *u) {
        return !isa<SliceOp>(u) || !u->use_empty();
      });
      if (!live || !sinkConcat(sm))
        return WalkResult::advance();
      std::string why;
      for (Operation *user : sm->getUsers())
        if (isa<SliceOp>(user))
          matchSinkSoftmax(user->getResult(0), why);
      if (why.empty())
        why = "the softmax must be sliced back to the keys and multiplied "
              "by v, with the scores q k^T (times a constant scale) of "
              "[B, H, T, D] q and k and one sink per query head";
      sm.emitError("attention sinks (softmax over the scores and a sink "
                   "column) not recognised: ")
          << why;
      return WalkResult::interrupt();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
