//===- VerifyPlan.cpp - pipe-verify-plan ------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The executor trusts these invariants when it lowers a plan to transfers
// and events: a gap in coverage would silently drop a layer's gradient, a
// missing checkpoint would make a backward stage read memory nobody wrote,
// and a plan over budget would fail at run time instead of compile time.
// Peaks are recomputed from the layer table, not read from the plan's
// attributes, so a hand-edited plan cannot claim to fit.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Pipe/Transforms/Passes.h"

#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace rondo::pipe {
#define GEN_PASS_DEF_PIPEVERIFYPLANPASS
#include "Dialect/Pipe/Transforms/Passes.h.inc"
} // namespace rondo::pipe

using namespace mlir;
using namespace rondo;
using namespace rondo::pipe;

namespace {

/// The layers of the training function must meet at narrow waists, or a
/// stage could not run from its hand-off alone: between layers b-1 and b at
/// most one forward activation and one activation gradient may cross (the
/// hidden state and its gradient). A backward op may read forward values of
/// its own layer (recomputed) or the activation entering it (the
/// checkpoint), never of a later layer. Parameters, weight-side values,
/// side data and parameter gradients (summed on the host) are exempt.
LogicalResult verifyWaists(func::FuncOp func, int64_t numLayers) {
  Block &body = func.getBody().front();
  Operation *terminator = body.getTerminator();
  llvm::DenseSet<Value> onData, backward, paramGrads;
  for (BlockArgument arg : func.getArguments()) {
    if (func.getArgAttr(arg.getArgNumber(), tg::kLossScaleAttr))
      backward.insert(arg);
    else if (!func.getArgAttr(arg.getArgNumber(), tg::kParamAttr))
      onData.insert(arg);
  }
  for (Operation &op : body.without_terminator()) {
    bool d = llvm::any_of(op.getOperands(),
                          [&](Value v) { return onData.contains(v); });
    bool g = llvm::any_of(op.getOperands(),
                          [&](Value v) { return backward.contains(v); });
    for (Value r : op.getResults()) {
      if (d)
        onData.insert(r);
      if (g)
        backward.insert(r);
    }
  }
  // Parameter gradients: returned, possibly through sums of contributions.
  for (Value v : terminator->getOperands())
    paramGrads.insert(v);
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    auto add = dyn_cast<tg::BinaryOp>(op);
    if (add && add.getKind() == tg::BinaryKind::add &&
        paramGrads.contains(add.getResult()))
      for (Value v : op.getOperands())
        paramGrads.insert(v);
  }
  // Values crossing each boundary b (between layer b-1 and layer b).
  std::vector<llvm::SetVector<Value>> activations(numLayers + 1),
      gradients(numLayers + 1);
  llvm::DenseSet<Value> entering; // forward values read by a later layer
  for (Operation &op : body.without_terminator()) {
    std::optional<int64_t> lx = getLayer(&op);
    if (!lx)
      continue;
    bool isBackward = llvm::any_of(
        op.getResults(), [&](Value r) { return backward.contains(r); });
    for (Value v : op.getOperands()) {
      std::optional<int64_t> ly = getLayer(v.getDefiningOp());
      // Exempt: parameters, side data, weight-side values.
      if (!ly || *ly == *lx || !onData.contains(v) || paramGrads.contains(v))
        continue;
      bool fromBackward = backward.contains(v);
      if (!fromBackward && !isBackward) {
        if (*ly > *lx)
          return op.emitOpError("in layer ")
                 << *lx << " reads a forward value of the later layer " << *ly;
        entering.insert(v);
        for (int64_t b = *ly + 1; b <= *lx; ++b)
          activations[b].insert(v);
      } else if (!fromBackward) {
        if (*ly > *lx || !entering.contains(v) || !activations[*lx].contains(v))
          return op.emitOpError("in the backward of layer ")
                 << *lx << " reads a forward value of layer " << *ly
                 << " that is not the activation entering layer " << *lx
                 << " (its checkpoint)";
      } else {
        if (*ly < *lx)
          return op.emitOpError("in the backward of layer ")
                 << *lx << " reads a gradient of the earlier layer " << *ly;
        for (int64_t b = *lx + 1; b <= *ly; ++b)
          gradients[b].insert(v);
      }
    }
  }
  for (int64_t b = 1; b < numLayers; ++b) {
    for (auto [what, values] : {std::pair{"activations", &activations[b]},
                                {"activation gradients", &gradients[b]}})
      if (values->size() > 1) {
        Value second = (*values)[1];
        Operation *at = second.getDefiningOp();
        return (at ? at : func.getOperation())->emitOpError("is one of ")
               << values->size() << " " << what << " crossing from layer "
               << b - 1 << " to layer " << b
               << "; layers must meet at a narrow waist (one hidden state)";
      }
  }
  return success();
}

LogicalResult verifyPlan(PlanOp plan) {
  std::vector<LayerOp> layers = plan.getLayers();
  int64_t numLayers = static_cast<int64_t>(layers.size());
  if (numLayers == 0)
    return plan.emitOpError("has no layers");
  for (auto [i, layer] : llvm::enumerate(layers))
    if (static_cast<int64_t>(layer.getIndex()) != static_cast<int64_t>(i))
      return layer.emitOpError("is layer ")
             << layer.getIndex() << " but layers must be numbered 0.."
             << numLayers - 1 << " in order";
  if (auto func = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
          plan->getParentOp(), plan.getFunctionAttr())) {
    if (auto kinds = func->getAttrOfType<ArrayAttr>(kLayerKindsAttr))
      if (static_cast<int64_t>(kinds.size()) != numLayers)
        return plan.emitOpError("has ")
               << numLayers << " layers but @" << func.getSymName() << " has "
               << kinds.size();
    if (!func.getBody().empty() && failed(verifyWaists(func, numLayers)))
      return failure();
    if (ArrayAttr frozen = plan.getFrozenBf16Attr()) {
      // Held in bf16 alone only where no use needs more than bf16 and
      // nothing updates the weight.
      if (plan.getPrecision() != "bf16")
        return plan.emitOpError("holds frozen weights in bf16 (frozen_bf16) "
                                "but computes in ")
               << plan.getPrecision();
      for (Attribute name : frozen) {
        unsigned i = 0, e = func.getNumArguments();
        while (i < e && func.getArgAttr(i, tg::kParamAttr) != name)
          ++i;
        if (i == e || !tg::isFrozenProductWeight(func, i))
          return plan.emitOpError("holds ")
                 << name
                 << " in bf16 alone (frozen_bf16), but it is not a frozen "
                    "parameter of @"
                 << func.getSymName() << " that only matrix products read";
      }
    }
  } else {
    return plan.emitOpError("plans unknown function ")
           << plan.getFunctionAttr();
  }

  ScheduleOp schedule = plan.getSchedule();
  SmallVector<StageOp> jobs;
  for (Attribute job : schedule.getJobs())
    jobs.push_back(cast<StageOp>(SymbolTable::lookupSymbolIn(
        plan, cast<SymbolRefAttr>(job).getRootReference())));

  // Forward stages then the tail: ascending and contiguous from layer 0.
  int64_t next = 0;
  StageOp tail;
  for (StageOp stage : jobs) {
    if (stage.getKind() == StageKind::backward)
      break;
    if (static_cast<int64_t>(stage.getFirst()) != next)
      return stage.emitOpError("starts at layer ")
             << stage.getFirst() << " but the forward pass has covered layers "
             << "[0, " << next << "): a gap or overlap in layer coverage";
    next = stage.getEnd();
    if (stage.getKind() == StageKind::tail)
      tail = stage;
  }
  if (next != numLayers)
    return tail.emitOpError("ends at layer ")
           << next << " but the model has " << numLayers
           << " layers: the tail must end the forward pass";
  // Backward stages: deepest first, contiguous from the tail down to 0.
  int64_t below = tail.getFirst();
  for (StageOp stage : jobs) {
    if (stage.getKind() != StageKind::backward)
      continue;
    if (static_cast<int64_t>(stage.getEnd()) != below)
      return stage.emitOpError("ends at layer ")
             << stage.getEnd() << " but the backward pass needs layers up to "
             << below << " next: a gap or overlap in layer coverage";
    below = stage.getFirst();
    if (below == 0)
      continue;
    bool checkpointed = llvm::any_of(jobs, [&](StageOp fwd) {
      return fwd.getKind() == StageKind::forward &&
             llvm::is_contained(fwd.getCheckpoints(), below);
    });
    if (!checkpointed)
      return stage.emitOpError("recomputes from the input of layer ")
             << below << ", but no forward stage checkpoints it";
  }
  if (below != 0)
    return plan.emitOpError("backward stages stop at layer ")
           << below << "; layers [0, " << below << ") get no gradient";
  // A checkpoint nobody reloads costs host memory for nothing.
  for (StageOp fwd : jobs)
    for (int64_t layer : fwd.getCheckpoints())
      if (!llvm::any_of(jobs, [&](StageOp s) {
            return s.getKind() == StageKind::backward &&
                   static_cast<int64_t>(s.getFirst()) == layer;
          }))
        return fwd.emitOpError("checkpoints the input of layer ")
               << layer << ", which no backward stage recomputes from";

  planner::PlanProblem problem = plan.buildProblem();
  planner::Plan partition = plan.buildPlan();
  double worker = planner::workerPeakBytes(problem, partition);
  double host = planner::hostPeakBytes(problem, partition);
  if (problem.workerMemoryBytes > 0 && worker > problem.workerMemoryBytes)
    return plan.emitOpError(llvm::formatv(
        "needs {0:f3} GB per worker, over the budget of {1:f3} GB",
        worker / 1e9, problem.workerMemoryBytes / 1e9));
  if (problem.hostMemoryBytes > 0 && host > problem.hostMemoryBytes)
    return plan.emitOpError(llvm::formatv(
        "needs {0:f3} GB of host memory, over the budget of {1:f3} GB",
        host / 1e9, problem.hostMemoryBytes / 1e9));
  return success();
}

struct PipeVerifyPlanPass
    : rondo::pipe::impl::PipeVerifyPlanPassBase<PipeVerifyPlanPass> {
  using Base::Base;
  void runOnOperation() override {
    for (PlanOp plan : getOperation().getOps<PlanOp>())
      if (failed(verifyPlan(plan)))
        signalPassFailure();
  }
};
} // namespace
