//===- PlanOpBuilder.cpp - A searched plan as a pipe.plan op --------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "PlanOpBuilder.h"

#include "Dialect/TG/IR/TGOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace rondo;
using namespace rondo::pipe;

/// Which constraint limited the plan, with the numbers --explain words
/// (compiler/Explain). With fewer forward stages than workers it also records
/// what N forward stages would cost: the same plan with its forward range
/// split into N stages of balanced time, simulated.
BoundAttr rondo::pipe::buildBound(MLIRContext *ctx, const Candidate &c) {
  const planner::PlanProblem &p = c.problem;
  std::vector<planner::Stage> jobs = c.plan.jobs();
  int slowest = 0;
  double slowestTime = 0, fastestTime = 1e300;
  for (auto [j, stage] : llvm::enumerate(jobs)) {
    planner::StageCost sc = planner::costStage(p, stage);
    if (sc.jobSeconds > slowestTime) {
      slowestTime = sc.jobSeconds;
      slowest = static_cast<int>(j);
    }
    fastestTime = std::min(fastestTime, sc.jobSeconds);
  }
  planner::StageCost sc = planner::costStage(p, jobs[slowest]);
  double compute = p.microbatches * sc.computeSeconds + sc.hopSeconds;
  BoundKind kind = sc.uploadSeconds >= compute     ? BoundKind::upload
                   : sc.downloadSeconds >= compute ? BoundKind::download
                   : jobs[slowest].end - jobs[slowest].first == 1
                       ? BoundKind::single_layer
                       : BoundKind::balance;
  std::string layer = kind == BoundKind::single_layer
                          ? p.layers[jobs[slowest].first].name
                          : std::string();
  double trainable = 0;
  for (double t : p.trainableParams)
    trainable += t;
  double optimizer = p.optimizerParamsPerSecond > 0
                         ? trainable / p.optimizerParamsPerSecond
                         : 0;
  // The update of the last backward stage, which the next step's first
  // upload waits for, is what overlap cannot hide.
  double exposed = c.overlap.stepSeconds - c.stale.stepSeconds;

  DenseI64ArrayAttr balanced;
  double balancedStep = 0;
  std::string unfit;
  int numForward = static_cast<int>(c.plan.forward.size());
  int b = c.plan.tail.first;
  if (numForward < p.workers && b >= p.workers) {
    // Min-max split of [0, b) into N parts by forward time (DP over cuts).
    int parts = p.workers;
    std::vector<std::vector<double>> best(parts + 1,
                                          std::vector<double>(b + 1, 1e300));
    std::vector<std::vector<int>> cut(parts + 1, std::vector<int>(b + 1, 0));
    best[0][0] = 0;
    for (int k = 1; k <= parts; ++k)
      for (int e = k; e <= b; ++e)
        for (int a = k - 1; a < e; ++a) {
          double t = 0;
          for (int l = a; l < e; ++l)
            t += p.layers[l].forwardSeconds;
          double v = std::max(best[k - 1][a], t);
          if (v < best[k][e]) {
            best[k][e] = v;
            cut[k][e] = a;
          }
        }
    planner::Plan alt = c.plan;
    alt.forward.clear();
    for (int k = parts, e = b; k > 0; e = cut[k][e], --k)
      alt.forward.insert(alt.forward.begin(),
                         {planner::StageKind::Forward, cut[k][e], e});
    if (planner::fitsBudgets(p, alt, &unfit)) {
      SmallVector<int64_t> sizes;
      for (const planner::Stage &st : alt.forward)
        sizes.push_back(st.end - st.first);
      balanced = DenseI64ArrayAttr::get(ctx, sizes);
      balancedStep = planner::simulate(p, alt, {}).stepSeconds;
    }
  }
  auto exact = [](double v) { return APFloat(v); };
  return BoundAttr::get(
      ctx, kind, planner::stageName(c.plan, slowest), layer, exact(slowestTime),
      exact(fastestTime), exact(compute), exact(sc.uploadSeconds),
      exact(sc.downloadSeconds), exact(sc.paramBytes),
      exact(p.linkBytesPerSecond), exact(planner::workerArenaBytes(p, c.plan)),
      exact(p.workerMemoryBytes), exact(optimizer),
      exact(c.overlap.stepSeconds), exact(c.overlap.bubbleFraction),
      exact(exposed), exact(c.sync.bubbleFraction), balanced,
      exact(balancedStep), unfit);
}

PlanOp rondo::pipe::buildPlanOp(OpBuilder &b, func::FuncOp func,
                                const cost::DeviceSpec &spec, bool bf16,
                                int64_t n, int64_t batch, int64_t tokens,
                                const Candidate &c, SearchAttr searched,
                                StringRef strategy, StringRef planName) {
  MLIRContext *ctx = b.getContext();
  Location loc = func.getLoc();
  // Six significant digits: the plan stays readable (and exact in
  // decimal), far finer than the cost model's accuracy.
  auto round6 = [](double v) {
    return v == 0 ? 0.0 : std::stod(llvm::formatv("{0:e5}", v).str());
  };
  auto f64 = [&](double v) { return b.getF64FloatAttr(round6(v)); };
  auto r6 = [&](double v) { return APFloat(round6(v)); };
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
  auto str = [&](StringRef v) { return b.getStringAttr(v); };
  const planner::PlanProblem &p = c.problem;
  auto plan = PlanOp::create(
      b, loc,
      b.getStringAttr(planName.empty() ? llvm::formatv("plan_w{0}", n).str()
                                       : planName.str()),
      FlatSymbolRefAttr::get(func.getSymNameAttr()), i64(n),
      i64(c.microbatches), i64(batch), i64(batch / c.microbatches), i64(tokens),
      str(spec.name), str(bf16 ? "bf16" : "fp32"), str(strategy),
      MemoryAttr::get(ctx, r6(p.workerMemoryBytes), r6(p.hostMemoryBytes),
                      r6(planner::workerArenaBytes(p, c.plan)),
                      r6(planner::hostPeakBytes(p, c.plan))),
      PredictionAttr::get(ctx, r6(c.overlap.stepSeconds),
                          r6(c.overlap.bubbleFraction), r6(c.sync.stepSeconds),
                          r6(c.sync.bubbleFraction), r6(c.stale.stepSeconds)),
      f64(p.linkBytesPerSecond), f64(p.peerBytesPerSecond),
      f64(p.optimizerParamsPerSecond), f64(p.hostFixedBytes),
      buildBound(ctx, c), searched,
      /*replicas=*/nullptr, /*replica_link_bandwidth=*/nullptr,
      /*replica_scaling=*/nullptr, /*replica_scaling_other_mode=*/nullptr,
      /*shard_optimizer=*/nullptr, /*replicas_per_host=*/nullptr,
      /*max_seq_len=*/nullptr, /*mapped_weight_bytes=*/nullptr,
      /*shared_params=*/nullptr, /*resident_layers=*/nullptr,
      /*resident_params=*/nullptr, /*residency_alternatives=*/nullptr,
      /*shared_cores=*/nullptr, /*layout_gpus=*/nullptr,
      /*layout_chosen=*/nullptr, /*layouts_unfit=*/nullptr,
      /*local_copy_bandwidth=*/nullptr, /*frozen_bf16=*/nullptr,
      /*device_optimizer_params_per_second=*/nullptr,
      /*replica_host_crossing_bandwidth=*/nullptr,
      /*host_memory_bandwidth=*/nullptr, /*step_end_pass_bandwidth=*/nullptr);
  if (p.localCopyBytesPerSecond > 0)
    plan.setLocalCopyBandwidthAttr(f64(p.localCopyBytesPerSecond));
  if (p.sharedCores > 0)
    plan.setSharedCoresAttr(i64(p.sharedCores));
  if (p.hostMemoryBytesPerSecond > 0)
    plan.setHostMemoryBandwidthAttr(f64(p.hostMemoryBytesPerSecond));
  if (p.stepEndPassBytesPerSecond > 0)
    plan.setStepEndPassBandwidthAttr(f64(p.stepEndPassBytesPerSecond));
  if (llvm::is_contained(p.resident, 1)) {
    SmallVector<int64_t> layers;
    for (size_t l = 0; l < p.resident.size(); ++l)
      if (p.resident[l])
        layers.push_back(static_cast<int64_t>(l));
    plan.setResidentLayersAttr(b.getDenseI64ArrayAttr(layers));
    // A parameter is resident when every layer reading it is.
    llvm::SmallDenseMap<unsigned, bool> residentArg;
    for (size_t l = 0; l < c.table.layerParamArgs.size(); ++l)
      for (unsigned arg : c.table.layerParamArgs[l]) {
        auto [it, inserted] = residentArg.try_emplace(arg, true);
        it->second = it->second && planner::isResident(p, int(l));
      }
    SmallVector<Attribute> names;
    for (unsigned arg = 0; arg < func.getNumArguments(); ++arg) {
      auto it = residentArg.find(arg);
      if (it == residentArg.end() || !it->second)
        continue;
      if (Attribute name = func.getArgAttr(arg, tg::kParamAttr))
        names.push_back(name);
    }
    plan.setResidentParamsAttr(b.getArrayAttr(names));
    if (p.deviceOptimizerParamsPerSecond > 0)
      plan.setDeviceOptimizerParamsPerSecondAttr(
          f64(p.deviceOptimizerParamsPerSecond));
  }
  if (!c.residencyAlternatives.empty()) {
    SmallVector<NamedAttribute> alternatives;
    for (auto &[name, seconds] : c.residencyAlternatives)
      alternatives.push_back(b.getNamedAttr(name, f64(seconds)));
    plan.setResidencyAlternativesAttr(b.getDictionaryAttr(alternatives));
  }
  if (p.mappedWeightBytes > 0)
    plan.setMappedWeightBytesAttr(f64(p.mappedWeightBytes));
  if (c.table.frozenBf16Count > 0) {
    SmallVector<Attribute> names;
    for (unsigned arg = 0; arg < func.getNumArguments(); ++arg)
      if (tg::isFrozenProductWeight(func, arg))
        names.push_back(func.getArgAttr(arg, tg::kParamAttr));
    plan.setFrozenBf16Attr(b.getArrayAttr(names));
  }
  if (p.workerMemoryBytes > 0 || p.hostMemoryBytes > 0)
    plan.setMaxSeqLenAttr(i64(planner::maxSequenceLength(
        p, double(tokens) / double(c.microbatches))));
  if (p.replicas > 1) {
    // The same plan's overlapped step for 1, 2, 4, ... replicas, with the
    // optimizer sharded and not, so that --explain can say where another
    // replica stops paying and what sharding saves.
    SmallVector<double> scaling[2];
    for (int r = 1; r <= std::max(32, p.replicas); r *= 2) {
      for (int sharded = 0; sharded < 2; ++sharded) {
        planner::PlanProblem q = p;
        q.replicas = r;
        q.shardOptimizer = sharded;
        planner::SimOptions overlapped;
        scaling[sharded].push_back(
            round6(planner::simulate(q, c.plan, overlapped).stepSeconds));
      }
    }
    plan.setReplicasAttr(i64(p.replicas));
    plan.setReplicaLinkBandwidthAttr(f64(p.replicaBytesPerSecond));
    plan.setReplicaScalingAttr(
        b.getDenseF64ArrayAttr(scaling[p.shardOptimizer]));
    plan.setReplicaScalingOtherModeAttr(
        b.getDenseF64ArrayAttr(scaling[!p.shardOptimizer]));
    plan.setShardOptimizerAttr(b.getBoolAttr(p.shardOptimizer));
    plan.setReplicasPerHostAttr(i64(p.replicasPerHost));
    if (p.replicaHostCrossingBytesPerSecond > 0)
      plan.setReplicaHostCrossingBandwidthAttr(
          f64(p.replicaHostCrossingBytesPerSecond));
  }
  if (!p.sharedParams.empty()) {
    SmallVector<Attribute> shared;
    for (const planner::SharedParam &sp : p.sharedParams) {
      SmallVector<NamedAttribute> entry = {
          b.getNamedAttr("param_bytes", f64(sp.paramBytes)),
          b.getNamedAttr("grad_bytes", f64(sp.gradBytes)),
          b.getNamedAttr("layers", b.getDenseI64ArrayAttr(SmallVector<int64_t>(
                                       sp.layers.begin(), sp.layers.end())))};
      if (sp.residentBytes)
        entry.push_back(
            b.getNamedAttr("resident_bytes", f64(*sp.residentBytes)));
      shared.push_back(b.getDictionaryAttr(entry));
    }
    plan.setSharedParamsAttr(b.getArrayAttr(shared));
  }
  Block *body = new Block();
  plan.getBody().push_back(body);
  OpBuilder inner = OpBuilder::atBlockEnd(body);
  for (auto [i, layer] : llvm::enumerate(p.layers)) {
    LayerKind kind =
        layer.kind == planner::LayerKind::Prefix ? LayerKind::prefix
        : layer.kind == planner::LayerKind::Tail ? LayerKind::tail
                                                 : LayerKind::block;
    LayerOp::create(inner, loc, i64(i), LayerKindAttr::get(ctx, kind),
                    f64(layer.forwardFlops), f64(layer.backwardFlops),
                    f64(layer.forwardSeconds), f64(layer.backwardSeconds),
                    f64(layer.paramBytes), f64(layer.gradBytes),
                    f64(layer.inputBytes), f64(layer.workspaceBytes),
                    f64(p.trainableParams[i]),
                    layer.backwardWork ? nullptr : inner.getUnitAttr(),
                    layer.residentBytes ? f64(*layer.residentBytes) : nullptr);
  }
  // Forward stages checkpoint the input of every backward stage's first
  // layer that they compute (layer 0's input is the token data itself).
  std::vector<planner::Stage> jobs = c.plan.jobs();
  SmallVector<Attribute> jobRefs;
  for (auto [j, stage] : llvm::enumerate(jobs)) {
    planner::StageCost sc = planner::costStage(p, stage);
    SmallVector<int64_t> checkpoints;
    if (stage.kind == planner::StageKind::Forward)
      for (const planner::Stage &bwd : c.plan.backward)
        if (bwd.first >= stage.first && bwd.first < stage.end)
          checkpoints.push_back(bwd.first);
    llvm::sort(checkpoints);
    StageKind kind =
        stage.kind == planner::StageKind::Forward ? StageKind::forward
        : stage.kind == planner::StageKind::Tail  ? StageKind::tail
                                                  : StageKind::backward;
    std::string name = planner::stageName(c.plan, static_cast<int>(j));
    StageOp::create(
        inner, loc, str(name), StageKindAttr::get(ctx, kind), i64(stage.first),
        i64(stage.end), b.getDenseI64ArrayAttr(checkpoints),
        f64(sc.computeSeconds), f64(sc.hopSeconds), f64(sc.uploadSeconds),
        f64(sc.downloadSeconds), f64(sc.jobSeconds), f64(sc.paramBytes),
        f64(sc.gradBytes), f64(sc.activationBytes),
        f64(round6(sc.paramBytes) + round6(sc.gradBytes) +
            round6(sc.activationBytes)));
    jobRefs.push_back(FlatSymbolRefAttr::get(ctx, name));
  }
  ScheduleOp::create(inner, loc, i64(0), b.getArrayAttr(jobRefs));
  return plan;
}
