//===- Partition.cpp - pipe-partition ---------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The pass is the glue between the IR and the planner core
// (compiler/Planner): it builds the layer table with the cost model for each
// candidate number of microbatches, lets the planner choose stages, keeps
// the candidate with the best simulated step time, and writes the result as
// a `pipe.plan`. When nothing fits, it reports the numbers and the smallest
// configuration that would.
//
//===----------------------------------------------------------------------===//

#include "CostModel/CostModel.h"
#include "Dialect/Pipe/Transforms/Passes.h"
#include "Dialect/TG/IR/TGOps.h"
#include "PlanOpBuilder.h"
#include "Target/Target.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace rondo::pipe {
#define GEN_PASS_DEF_PIPEPARTITIONPASS
#include "Dialect/Pipe/Transforms/Passes.h.inc"
} // namespace rondo::pipe

using namespace mlir;
using namespace rondo;
using namespace rondo::pipe;

namespace {

/// Two decimals of GB, or the bytes where those would round a small
/// budget or need to 0.00 GB.
std::string gb(double bytes) {
  if (bytes < 1e7)
    return llvm::formatv("{0} bytes", int64_t(std::llround(bytes)));
  return llvm::formatv("{0:f2} GB", bytes / 1e9);
}

/// Whether the executor's arena for `plan` (planner::workerArenaBytes) fits
/// the worker budget.
bool fitsArena(const planner::PlanProblem &problem, const planner::Plan &plan,
               std::string *why) {
  double arena = planner::workerArenaBytes(problem, plan);
  if (problem.workerMemoryBytes <= 0 || arena <= problem.workerMemoryBytes)
    return true;
  if (why)
    *why = "worker memory: the executor needs " + gb(arena) +
           " (parameter, gradient, hand-off and checkpoint buffers, each "
           "sized by its largest stage, plus the largest stage's "
           "temporaries), the budget is " +
           gb(problem.workerMemoryBytes);
  return false;
}

/// Every microbatch count's best plan for one worker count.
struct Searched {
  int64_t workers = 0;
  SmallVector<int64_t> counts;
  std::vector<Candidate> perCount;
  int tried = 0;
};

struct PipePartitionPass
    : rondo::pipe::impl::PipePartitionPassBase<PipePartitionPass> {
  using Base::Base;

  /// The layout being searched (--gpus): its replicas, each training
  /// batch / layoutReplicas rows of the global batch. 0 outside a layout
  /// search (the `replicas` option then holds).
  int64_t layoutReplicas = 0;
  /// A layout search reports no error for a layout without a plan.
  bool quietNoFit = false;
  /// Frozen product weights are held in bf16 (`frozen-storage`).
  bool frozenBf16 = false;

  cost::CostOptions costOptions(int64_t microbatches, int64_t n,
                                bool bf16) const {
    cost::CostOptions options{microbatches, n, bf16};
    options.frozenBf16 = frozenBf16;
    return options;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = tg::lookupMain(module, "pipe-partition");
    if (!func)
      return signalPassFailure();
    FailureOr<TargetConfig> target = planTarget(module);
    if (failed(target))
      return signalPassFailure();
    llvm::Expected<cost::DeviceSpec> spec =
        cost::lookupDeviceSpec(target->device);
    if (!spec) {
      module.emitError("--device: ") << llvm::toString(spec.takeError());
      return signalPassFailure();
    }
    if (replicas < 1 || replicas > 65536) {
      module.emitError("--replicas=")
          << static_cast<int64_t>(replicas) << " must be in [1, 65536]";
      return signalPassFailure();
    }
    if (!(replicaLinkGBps > 0)) {
      char value[32];
      std::snprintf(value, sizeof(value), "%g",
                    static_cast<double>(replicaLinkGBps));
      module.emitError("--replica-link-gbps=") << value << " must be positive";
      return signalPassFailure();
    }
    if (replicasPerHost < 1 || replicasPerHost > 65536) {
      module.emitError("--replicas-per-host=")
          << static_cast<int64_t>(replicasPerHost) << " must be in [1, 65536]";
      return signalPassFailure();
    }
    if (strategy != "exact" && strategy != "greedy") {
      module.emitError("--strategy=")
          << strategy << " is not supported (exact or greedy)";
      return signalPassFailure();
    }
    // Host workers live in this machine's RAM: a budget beyond it plans
    // for memory the run will not have.
    if (!spec->isGpu) {
      double physical = cost::physicalMemoryBytes();
      int64_t most = 1;
      for (int64_t n : workers)
        most = std::max(most, n);
      if (physical > 0 && hostMemoryGB * 1e9 > physical)
        module.emitWarning("--host-memory-gb: ")
            << gb(hostMemoryGB * 1e9) << " exceeds this machine's memory ("
            << gb(physical) << ")";
      if (physical > 0 && workerMemoryGB * 1e9 * double(most) > physical)
        module.emitWarning("--worker-memory-gb: ")
            << gb(workerMemoryGB * 1e9) << " for each of " << most
            << " host workers exceeds this machine's memory (" << gb(physical)
            << "): the workers' arenas share it";
    }
    bool bf16 = target->isBf16();
    if (frozenStorage != "" && frozenStorage != "bf16" &&
        frozenStorage != "fp32") {
      module.emitError("--frozen-storage=")
          << frozenStorage << " is not one of bf16, fp32";
      return signalPassFailure();
    }
    if (frozenStorage == "bf16" && !bf16) {
      module.emitError("--frozen-storage=bf16 needs a bf16 plan, but this "
                       "one computes in fp32, so its frozen weights stay "
                       "fp32; drop the option or plan in bf16 "
                       "(precision=bf16 on a GPU device)");
      return signalPassFailure();
    }
    frozenBf16 = bf16 && frozenStorage != "fp32";
    tagOpsCreatedAfterLayerize(func);

    int64_t batch = 0, tokens = 0;
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), tg::kInputAttr)) {
        auto t = cast<RankedTensorType>(arg.getType());
        batch = t.getDimSize(0);
        tokens = t.getNumElements();
        break;
      }
    if (batch <= 0) {
      func.emitError("pipe-partition: @main has no token input to split "
                     "into microbatches");
      return signalPassFailure();
    }

    if (residency != "auto" && residency != "device" &&
        residency != "streamed") {
      module.emitError("--residency=")
          << residency << " is not one of auto, device, streamed";
      return signalPassFailure();
    }
    if (residency == "device")
      for (int64_t n : workers)
        if (n != 1) {
          module.emitError("--residency=device: plans of ")
              << n
              << " workers stream their parameters (device-resident state "
                 "lives on the one worker that runs every stage-job: "
                 "--workers 1)";
          return signalPassFailure();
        }
    if (optimizerMode != "overlap" && optimizerMode != "sync" &&
        optimizerMode != "stale") {
      module.emitError("--optimizer-mode=")
          << optimizerMode << " is not one of overlap, sync, stale";
      return signalPassFailure();
    }
    if (gpus != 0) {
      if (failed(planLayouts(module, func, *spec, bf16, batch, tokens)))
        return signalPassFailure();
      return;
    }
    if (!layouts.empty()) {
      module.emitError("--layouts chooses among the layouts of --gpus, "
                       "which is not given");
      return signalPassFailure();
    }
    SmallVector<int64_t> workerCounts(workers.begin(), workers.end());
    if (workerCounts.empty())
      workerCounts.push_back(1);
    for (int64_t n : workerCounts)
      if (n <= 0) {
        module.emitError("--workers: ") << n << " is not a worker count";
        return signalPassFailure();
      }
    std::vector<Searched> searches;
    for (int64_t n : workerCounts) {
      FailureOr<Searched> searched =
          searchAllCounts(func, *spec, bf16, n, batch);
      if (failed(searched))
        return signalPassFailure();
      searches.push_back(std::move(*searched));
    }
    // One M for every worker count, unless --microbatches fixes it: the
    // losses of a plan depend on M (the gradient is summed microbatch by
    // microbatch), so this is what makes a trainer's worker counts give the
    // same bits. The M kept is the one whose worst step, relative to each
    // count's own best, is least.
    std::optional<int64_t> sharedM = chooseSharedMicrobatches(searches);
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    for (Searched &searched : searches) {
      const Candidate *chosen = nullptr;
      for (const Candidate &c : searched.perCount)
        if (sharedM ? c.microbatches == *sharedM
                    : !chosen || score(c) < score(*chosen))
          chosen = &c;
      // Each residency's best step over the microbatch counts the plan
      // could take (the shared M only, when there is one).
      Candidate withAlternatives = *chosen;
      withAlternatives.residencyAlternatives.clear();
      for (const Candidate &c : searched.perCount) {
        if (sharedM && c.microbatches != *sharedM)
          continue;
        for (const auto &[name, seconds] : c.residencyAlternatives) {
          auto it =
              llvm::find_if(withAlternatives.residencyAlternatives,
                            [&](const auto &a) { return a.first == name; });
          if (it == withAlternatives.residencyAlternatives.end())
            withAlternatives.residencyAlternatives.push_back({name, seconds});
          else if (seconds >= 0 && (it->second < 0 || seconds < it->second))
            it->second = seconds;
        }
      }
      if (withAlternatives.residencyAlternatives.size() < 2)
        withAlternatives.residencyAlternatives.clear();
      chosen = &withAlternatives;
      auto attr = SearchAttr::get(
          &getContext(), searched.tried,
          DenseI64ArrayAttr::get(&getContext(), searched.counts),
          microbatches == 0,
          strategy == "exact" && stages.empty() && chosen->objectiveOptimal,
          optimizerMode, sharedM.has_value());
      buildPlanOp(b, func, *spec, bf16, searched.workers, batch, tokens,
                  *chosen, attr, strategyName());
    }
  }

  /// --gpus G: every layout of R replicas x N workers (R N = G, R dividing
  /// the batch), each replica training batch / R rows of the global batch,
  /// searched like a worker count (its microbatch counts, residencies and
  /// stages) with the replicas' gradient sums in its step. One plan per
  /// layout that fits, the fastest first (the trainer's default) and marked
  /// `layout_chosen`; every plan records the G it is a layout of.
  LogicalResult planLayouts(ModuleOp module, func::FuncOp func,
                            const cost::DeviceSpec &spec, bool bf16,
                            int64_t batch, int64_t tokens) {
    if (gpus < 1 || gpus > 4096)
      return module.emitError("--gpus=")
             << static_cast<int64_t>(gpus) << " must be in [1, 4096]";
    if (!workers.empty())
      return module.emitError("--gpus plans the workers of every layout "
                              "itself; drop --workers");
    if (replicas != 1)
      return module.emitError("--gpus plans the replicas of every layout "
                              "itself; drop --replicas");
    // --layouts RxN[,RxN...] keeps some of them.
    SmallVector<std::pair<int64_t, int64_t>> wanted;
    for (const std::string &l : layouts) {
      int64_t r = 0, n = 0;
      char tail = 0;
      if (std::sscanf(l.c_str(), "%" SCNd64 "x%" SCNd64 "%c", &r, &n, &tail) !=
              2 ||
          r < 1 || n < 1 || r * n != gpus)
        return module.emitError("--layouts: '")
               << l << "' is not a layout of --gpus "
               << static_cast<int64_t>(gpus)
               << " (REPLICASxWORKERS with REPLICAS * WORKERS = "
               << static_cast<int64_t>(gpus) << ")";
      wanted.push_back({r, n});
    }
    if (microbatches > 0 && batch % microbatches != 0)
      return func.emitError("--microbatches=")
             << static_cast<int64_t>(microbatches)
             << " does not divide the batch of " << batch << " rows";
    struct Layout {
      int64_t replicas, workers;
      std::optional<Candidate> best;
      int tried = 0;
      SmallVector<int64_t> counts;
    };
    std::vector<Layout> found;
    // --microbatches is the global batch's count under --gpus: every
    // layout keeps its microbatch shape.
    const int64_t globalM = microbatches;
    quietNoFit = true;
    for (int64_t r = 1; r <= gpus; ++r) {
      if (gpus % r != 0 || batch % r != 0)
        continue;
      if (globalM > 0 && globalM % r != 0)
        continue;
      const int64_t n = gpus / r;
      if (!wanted.empty() &&
          !llvm::is_contained(wanted, std::pair<int64_t, int64_t>{r, n}))
        continue;
      layoutReplicas = r;
      microbatches = globalM > 0 ? globalM / r : 0;
      FailureOr<Searched> searched =
          searchAllCounts(func, spec, bf16, n, batch / r);
      microbatches = globalM;
      layoutReplicas = 0;
      if (failed(searched)) {
        quietNoFit = false;
        return failure();
      }
      Layout layout{r, n, std::nullopt, searched->tried, searched->counts};
      for (Candidate &c : searched->perCount)
        if (!layout.best || score(c) < score(*layout.best))
          layout.best = std::move(c);
      found.push_back(std::move(layout));
    }
    quietNoFit = false;
    const Layout *chosen = nullptr;
    for (const Layout &l : found)
      if (l.best &&
          (!chosen || score(*l.best) < score(*chosen->best) * (1 - 1e-9)))
        chosen = &l;
    if (!chosen) {
      InFlightDiagnostic diag = module.emitError();
      diag << "--gpus " << static_cast<int64_t>(gpus)
           << ": no layout has a plan that fits the memory budgets (weighed:";
      for (const Layout &l : found)
        diag << " " << l.replicas << "x" << l.workers;
      if (found.empty())
        diag << " none: no replica count divides both --gpus and the batch "
                "of "
             << batch << " rows";
      diag << "); plan one layout with --workers to see its numbers";
      return diag;
    }
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    auto emit = [&](const Layout &l) {
      auto attr = SearchAttr::get(
          &getContext(), l.tried,
          DenseI64ArrayAttr::get(&getContext(), l.counts), globalM == 0,
          strategy == "exact" && stages.empty() && l.best->objectiveOptimal,
          optimizerMode, /*shared_microbatches=*/false);
      std::string name =
          l.replicas == 1
              ? llvm::formatv("plan_w{0}", l.workers).str()
              : llvm::formatv("plan_r{0}_w{1}", l.replicas, l.workers).str();
      PlanOp plan =
          buildPlanOp(b, func, spec, bf16, l.workers, batch / l.replicas,
                      tokens / l.replicas, *l.best, attr, strategyName(), name);
      plan.setLayoutGpusAttr(b.getI64IntegerAttr(gpus));
      if (&l == chosen)
        plan.setLayoutChosenAttr(b.getUnitAttr());
    };
    emit(*chosen);
    for (const Layout &l : found)
      if (&l != chosen && l.best)
        emit(l);
    // Layouts without a plan are recorded on the chosen one, so that
    // --explain can say what did not fit.
    SmallVector<Attribute> unfit;
    for (const Layout &l : found)
      if (!l.best)
        unfit.push_back(b.getStringAttr(
            llvm::formatv("{0}x{1}", l.replicas, l.workers).str()));
    if (!unfit.empty())
      for (PlanOp plan : module.getOps<PlanOp>())
        if (plan.getLayoutChosen())
          plan.setLayoutsUnfitAttr(b.getArrayAttr(unfit));
    return success();
  }

  /// The residencies a plan of `problem`'s workers may take: every layer
  /// streamed; with one worker, every layer resident and, when the whole
  /// state leaves too little room, the deepest layers whose state fits
  /// beside the finest streamed plan (their updates come last in a step, so
  /// they are the most exposed). `--residency` keeps one of the first two.
  std::vector<std::vector<char>>
  residencyOptions(const planner::PlanProblem &problem) const {
    std::vector<std::vector<char>> options;
    const size_t numLayers = problem.layers.size();
    if (residency != "device")
      options.push_back({});
    // Stale updates overlap the next step on the host; resident state is
    // updated on the worker between steps, with nothing left to hide.
    if (residency == "streamed" || problem.workers != 1 ||
        optimizerMode == "stale")
      return options;
    std::vector<char> all(numLayers, 1);
    options.push_back(all);
    if (residency == "device" || problem.workerMemoryBytes <= 0)
      return options;
    planner::PlanProblem streamed = problem;
    streamed.resident.clear();
    const double room =
        problem.workerMemoryBytes -
        planner::workerArenaBytes(
            streamed, planner::finestPlan(static_cast<int>(numLayers)));
    planner::PlanProblem probe = problem;
    probe.resident.assign(numLayers, 0);
    for (size_t l = numLayers; l-- > 0;) {
      probe.resident[l] = 1;
      if (planner::residentBytes(probe) > room) {
        probe.resident[l] = 0;
        break;
      }
    }
    if (llvm::count(probe.resident, 1) > 0 &&
        llvm::count(probe.resident, 0) > 0)
      options.push_back(probe.resident);
    return options;
  }

  static std::string residencyName(const planner::PlanProblem &problem) {
    size_t resident = llvm::count(problem.resident, 1);
    if (resident == 0)
      return "streamed";
    return resident == problem.layers.size() ? "device" : "mixed";
  }

  /// The step the trainer will run: the prediction of the optimizer mode
  /// the plan is for (--optimizer-mode, the trainer's default mode).
  /// The strategy a plan records: forced stages, or the search's.
  std::string strategyName() const {
    return stages.empty() ? std::string(strategy) : std::string("forced");
  }

  double score(const Candidate &c) const {
    if (optimizerMode == "sync")
      return c.sync.stepSeconds;
    if (optimizerMode == "stale")
      return c.stale.stepSeconds;
    return c.overlap.stepSeconds;
  }

  std::optional<int64_t>
  chooseSharedMicrobatches(ArrayRef<Searched> searches) const {
    if (microbatches > 0 || searches.size() < 2)
      return std::nullopt;
    std::optional<int64_t> bestM;
    double bestWorst = std::numeric_limits<double>::infinity();
    for (const Candidate &first : searches.front().perCount) {
      double worst = 0;
      for (const Searched &s : searches) {
        const Candidate *at = nullptr, *own = nullptr;
        for (const Candidate &c : s.perCount) {
          if (c.microbatches == first.microbatches)
            at = &c;
          if (!own || score(c) < score(*own))
            own = &c;
        }
        if (!at) {
          worst = std::numeric_limits<double>::infinity();
          break;
        }
        worst = std::max(worst, score(*at) / score(*own));
      }
      if (worst < bestWorst * (1 - 1e-9)) {
        bestWorst = worst;
        bestM = first.microbatches;
      }
    }
    return bestM;
  }

  /// The target the plans are costed for: the module's `rondo.target`
  /// (recorded by the driver, which the emitter reads too), else resolved
  /// from the `device` and `precision` options by the same rule (rondo-opt).
  FailureOr<TargetConfig> planTarget(ModuleOp module) {
    FailureOr<std::optional<TargetConfig>> recorded = getModuleTarget(module);
    if (failed(recorded))
      return failure();
    if (*recorded) {
      // Two sources of the precision are how plan and code came to differ.
      if (device.getNumOccurrences() || precision.getNumOccurrences())
        return module.emitError("pipe-partition: the module's ")
               << kTargetAttr
               << " decides the device and precision; drop the device and "
                  "precision options";
      return **recorded;
    }
    llvm::Expected<TargetConfig> resolved =
        resolveTarget(/*backend=*/"", device, precision);
    if (!resolved)
      return module.emitError(llvm::toString(resolved.takeError()));
    return *resolved;
  }

  /// Host memory every plan needs: the fixed part plus hand-off staging
  /// (a plan without backward stages has no checkpoints).
  static double hostFloorBytes(const planner::PlanProblem &p) {
    planner::Plan allTail;
    int numLayers = static_cast<int>(p.layers.size());
    allTail.tail = {planner::StageKind::Tail, 0, numLayers};
    return planner::hostPeakBytes(p, allTail);
  }

  planner::PlanProblem makeProblem(const cost::LayerTable &table,
                                   const cost::DeviceSpec &spec, int64_t n,
                                   int64_t m) {
    planner::PlanProblem p;
    p.layers = table.layers;
    p.sharedParams = table.sharedParams;
    p.trainableParams = table.trainableParams;
    p.workers = static_cast<int>(n);
    p.microbatches = static_cast<int>(m);
    p.workerMemoryBytes =
        workerMemoryGB > 0 ? workerMemoryGB * 1e9 : 0.9 * spec.memoryBytes;
    p.hostMemoryBytes =
        hostMemoryGB > 0 ? hostMemoryGB * 1e9 : spec.hostMemoryBytes;
    p.hostFixedBytes = table.hostFixedBytes;
    // The trainer's --map-weights=auto rule, with the budget standing for
    // the host's memory: frozen fp32 external-data weights above half of it
    // are mapped, not copied, so they need no host memory of their own.
    if (p.hostMemoryBytes > 0 && table.mappableBytes > p.hostMemoryBytes / 2) {
      p.mappedWeightBytes = table.mappableBytes;
      p.hostFixedBytes -= table.mappableBytes;
    }
    p.linkBytesPerSecond =
        std::min(spec.hostLinkBandwidth,
                 spec.hostLinkAggregateBandwidth / static_cast<double>(n));
    p.peerBytesPerSecond = n > 1 ? spec.peerBandwidth : 0;
    // Read once and written once at the memory-bound kernels' rate.
    p.localCopyBytesPerSecond =
        spec.memoryBandwidth * spec.memoryEfficiency / 2.0;
    p.optimizerParamsPerSecond = spec.optimizerParamsPerSecond;
    p.hostMemoryBytesPerSecond = spec.hostMemoryBandwidth;
    p.stepEndPassBytesPerSecond = spec.hostGradientPassBandwidth;
    // A calibrated host's op times hold its concurrency (measured ops,
    // concurrentSlowdown); the cores bound the step (PlanProblem).
    if (spec.sharedCompute && spec.measureOps && spec.cores > 0)
      p.sharedCores = static_cast<int>(spec.cores);
    // Resident AdamW: on a GPU one fused pass reading the weight, gradient
    // and both moments and writing three (28 bytes a parameter); a host
    // worker's memory is host memory, updated by the host optimizer's code.
    p.deviceOptimizerParamsPerSecond =
        spec.isGpu ? spec.memoryBandwidth * spec.memoryEfficiency / 28.0
                   : spec.optimizerParamsPerSecond;
    p.replicas = static_cast<int>(replicas);
    p.replicaBytesPerSecond = replicaLinkGBps * 1e9;
    p.shardOptimizer = shardOptimizer;
    p.replicasPerHost = static_cast<int>(replicasPerHost);
    if (layoutReplicas > 0) {
      // The GPUs of one machine: the replicas share its host (its memory
      // and its cores) and sum over its GPU links where the spec has them.
      p.replicas = static_cast<int>(layoutReplicas);
      p.replicasPerHost = p.replicas;
      p.hostMemoryBytes /= static_cast<double>(p.replicas);
      // Every GPU of the machine copies through the host's one aggregate.
      p.linkBytesPerSecond = std::min(
          spec.hostLinkBandwidth, spec.hostLinkAggregateBandwidth /
                                      static_cast<double>(n * layoutReplicas));
      if (spec.peerBandwidth > 0)
        p.replicaBytesPerSecond = spec.peerBandwidth;
    }
    if (spec.isGpu)
      p.replicaHostCrossingBytesPerSecond = p.linkBytesPerSecond;
    return p;
  }

  /// The best plan of every microbatch count that has one, for N workers;
  /// reports the numbers when no count has a plan that fits.
  FailureOr<Searched> searchAllCounts(func::FuncOp func,
                                      const cost::DeviceSpec &spec, bool bf16,
                                      int64_t n, int64_t batch) {
    // Candidate microbatch counts: divisors of the batch, at least N+1 so
    // that a stage-job outlasts the hand-offs of the N jobs before it.
    SmallVector<int64_t> counts;
    if (microbatches > 0) {
      if (microbatches < 0 || batch % microbatches != 0)
        return func.emitError("--microbatches=")
               << static_cast<int64_t>(microbatches)
               << " does not divide the batch of " << batch << " rows";
      counts.push_back(microbatches);
    } else {
      for (int64_t m = 1; m <= batch; ++m)
        if (batch % m == 0 && m >= n + 1)
          counts.push_back(m);
      if (counts.empty())
        counts.push_back(batch);
    }

    // Candidates compete on the prediction of the optimizer mode the
    // trainer will run (score); the plan records all three modes'.
    auto simulateModes = [](Candidate &c) {
      planner::SimOptions mode;
      c.overlap = planner::simulate(c.problem, c.plan, mode);
      mode.optimizer = planner::OptimizerMode::Sync;
      c.sync = planner::simulate(c.problem, c.plan, mode);
      mode.optimizer = planner::OptimizerMode::Stale;
      c.stale = planner::simulate(c.problem, c.plan, mode);
    };
    Searched searched;
    searched.workers = n;
    searched.counts = counts;
    int &tried = searched.tried;
    std::string lastFailure;
    double smallestWorkerPeak = std::numeric_limits<double>::infinity();
    int64_t smallestWorkerPeakM = 0;
    // @main is the global batch: a replica's microbatch is 1/(R m) of it.
    const int64_t share = std::max<int64_t>(layoutReplicas, 1);
    for (int64_t m : counts) {
      cost::CostOptions options = costOptions(m * share, n, bf16);
      llvm::Expected<cost::LayerTable> table =
          cost::buildLayerTable(func, spec, options);
      if (!table)
        return func.emitError("pipe-partition: ")
               << llvm::toString(table.takeError());
      Candidate c;
      c.microbatches = m;
      c.table = std::move(*table);
      c.problem = makeProblem(c.table, spec, n, m);

      // The least worker memory any plan needs: one layer per stage.
      planner::PlanProblem unlimited = c.problem;
      unlimited.workerMemoryBytes = 0;
      unlimited.hostMemoryBytes = 0;
      {
        planner::Plan fine =
            planner::finestPlan(static_cast<int>(c.problem.layers.size()));
        double peak = planner::workerArenaBytes(unlimited, fine);
        if (peak < smallestWorkerPeak) {
          smallestWorkerPeak = peak;
          smallestWorkerPeakM = m;
        }
      }

      // Every residency this plan may take, each searched on its own (a
      // resident state leaves less memory for the stages), and the fastest
      // kept.
      std::vector<Candidate> found;
      auto searchOne = [&](Candidate c) -> LogicalResult {
        std::string why;
        if (!stages.empty()) {
          FailureOr<planner::Plan> forced = parseStages(
              stages, static_cast<int>(c.problem.layers.size()), why);
          if (failed(forced))
            return func.emitError(why);
          if (!planner::isValid(c.problem, *forced, &why))
            return func.emitError("--stages: ") << why;
          if (!planner::fitsBudgets(c.problem, *forced, &why) ||
              !fitsArena(c.problem, *forced, &why)) {
            lastFailure = why;
            return success();
          }
          c.plan = *forced;
        } else if (strategy == "greedy") {
          double limit = 0.6 * (workerMemoryGB > 0 ? workerMemoryGB * 1e9
                                                   : spec.memoryBytes);
          c.plan = planner::greedyRoundPipe(c.problem, limit);
          if (!planner::fitsBudgets(c.problem, c.plan, &why) ||
              !fitsArena(c.problem, c.plan, &why)) {
            lastFailure = "RoundPipe's greedy plan: " + why;
            return success();
          }
        } else {
          // The exact optimum of the objective, and of the same objective
          // with a floor of more jobs (RoundPipe's min_stages): finer plans
          // trade a longer chain for better balance, which only the
          // simulator can weigh. It picks among them below.
          std::vector<planner::Plan> plans;
          int numLayers = static_cast<int>(c.problem.layers.size());
          int maxJobs = std::max<int>(2 * numLayers - 1, 1);
          const double budget = c.problem.workerMemoryBytes;
          // The search gives the stages what the resident state leaves
          // (exactSearch); a budget it fills alone has no plan.
          double searchBudget = budget;
          if (budget > 0 && planner::residentBytes(c.problem) >= budget) {
            lastFailure = "worker";
            return success();
          }
          // The search prunes with a stage-local bound of worker memory; the
          // executor's arena sizes each buffer class by its own largest stage
          // and can need more. Plans it cannot hold are dropped and the search
          // reruns with the budget lowered by the overshoot.
          for (int attempt = 0; attempt < 8 && plans.empty(); ++attempt) {
            double overshoot = std::numeric_limits<double>::infinity();
            bool found = false;
            for (int floor = static_cast<int>(n);
                 floor <= std::min<int>(maxJobs, 4 * static_cast<int>(n));
                 ++floor) {
              planner::PlanProblem p = c.problem;
              p.minJobs = floor;
              p.workerMemoryBytes = searchBudget;
              std::optional<planner::Plan> plan = planner::exactSearch(p);
              if (!plan)
                break;
              found = true;
              double arena = planner::workerArenaBytes(c.problem, *plan);
              if (budget > 0 && arena > budget) {
                overshoot = std::min(overshoot, arena - budget);
                continue;
              }
              if (llvm::none_of(plans, [&](const planner::Plan &q) {
                    return q.jobs() == plan->jobs();
                  }))
                plans.push_back(*plan);
            }
            if (!found || budget <= 0)
              break;
            searchBudget -= std::max(overshoot, 0.01 * budget);
            if (searchBudget <= 0)
              break;
          }
          if (plans.empty()) {
            // At the edge of the budget (long sequences) the search's
            // stage-local pruning can miss the one plan that fits: the finest,
            // whose stages each hold one layer's activations.
            planner::Plan fine =
                planner::finestPlan(static_cast<int>(c.problem.layers.size()));
            if (planner::fitsBudgets(c.problem, fine, nullptr) &&
                fitsArena(c.problem, fine, nullptr))
              plans.push_back(fine);
          }
          if (plans.empty()) {
            // Say which budget: the host part does not depend on the plan.
            if (c.problem.hostMemoryBytes > 0 &&
                hostFloorBytes(c.problem) > c.problem.hostMemoryBytes)
              lastFailure = "host";
            else
              lastFailure = "worker";
            return success();
          }
          std::optional<Candidate> best;
          for (const planner::Plan &plan : plans) {
            Candidate alt = c;
            alt.plan = plan;
            simulateModes(alt);
            ++tried;
            if (!best || score(alt) < score(*best) * (1 - 1e-9)) {
              alt.objectiveOptimal = &plan == &plans.front();
              best = std::move(alt);
            }
          }
          found.push_back(std::move(*best));
          return success();
        }
        simulateModes(c);
        ++tried;
        found.push_back(std::move(c));
        return success();
      };
      // What each residency weighed came to: its step, or -1 where no plan
      // of it fits the budgets.
      std::vector<std::pair<std::string, double>> weighed;
      std::vector<std::vector<char>> residencies = residencyOptions(c.problem);
      for (std::vector<char> &resident : residencies) {
        Candidate r = c;
        r.problem.resident = std::move(resident);
        const std::string name = residencyName(r.problem);
        const size_t before = found.size();
        if (failed(searchOne(std::move(r))))
          return failure();
        weighed.push_back(
            {name, found.size() > before ? score(found.back()) : -1.0});
      }
      if (found.empty())
        continue;
      Candidate *best = &found.front();
      for (Candidate &f : found)
        if (score(f) < score(*best) * (1 - 1e-9))
          best = &f;
      best->residencyAlternatives = std::move(weighed);
      searched.perCount.push_back(std::move(*best));
    }

    if (searched.perCount.empty()) {
      if (quietNoFit)
        return searched;
      (void)reportNoFit(func, spec, bf16, n, batch, counts, lastFailure,
                        smallestWorkerPeak, smallestWorkerPeakM);
      return failure();
    }
    return searched;
  }

  LogicalResult reportNoFit(func::FuncOp func, const cost::DeviceSpec &spec,
                            bool bf16, int64_t n, int64_t batch,
                            ArrayRef<int64_t> counts, StringRef failure,
                            double smallestWorkerPeak,
                            int64_t smallestWorkerPeakM) {
    cost::CostOptions options = costOptions(
        counts.back() * std::max<int64_t>(layoutReplicas, 1), n, bf16);
    llvm::Expected<cost::LayerTable> table =
        cost::buildLayerTable(func, spec, options);
    if (!table)
      return func.emitError(llvm::toString(table.takeError()));
    planner::PlanProblem p = makeProblem(*table, spec, n, counts.back());
    InFlightDiagnostic diag = func.emitError();
    diag << "no plan for " << n << " worker(s) on " << spec.name
         << " fits the memory budgets:";
    double hostFloor = hostFloorBytes(p);
    if (p.hostMemoryBytes > 0 && hostFloor > p.hostMemoryBytes) {
      double params = table->paramCount, trainable = table->trainableCount;
      double frozenBf16Count = table->frozenBf16Count;
      diag << " host memory needs at least " << gb(hostFloor)
           << " (fp32 weights "
           << gb(4 * (params - frozenBf16Count) - p.mappedWeightBytes)
           << (frozenBf16Count > 0
                   ? ", bf16 frozen weights " + gb(2 * frozenBf16Count)
                   : std::string())
           << (p.mappedWeightBytes > 0
                   ? " besides " + gb(p.mappedWeightBytes) + " mapped"
                   : std::string())
           << ", AdamW moments " << gb(8 * trainable) << ", fp32 gradients "
           << gb(4 * trainable);
      double state = planner::hostStateBytes(p);
      if (state > p.hostFixedBytes)
        diag << ", the per-layer gradient parts of shared weights and their "
                "sums "
             << gb(state - p.hostFixedBytes);
      diag << ", hand-off staging " << gb(hostFloor - state);
      diag << ") but the host budget is " << gb(p.hostMemoryBytes)
           << "; the smallest configuration that fits needs a host budget "
              "of at least "
           << gb(hostFloor * 1.05)
           << " (--host-memory-gb), or fewer trainable parameters (--freeze)";
      return diag;
    }
    if (!failure.empty() && failure != "worker")
      diag << " " << failure << ";";
    diag << " the worker budget is " << gb(p.workerMemoryBytes)
         << " and the smallest plan (one layer per stage, "
         << smallestWorkerPeakM << " microbatches of "
         << batch / smallestWorkerPeakM << " rows) needs "
         << gb(smallestWorkerPeak) << " per worker";
    if (smallestWorkerPeak <= p.workerMemoryBytes)
      diag << "; it fits, but not with the forced stages";
    else
      diag << "; use a device with at least " << gb(smallestWorkerPeak / 0.9)
           << ", or a smaller --batch or --seq-len";
    return diag;
  }
};
} // namespace

/// Canonicalization after tg-autodiff creates ops (folded reshapes, CSE
/// leaders) without a layer tag. An untagged op that depends on a
/// parameter or on the loss-scale seed belongs where it is used: the
/// smallest layer among its users, else the largest among its producers.
/// Side data (masks, labels, positions) stays untagged.
void rondo::pipe::tagOpsCreatedAfterLayerize(func::FuncOp func) {
  Block &body = func.getBody().front();
  llvm::DenseSet<Value> heavy;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), tg::kParamAttr) ||
        func.getArgAttr(arg.getArgNumber(), tg::kLossScaleAttr))
      heavy.insert(arg);
  SmallVector<Operation *> untagged;
  for (Operation &op : body.without_terminator()) {
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return heavy.contains(v); }))
      for (Value r : op.getResults())
        heavy.insert(r);
    if (!op.hasAttr(kLayerAttr) && op.getNumResults() &&
        heavy.contains(op.getResult(0)))
      untagged.push_back(&op);
  }
  Builder b(func.getContext());
  for (Operation *op : llvm::reverse(untagged)) {
    std::optional<int64_t> layer;
    for (Operation *user : op->getUsers())
      if (auto l = getLayer(user))
        layer = std::min(layer.value_or(*l), *l);
    if (layer)
      op->setAttr(kLayerAttr, b.getI64IntegerAttr(*layer));
  }
  for (Operation *op : untagged) {
    if (op->hasAttr(kLayerAttr))
      continue;
    std::optional<int64_t> layer;
    for (Value v : op->getOperands())
      if (auto l = getLayer(v.getDefiningOp()))
        layer = std::max(layer.value_or(*l), *l);
    if (layer)
      op->setAttr(kLayerAttr, b.getI64IntegerAttr(*layer));
  }
}
