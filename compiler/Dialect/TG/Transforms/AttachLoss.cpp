//===- AttachLoss.cpp - tg-attach-loss --------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace rondo::tg {
#define GEN_PASS_DEF_TGATTACHLOSSPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
struct TGAttachLossPass
    : rondo::tg::impl::TGAttachLossPassBase<TGAttachLossPass> {
  using Base::Base;

  void runOnOperation() override {
    auto func = lookupMain(getOperation(), "tg-attach-loss");
    if (!func)
      return signalPassFailure();
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    StringRef k = kind;
    if (k.consume_front("output:")) {
      if (failed(useOutputLoss(func, ret, k)))
        signalPassFailure();
      return;
    }
    if (k != "causal-lm") {
      func.emitError("unknown --loss '")
          << kind << "' (expected causal-lm or output:NAME)";
      return signalPassFailure();
    }
    if (failed(attachCausalLM(func, ret)))
      signalPassFailure();
  }

  LogicalResult useOutputLoss(func::FuncOp func, func::ReturnOp ret,
                              StringRef name) {
    for (unsigned k = 0; k < func.getNumResults(); ++k) {
      auto attr = func.getResultAttrOfType<StringAttr>(k, kResultNameAttr);
      if (!attr || attr.getValue() != name)
        continue;
      auto type = cast<RankedTensorType>(ret.getOperand(k).getType());
      if (type.getRank() != 0 || !type.getElementType().isF32())
        return func.emitError("--loss=output:")
               << name << ": the output is " << type
               << ", not a scalar f32 loss";
      Value loss = ret.getOperand(k);
      OpBuilder b(ret);
      func::ReturnOp::create(b, ret.getLoc(), loss);
      ret.erase();
      func.setFunctionType(FunctionType::get(
          &getContext(), func.getArgumentTypes(), loss.getType()));
      // Result attributes are positional: reset them for the new results.
      func.setAllResultAttrs(SmallVector<DictionaryAttr>(
          func.getNumResults(), DictionaryAttr::get(&getContext())));
      func.setResultAttr(0, kResultNameAttr, b.getStringAttr("loss"));
      getOperation()->setAttr(kLossAttr, b.getStringAttr("output"));
      return success();
    }
    return func.emitError("--loss=output:")
           << name << ": the model has no output of that name";
  }

  LogicalResult attachCausalLM(func::FuncOp func, func::ReturnOp ret) {
    // The logits: the one [B, T, V] float result.
    Value logits;
    for (Value v : ret.getOperands()) {
      auto t = cast<RankedTensorType>(v.getType());
      if (t.getRank() == 3 && isa<FloatType>(t.getElementType())) {
        if (logits)
          return func.emitError(
              "causal-lm loss: more than one [batch, seq, vocab] output; "
              "name the loss with --loss=output:NAME");
        logits = v;
      }
    }
    if (!logits)
      return func.emitError(
          "causal-lm loss: the model has no [batch, seq, vocab] float output");
    // The token input: the one integer [B, T] argument.
    int tokenArg = -1;
    for (unsigned k = 0; k < func.getNumArguments(); ++k) {
      auto t = cast<RankedTensorType>(func.getArgument(k).getType());
      if (func.getArgAttr(k, kInputAttr) && t.getRank() == 2 &&
          t.getElementType().isInteger(64)) {
        if (tokenArg >= 0)
          return func.emitError(
              "causal-lm loss: more than one integer [batch, seq] input");
        tokenArg = k;
      }
    }
    if (tokenArg < 0)
      return func.emitError(
          "causal-lm loss: the model has no integer [batch, seq] input");
    auto lt = cast<RankedTensorType>(logits.getType());
    auto it = cast<RankedTensorType>(func.getArgument(tokenArg).getType());
    int64_t batch = lt.getDimSize(0), seq = lt.getDimSize(1),
            vocab = lt.getDimSize(2);
    if (it.getShape() != ArrayRef<int64_t>{batch, seq})
      return func.emitError("causal-lm loss: logits ")
             << lt << " do not match the tokens " << it;
    if (seq < 2)
      return func.emitError("causal-lm loss needs --seq-len >= 2");

    OpBuilder b(ret);
    Location loc = func.getLoc();
    unsigned labelsIdx = func.getNumArguments();
    (void)func.insertArgument(
        labelsIdx, it,
        b.getDictionaryAttr(b.getNamedAttr(kLabelsAttr, b.getUnitAttr())), loc);
    auto scalarF32 = RankedTensorType::get({}, b.getF32Type());
    (void)func.insertArgument(
        labelsIdx + 1, scalarF32,
        b.getDictionaryAttr(b.getNamedAttr(kLossScaleAttr, b.getUnitAttr())),
        loc);
    Value labels = func.getArgument(labelsIdx);

    // Position t predicts token t+1: logits[:, :-1] against labels[:, 1:].
    int64_t rows = batch * (seq - 1);
    b.setInsertionPoint(ret);
    Value shifted = SliceOp::create(
        b, loc,
        RankedTensorType::get({batch, seq - 1, vocab}, lt.getElementType()),
        logits, b.getDenseI64ArrayAttr({0, 0, 0}),
        b.getDenseI64ArrayAttr({1, 1, 1}));
    Value flat = ReshapeOp::create(
        b, loc, RankedTensorType::get({rows, vocab}, lt.getElementType()),
        shifted);
    Value targets = SliceOp::create(
        b, loc, RankedTensorType::get({batch, seq - 1}, it.getElementType()),
        labels, b.getDenseI64ArrayAttr({0, 1}), b.getDenseI64ArrayAttr({1, 1}));
    Value flatTargets = ReshapeOp::create(
        b, loc, RankedTensorType::get({rows}, it.getElementType()), targets);
    Value loss = CrossEntropyOp::create(b, loc, scalarF32, flat, flatTargets,
                                        b.getI64IntegerAttr(-100));
    func::ReturnOp::create(b, ret.getLoc(), loss);
    ret.erase();
    func.setFunctionType(
        FunctionType::get(&getContext(), func.getArgumentTypes(), scalarF32));
    // Result attributes are positional: reset them for the new results.
    func.setAllResultAttrs(SmallVector<DictionaryAttr>(
        func.getNumResults(), DictionaryAttr::get(&getContext())));
    func.setResultAttr(0, kResultNameAttr, b.getStringAttr("loss_sum"));
    getOperation()->setAttr(kLossAttr, b.getStringAttr("causal-lm"));
    return success();
  }
};
} // namespace
