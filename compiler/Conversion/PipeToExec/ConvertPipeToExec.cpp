//===- ConvertPipeToExec.cpp - A plan becomes buffers, copies, events ----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Lowers every `pipe.plan` (whose stages pipe-outline-stages turned into
// functions) to `exec.program`s: one per optimizer mode. The pass decides
// WHAT moves (the RoundPipe data flow: parameter uploads per stage-job in
// chunks, hand-offs, checkpoints and reloads, gradient downloads, optimizer
// tasks) and derives WHEN from the data alone: an op awaits the last writer
// of every range it reads and the last writer and readers of every range it
// writes, minus what stream order and transitivity already imply. Deriving
// events from accesses (rather than writing them by hand per case) is what
// keeps them minimal and correct when the data flow changes; exec-verify
// re-proves the result independently over several steps of the rotation.
//
//===----------------------------------------------------------------------===//

#include "Conversion/PipeToExec/Passes.h"
#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/Pipe/IR/PipeOps.h"
#include "Dialect/TG/IR/TGDialect.h"
#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringMap.h"

namespace rondo::exec {
#define GEN_PASS_DEF_CONVERTPIPETOEXECPASS
#include "Conversion/PipeToExec/Passes.h.inc"
} // namespace rondo::exec

using namespace mlir;
using namespace rondo;
using namespace rondo::exec;

namespace {

constexpr int64_t kAlign = 64;
int64_t alignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

int64_t byteSize(Type t) {
  auto shaped = cast<ShapedType>(t);
  return shaped.getNumElements() *
         std::max<int64_t>(1, shaped.getElementTypeBitWidth() / 8);
}

StringRef roleOf(DictionaryAttr attrs) {
  if (!attrs)
    return "";
  if (auto role = attrs.getAs<StringAttr>(kRoleAttr))
    return role.getValue();
  return "";
}

/// A stage function's interface, read from its exec.role attributes.
struct StageInfo {
  mutable pipe::StageOp planStage;
  mutable func::FuncOp fn;
  StageKind kind;
  int64_t first = 0, end = 0, index = 0;
  SmallVector<StringRef> argRoles, resultRoles;
  SmallVector<Attribute> params, grads;
  SmallVector<int64_t> paramOffsets, paramSizes, gradOffsets, gradSizes;
  int64_t paramBytes = 0, gradBytes = 0, hostGradOffset = 0;
  SmallVector<int64_t> checkpointLayers; ///< Per "checkpoint" result.
  bool hasCheckpointOfInput = false;     ///< Saves its own input activation.
  /// Device-resident parameters it reads and gradient parts it accumulates
  /// (offsets into @resident_grads, its block starting at residentGradBase).
  SmallVector<Attribute> residentParams, residentBf16, residentGrads;
  /// The frozen parameters its image holds in bf16 (the plan's
  /// frozen_bf16 that it reads).
  SmallVector<Attribute> bf16Params;
  SmallVector<int64_t> residentGradOffsets, residentGradSizes;
  int64_t residentGradBytes = 0;
};

/// Gives each stage function of a bf16 plan a `param_bf16` argument for
/// every weight that has a bf16 form: the bf16 copy the trainer keeps
/// beside a device-resident weight that products read in bf16 (matrix
/// products, the fused LM head; tg::readByBf16Products) on the worker,
/// and a frozen weight the plan holds in bf16 alone
/// (`frozen_bf16`), which its stage image (or, resident, the worker's
/// `@resident`) carries. The products then read it (kern-bf16-storage)
/// instead of rounding fp32 weights at every microbatch. The fp32 argument
/// of a `frozen_bf16` weight becomes `param_unbound`: nothing backs it, and
/// kern-bf16-storage removes it once its readers read the bf16 argument.
/// Idempotent: one plan is lowered once per optimizer mode.
LogicalResult addBf16Arguments(ModuleOp module, pipe::PlanOp plan,
                               const llvm::SmallDenseSet<Attribute> &resident,
                               const llvm::SmallDenseSet<Attribute> &frozen) {
  auto precision = plan->getAttrOfType<StringAttr>("precision");
  if (!precision || precision.getValue() != "bf16" ||
      (resident.empty() && frozen.empty()))
    return success();
  MLIRContext *ctx = module.getContext();
  for (auto stage : plan.getBody().getOps<pipe::StageOp>()) {
    auto fn = module.lookupSymbol<func::FuncOp>(
        (plan.getSymName() + "_" + stage.getSymName()).str());
    if (!fn)
      continue;
    llvm::SmallDenseSet<Attribute> copied;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (roleOf(fn.getArgAttrDict(i)) == "param_bf16")
        copied.insert(fn.getArgAttr(i, tg::kParamAttr));
    for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i) {
      Attribute name = fn.getArgAttr(i, tg::kParamAttr);
      if (roleOf(fn.getArgAttrDict(i)) != "param" || copied.contains(name))
        continue;
      bool isResident = resident.contains(name);
      bool isFrozen = frozen.contains(name);
      if (!isFrozen &&
          !(isResident && tg::readByBf16Products(fn.getArgument(i))))
        continue;
      // The plan chose bf16 storage from @main's uses; a stage reads a
      // subset of them.
      if (isFrozen && !fn.getArgument(i).use_empty() &&
          !tg::readOnlyByProducts(fn.getArgument(i)))
        return fn.emitOpError("reads '")
               << cast<StringAttr>(name).getValue()
               << "', which the plan holds in bf16 alone (frozen_bf16), "
                  "other than through matrix products";
      auto type = cast<RankedTensorType>(fn.getArgumentTypes()[i]);
      NamedAttribute attrs[] = {
          NamedAttribute(StringAttr::get(ctx, kRoleAttr),
                         StringAttr::get(ctx, "param_bf16")),
          NamedAttribute(StringAttr::get(ctx, tg::kParamAttr), name)};
      if (failed(fn.insertArgument(
              fn.getNumArguments(),
              RankedTensorType::get(type.getShape(), BFloat16Type::get(ctx)),
              DictionaryAttr::get(ctx, attrs), fn.getLoc())))
        return fn.emitOpError("cannot take the bf16 copy of '")
               << name << "' as an argument";
      if (isFrozen)
        fn.setArgAttr(i, kRoleAttr, StringAttr::get(ctx, "param_unbound"));
    }
  }
  return success();
}

/// Derives awaits from accesses while ops are appended in issue order.
class DependencyTracker {
public:
  DependencyTracker(ProgramOp program, int64_t workers)
      : program(program), workers(workers) {}

  /// Events `op` must await: RAW, WAR and WAW on every range it touches,
  /// without those implied by stream order or by another await.
  SmallVector<Value> awaitsFor(Operation *op, ArrayRef<Value> extra = {}) {
    SmallVector<Access> accesses;
    collectAccesses(program, op, accesses);
    llvm::SetVector<Value> needed(extra.begin(), extra.end());
    for (const Access &a : accesses)
      for (const Record &r : history[key(a)]) {
        if (!overlaps(a, r))
          continue;
        if (a.write || r.write)
          needed.insert(r.event);
      }
    return minimise(op, needed.getArrayRef());
  }

  /// Records `op` (already built with `event`) as issued.
  void issued(Operation *op, Value event) {
    unsigned id = nodes.size();
    Node node;
    node.event = event;
    node.reach.resize(id + 1);
    auto addPred = [&](unsigned p) {
      node.reach |= nodes[p].reach;
      node.reach.set(p);
    };
    if (std::optional<Queue> q = getQueue(op)) {
      auto it = lastOnQueue.find(queueKey(*q));
      if (it != lastOnQueue.end())
        addPred(it->second);
      lastOnQueue[queueKey(*q)] = id;
      node.queue = queueKey(*q);
    }
    for (Value awaited : op->getOperands())
      if (auto it = nodeOf.find(awaited); it != nodeOf.end())
        addPred(it->second);
    for (Node &n : nodes)
      n.reach.resize(id + 1);
    nodes.push_back(std::move(node));
    nodeOf[event] = id;
    SmallVector<Access> accesses;
    collectAccesses(program, op, accesses);
    for (const Access &a : accesses) {
      auto &list = history[key(a)];
      if (a.write)
        hideWrittenBytes(list, a.offset, a.bytes);
      list.push_back({a.offset, a.bytes, a.write, event});
    }
  }

  /// Host accesses of the previous step's tasks, carried in by `arg`.
  void carried(Operation *op, Value arg) {
    SmallVector<Access> accesses;
    collectAccesses(program, op, accesses);
    for (const Access &a : accesses)
      history[key(a)].push_back({a.offset, a.bytes, a.write, arg});
  }

private:
  struct Record {
    int64_t offset, bytes;
    bool write;
    Value event;
  };
  struct Node {
    Value event;
    llvm::BitVector reach; ///< Nodes that happen before this one.
    std::string queue;
  };

  std::string queueKey(Queue q) {
    // Jobs n and n + N share a worker within a step.
    int64_t worker = q.job < 0 ? -1 : q.job % workers;
    return std::to_string(worker) + "/" + std::to_string(q.stream);
  }
  std::string key(const Access &a) {
    int64_t worker = a.job < 0 ? -1 : a.job % workers;
    return a.buffer.str() + "/" + std::to_string(worker) + "/" +
           std::to_string(a.slot) + "/" + (a.param ? a.param.str() : "");
  }
  static bool overlaps(const Access &a, const Record &r) {
    return a.offset < r.offset + r.bytes && r.offset < a.offset + a.bytes;
  }

  SmallVector<Value> minimise(Operation *op, ArrayRef<Value> needed) {
    std::optional<Queue> q = getQueue(op);
    std::optional<unsigned> streamPred;
    if (q)
      if (auto it = lastOnQueue.find(queueKey(*q)); it != lastOnQueue.end())
        streamPred = it->second;
    SmallVector<Value> result;
    for (Value e : needed) {
      auto it = nodeOf.find(e);
      if (it == nodeOf.end()) { // A carried event: always explicit.
        result.push_back(e);
        continue;
      }
      unsigned id = it->second;
      auto implied = [&](unsigned other) {
        return other == id || nodes[other].reach.test(id);
      };
      if (streamPred && implied(*streamPred))
        continue;
      bool byOther = false;
      for (Value f : needed) {
        auto jt = nodeOf.find(f);
        if (f != e && jt != nodeOf.end() && nodes[jt->second].reach.test(id))
          byOther = true;
      }
      if (!byOther)
        result.push_back(e);
    }
    return result;
  }

  ProgramOp program;
  int64_t workers;
  std::vector<Node> nodes;
  DenseMap<Value, unsigned> nodeOf;
  llvm::StringMap<unsigned> lastOnQueue;
  llvm::StringMap<SmallVector<Record>> history;
};

struct ConvertPipeToExecPass
    : rondo::exec::impl::ConvertPipeToExecPassBase<ConvertPipeToExecPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<pipe::PlanOp> plans(module.getOps<pipe::PlanOp>());
    for (pipe::PlanOp plan : plans)
      for (StringRef mode : {"sync", "overlap", "stale"}) {
        const bool asked = llvm::is_contained(optimizerModes, mode);
        if (!optimizerModes.empty() && !asked)
          continue;
        // The stale update runs a step late on the host: not for state the
        // worker keeps (nothing would hide it), nor for replicas (their
        // sums need every step's gradients in turn).
        if (mode == "stale") {
          StringRef why =
              plan.getResidentParamsAttr() ? "keeps parameters on the worker"
              : plan.getReplicas().value_or(1) > 1 ? "has several replicas"
                                                   : "";
          if (!why.empty()) {
            if (!asked)
              continue;
            plan.emitOpError("cannot have a stale program: it ") << why;
            return signalPassFailure();
          }
        }
        if (failed(convert(module, plan, mode)))
          return signalPassFailure();
      }
  }

  LogicalResult convert(ModuleOp module, pipe::PlanOp plan, StringRef mode);
};

LogicalResult ConvertPipeToExecPass::convert(ModuleOp module, pipe::PlanOp plan,
                                             StringRef mode) {
  MLIRContext *ctx = module.getContext();
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    return module.emitError("convert-pipe-to-exec needs @main");
  pipe::ScheduleOp schedule;
  for (auto s : plan.getBody().getOps<pipe::ScheduleOp>())
    schedule = s;
  if (!schedule)
    return plan.emitOpError("has no pipe.schedule");
  const int64_t N = plan.getWorkers(), M = plan.getMicrobatches();
  llvm::SmallDenseSet<Attribute> residentSet;
  if (ArrayAttr resident = plan.getResidentParamsAttr()) {
    // One worker holds resident state: every job must run there.
    if (N != 1)
      return plan.emitOpError("keeps parameters on the worker with ")
             << N << " workers; device-resident state needs one worker";
    residentSet.insert(resident.begin(), resident.end());
  }
  llvm::SmallDenseSet<Attribute> frozenBf16Set;
  if (ArrayAttr frozen = plan.getFrozenBf16Attr())
    frozenBf16Set.insert(frozen.begin(), frozen.end());
  if (failed(addBf16Arguments(module, plan, residentSet, frozenBf16Set)))
    return failure();
  llvm::SmallDenseSet<Attribute> bf16Copies, bf16Only;
  // Each resident parameter's size and how many stages produce a part of
  // its gradient.
  llvm::MapVector<Attribute, std::pair<int64_t, int64_t>> residentInfo;

  // Stages in job order, with their interfaces.
  std::vector<StageInfo> stages;
  int64_t boundaryBytes = 0, idsBytes = 0, labelsBytes = 0, maxParam = 0,
          maxGrad = 0, maxCheckpoints = 0, hostGradBytes = 0;
  SmallVector<int64_t> checkpointLayers; // Host checkpoint slot groups.
  for (Attribute ref : schedule.getJobs()) {
    auto planStage = dyn_cast_or_null<pipe::StageOp>(
        plan.lookupSymbol(cast<FlatSymbolRefAttr>(ref).getAttr()));
    if (!planStage)
      return schedule.emitOpError("names unknown stage ") << ref;
    std::string fnName =
        (plan.getSymName() + "_" + planStage.getSymName()).str();
    auto fn = module.lookupSymbol<func::FuncOp>(fnName);
    if (!fn)
      return plan.emitOpError("stage ")
             << planStage.getSymName() << " has no function @" << fnName
             << "; run pipe-outline-stages first";
    StageInfo info;
    info.planStage = planStage;
    info.fn = fn;
    info.index = stages.size();
    info.first = planStage.getFirst();
    info.end = planStage.getEnd();
    info.kind = static_cast<StageKind>(planStage.getKind());
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      StringRef role = roleOf(fn.getArgAttrDict(i));
      info.argRoles.push_back(role);
      Type t = fn.getArgumentTypes()[i];
      if ((role == "param" || role == "param_unbound") &&
          residentSet.contains(fn.getArgAttr(i, tg::kParamAttr))) {
        // A frozen weight held in bf16 (unbound fp32 argument) has no fp32
        // weights on the worker, only the bf16 copy.
        Attribute name = fn.getArgAttr(i, tg::kParamAttr);
        info.residentParams.push_back(name);
        residentInfo[name].first = byteSize(t);
        if (role == "param_unbound")
          bf16Only.insert(name);
      } else if (role == "param_bf16" &&
                 residentSet.contains(fn.getArgAttr(i, tg::kParamAttr))) {
        info.residentBf16.push_back(fn.getArgAttr(i, tg::kParamAttr));
        bf16Copies.insert(info.residentBf16.back());
      } else if (role == "param" || role == "param_bf16") {
        // A frozen weight held in bf16 alone is in the image in bf16.
        if (role == "param_bf16")
          info.bf16Params.push_back(fn.getArgAttr(i, tg::kParamAttr));
        info.params.push_back(fn.getArgAttr(i, tg::kParamAttr));
        info.paramOffsets.push_back(info.paramBytes);
        info.paramSizes.push_back(byteSize(t));
        info.paramBytes = alignUp(info.paramBytes + byteSize(t));
      } else if (role == "activation" || role == "gradient") {
        boundaryBytes = std::max(boundaryBytes, byteSize(t));
      } else if (role == "input_ids") {
        idsBytes = byteSize(t);
      } else if (role == "labels") {
        labelsBytes = byteSize(t);
      }
    }
    for (unsigned i = 0; i < fn.getNumResults(); ++i) {
      StringRef role = roleOf(fn.getResultAttrDict(i));
      info.resultRoles.push_back(role);
      Type t = fn.getResultTypes()[i];
      if (role == "param_grad" &&
          residentSet.contains(fn.getResultAttr(i, tg::kGradOfAttr))) {
        Attribute name = fn.getResultAttr(i, tg::kGradOfAttr);
        info.residentGrads.push_back(name);
        info.residentGradOffsets.push_back(info.residentGradBytes);
        info.residentGradSizes.push_back(byteSize(t));
        info.residentGradBytes = alignUp(info.residentGradBytes + byteSize(t));
        auto &[bytes, parts] = residentInfo[name];
        bytes = byteSize(t);
        ++parts;
      } else if (role == "param_grad") {
        info.grads.push_back(fn.getResultAttr(i, tg::kGradOfAttr));
        info.gradOffsets.push_back(info.gradBytes);
        info.gradSizes.push_back(byteSize(t));
        info.gradBytes = alignUp(info.gradBytes + byteSize(t));
      } else if (role == "checkpoint") {
        info.checkpointLayers.push_back(
            cast<IntegerAttr>(fn.getResultAttr(i, kLayerAttr)).getInt());
        boundaryBytes = std::max(boundaryBytes, byteSize(t));
      } else if (role == "activation" || role == "gradient") {
        boundaryBytes = std::max(boundaryBytes, byteSize(t));
      }
    }
    if (info.kind == StageKind::forward)
      for (int64_t c : planStage.getCheckpoints()) {
        if (c == 0)
          continue;
        if (c == info.first)
          info.hasCheckpointOfInput = true;
        checkpointLayers.push_back(c);
      }
    maxCheckpoints =
        std::max<int64_t>(maxCheckpoints, info.checkpointLayers.size());
    info.hostGradOffset = hostGradBytes;
    hostGradBytes += info.gradBytes;
    maxParam = std::max(maxParam, info.paramBytes);
    maxGrad = std::max(maxGrad, info.gradBytes);
    stages.push_back(std::move(info));
  }
  const int64_t numJobs = stages.size();
  auto checkpointGroup = [&](int64_t layer) {
    return std::find(checkpointLayers.begin(), checkpointLayers.end(), layer) -
           checkpointLayers.begin();
  };
  for (const StageInfo &s : stages)
    if (s.kind == StageKind::backward && s.first > 0 &&
        checkpointGroup(s.first) == int64_t(checkpointLayers.size()))
      return s.planStage.emitOpError("starts at layer ")
             << s.first << ", which no forward stage checkpoints";

  // The program and its memory plan.
  OpBuilder builder(ctx);
  builder.setInsertionPointToEnd(module.getBody());
  std::string name = ("exec_w" + Twine(N) + "_" + mode).str();
  if (plan.getReplicas().value_or(1) > 1 ||
      llvm::count_if(module.getOps<pipe::PlanOp>(), [&](pipe::PlanOp p) {
        return int64_t(p.getWorkers()) == N;
      }) > 1)
    name = ("exec_" + plan.getSymName() + "_" + mode).str();
  SmallVector<Attribute> jobRefs;
  for (const StageInfo &s : stages)
    jobRefs.push_back(FlatSymbolRefAttr::get(s.planStage.getSymNameAttr()));
  int64_t firstWorker = schedule.getFirstWorker();
  auto program = ProgramOp::create(
      builder, plan.getLoc(), builder.getStringAttr(name),
      FlatSymbolRefAttr::get(plan.getSymNameAttr()),
      builder.getI64IntegerAttr(N), builder.getI64IntegerAttr(M),
      builder.getI64IntegerAttr(plan.getRowsPerMicrobatch()),
      builder.getI64IntegerAttr(firstWorker), builder.getStringAttr(mode),
      builder.getArrayAttr(jobRefs),
      builder.getF64FloatAttr(
          mode == "overlap" ? plan.getPrediction().getStep().convertToDouble()
          : mode == "stale" && !plan.getPrediction().getStaleStep().isZero()
              ? plan.getPrediction().getStaleStep().convertToDouble()
              : plan.getPrediction().getSyncStep().convertToDouble()),
      plan.getReplicasAttr(), plan.getFrozenBf16Attr(),
      builder.getF64FloatAttr(
          plan.getMemory().getWorkerPeak().convertToDouble()));
  Block *body = new Block();
  program.getBody().push_back(body);
  OpBuilder b = OpBuilder::atBlockBegin(body);
  Location loc = plan.getLoc();

  int64_t arena = 0, pool = 0;
  auto buffer = [&](StringRef bufName, Space space, int64_t slots,
                    int64_t bytes) {
    int64_t &cursor = space == Space::worker ? arena : pool;
    int64_t offset = cursor;
    cursor = alignUp(cursor + slots * bytes);
    BufferOp::create(b, loc, b.getStringAttr(bufName),
                     SpaceAttr::get(ctx, space), b.getI64IntegerAttr(slots),
                     b.getI64IntegerAttr(bytes), b.getI64IntegerAttr(offset));
  };
  const bool hasBackward = llvm::any_of(
      stages, [](const StageInfo &s) { return s.kind != StageKind::forward; });
  buffer("params0", Space::worker, 1, maxParam);
  buffer("params1", Space::worker, 1, maxParam);
  if (maxGrad)
    buffer("grads", Space::worker, 1, maxGrad);
  buffer("act_in", Space::worker, M, boundaryBytes);
  buffer("act_out", Space::worker, M, boundaryBytes);
  if (hasBackward) {
    buffer("grad_in", Space::worker, M, boundaryBytes);
    buffer("grad_out", Space::worker, M, boundaryBytes);
  }
  if (maxCheckpoints)
    buffer("ckpt_out", Space::worker, M * maxCheckpoints, boundaryBytes);
  if (idsBytes)
    buffer("ids", Space::worker, M, idsBytes);
  if (labelsBytes)
    buffer("labels", Space::worker, M, labelsBytes);
  buffer("loss", Space::worker, 1, 4 * M);
  // Device-resident state: each parameter once (weights, then moments and
  // sums when it trains), and every stage's gradient parts in a block of
  // their own, so that no stage-job's zeroing touches another's parts.
  struct ResidentLayout {
    Attribute name;
    int64_t bytes, weights, expAvg = -1, expAvgSq = -1, sum = -1, normSum = -1;
    std::optional<int64_t> bf16;
  };
  SmallVector<ResidentLayout> residentLayout;
  llvm::DenseMap<Attribute, int64_t> residentWeights, residentBf16;
  int64_t residentBytes = 0, residentGradBytes = 0;
  SmallVector<int64_t> residentGradBase;
  for (auto &[name, info] : residentInfo) {
    auto [bytes, parts] = info;
    ResidentLayout r{name, bytes, bf16Only.contains(name) ? -1 : residentBytes};
    if (r.weights >= 0)
      residentBytes = alignUp(residentBytes + bytes);
    if (parts > 0) {
      r.expAvg = residentBytes;
      r.expAvgSq = residentBytes = alignUp(residentBytes + bytes);
      residentBytes = alignUp(residentBytes + bytes);
    }
    if (parts > 1) {
      r.sum = residentBytes;
      r.normSum = residentBytes = alignUp(residentBytes + bytes);
      residentBytes = alignUp(residentBytes + bytes);
    }
    if (bf16Copies.contains(name)) {
      r.bf16 = residentBytes;
      residentBf16[name] = *r.bf16;
      residentBytes = alignUp(residentBytes + bytes / 2);
    }
    residentWeights[name] = r.weights;
    residentLayout.push_back(r);
  }
  for (const StageInfo &s : stages) {
    residentGradBase.push_back(residentGradBytes);
    residentGradBytes = alignUp(residentGradBytes + s.residentGradBytes);
  }
  if (residentBytes)
    buffer(kResidentBuffer, Space::worker, 1, residentBytes);
  if (residentGradBytes)
    buffer(kResidentGradsBuffer, Space::worker, 1, residentGradBytes);
  BufferOp::create(b, loc, b.getStringAttr(kParamsBuffer),
                   SpaceAttr::get(ctx, Space::host),
                   b.getI64IntegerAttr(numJobs), b.getI64IntegerAttr(maxParam),
                   b.getI64IntegerAttr(-1));
  if (idsBytes)
    buffer(kHostIdsBuffer, Space::host, M, idsBytes);
  if (labelsBytes)
    buffer(kHostLabelsBuffer, Space::host, M, labelsBytes);
  buffer(kHostLossBuffer, Space::host, 1, 4 * M);
  // Always there (empty when every gradient stays on the worker): the
  // runtime's optimizer reads gradient images through it.
  buffer(kHostGradsBuffer, Space::host, 1, hostGradBytes);
  // The one-step-stale update reads the previous step's gradients from a
  // copy, so that this step's downloads need not wait for it.
  if (mode == "stale")
    buffer(kGradStashBuffer, Space::host, 1, hostGradBytes);
  if (!checkpointLayers.empty())
    buffer("host_ckpt", Space::host, M * checkpointLayers.size(),
           boundaryBytes);
  if (!peerHandoff)
    buffer("host_stage", Space::host, 2 * M, boundaryBytes);
  program->setAttr("worker_arena_bytes", b.getI64IntegerAttr(arena));
  program->setAttr("host_pool_bytes", b.getI64IntegerAttr(pool));

  for (const ResidentLayout &r : residentLayout)
    ResidentOp::create(b, loc, cast<StringAttr>(r.name), r.bytes, r.weights,
                       r.expAvg, r.expAvgSq, r.sum, r.normSum,
                       r.bf16 ? b.getI64IntegerAttr(*r.bf16) : IntegerAttr());
  for (const StageInfo &s : stages) {
    auto stageOp = StageOp::create(
        b, loc, b.getStringAttr(s.planStage.getSymName()),
        StageKindAttr::get(ctx, s.kind), b.getI64IntegerAttr(s.first),
        b.getI64IntegerAttr(s.end),
        FlatSymbolRefAttr::get(s.fn.getSymNameAttr()), b.getArrayAttr(s.params),
        b.getDenseI64ArrayAttr(s.paramOffsets),
        b.getDenseI64ArrayAttr(s.paramSizes), b.getI64IntegerAttr(s.paramBytes),
        b.getArrayAttr(s.grads), b.getDenseI64ArrayAttr(s.gradOffsets),
        b.getDenseI64ArrayAttr(s.gradSizes), b.getI64IntegerAttr(s.gradBytes),
        b.getI64IntegerAttr(s.hostGradOffset),
        b.getF64FloatAttr(
            s.planStage->getAttrOfType<FloatAttr>("job_seconds")
                ? s.planStage->getAttrOfType<FloatAttr>("job_seconds")
                      .getValueAsDouble()
                : 0.0),
        /*resident=*/nullptr, /*resident_grads=*/nullptr,
        /*resident_grad_offsets=*/nullptr, /*resident_grad_sizes=*/nullptr,
        /*bf16_params=*/nullptr);
    if (!s.residentParams.empty())
      stageOp.setResidentAttr(b.getArrayAttr(s.residentParams));
    if (!s.bf16Params.empty())
      stageOp.setBf16ParamsAttr(b.getArrayAttr(s.bf16Params));
    if (!s.residentGrads.empty()) {
      SmallVector<int64_t> offsets;
      for (int64_t off : s.residentGradOffsets)
        offsets.push_back(residentGradBase[s.index] + off);
      stageOp.setResidentGradsAttr(b.getArrayAttr(s.residentGrads));
      stageOp.setResidentGradOffsetsAttr(b.getDenseI64ArrayAttr(offsets));
      stageOp.setResidentGradSizesAttr(
          b.getDenseI64ArrayAttr(s.residentGradSizes));
    }
  }

  auto ref = [&](StringRef buf, int64_t job, int64_t slot, int64_t offset,
                 int64_t bytes) {
    return RefAttr::get(ctx, FlatSymbolRefAttr::get(ctx, buf), job, slot,
                        offset, bytes);
  };
  auto copy = [&](CopyKind kind, RefAttr src, RefAttr dst, Stream stream,
                  int64_t job, int64_t mb) -> Operation * {
    return CopyOp::create(
        b, loc, EventType::get(ctx), CopyKindAttr::get(ctx, kind), src, dst,
        StreamAttr::get(ctx, stream), b.getI64IntegerAttr(job),
        b.getI64IntegerAttr(mb), ValueRange{});
  };
  DependencyTracker deps(program, N);
  auto event = EventType::get(ctx);

  // Events the previous step's optimizer tasks carry in. The tasks are the
  // same every step, so build them once to learn their accesses.
  SmallVector<Value> carriedArgs;
  SmallVector<HostTaskOp> optimizerTasks;
  auto makeTask = [&](OpBuilder &at, HostTaskKind kind,
                      std::optional<StringRef> stage = std::nullopt) {
    return HostTaskOp::create(at, loc, event, HostTaskKindAttr::get(ctx, kind),
                              stage ? FlatSymbolRefAttr::get(ctx, *stage)
                                    : FlatSymbolRefAttr(),
                              ValueRange{});
  };
  // The tasks each step ends with, whose events the next step awaits: the
  // optimizer tasks, or a stale program's update and gradient stash.
  struct Task {
    HostTaskKind kind;
    std::optional<StringRef> stage;
  };
  SmallVector<Task> endTasks;
  if (mode == "sync") {
    endTasks.push_back({HostTaskKind::optimizer, std::nullopt});
  } else if (mode == "stale") {
    endTasks.push_back({HostTaskKind::stale_optimizer, std::nullopt});
    endTasks.push_back({HostTaskKind::stash_grads, std::nullopt});
  } else {
    for (const StageInfo &s : stages)
      if (!finalisedParams(program, program.getJobStage(s.index)).empty())
        endTasks.push_back({HostTaskKind::optimizer, s.planStage.getSymName()});
  }
  for (const Task &t : endTasks) {
    OpBuilder probe = OpBuilder::atBlockEnd(body);
    HostTaskOp task = makeTask(probe, t.kind, t.stage);
    Value arg = body->addArgument(event, loc);
    deps.carried(task, arg);
    carriedArgs.push_back(arg);
    task.erase();
  }

  // Operand segments are plain variadics: rebuild via the mutable range.
  auto setAwaits = [&](Operation *op, ArrayRef<Value> awaits) {
    op->setOperands(awaits);
  };
  auto issueOp = [&](Operation *op, ArrayRef<Value> extra = {}) -> Value {
    SmallVector<Value> awaits = deps.awaitsFor(op, extra);
    setAwaits(op, awaits);
    Value e = op->getResult(0);
    deps.issued(op, e);
    return e;
  };

  if (idsBytes || labelsBytes)
    issueOp(HostTaskOp::create(
        b, loc, event, HostTaskKindAttr::get(ctx, HostTaskKind::load_batch),
        FlatSymbolRefAttr(), ValueRange{}));

  // Per (job, microbatch): the copy that brought its activation input, which
  // the parameter upload of the job N places later waits behind.
  std::vector<std::vector<Value>> inputCopy(numJobs,
                                            std::vector<Value>(M, Value()));
  const int64_t maxChunks = std::max<int64_t>(1, paramChunks);
  // The hand-off of an activation (which = 0) or activation gradient
  // (which = 1) of microbatch m from job n - 1's worker into `dst` on job n's:
  // one device-to-device copy, or through host memory (download on the
  // sender, upload on the receiver) where devices cannot reach each other.
  auto handoff = [&](StringRef from, RefAttr dst, int64_t n, int64_t m,
                     int64_t which) -> Value {
    RefAttr src = ref(from, n - 1, m, 0, dst.getBytes());
    if (peerHandoff)
      return issueOp(
          copy(CopyKind::handoff, src, dst, Stream::act_upload, n, m));
    RefAttr staged = ref("host_stage", -1, which * M + m, 0, dst.getBytes());
    issueOp(copy(CopyKind::handoff, src, staged, Stream::download, n - 1, m));
    return issueOp(
        copy(CopyKind::handoff, staged, dst, Stream::act_upload, n, m));
  };
  for (int64_t n = 0; n < numJobs; ++n) {
    const StageInfo &s = stages[n];
    StringRef slotBuffer = (n / N) % 2 == 0 ? "params0" : "params1";
    // Parameter upload in balanced chunks; chunk c goes after the
    // activation input of microbatch c of the job this worker is running.
    if (s.paramBytes > 0) {
      int64_t chunks = std::min<int64_t>(maxChunks, M);
      int64_t per = alignUp((s.paramBytes + chunks - 1) / chunks);
      for (int64_t c = 0, off = 0; off < s.paramBytes; ++c, off += per) {
        int64_t bytes = std::min(per, s.paramBytes - off);
        SmallVector<Value> gate;
        if (n >= N && c < M && inputCopy[n - N][c])
          gate.push_back(inputCopy[n - N][c]);
        issueOp(copy(CopyKind::param_upload,
                     ref(kParamsBuffer, -1, s.index, off, bytes),
                     ref(slotBuffer, n, 0, off, bytes), Stream::param_upload, n,
                     -1),
                gate);
      }
    }
    if (s.gradBytes > 0)
      issueOp(FillZeroOp::create(b, loc, event,
                                 ref("grads", n, 0, 0, s.gradBytes),
                                 b.getI64IntegerAttr(n), ValueRange{}));
    if (s.residentGradBytes > 0)
      issueOp(FillZeroOp::create(b, loc, event,
                                 ref(kResidentGradsBuffer, n, 0,
                                     residentGradBase[n], s.residentGradBytes),
                                 b.getI64IntegerAttr(n), ValueRange{}));
    for (int64_t m = 0; m < M; ++m) {
      SmallVector<Attribute> inputs, outputs, accumulate;
      unsigned paramIdx = 0, bf16Idx = 0;
      for (auto [i, role] : llvm::enumerate(s.argRoles)) {
        int64_t bytes = byteSize(s.fn.getArgumentTypes()[i]);
        if (role == "activation") {
          RefAttr dst = ref("act_in", n, m, 0, bytes);
          if (s.kind == StageKind::backward) {
            int64_t group = checkpointGroup(s.first);
            inputCopy[n][m] = issueOp(copy(
                CopyKind::reload, ref("host_ckpt", -1, group * M + m, 0, bytes),
                dst, Stream::act_upload, n, m));
          } else {
            if (n == 0)
              return s.planStage.emitOpError(
                  "is the first job but takes an activation");
            inputCopy[n][m] = handoff("act_out", dst, n, m, 0);
          }
          inputs.push_back(dst);
        } else if (role == "gradient") {
          if (n == 0 || stages[n - 1].kind == StageKind::forward)
            return s.planStage.emitOpError(
                "takes a gradient but no backward job precedes it");
          RefAttr dst = ref("grad_in", n, m, 0, bytes);
          handoff("grad_out", dst, n, m, 1);
          inputs.push_back(dst);
        } else if (role == "input_ids" || role == "labels") {
          bool ids = role == "input_ids";
          RefAttr dst = ref(ids ? "ids" : "labels", n, m, 0, bytes);
          issueOp(copy(
              CopyKind::input_upload,
              ref(ids ? kHostIdsBuffer : kHostLabelsBuffer, -1, m, 0, bytes),
              dst, Stream::act_upload, n, m));
          inputs.push_back(dst);
        } else if (role == "param" &&
                   residentSet.contains(s.fn.getArgAttr(i, tg::kParamAttr))) {
          Attribute name = s.fn.getArgAttr(i, tg::kParamAttr);
          inputs.push_back(
              ref(kResidentBuffer, n, 0, residentWeights.lookup(name), bytes));
        } else if (role == "param_bf16" &&
                   residentSet.contains(s.fn.getArgAttr(i, tg::kParamAttr))) {
          Attribute name = s.residentBf16[bf16Idx++];
          inputs.push_back(
              ref(kResidentBuffer, n, 0, residentBf16.lookup(name), bytes));
        } else if (role == "param_unbound") {
          continue; // Read through its param_bf16 argument.
        } else if (role == "param" || role == "param_bf16") {
          inputs.push_back(ref(slotBuffer, n, 0, s.paramOffsets[paramIdx],
                               s.paramSizes[paramIdx]));
          ++paramIdx;
        } else if (role == "loss_scale") {
          continue; // Passed by value to every launch.
        } else {
          return s.fn.emitOpError("argument ")
                 << i << " has no exec.role the executor knows ('" << role
                 << "')";
        }
      }
      unsigned gradIdx = 0, ckIdx = 0, residentGradIdx = 0;
      for (auto [i, role] : llvm::enumerate(s.resultRoles)) {
        int64_t bytes = byteSize(s.fn.getResultTypes()[i]);
        if (role == "activation")
          outputs.push_back(ref("act_out", n, m, 0, bytes));
        else if (role == "checkpoint")
          outputs.push_back(
              ref("ckpt_out", n, m * maxCheckpoints + ckIdx++, 0, bytes));
        else if (role == "gradient")
          outputs.push_back(ref("grad_out", n, m, 0, bytes));
        else if (role == "loss_sum")
          outputs.push_back(ref("loss", n, 0, 4 * m, 4));
        else if (role == "param_grad" &&
                 residentSet.contains(s.fn.getResultAttr(i, tg::kGradOfAttr))) {
          accumulate.push_back(
              ref(kResidentGradsBuffer, n, 0,
                  residentGradBase[n] + s.residentGradOffsets[residentGradIdx],
                  s.residentGradSizes[residentGradIdx]));
          ++residentGradIdx;
        } else if (role == "param_grad") {
          accumulate.push_back(
              ref("grads", n, 0, s.gradOffsets[gradIdx], s.gradSizes[gradIdx]));
          ++gradIdx;
        } else
          return s.fn.emitOpError("result ")
                 << i << " has no exec.role the executor knows ('" << role
                 << "')";
      }
      issueOp(LaunchOp::create(
          b, loc, event, FlatSymbolRefAttr::get(s.planStage.getSymNameAttr()),
          b.getI64IntegerAttr(n), b.getI64IntegerAttr(m),
          b.getArrayAttr(inputs), b.getArrayAttr(outputs),
          b.getArrayAttr(accumulate), ValueRange{}));
      // Checkpoints of backward-stage inputs go to host memory.
      if (s.hasCheckpointOfInput) {
        int64_t group = checkpointGroup(s.first);
        issueOp(copy(CopyKind::checkpoint,
                     ref("act_in", n, m, 0, boundaryBytes),
                     ref("host_ckpt", -1, group * M + m, 0, boundaryBytes),
                     Stream::download, n, m));
      }
      for (auto [k, layer] : llvm::enumerate(s.checkpointLayers)) {
        int64_t group = checkpointGroup(layer);
        issueOp(
            copy(CopyKind::checkpoint,
                 ref("ckpt_out", n, m * maxCheckpoints + k, 0, boundaryBytes),
                 ref("host_ckpt", -1, group * M + m, 0, boundaryBytes),
                 Stream::download, n, m));
      }
    }
    if (s.gradBytes > 0)
      issueOp(copy(CopyKind::grad_download, ref("grads", n, 0, 0, s.gradBytes),
                   ref(kHostGradsBuffer, -1, 0, s.hostGradOffset, s.gradBytes),
                   Stream::download, n, -1));
    if (llvm::is_contained(s.resultRoles, "loss_sum"))
      issueOp(copy(CopyKind::loss_download, ref("loss", n, 0, 0, 4 * M),
                   ref(kHostLossBuffer, -1, 0, 0, 4 * M), Stream::download, n,
                   -1));
    if (mode == "overlap" &&
        !finalisedParams(program, program.getJobStage(n)).empty())
      optimizerTasks.push_back(
          cast<HostTaskOp>(issueOp(makeTask(b, HostTaskKind::optimizer,
                                            s.planStage.getSymName()))
                               .getDefiningOp()));
  }
  // sync: one update once every gradient has landed. stale: the previous
  // step's update once this step's uploads have read the weights (the
  // accesses make it await them and the previous step's stash), then this
  // step's gradients set aside once they have landed (after the update
  // read the previous ones: the same host queue).
  if (mode != "overlap")
    for (const Task &t : endTasks)
      optimizerTasks.push_back(
          cast<HostTaskOp>(issueOp(makeTask(b, t.kind)).getDefiningOp()));
  BarrierOp::create(b, loc);
  SmallVector<Value> yielded;
  for (HostTaskOp t : optimizerTasks)
    yielded.push_back(t.getEvent());
  YieldOp::create(b, loc, yielded);
  return success();
}

} // namespace
