//===- OutlineStages.cpp - One function per pipeline stage ------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Cuts the layer-tagged training function into the stage functions of each
// plan. What crosses a stage boundary is decided by the narrow waists that
// pipe-verify-plan proved: one activation forward, one activation gradient
// backward. Everything else a stage needs is either an argument of @main
// (parameters, token ids, labels, the loss scale) or cheap data computed
// from arguments and constants only (masks, rotary tables, shifted labels,
// weight transposes), which every stage recomputes rather than receives,
// since shipping it would cost a transfer per microbatch.
//
// Parameter gradients that @main sums across layers (a tied embedding and
// LM head) are not summed in any stage: each stage returns its part and
// the host adds the parts in a fixed order, so the result does not depend
// on how the layers were grouped into stages.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/Pipe/IR/PipeOps.h"
#include "Dialect/Pipe/Transforms/Passes.h"
#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace rondo::pipe {
#define GEN_PASS_DEF_PIPEOUTLINESTAGESPASS
#include "Dialect/Pipe/Transforms/Passes.h.inc"
} // namespace rondo::pipe

using namespace mlir;
using namespace rondo;
using namespace rondo::pipe;

namespace {

/// What a value of @main depends on.
enum DepBits : unsigned { kParam = 1, kData = 2, kLossScale = 4 };

struct TrainFunction {
  func::FuncOp func;
  DenseMap<Value, unsigned> deps;
  /// Values every stage may recompute: they depend on parameters only or on
  /// data only, never on both and never on the loss scale.
  bool isRecomputable(Value v) const {
    unsigned d = deps.lookup(v);
    return !(d & kLossScale) && d != (kParam | kData);
  }
  bool isBackward(Operation *op) const {
    for (Value r : op->getResults())
      if (deps.lookup(r) & kLossScale)
        return true;
    return false;
  }
  /// Return operand k (k >= 1) split into the parts @main adds across
  /// layers; the adds themselves belong to no stage.
  SmallVector<SmallVector<Value>> gradParts;
  DenseSet<Operation *> hostSums;
};

std::optional<int64_t> layerOfValue(Value v) {
  return getLayer(v.getDefiningOp());
}

void splitAcrossLayers(Value v, SmallVectorImpl<Value> &parts,
                       DenseSet<Operation *> &hostSums) {
  if (auto add = v.getDefiningOp<tg::BinaryOp>();
      add && add.getKind() == tg::BinaryKind::add &&
      add.getLhs().getType() == add.getType() &&
      add.getRhs().getType() == add.getType()) {
    auto crosses = [&](Value operand) {
      Operation *def = operand.getDefiningOp();
      return def && (hostSums.count(def) || getLayer(def) != getLayer(add));
    };
    // Operands first, so that nested sums are recognised bottom-up.
    SmallVector<Value> lhs, rhs;
    splitAcrossLayers(add.getLhs(), lhs, hostSums);
    splitAcrossLayers(add.getRhs(), rhs, hostSums);
    if (crosses(add.getLhs()) || crosses(add.getRhs())) {
      hostSums.insert(add);
      parts.append(lhs);
      parts.append(rhs);
      return;
    }
  }
  parts.push_back(v);
}

FailureOr<TrainFunction> analyse(func::FuncOp func) {
  TrainFunction tf;
  tf.func = func;
  for (BlockArgument arg : func.getArguments()) {
    unsigned bits = 0;
    if (func.getArgAttr(arg.getArgNumber(), tg::kParamAttr))
      bits = kParam;
    else if (func.getArgAttr(arg.getArgNumber(), tg::kLossScaleAttr))
      bits = kLossScale;
    else
      bits = kData;
    tf.deps[arg] = bits;
  }
  func.walk([&](Operation *op) {
    unsigned bits = 0;
    for (Value operand : op->getOperands())
      bits |= tf.deps.lookup(operand);
    for (Value r : op->getResults())
      tf.deps[r] = bits;
  });
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  tf.gradParts.resize(ret.getNumOperands());
  for (unsigned k = 1; k < ret.getNumOperands(); ++k)
    splitAcrossLayers(ret.getOperand(k), tf.gradParts[k], tf.hostSums);
  return tf;
}

struct StageSpec {
  StageOp stage;
  int64_t first, end;
  bool forwardOnly; ///< Forward stages run no backward op.
};

/// Builds the function of one stage.
LogicalResult outlineStage(TrainFunction &tf, PlanOp plan, StageOp stage,
                           int64_t numLayers, OpBuilder &builder) {
  func::FuncOp main = tf.func;
  const int64_t first = stage.getFirst(), end = stage.getEnd();
  const StageKind kind = stage.getKind();
  auto inRange = [&](Operation *op) {
    std::optional<int64_t> layer = getLayer(op);
    return layer && *layer >= first && *layer < end;
  };
  auto describe = [&](Value v) {
    std::string text;
    llvm::raw_string_ostream os(text);
    v.printAsOperand(os, OpPrintingFlags());
    if (std::optional<int64_t> layer = layerOfValue(v))
      os << " (layer " << *layer << ")";
    return text;
  };

  // The stage's own ops.
  llvm::SetVector<Operation *> ops;
  main.walk([&](Operation *op) {
    if (op == main || isa<func::ReturnOp>(op) || tf.hostSums.count(op))
      return;
    if (!inRange(op))
      return;
    if (kind == StageKind::forward && tf.isBackward(op))
      return;
    ops.insert(op);
  });

  // What it reads from outside: arguments, recomputed data, and at most one
  // activation and one activation gradient.
  Value activationIn, gradientIn;
  llvm::SetVector<Operation *> recomputed;
  SmallVector<Value> worklist;
  for (Operation *op : ops)
    for (Value operand : op->getOperands())
      worklist.push_back(operand);
  llvm::SetVector<BlockArgument> argsUsed;
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      argsUsed.insert(arg);
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (ops.count(def) || recomputed.count(def))
      continue;
    if (tf.isRecomputable(v)) {
      recomputed.insert(def);
      for (Value operand : def->getOperands())
        worklist.push_back(operand);
      continue;
    }
    std::optional<int64_t> layer = getLayer(def);
    if (layer && *layer < first && !tf.isBackward(def)) {
      if (activationIn && activationIn != v)
        return stage.emitOpError("needs two activations from earlier layers, ")
               << describe(activationIn) << " and " << describe(v)
               << "; stages must start at a narrow waist";
      activationIn = v;
      continue;
    }
    if (layer && *layer >= end && tf.isBackward(def) &&
        kind == StageKind::backward) {
      if (gradientIn && gradientIn != v)
        return stage.emitOpError("needs two gradients from later layers, ")
               << describe(gradientIn) << " and " << describe(v);
      gradientIn = v;
      continue;
    }
    return stage.emitOpError("reads ")
           << describe(v) << ", which no stage boundary carries";
  }

  // What it hands on.
  auto usedOutside = [&](Value v, auto &&pred) {
    for (Operation *user : v.getUsers())
      if (!ops.count(user) && !tf.hostSums.count(user) &&
          !isa<func::ReturnOp>(user) && pred(user))
        return true;
    return false;
  };
  SmallVector<Value> outputs;
  SmallVector<NamedAttrList> outputAttrs;
  auto addOutput = [&](Value v, StringRef role) {
    outputs.push_back(v);
    NamedAttrList attrs;
    attrs.set(exec::kRoleAttr, builder.getStringAttr(role));
    outputAttrs.push_back(attrs);
    return &outputAttrs.back();
  };
  auto ret = cast<func::ReturnOp>(main.getBody().front().getTerminator());
  if (kind == StageKind::forward) {
    // The boundary activation into layer `end`, and checkpoints of backward
    // stage inputs that lie inside this stage.
    auto boundary = [&](int64_t layer) -> FailureOr<Value> {
      Value found;
      for (Operation *op : ops)
        for (Value r : op->getResults())
          if (!tf.isRecomputable(r) && usedOutside(r, [&](Operation *user) {
                std::optional<int64_t> l = getLayer(user);
                return l && *l >= layer && !tf.isBackward(user);
              })) {
            if (found && found != r)
              return stage.emitOpError("passes two activations into layer ")
                     << layer << ": " << describe(found) << " and "
                     << describe(r);
            found = r;
          }
      if (!found)
        return stage.emitOpError("computes no activation for layer ") << layer;
      return found;
    };
    if (end < numLayers) {
      FailureOr<Value> out = boundary(end);
      if (failed(out))
        return failure();
      addOutput(*out, "activation");
    }
    for (int64_t c : stage.getCheckpoints()) {
      if (c <= first)
        continue; // Layer 0 reads data; the stage input is checkpointed as is.
      // The activation entering layer c: defined below c, read at or
      // above c, within this stage.
      Value found;
      for (Operation *op : ops) {
        std::optional<int64_t> l = getLayer(op);
        if (!l || *l >= c)
          continue;
        for (Value r : op->getResults())
          for (Operation *user : r.getUsers()) {
            if (tf.isRecomputable(r))
              continue;
            std::optional<int64_t> ul = getLayer(user);
            if (ops.count(user) && ul && *ul >= c) {
              if (found && found != r)
                return stage.emitOpError("passes two activations into layer ")
                       << c << ": " << describe(found) << " and "
                       << describe(r);
              found = r;
            }
          }
      }
      if (!found)
        return stage.emitOpError("has no activation entering layer ") << c;
      addOutput(found, "checkpoint")
          ->set(exec::kLayerAttr, builder.getI64IntegerAttr(c));
    }
  } else {
    if (kind == StageKind::tail)
      addOutput(ret.getOperand(0), "loss_sum");
    if (first > 0) {
      // The activation gradient handed to layer first - 1.
      Value found;
      for (Operation *op : ops)
        for (Value r : op->getResults())
          if (tf.isBackward(op) && !tf.isRecomputable(r) &&
              usedOutside(r, [&](Operation *user) {
                std::optional<int64_t> l = getLayer(user);
                return l && *l < first;
              })) {
            if (found && found != r)
              return stage.emitOpError("hands two gradients to layer ")
                     << first - 1 << ": " << describe(found) << " and "
                     << describe(r);
            found = r;
          }
      // Layers below that do no backward work (a frozen embedding under
      // LoRA) need no gradient: the backward chain ends here, and their
      // backward stages are empty.
      bool backwardBelow = false;
      main.walk([&](Operation *op) {
        std::optional<int64_t> l = getLayer(op);
        backwardBelow |= l && *l < first && tf.isBackward(op);
      });
      if (!found && backwardBelow)
        return stage.emitOpError("hands no gradient to layer ") << first - 1;
      if (found)
        addOutput(found, "gradient");
    }
    for (unsigned k = 1; k < ret.getNumOperands(); ++k)
      for (Value part : tf.gradParts[k]) {
        Operation *def = part.getDefiningOp();
        if (!def || !ops.count(def))
          continue;
        addOutput(part, "param_grad")
            ->set(tg::kGradOfAttr, main.getResultAttr(k, tg::kGradOfAttr));
      }
  }

  // Arguments in a fixed order: activation, gradient, then @main's
  // arguments in their order.
  SmallVector<Value> inputs;
  SmallVector<NamedAttrList> inputAttrs;
  auto addInput = [&](Value v, StringRef role, DictionaryAttr extra = {}) {
    inputs.push_back(v);
    NamedAttrList attrs(extra);
    attrs.set(exec::kRoleAttr, builder.getStringAttr(role));
    inputAttrs.push_back(attrs);
  };
  if (activationIn)
    addInput(activationIn, "activation");
  if (gradientIn)
    addInput(gradientIn, "gradient");
  for (BlockArgument arg : main.getArguments()) {
    if (!argsUsed.count(arg))
      continue;
    unsigned i = arg.getArgNumber();
    StringRef role = main.getArgAttr(i, tg::kParamAttr)       ? "param"
                     : main.getArgAttr(i, tg::kInputAttr)     ? "input_ids"
                     : main.getArgAttr(i, tg::kLabelsAttr)    ? "labels"
                     : main.getArgAttr(i, tg::kLossScaleAttr) ? "loss_scale"
                                                              : "data";
    addInput(arg, role, main.getArgAttrDict(i));
  }

  SmallVector<Type> inTypes, outTypes;
  for (Value v : inputs)
    inTypes.push_back(v.getType());
  for (Value v : outputs)
    outTypes.push_back(v.getType());
  std::string name = (plan.getSymName() + "_" + stage.getSymName()).str();
  auto fn = func::FuncOp::create(builder, stage.getLoc(), name,
                                 builder.getFunctionType(inTypes, outTypes));
  fn->setAttr(
      exec::kStageAttr,
      SymbolRefAttr::get(plan.getSymNameAttr(),
                         {FlatSymbolRefAttr::get(stage.getSymNameAttr())}));
  for (auto [i, attrs] : llvm::enumerate(inputAttrs))
    fn.setArgAttrs(i, attrs.getDictionary(builder.getContext()));
  for (auto [i, attrs] : llvm::enumerate(outputAttrs))
    fn.setResultAttrs(i, attrs.getDictionary(builder.getContext()));
  Block *entry = fn.addEntryBlock();
  OpBuilder body = OpBuilder::atBlockBegin(entry);
  IRMapping map;
  for (auto [v, arg] : llvm::zip(inputs, entry->getArguments()))
    map.map(v, arg);
  main.walk([&](Operation *op) {
    if (ops.count(op) || recomputed.count(op))
      body.clone(*op, map);
  });
  SmallVector<Value> results;
  for (Value v : outputs)
    results.push_back(map.lookup(v));
  func::ReturnOp::create(body, stage.getLoc(), results);
  // A forward stage takes every non-backward op of its layers, including
  // forward values only the backward reads (the gate's activation kept for
  // the gated MLP's gradient). Here they are dead, and worse, they run last
  // and keep each layer's inputs to them alive until the stage ends: the
  // stage's memory then grows with its layer count.
  for (Operation &op :
       llvm::make_early_inc_range(llvm::reverse(entry->getOperations())))
    if (isOpTriviallyDead(&op))
      op.erase();
  return success();
}

struct PipeOutlineStagesPass
    : rondo::pipe::impl::PipeOutlineStagesPassBase<PipeOutlineStagesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<PlanOp> plans(module.getOps<PlanOp>());
    if (plans.empty())
      return;
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("pipe-outline-stages needs the training function @main");
      return signalPassFailure();
    }
    tagOpsCreatedAfterLayerize(main);
    FailureOr<TrainFunction> tf = analyse(main);
    if (failed(tf))
      return signalPassFailure();
    int64_t rows = -1;
    for (BlockArgument arg : main.getArguments())
      if (main.getArgAttr(arg.getArgNumber(), tg::kInputAttr))
        rows = cast<ShapedType>(arg.getType()).getDimSize(0);
    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToEnd(module.getBody());
    for (PlanOp plan : plans) {
      if (rows >= 0 && int64_t(plan.getRowsPerMicrobatch()) != rows) {
        plan.emitOpError("is for ")
            << plan.getRowsPerMicrobatch()
            << " rows per microbatch, but @main takes " << rows
            << "; stage functions are outlined from @main built at the "
               "microbatch shape";
        return signalPassFailure();
      }
      int64_t numLayers = plan.getLayers().size();
      for (StageOp stage : plan.getBody().getOps<StageOp>())
        if (failed(outlineStage(*tf, plan, stage, numLayers, builder)))
          return signalPassFailure();
    }
  }
};

} // namespace
