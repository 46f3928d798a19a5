//===- PipeOps.cpp - pipe ops and their local invariants --------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Verifiers here check what one op can see. Invariants of the whole plan
// (coverage of every layer, checkpoints, budgets) need every stage at once
// and live in the pipe-verify-plan pass.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Pipe/IR/PipeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>

using namespace mlir;
using namespace rondo::pipe;

#include "Dialect/Pipe/IR/PipeDialect.cpp.inc"
#include "Dialect/Pipe/IR/PipeEnums.cpp.inc"
std::string rondo::pipe::formatExact(double value) {
  // 17 significant digits always read back exactly; most values need fewer.
  std::string out;
  for (int digits = 6; digits <= 17; ++digits) {
    out = llvm::formatv("{0}", llvm::format("%.*g", digits, value)).str();
    if (std::strtod(out.c_str(), nullptr) == value)
      break;
  }
  // The parser reads a float literal only with a point: 8e+10 -> 8.0e+10.
  if (out.find_first_of(".ni") == std::string::npos)
    out.insert(std::min(out.find('e'), out.size()), ".0");
  return out;
}

#define GET_ATTRDEF_CLASSES
#include "Dialect/Pipe/IR/PipeAttrs.cpp.inc"

void PipeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Dialect/Pipe/IR/PipeOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Dialect/Pipe/IR/PipeAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

LogicalResult PipeDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                    unsigned,
                                                    NamedAttribute attr) {
  return op->emitError() << "'" << attr.getName().strref()
                         << "' does not belong on a function argument";
}

LogicalResult PipeDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned,
                                                       NamedAttribute attr) {
  return op->emitError() << "'" << attr.getName().strref()
                         << "' does not belong on a function result";
}

LogicalResult PipeDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == kLayerAttr) {
    auto layer = dyn_cast<IntegerAttr>(attr.getValue());
    if (!layer || !layer.getType().isSignlessInteger(64) || layer.getInt() < 0)
      return op->emitError()
             << "'" << kLayerAttr << "' must be a non-negative i64";
    if (isa<FunctionOpInterface, ModuleOp>(op))
      return op->emitError()
             << "'" << kLayerAttr << "' belongs on an op of a function body";
    return success();
  }
  if (attr.getName() == kLayerKindsAttr) {
    auto kinds = dyn_cast<ArrayAttr>(attr.getValue());
    if (!kinds || !llvm::all_of(kinds, [](Attribute kind) {
          auto name = dyn_cast<StringAttr>(kind);
          return name && symbolizeLayerKind(name.getValue());
        }))
      return op->emitError() << "'" << kLayerKindsAttr
                             << "' must be an array of \"prefix\", "
                                "\"block\" or \"tail\"";
    if (!isa<FunctionOpInterface>(op))
      return op->emitError()
             << "'" << kLayerKindsAttr << "' belongs on a function";
    return success();
  }
  return op->emitError() << "unknown attribute '" << attr.getName().strref()
                         << "'";
}

#define GET_OP_CLASSES
#include "Dialect/Pipe/IR/PipeOps.cpp.inc"

//===----------------------------------------------------------------------===//
// PlanOp
//===----------------------------------------------------------------------===//

std::vector<LayerOp> PlanOp::getLayers() {
  auto ops = getBody().front().getOps<LayerOp>();
  return std::vector<LayerOp>(ops.begin(), ops.end());
}

std::vector<StageOp> PlanOp::getStages() {
  auto ops = getBody().front().getOps<StageOp>();
  return std::vector<StageOp>(ops.begin(), ops.end());
}

ScheduleOp PlanOp::getSchedule() {
  auto range = getBody().front().getOps<ScheduleOp>();
  return range.empty() ? ScheduleOp() : *range.begin();
}

LogicalResult PlanOp::verify() {
  if (getRowsPerMicrobatch() * getMicrobatches() != getBatch())
    return emitOpError("splits a batch of ")
           << getBatch() << " rows into " << getMicrobatches()
           << " microbatches of " << getRowsPerMicrobatch() << " rows";
  int schedules = 0;
  for (Operation &op : getBody().front()) {
    if (isa<ScheduleOp>(op))
      ++schedules;
    else if (!isa<LayerOp, StageOp>(op))
      return op.emitOpError("is not allowed in a pipe.plan");
  }
  if (schedules != 1)
    return emitOpError("needs exactly one pipe.schedule, found ") << schedules;
  if (getMemory().getWorkerBudget().convertToDouble() < 0 ||
      getMemory().getHostBudget().convertToDouble() < 0)
    return emitOpError("has a negative memory budget");
  double bubble = getPrediction().getBubble().convertToDouble();
  if (bubble < 0 || bubble > 1)
    return emitOpError("bubble fraction ") << bubble << " is not in [0, 1]";
  if (ArrayAttr shared = getSharedParamsAttr()) {
    int64_t numLayers = static_cast<int64_t>(getLayers().size());
    for (auto [i, entry] :
         llvm::enumerate(shared.getAsRange<DictionaryAttr>())) {
      auto layers = entry.getAs<DenseI64ArrayAttr>("layers");
      if (!entry.getAs<FloatAttr>("param_bytes") ||
          !entry.getAs<FloatAttr>("grad_bytes") || !layers)
        return emitOpError("shared_params entry ")
               << i << " needs param_bytes, grad_bytes and layers";
      if (layers.size() < 2)
        return emitOpError("shared_params entry ")
               << i << " names fewer than two layers";
      for (int64_t l : layers.asArrayRef())
        if (l < 0 || l >= numLayers)
          return emitOpError("shared_params entry ")
                 << i << " names layer " << l << " of " << numLayers;
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// LayerOp
//===----------------------------------------------------------------------===//

LogicalResult LayerOp::verify() {
  for (auto [name, value] : {std::pair{"fwd_flops", getFwdFlops()},
                             {"bwd_flops", getBwdFlops()},
                             {"fwd_seconds", getFwdSeconds()},
                             {"bwd_seconds", getBwdSeconds()},
                             {"param_bytes", getParamBytes()},
                             {"grad_bytes", getGradBytes()},
                             {"input_bytes", getInputBytes()},
                             {"workspace_bytes", getWorkspaceBytes()}})
    if (!(value.convertToDouble() >= 0))
      return emitOpError() << name << " must be a non-negative number";
  if (getGradBytes().convertToDouble() > 0 &&
      getParamBytes().convertToDouble() == 0)
    return emitOpError("has gradients but no parameters");
  return success();
}

//===----------------------------------------------------------------------===//
// StageOp
//===----------------------------------------------------------------------===//

LogicalResult StageOp::verify() {
  int64_t first = getFirst(), end = getEnd();
  if (first >= end)
    return emitOpError("has an empty layer range [")
           << first << ", " << end << ")";
  ArrayRef<int64_t> checkpoints = getCheckpoints();
  if (!checkpoints.empty() && getKind() != StageKind::forward)
    return emitOpError("only forward stages take checkpoints");
  for (auto [k, layer] : llvm::enumerate(checkpoints)) {
    if (layer < first || layer >= end)
      return emitOpError("checkpoints the input of layer ")
             << layer << ", which is outside its layers [" << first << ", "
             << end << ")";
    if (k > 0 && checkpoints[k - 1] >= layer)
      return emitOpError("checkpoints must be strictly ascending");
  }
  if (getKind() == StageKind::forward && getGradBytes().convertToDouble() != 0)
    return emitOpError("is a forward stage but produces gradients");
  for (auto [name, value] : {std::pair{"compute_seconds", getComputeSeconds()},
                             {"hop_seconds", getHopSeconds()},
                             {"upload_seconds", getUploadSeconds()},
                             {"download_seconds", getDownloadSeconds()},
                             {"job_seconds", getJobSeconds()},
                             {"param_bytes", getParamBytes()},
                             {"grad_bytes", getGradBytes()},
                             {"activation_bytes", getActivationBytes()},
                             {"memory_bytes", getMemoryBytes()}})
    if (!(value.convertToDouble() >= 0))
      return emitOpError() << name << " must be a non-negative number";
  double parts = getParamBytes().convertToDouble() +
                 getGradBytes().convertToDouble() +
                 getActivationBytes().convertToDouble();
  double memory = getMemoryBytes().convertToDouble();
  if (std::abs(parts - memory) > 1e-5 * std::max(1.0, memory))
    return emitOpError("memory_bytes ")
           << memory << " is not param + grad + activation bytes (" << parts
           << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// ScheduleOp
//===----------------------------------------------------------------------===//

LogicalResult ScheduleOp::verify() {
  auto plan = cast<PlanOp>((*this)->getParentOp());
  if (static_cast<int64_t>(getFirstWorker()) >=
      static_cast<int64_t>(plan.getWorkers()))
    return emitOpError("first worker ")
           << getFirstWorker() << " is not one of the plan's "
           << plan.getWorkers() << " workers";
  llvm::DenseSet<Operation *> seen;
  // Issue order: forward stages, then exactly one tail, then backward.
  int phase = 0;
  for (Attribute attr : getJobs()) {
    auto ref = cast<SymbolRefAttr>(attr);
    auto stage = dyn_cast_or_null<StageOp>(
        mlir::SymbolTable::lookupSymbolIn(plan, ref.getRootReference()));
    if (!stage)
      return emitOpError("job ") << ref << " is not a stage of the plan";
    if (!seen.insert(stage).second)
      return emitOpError("stage ") << ref << " is issued twice in one step";
    int stagePhase = stage.getKind() == StageKind::forward ? 0
                     : stage.getKind() == StageKind::tail  ? 1
                                                           : 2;
    if (stagePhase < phase || (stagePhase == 1 && phase == 1))
      return emitOpError("job order must be forward stages, one tail, then "
                         "backward stages; ")
             << ref << " is out of place";
    phase = std::max(phase, stagePhase);
    if (stagePhase == 1)
      phase = 2;
  }
  for (StageOp stage : plan.getStages())
    if (!seen.contains(stage))
      return emitOpError("stage @") << stage.getSymName() << " is never issued";
  if (phase < 2)
    return emitOpError("issues no tail stage");
  return success();
}

//===----------------------------------------------------------------------===//
// The planner's view of a plan
//===----------------------------------------------------------------------===//

rondo::planner::PlanProblem PlanOp::buildProblem() {
  planner::PlanProblem problem;
  problem.workers = static_cast<int>(getWorkers());
  problem.microbatches = static_cast<int>(getMicrobatches());
  problem.workerMemoryBytes = getMemory().getWorkerBudget().convertToDouble();
  problem.hostMemoryBytes = getMemory().getHostBudget().convertToDouble();
  problem.hostFixedBytes = getHostFixedBytes().convertToDouble();
  if (std::optional<APFloat> mapped = getMappedWeightBytes())
    problem.mappedWeightBytes = mapped->convertToDouble();
  problem.linkBytesPerSecond = getLinkBandwidth().convertToDouble();
  problem.peerBytesPerSecond = getPeerBandwidth().convertToDouble();
  if (std::optional<APFloat> local = getLocalCopyBandwidth())
    problem.localCopyBytesPerSecond = local->convertToDouble();
  problem.optimizerParamsPerSecond =
      getOptimizerParamsPerSecond().convertToDouble();
  if (std::optional<uint64_t> cores = getSharedCores())
    problem.sharedCores = static_cast<int>(*cores);
  if (std::optional<APFloat> bandwidth = getHostMemoryBandwidth())
    problem.hostMemoryBytesPerSecond = bandwidth->convertToDouble();
  if (std::optional<APFloat> rate = getStepEndPassBandwidth())
    problem.stepEndPassBytesPerSecond = rate->convertToDouble();
  if (auto r = getReplicas()) {
    problem.replicas = static_cast<int>(*r);
    if (auto bw = getReplicaLinkBandwidth())
      problem.replicaBytesPerSecond = bw->convertToDouble();
    if (auto bw = getReplicaHostCrossingBandwidth())
      problem.replicaHostCrossingBytesPerSecond = bw->convertToDouble();
  }
  if (ArrayAttr shared = getSharedParamsAttr())
    for (auto entry : shared.getAsRange<DictionaryAttr>()) {
      planner::SharedParam sp;
      if (auto bytes = entry.getAs<FloatAttr>("param_bytes"))
        sp.paramBytes = bytes.getValueAsDouble();
      if (auto bytes = entry.getAs<FloatAttr>("grad_bytes"))
        sp.gradBytes = bytes.getValueAsDouble();
      if (auto bytes = entry.getAs<FloatAttr>("resident_bytes"))
        sp.residentBytes = bytes.getValueAsDouble();
      if (auto layers = entry.getAs<DenseI64ArrayAttr>("layers"))
        for (int64_t l : layers.asArrayRef())
          sp.layers.push_back(static_cast<int>(l));
      problem.sharedParams.push_back(std::move(sp));
    }
  for (LayerOp layer : getLayers()) {
    planner::LayerCost cost;
    cost.name = (stringifyLayerKind(layer.getKind()) + " " +
                 llvm::Twine(static_cast<int64_t>(layer.getIndex())))
                    .str();
    cost.kind =
        layer.getKind() == LayerKind::prefix ? planner::LayerKind::Prefix
        : layer.getKind() == LayerKind::tail ? planner::LayerKind::Tail
                                             : planner::LayerKind::Block;
    cost.forwardFlops = layer.getFwdFlops().convertToDouble();
    cost.backwardFlops = layer.getBwdFlops().convertToDouble();
    cost.forwardSeconds = layer.getFwdSeconds().convertToDouble();
    cost.backwardSeconds = layer.getBwdSeconds().convertToDouble();
    cost.paramBytes = layer.getParamBytes().convertToDouble();
    cost.gradBytes = layer.getGradBytes().convertToDouble();
    if (std::optional<APFloat> bytes = layer.getResidentBytes())
      cost.residentBytes = bytes->convertToDouble();
    cost.inputBytes = layer.getInputBytes().convertToDouble();
    cost.workspaceBytes = layer.getWorkspaceBytes().convertToDouble();
    cost.backwardWork = !layer.getNoBackward();
    problem.layers.push_back(cost);
    problem.trainableParams.push_back(
        layer.getTrainableParams().convertToDouble());
  }
  // The layers whose state stays on the worker: their stages move and slot
  // none of it, residentBytes counts it once, and the worker updates it
  // (without them pipe-verify-plan counted a device-resident plan's
  // weights as streamed, twice, and refused plans the search had fitted).
  if (std::optional<ArrayRef<int64_t>> resident = getResidentLayers()) {
    problem.resident.assign(problem.layers.size(), 0);
    for (int64_t l : *resident)
      if (l >= 0 && l < static_cast<int64_t>(problem.resident.size()))
        problem.resident[l] = 1;
  }
  if (std::optional<APFloat> rate = getDeviceOptimizerParamsPerSecond())
    problem.deviceOptimizerParamsPerSecond = rate->convertToDouble();
  if (std::optional<bool> shard = getShardOptimizer())
    problem.shardOptimizer = *shard;
  if (std::optional<uint64_t> perHost = getReplicasPerHost())
    problem.replicasPerHost = static_cast<int>(*perHost);
  return problem;
}

rondo::planner::Plan PlanOp::buildPlan() {
  planner::Plan plan;
  // Job order is the schedule's; stages without a schedule in body order.
  std::vector<StageOp> stages;
  if (ScheduleOp schedule = getSchedule()) {
    for (Attribute job : schedule.getJobs())
      if (auto stage =
              dyn_cast_or_null<StageOp>(mlir::SymbolTable::lookupSymbolIn(
                  *this, cast<SymbolRefAttr>(job).getRootReference())))
        stages.push_back(stage);
  } else {
    stages = getStages();
  }
  for (StageOp stage : stages) {
    planner::Stage s;
    s.first = static_cast<int>(stage.getFirst());
    s.end = static_cast<int>(stage.getEnd());
    switch (stage.getKind()) {
    case StageKind::forward:
      s.kind = planner::StageKind::Forward;
      plan.forward.push_back(s);
      break;
    case StageKind::tail:
      s.kind = planner::StageKind::Tail;
      plan.tail = s;
      break;
    case StageKind::backward:
      s.kind = planner::StageKind::Backward;
      plan.backward.push_back(s);
      break;
    }
  }
  return plan;
}
