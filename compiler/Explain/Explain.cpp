//===- Explain.cpp - Human-readable plans -----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Everything printed is read back from the `pipe` IR (and re-simulated from
// it), so the explanation describes exactly the plan the executor gets.
//
//===----------------------------------------------------------------------===//

#include "Explain/Explain.h"

#include "CostModel/CostModel.h"
#include "Dialect/Pipe/IR/PipeOps.h"
#include "Dialect/TG/IR/TGDialect.h"
#include "Dialect/TG/IR/TGOps.h"
#include "Target/Target.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <limits>
#include <sstream>

using namespace mlir;
using namespace rondo;
using namespace rondo::pipe;

static std::string sig(double value) {
  std::string out;
  llvm::raw_string_ostream(out) << llvm::format("%.4g", value);
  return out;
}
static std::string mb(double bytes) { return sig(bytes / 1e6); }
static std::string gb(double bytes) {
  return bytes < 1e9 ? sig(bytes / 1e6) + " MB" : sig(bytes / 1e9) + " GB";
}
static std::string ms(double seconds) {
  return llvm::formatv("{0:f3}", seconds * 1e3);
}

// The "Why:" paragraph has always printed two decimals.
static std::string gb2(double bytes) {
  return llvm::formatv("{0:f2} GB", bytes / 1e9);
}
static std::string ms2(double seconds) {
  return llvm::formatv("{0:f2} ms", seconds * 1e3);
}

/// Which constraint limited the plan (#pipe.bound), in words.
static void explainBound(PlanOp plan, const planner::Plan &partition,
                         llvm::raw_ostream &os) {
  BoundAttr bound = plan.getBound();
  int64_t workers = plan.getWorkers();
  auto num = [](const APFloat &v) { return v.convertToDouble(); };
  StringRef name = bound.getStage();
  double slowest = num(bound.getSlowestSeconds());
  double compute = num(bound.getComputeSeconds());
  switch (bound.getKind()) {
  case BoundKind::upload:
    os << "the host link: uploading " << name << "'s parameters ("
       << gb2(num(bound.getParamBytes())) << ") takes "
       << ms2(num(bound.getUploadSeconds())) << " at "
       << llvm::formatv("{0:f1}", num(bound.getLinkBandwidth()) / 1e9)
       << " GB/s per worker, longer than its compute (" << ms2(compute) << ")";
    break;
  case BoundKind::download:
    os << "the host link: downloading " << name << "'s gradients takes "
       << ms2(num(bound.getDownloadSeconds())) << ", longer than its compute";
    break;
  case BoundKind::single_layer:
    os << "the heaviest single layer: " << name << " (" << bound.getLayer()
       << ") takes " << ms2(slowest)
       << " per stage-job and cannot be split; the other stages are packed "
          "up to it";
    break;
  case BoundKind::balance:
    os << "stage balance: the slowest stage-job is " << name << " ("
       << ms2(slowest) << ")";
    break;
  }
  int64_t k = partition.numJobs();
  if (k < workers)
    os << "; only " << k << " stage-jobs per step for " << workers
       << " workers";
  double worker = num(bound.getWorkerArenaBytes());
  double budget = num(bound.getWorkerBudgetBytes());
  if (budget > 0 && worker > 0.9 * budget)
    os << "; worker memory is nearly full (" << gb2(worker) << " of "
       << gb2(budget) << ")";
  double step = num(bound.getStepSeconds());
  double optimizer = num(bound.getOptimizerSeconds());
  if (optimizer > 0.7 * step)
    os << "; the host optimizer is nearly saturated (" << ms2(optimizer)
       << " of AdamW per " << ms2(step)
       << " step): a faster host or fewer trainable parameters is the next "
          "limit";
  os << ". Bubble " << llvm::formatv("{0:f1}", 100 * num(bound.getBubble()))
     << "% with the overlapped optimizer: stage-jobs range from "
     << ms2(num(bound.getFastestSeconds())) << " to " << ms2(slowest)
     << ", and a stage waits for its predecessor's microbatches";
  double exposed = num(bound.getExposedUpdateSeconds());
  if (exposed > 0.1 * step)
    os << " and for the update of the stage-job that finishes the "
          "gradients of its weights ("
       << ms2(exposed) << " per step; --optimizer-mode=stale hides it, "
       << "one step late)";
  os << "; " << llvm::formatv("{0:f1}", 100 * num(bound.getSyncBubble()))
     << "% with the synchronous optimizer, which also drains the pipeline "
        "and waits for the update every step.";

  // Fewer forward stages than workers: what N balanced ones would cost.
  DenseI64ArrayAttr balanced = bound.getBalancedForward();
  if (!balanced && bound.getBalancedUnfit().empty())
    return;
  // The search ranks plans by their slowest stage-job, where splitting
  // cheap forward stages gains nothing; the replay may still find the split
  // faster (a step's jobs start only once the previous step's have ended).
  const bool splitIsFaster =
      balanced && num(bound.getBalancedStepSeconds()) < step;
  os << " Forward stages: " << partition.forward.size() << " for " << workers
     << " workers, because forward stage-jobs are cheap (no recompute, no "
        "gradients) and splitting them adds stage-jobs without shortening "
        "the slowest one"
     << (splitIsFaster ? " (the search's measure)" : "");
  if (!balanced) {
    os << "; " << workers << " forward stages would not fit ("
       << bound.getBalancedUnfit() << ").";
    return;
  }
  os << ": the same plan with " << workers
     << " balanced forward stages (--stages=fwd:";
  llvm::interleave(balanced.asArrayRef(), os, "+");
  os << ",tail:" << partition.tail.end - partition.tail.first << ",bwd:";
  for (auto [i, st] : llvm::enumerate(partition.backward))
    os << (i ? "+" : "") << st.end - st.first;
  os << ") is predicted at " << ms2(num(bound.getBalancedStepSeconds()))
     << " per step against " << ms2(step)
     << (splitIsFaster ? ", faster in the replay; --stages forces it" : "")
     << ".";
}

/// How the partitioner chose the plan (#pipe.search), in words.
static void explainSearch(PlanOp plan, llvm::raw_ostream &os) {
  SearchAttr search = plan.getSearch();
  ArrayRef<int64_t> counts = search.getMicrobatchCounts().asArrayRef();
  int64_t n = plan.getWorkers(), m = plan.getMicrobatches();
  os << " Searched " << search.getCandidates() << " candidate plan(s) over "
     << (counts.size() == 1 ? "M = " : "M in {");
  llvm::interleaveComma(counts, os);
  llvm::StringRef mode = search.getOptimizerMode();
  os << (counts.size() == 1 ? "" : "}")
     << "; kept the shortest predicted step with the " << mode
     << " optimizer, the mode the trainer runs by default (rondo-compile "
        "--optimizer-mode)";
  if (search.getSharedMicrobatches())
    os << "; M = " << m
       << " for every compiled worker count, so that they train to the same "
          "bits (of the M they all can use, the one that slows any count "
          "least against its own best M; --microbatches fixes another)";
  else if (search.getAutoMicrobatches())
    os << "; M chosen for this worker count alone";
  if (m < n + 1 && search.getAutoMicrobatches())
    os << " (M = " << m << " < N + 1 = " << n + 1
       << " because a microbatch is a whole number of rows and the batch "
          "has "
       << plan.getBatch() << "; workers wait for hand-offs)";
  if (plan.getStrategy() == "exact")
    os << (search.getExactOptimum()
               ? ", which is also the exact optimum of max(K, N) * slowest "
                 "stage-job"
               : ", finer than the exact optimum of max(K, N) * slowest "
                 "stage-job (better balance outweighs the extra jobs)");
  os << ".";
}

/// Where the plan's attention runs on a GPU, as the cost model priced it:
/// cuDNN's fused graph, or Rondo's flash kernels and why (a backward whose
/// deterministic workspace exceeds the runtime's limit runs 2.3x slower
/// there: Llama-3.2-1B's shape at 4 rows a microbatch).
static void explainAttention(PlanOp plan, llvm::raw_ostream &os) {
  auto module = plan->getParentOfType<ModuleOp>();
  if (!module)
    return;
  FailureOr<std::optional<TargetConfig>> target = getModuleTarget(module);
  if (failed(target) || !*target || (*target)->backend != "cuda")
    return;
  auto func = module.lookupSymbol<func::FuncOp>(plan.getFunction());
  if (!func)
    return;
  llvm::Expected<cost::DeviceSpec> spec =
      cost::lookupDeviceSpec((*target)->device);
  if (!spec) {
    // The planner has reported a bad spec already.
    llvm::consumeError(spec.takeError());
    return;
  }
  cost::CostOptions options;
  options.microbatches = plan.getMicrobatches();
  options.workers = plan.getWorkers();
  options.bf16 = (*target)->isBf16();
  // One line per direction and implementation, in the function's order.
  SmallVector<std::string> lines;
  func.walk([&](Operation *op) {
    std::optional<std::string> impl =
        cost::attentionImplementation(op, *spec, options);
    if (!impl)
      return;
    std::string line =
        (isa<tg::AttentionOp>(op) ? "forward on " : "backward on ") + *impl;
    if (!llvm::is_contained(lines, line))
      lines.push_back(line);
  });
  if (lines.empty())
    return;
  os << "\nAttention (as priced):";
  for (const std::string &line : lines)
    os << "\n  " << line;
  os << "\n";
}

static void explainPlan(PlanOp plan, llvm::raw_ostream &os) {
  planner::PlanProblem problem = plan.buildProblem();
  planner::Plan partition = plan.buildPlan();
  int64_t n = plan.getWorkers(), m = plan.getMicrobatches();
  int64_t tokens = plan.getTokensPerStep();
  double step = plan.getPrediction().getStep().convertToDouble();
  double syncStep = plan.getPrediction().getSyncStep().convertToDouble();

  os << llvm::formatv("== Plan @{0}: {1} worker(s), {2} ({3}), strategy {4}\n",
                      plan.getSymName(), n, plan.getDevice(),
                      plan.getPrecision(), plan.getStrategy());
  os << llvm::formatv("Step: {0} rows, {1} tokens, cut into {2} "
                      "microbatches of {3} rows\n\n",
                      plan.getBatch(), tokens, m, plan.getRowsPerMicrobatch());

  os << "Layers (costs of one microbatch";
  if (problem.sharedCores > 0)
    os << "; each op's time is its CPU kernels' measured on this machine at "
          "the microbatch's shape";
  os << "):\n";
  os << llvm::formatv("{0,4} {1,-7} {2,10} {3,10} {4,9} {5,9} {6,10} "
                      "{7,9} {8,9} {9,12}\n",
                      "#", "kind", "fwd GFLOP", "bwd GFLOP", "fwd ms", "bwd ms",
                      "params MB", "grads MB", "input MB", "workspace MB");
  for (LayerOp layer : plan.getLayers())
    os << llvm::formatv(
        "{0,4} {1,-7} {2,10} {3,10} {4,9} {5,9} {6,10} {7,9} {8,9} "
        "{9,12}\n",
        layer.getIndex(), stringifyLayerKind(layer.getKind()),
        sig(layer.getFwdFlops().convertToDouble() / 1e9),
        sig(layer.getBwdFlops().convertToDouble() / 1e9),
        ms(layer.getFwdSeconds().convertToDouble()),
        ms(layer.getBwdSeconds().convertToDouble()),
        mb(layer.getParamBytes().convertToDouble()),
        mb(layer.getGradBytes().convertToDouble()),
        mb(layer.getInputBytes().convertToDouble()),
        mb(layer.getWorkspaceBytes().convertToDouble()));

  ScheduleOp schedule = plan.getSchedule();
  os << llvm::formatv(
      "\nStages in job order (job n of step s runs on worker ({0} + s*{1} + "
      "n) mod {2}):\n",
      schedule.getFirstWorker(), schedule.getJobs().size(), n);
  os << llvm::formatv("{0,4} {1,-6} {2,-8} {3,-9} {4,12} {5,9} {6,9} "
                      "{7,11} {8,10} {9,9} {10,9} {11,9}  {12}\n",
                      "job", "stage", "kind", "layers", "compute/mb ms",
                      "job ms", "upload ms", "download ms", "params MB",
                      "grads MB", "act MB", "mem MB", "checkpoints");
  for (auto [j, job] : llvm::enumerate(schedule.getJobs())) {
    auto stage = cast<StageOp>(SymbolTable::lookupSymbolIn(
        plan, cast<SymbolRefAttr>(job).getRootReference()));
    std::string layers =
        llvm::formatv("[{0},{1})", stage.getFirst(), stage.getEnd());
    std::string checkpoints;
    llvm::raw_string_ostream cos(checkpoints);
    llvm::interleaveComma(stage.getCheckpoints(), cos);
    os << llvm::formatv(
        "{0,4} {1,-6} {2,-8} {3,-9} {4,12} {5,9} {6,9} {7,11} {8,10} {9,9} "
        "{10,9} {11,9}  {12}\n",
        j, stage.getSymName(), stringifyStageKind(stage.getKind()), layers,
        ms(stage.getComputeSeconds().convertToDouble()),
        ms(stage.getJobSeconds().convertToDouble()),
        ms(stage.getUploadSeconds().convertToDouble()),
        ms(stage.getDownloadSeconds().convertToDouble()),
        mb(stage.getParamBytes().convertToDouble()),
        mb(stage.getGradBytes().convertToDouble()),
        mb(stage.getActivationBytes().convertToDouble()),
        mb(stage.getMemoryBytes().convertToDouble()), checkpoints);
  }

  double worker = plan.getMemory().getWorkerPeak().convertToDouble();
  double host = plan.getMemory().getHostPeak().convertToDouble();
  double state = planner::hostStateBytes(problem);
  os << "\nMemory:\n";
  os << "  per worker: " << gb(worker) << " of a "
     << gb(plan.getMemory().getWorkerBudget().convertToDouble())
     << " budget (the executor's arena: two parameter slots, gradients, "
        "hand-off and checkpoint buffers; plus the largest stage's "
        "temporaries)\n";
  os << "  host:       " << gb(host) << " of a "
     << gb(plan.getMemory().getHostBudget().convertToDouble()) << " budget ("
     << gb(state) << " weights, moments, streamed gradients and upload copies; "
     << gb(host - state) << " checkpoints and hand-off staging)\n";
  if (std::optional<APFloat> mapped = plan.getMappedWeightBytes())
    os << "  mapped:     " << gb(mapped->convertToDouble())
       << " of frozen fp32 weights used in place from their external-data "
          "files, not counted above (trainer --map-weights=auto maps them: "
          "they exceed half of the host budget)\n";
  if (ArrayAttr frozen = plan.getFrozenBf16Attr()) {
    // Sizes from @main's arguments, which the names are of.
    llvm::DenseSet<Attribute> names(frozen.begin(), frozen.end());
    double elements = 0;
    if (auto module = plan->getParentOfType<ModuleOp>())
      if (auto main = module.lookupSymbol<func::FuncOp>(plan.getFunction()))
        for (unsigned i = 0; i < main.getNumArguments(); ++i)
          if (names.contains(main.getArgAttr(i, tg::kParamAttr)))
            elements += double(
                cast<ShapedType>(main.getArgumentTypes()[i]).getNumElements());
    std::string count =
        elements >= 1e9   ? llvm::formatv("{0:f2}B", elements / 1e9).str()
        : elements >= 1e6 ? llvm::formatv("{0:f1}M", elements / 1e6).str()
                          : llvm::formatv("{0:N}", int64_t(elements)).str();
    os << "  frozen:     " << frozen.size() << " frozen weights (" << count
       << " parameters) held in bf16 alone, on the host and in stage images: "
       << gb(2 * elements) << " instead of " << gb(4 * elements)
       << " (only matrix products read them, which round them to bf16 "
          "anyway; --frozen-storage=fp32 keeps them in fp32)\n";
  }
  if (std::optional<uint64_t> longest = plan.getMaxSeqLen())
    os << "  longest sequence these budgets hold: "
       << (*longest == 0 ? std::string("none (not even 256 tokens)")
                         : std::to_string(*longest) + " tokens")
       << " per row, one row per microbatch, one layer per stage (each "
          "backward stage recomputes one layer from its checkpoint; "
          "activations grow linearly with the sequence)\n";

  explainAttention(plan, os);

  if (plan.getResidentParams() || plan.getResidencyAlternatives()) {
    // The residencies the planner weighed for this plan, fastest first.
    std::string chosen = "streamed";
    if (std::optional<ArrayRef<int64_t>> layers = plan.getResidentLayers())
      chosen =
          int64_t(layers->size()) == int64_t(llvm::range_size(plan.getLayers()))
              ? "device"
              : "mixed";
    os << "\nResidency: " << chosen;
    if (chosen == "device")
      os << " (every parameter's weights, gradients and AdamW moments stay "
            "in the worker's memory: no uploads, no gradient downloads, "
            "AdamW on the worker)";
    else if (chosen == "mixed")
      os << (plan.getResidentLayers()->size() == 1 ? " (layer " : " (layers ")
         << llvm::join(
                llvm::map_range(*plan.getResidentLayers(),
                                [](int64_t l) { return std::to_string(l); }),
                ",")
         << (plan.getResidentLayers()->size() == 1 ? " stays" : " stay")
         << " in the worker's memory; the others stream)";
    else
      os << " (weights stream from the host for every stage-job, AdamW on "
            "the host)";
    os << "\n";
    if (DictionaryAttr alternatives = plan.getResidencyAlternativesAttr()) {
      // Fastest first; those that do not fit (-1) last.
      SmallVector<std::pair<double, StringRef>> ranked;
      for (NamedAttribute a : alternatives) {
        double seconds = cast<FloatAttr>(a.getValue()).getValueAsDouble();
        ranked.push_back(
            {seconds < 0 ? std::numeric_limits<double>::infinity() : seconds,
             a.getName()});
      }
      llvm::sort(ranked);
      for (auto [seconds, name] : ranked) {
        if (std::isinf(seconds)) {
          os << llvm::formatv("  {0,-9} does not fit the worker and host "
                              "budgets\n",
                              name);
          continue;
        }
        os << llvm::formatv("  {0,-9} {1} ms/step predicted{2}\n", name,
                            ms(seconds),
                            name == chosen ? "  <- chosen: the fastest that "
                                             "fits the budgets"
                                           : "");
      }
      os << "  (device-resident state needs one worker and one replica; "
            "one-step-stale updates stream; --residency forces one)\n";
    }
  }

  os << "\nPredicted step (steady state):\n";
  os << llvm::formatv("  overlapped optimizer: {0} ms/step, {1:f0} tokens/s, "
                      "bubble {2:f1}%\n",
                      ms(step), tokens / step,
                      100 * plan.getPrediction().getBubble().convertToDouble());
  os << llvm::formatv(
      "  synchronous optimizer: {0} ms/step, {1:f0} "
      "tokens/s, bubble {2:f1}%\n",
      ms(syncStep), tokens / syncStep,
      100 * plan.getPrediction().getSyncBubble().convertToDouble());
  if (APFloat stale = plan.getPrediction().getStaleStep(); !stale.isZero()) {
    double staleStep = stale.convertToDouble();
    os << llvm::formatv("  one-step-stale optimizer (trainer "
                        "--optimizer-mode=stale): {0} ms/step, {1:f0} "
                        "tokens/s\n",
                        ms(staleStep), tokens / staleStep);
  }
  os << llvm::formatv("  (bubble = 1 - sum of worker compute time / ({0} x "
                      "step time); link {1:f1} GB/s per worker per "
                      "direction{2})\n",
                      n, problem.linkBytesPerSecond / 1e9,
                      n == 1 && problem.localCopyBytesPerSecond > 0
                          ? llvm::formatv(", hand-offs copied within the "
                                          "worker at {0:f0} GB/s",
                                          problem.localCopyBytesPerSecond / 1e9)
                                .str()
                      : problem.peerBytesPerSecond > 0
                          ? llvm::formatv(", peer {0:f0} GB/s",
                                          problem.peerBytesPerSecond / 1e9)
                                .str()
                          : std::string(", hand-offs staged through the host"));
  if (problem.sharedCores > 0)
    os << llvm::formatv("  (the workers and the host optimizer share {0} "
                        "cores: a step takes at least their work spread over "
                        "them)\n",
                        problem.sharedCores);
  if (problem.hostMemoryBytesPerSecond > 0) {
    // What the host's shared memory does to the host work of the step.
    planner::SimOptions overlapped;
    overlapped.firstWorker =
        static_cast<int>(plan.getSchedule().getFirstWorker());
    planner::SimResult sim = planner::simulate(problem, partition, overlapped);
    if (sim.stepEndPassSecondsPerStep > 0) {
      const int processes = planner::processesPerHost(problem);
      os << llvm::formatv(
          "  (host memory {0:f0} GB/s, shared by the host AdamW ({1:f0} B a "
          "parameter), the trainer's pass over the gradients for the logged "
          "norm and the host copies of {2} worker(s){3}: the optimizer's "
          "tasks take {4} ms a step ({5} ms alone), the end-of-step pass {6} "
          "ms)\n",
          problem.hostMemoryBytesPerSecond / 1e9,
          planner::kOptimizerHostBytesPerParam, n,
          processes > 1
              ? llvm::formatv(" in each of {0} replica processes", processes)
                    .str()
              : std::string(),
          ms(sim.optimizerSecondsPerStep), ms(sim.optimizerAloneSecondsPerStep),
          ms(sim.stepEndPassSecondsPerStep));
    }
  }
  if (auto replicas = plan.getReplicas()) {
    // The same plan with 1, 2, 4, ... replicas: each one adds its tokens,
    // and its share of the gradient traffic lengthens every optimizer task.
    ArrayRef<double> scaling = *plan.getReplicaScaling();
    // The same with --shard-optimizer flipped.
    std::optional<ArrayRef<double>> otherMode =
        plan.getReplicaScalingOtherMode();
    const bool sharded = plan.getShardOptimizer().value_or(false);
    const int64_t perHost = plan.getReplicasPerHost().value_or(1);
    double bandwidth = plan.getReplicaLinkBandwidth()
                           ? plan.getReplicaLinkBandwidth()->convertToDouble()
                           : problem.replicaBytesPerSecond;
    os << llvm::formatv(
        "\nReplicas (trainer --replicas; {0}; {1:f1} GB/s between replicas, "
        "{2} per host):\n",
        sharded ? "optimizer sharded: each optimizer task reduce-scatters its "
                  "stage's gradients, updates this replica's 1/R and "
                  "all-gathers the weights"
                : "gradients summed across replicas (all-reduce) by each "
                  "optimizer task, every replica runs the whole optimizer",
        bandwidth / 1e9, perHost);
    os << "  replicas   ms/step   tokens/s (all)   efficiency"
       << (otherMode ? llvm::formatv("   {0} ms/step",
                                     sharded ? "unsharded" : "sharded")
                           .str()
                     : std::string())
       << "\n";
    double one = scaling.empty() ? step : scaling.front();
    // The largest count up to which every count keeps 80% efficiency.
    int64_t paysUpTo = 1;
    bool paying = true;
    for (auto [k, s] : llvm::enumerate(scaling)) {
      int64_t r = int64_t(1) << k;
      double efficiency = one / s;
      paying = paying && efficiency >= 0.8;
      if (paying)
        paysUpTo = r;
      os << llvm::formatv("  {0,8}{1}  {2,8}   {3,14:f0}   {4,9:f1}%", r,
                          r == int64_t(*replicas) ? "*" : " ", ms(s),
                          double(r) * tokens / s, 100 * efficiency);
      if (otherMode && k < otherMode->size())
        os << llvm::formatv("   {0,17}", ms((*otherMode)[k]));
      os << "\n";
    }
    const int64_t largest = int64_t(1) << (scaling.size() - 1);
    if (paysUpTo >= largest)
      os << llvm::formatv("  (* this plan's --replicas {0}) Every replica "
                          "count up to {1} keeps 80% efficiency or better: "
                          "the gradient traffic hides behind the backward.\n",
                          *replicas, largest);
    else
      os << llvm::formatv(
          "  (* this plan's --replicas {0}) Adding replicas pays (80% "
          "efficiency or better) up to {1}; beyond, the gradient traffic "
          "and the optimizer outlast the backward they hide behind and "
          "lengthen the step.\n",
          *replicas, paysUpTo);
    // The table has powers of two only.
    if (otherMode && llvm::isPowerOf2_64(uint64_t(*replicas))) {
      size_t k = size_t(llvm::Log2_64(uint64_t(*replicas)));
      if (k < scaling.size() && k < otherMode->size()) {
        double with = sharded ? scaling[k] : (*otherMode)[k];
        double without = sharded ? (*otherMode)[k] : scaling[k];
        os << llvm::formatv(
            "  Sharding the optimizer {0} {1} ms/step at --replicas {2} "
            "(same bytes on the link; 1/R of AdamW and its state per "
            "replica){3}.\n",
            with <= without ? "saves" : "costs", ms(std::abs(without - with)),
            *replicas,
            sharded ? "" : "; the plan assumes --shard-optimizer=off");
      }
    }
  }
  os << "\nWhy: ";
  explainBound(plan, partition, os);
  explainSearch(plan, os);
  os << "\n\n";
}

/// rondo-compile --gpus: every layout weighed, with its predicted step and
/// throughput at the global batch, and why the chosen one won.
static void explainLayouts(ModuleOp module, llvm::raw_ostream &os) {
  SmallVector<PlanOp> layouts;
  PlanOp chosen;
  for (PlanOp plan : module.getOps<PlanOp>())
    if (plan.getLayoutGpus()) {
      layouts.push_back(plan);
      if (plan.getLayoutChosen())
        chosen = plan;
    }
  if (layouts.empty() || !chosen)
    return;
  const int64_t gpus = *chosen.getLayoutGpus();
  const int64_t replicas0 = chosen.getReplicas().value_or(1);
  const double globalTokens =
      double(chosen.getTokensPerStep()) * double(replicas0);
  auto residency = [](PlanOp plan) -> std::string {
    if (!plan.getResidentLayers())
      return "streamed";
    return plan.getResidentLayers()->size() == plan.getLayers().size()
               ? "device"
               : "mixed";
  };
  os << llvm::formatv(
      "== Layouts for {0} GPUs ({1} tokens per step, every layout the same "
      "global batch; replicas x workers, each replica training its share):\n",
      gpus, int64_t(globalTokens));
  os << llvm::formatv("  {0,-8} {1,-9} {2,-12} {3,10} {4,12} {5,8}\n", "layout",
                      "residency", "microbatches", "ms/step", "tokens/s",
                      "vs best");
  const double best = chosen.getPrediction().getStep().convertToDouble();
  PlanOp runnerUp;
  for (PlanOp plan : layouts) {
    const double step = plan.getPrediction().getStep().convertToDouble();
    const int64_t r = plan.getReplicas().value_or(1);
    os << llvm::formatv("  {0,-8} {1,-9} {2,-12} {3,10} {4,12} {5,7}x{6}\n",
                        llvm::formatv("{0}x{1}", r, plan.getWorkers()).str(),
                        residency(plan),
                        llvm::formatv("{0} x {1}", plan.getMicrobatches(),
                                      plan.getRowsPerMicrobatch())
                            .str(),
                        ms(step), sig(globalTokens / step), sig(best / step),
                        plan == chosen ? "  <- chosen" : "");
    if (plan != chosen &&
        (!runnerUp ||
         step < runnerUp.getPrediction().getStep().convertToDouble()))
      runnerUp = plan;
  }
  if (ArrayAttr unfit = chosen.getLayoutsUnfitAttr())
    for (Attribute a : unfit)
      os << "  " << cast<StringAttr>(a).getValue()
         << ": no plan within the memory budgets\n";
  os << llvm::formatv(
      "Chosen: {0} replica(s) x {1} worker(s) (@{2}), the fastest predicted "
      "step",
      replicas0, chosen.getWorkers(), chosen.getSymName());
  if (runnerUp)
    os << llvm::formatv(
        "; the next, {0}x{1}, is predicted {2}% slower",
        runnerUp.getReplicas().value_or(1), runnerUp.getWorkers(),
        llvm::formatv(
            "{0:f0}",
            100 * (runnerUp.getPrediction().getStep().convertToDouble() / best -
                   1))
            .str());
  os << ". The trainer runs it by default (starting its replicas itself "
        "when nothing launched them); --replicas R --workers N picks another"
        ".\n\n";
}

void rondo::printExplanation(ModuleOp module, llvm::raw_ostream &os) {
  explainLayouts(module, os);
  for (PlanOp plan : module.getOps<PlanOp>())
    explainPlan(plan, os);
}

LogicalResult rondo::writeFileAtomically(StringRef path, StringRef contents,
                                         std::string &error) {
  std::string tmp = (path + ".tmp-rondo").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec) {
      error = "cannot write '" + tmp + "': " + ec.message();
      return failure();
    }
    os << contents;
    os.close();
    if (os.has_error()) {
      error = "cannot write '" + tmp + "': " + os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return failure();
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    error = "cannot write '" + path.str() + "': " + ec.message();
    llvm::sys::fs::remove(tmp);
    return failure();
  }
  return success();
}

LogicalResult rondo::writeExplainDir(ModuleOp module, StringRef dir,
                                     std::string &error) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
    error = "cannot create '" + dir.str() + "': " + ec.message();
    return failure();
  }
  {
    std::string text;
    llvm::raw_string_ostream tos(text);
    explainLayouts(module, tos);
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, "layouts.txt");
    if (!text.empty() && failed(writeFileAtomically(path, text, error)))
      return failure();
  }
  for (PlanOp plan : module.getOps<PlanOp>()) {
    std::string text;
    llvm::raw_string_ostream tos(text);
    explainPlan(plan, tos);
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, plan.getSymName() + ".txt");
    if (failed(writeFileAtomically(path, text, error)))
      return failure();

    planner::PlanProblem problem = plan.buildProblem();
    planner::Plan partition = plan.buildPlan();
    planner::SimOptions options;
    options.firstWorker = static_cast<int>(plan.getSchedule().getFirstWorker());
    planner::SimResult sim = planner::simulate(problem, partition, options);
    std::ostringstream svg;
    std::string title = llvm::formatv(
        "{0}: {1} worker(s) on {2}, {3} microbatches, predicted {4} ms/step, "
        "bubble {5:f1}% (overlapped optimizer)",
        plan.getSymName(), plan.getWorkers(), plan.getDevice(),
        plan.getMicrobatches(), ms(sim.stepSeconds), 100 * sim.bubbleFraction);
    planner::writeGanttSvg(svg, problem, partition, sim, title);
    path = dir;
    llvm::sys::path::append(path, plan.getSymName() + ".svg");
    if (failed(writeFileAtomically(path, svg.str(), error)))
      return failure();
  }
  // The plans only: the training function is --emit=train's business and
  // can be large (folded tables).
  std::string ir;
  llvm::raw_string_ostream irs(ir);
  for (PlanOp plan : module.getOps<PlanOp>()) {
    plan.print(irs);
    irs << "\n";
  }
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "plan.mlir");
  return writeFileAtomically(path, ir, error);
}
