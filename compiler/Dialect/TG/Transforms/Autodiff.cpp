//===- Autodiff.cpp - tg-autodiff -------------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Reverse mode over the single block of @main. Only ops that lie on a path
// from a trainable parameter to the loss are differentiated ("active"), so
// frozen parameters and data-independent constants cost no gradient work.
// Contributions to one value are summed in reverse program order, which is
// fixed, so gradients are deterministic.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace rondo::tg {
#define GEN_PASS_DEF_TGAUTODIFFPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
struct TGAutodiffPass : rondo::tg::impl::TGAutodiffPassBase<TGAutodiffPass> {
  using Base::Base;

  void runOnOperation() override {
    auto func = lookupMain(getOperation(), "tg-autodiff");
    if (!func)
      return signalPassFailure();
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (ret.getNumOperands() != 1 ||
        cast<RankedTensorType>(ret.getOperand(0).getType()).getRank() != 0) {
      func.emitError("tg-autodiff: @main must return one scalar loss (run "
                     "tg-attach-loss first)");
      return signalPassFailure();
    }
    Value loss = ret.getOperand(0);

    // Forward activity: values that depend on a trainable parameter.
    llvm::DenseSet<Value> active;
    SmallVector<unsigned> trainable;
    Value seed;
    for (unsigned k = 0; k < func.getNumArguments(); ++k) {
      if (func.getArgAttr(k, kTrainableAttr)) {
        active.insert(func.getArgument(k));
        trainable.push_back(k);
      }
      if (func.getArgAttr(k, kLossScaleAttr))
        seed = func.getArgument(k);
    }
    for (Operation &op : body.without_terminator())
      if (llvm::any_of(op.getOperands(),
                       [&](Value v) { return active.contains(v); }))
        for (Value r : op.getResults())
          if (isa<FloatType>(
                  cast<RankedTensorType>(r.getType()).getElementType()))
            active.insert(r);

    OpBuilder b(ret);
    if (!seed)
      seed = ConstantOp::create(
          b, func.getLoc(),
          DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                 1.0f));
    llvm::DenseMap<Value, Value> grads;
    auto addGrad = [&](Value v, Value g, Location loc) {
      auto it = grads.find(v);
      if (it == grads.end()) {
        grads[v] = g;
        return;
      }
      it->second = BinaryOp::create(b, loc, BinaryKind::add, it->second, g);
    };
    if (active.contains(loss))
      grads[loss] = seed;

    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      forwardOps.push_back(&op);
    for (Operation *op : llvm::reverse(forwardOps)) {
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        auto it = grads.find(r);
        resultGrads.push_back(it == grads.end() ? Value() : it->second);
        any |= it != grads.end();
      }
      if (!any)
        continue;
      SmallVector<bool> needs;
      bool anyNeeded = false;
      for (Value v : op->getOperands()) {
        needs.push_back(active.contains(v));
        anyNeeded |= needs.back();
      }
      if (!anyNeeded)
        continue;
      auto rule = dyn_cast<GradientOpInterface>(op);
      if (!rule) {
        op->emitError("tg-autodiff: no gradient rule for '")
            << op->getName() << "'";
        return signalPassFailure();
      }
      // Results without a gradient get zeros only if the rule needs them;
      // every rule here accepts null for secondary results.
      if (!resultGrads[0]) {
        auto t = cast<RankedTensorType>(op->getResult(0).getType());
        resultGrads[0] = ConstantOp::create(
            b, op->getLoc(),
            DenseElementsAttr::get(t, b.getZeroAttr(t.getElementType())));
      }
      SmallVector<Value> operandGrads;
      OpBuilder::InsertionGuard guard(b);
      Operation *before = ret->getPrevNode();
      if (failed(rule.buildGradient(b, resultGrads, needs, operandGrads)))
        return signalPassFailure();
      for (auto [v, g] : llvm::zip(op->getOperands(), operandGrads))
        if (g && active.contains(v))
          addGrad(v, g, op->getLoc());
      // Annotations of a forward op (such as the pipeline layer it belongs
      // to) describe its gradient ops too.
      for (Operation *built = before ? before->getNextNode() : &body.front();
           built != ret.getOperation(); built = built->getNextNode())
        for (NamedAttribute attr : op->getDiscardableAttrs())
          built->setAttr(attr.getName(), attr.getValue());
    }

    SmallVector<Value> results{loss};
    SmallVector<Attribute> names;
    for (unsigned k : trainable) {
      Value arg = func.getArgument(k);
      Value g = grads.lookup(arg);
      if (!g) {
        auto t = cast<RankedTensorType>(arg.getType());
        g = ConstantOp::create(
            b, func.getLoc(),
            DenseElementsAttr::get(t, b.getZeroAttr(t.getElementType())));
      }
      results.push_back(g);
    }
    auto newRet = func::ReturnOp::create(b, ret.getLoc(), results);
    ret.erase();
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    func.setFunctionType(
        FunctionType::get(&getContext(), func.getArgumentTypes(), types));
    // Result attributes are positional: reset them for the new results.
    func.setAllResultAttrs(SmallVector<DictionaryAttr>(
        func.getNumResults(), DictionaryAttr::get(&getContext())));
    func.setResultAttr(0, kResultNameAttr, b.getStringAttr("loss_sum"));
    for (auto [k, argIdx] : llvm::enumerate(trainable)) {
      auto name = func.getArgAttrOfType<StringAttr>(argIdx, kParamAttr);
      func.setResultAttr(k + 1, kGradOfAttr, name);
    }
    (void)newRet;
  }
};
} // namespace
