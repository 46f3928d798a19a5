//===- Options.cpp - rondo-compile's flags ----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Driver/Options.h"

#include <cmath>
#include <cstdio>

using namespace rondo;
namespace cl = llvm::cl;

/// Rows per step and workers far past any real run (docs and tests use at
/// most 32 rows; the documented workloads run 4 to 8 workers).
constexpr int64_t kMaxBatch = int64_t(1) << 16;
constexpr int64_t kMaxWorkers = 64;

struct CompileFlags::Impl {
  Impl(CompileOptions &o, cl::OptionCategory &category)
      : options(o),
        inputFile(cl::Positional, cl::desc("<model.onnx>"), cl::Required,
                  cl::location(o.inputFile), cl::cat(category)),
        outputFile("o", cl::desc("output file ('-' for stdout)"),
                   cl::value_desc("path"), cl::location(o.outputFile),
                   cl::cat(category)),
        batch("batch", cl::desc("rows per step (the dynamic batch dimension)"),
              cl::location(o.batch), cl::init(-1), cl::cat(category)),
        seqLen("seq-len",
               cl::desc("tokens per row (the dynamic sequence dimension)"),
               cl::location(o.seqLen), cl::init(-1), cl::cat(category)),
        inputShapes("input-shape",
                    cl::desc("NAME=d0,d1,...: the shape of a graph input"),
                    cl::location(o.inputShapes), cl::cat(category)),
        emit("emit", cl::desc("what to produce"), cl::location(o.emit),
             cl::init(Emit::Exe),
             cl::values(
                 clEnumValN(Emit::TG, "tg", "imported, recognised tg IR"),
                 clEnumValN(Emit::Train, "train",
                            "the training function (loss and gradients)"),
                 clEnumValN(Emit::Pipe, "pipe",
                            "the plan: layers, stages, job order"),
                 clEnumValN(Emit::Exec, "exec",
                            "per plan: stage functions and exec programs"),
                 clEnumValN(Emit::Cpp, "cpp", "the trainer's C++ source"),
                 clEnumValN(Emit::Exe, "exe", "the trainer executable")),
             cl::cat(category)),
        loss("loss", cl::desc("causal-lm or output:NAME"), cl::location(o.loss),
             cl::init("causal-lm"), cl::cat(category)),
        trainable("trainable", cl::desc("regex: only these parameters train"),
                  cl::location(o.trainable), cl::init(""), cl::cat(category)),
        freeze("freeze", cl::desc("regex: these parameters are frozen"),
               cl::location(o.freeze), cl::init(""), cl::cat(category)),
        lora("lora",
             cl::desc(
                 "LoRA fine-tuning: "
                 "rank=R,alpha=A,dropout=0,targets=ROLES|REGEX "
                 "adds low-rank adapters to the selected linear weights and "
                 "trains only them (roles: q, k, v, o, gate, up, down, attn, "
                 "mlp, all-linear, joined by '+'; defaults rank=8, alpha=8, "
                 "targets=all-linear)"),
             cl::value_desc("spec"), cl::init(""), cl::cat(category)),
        target(
            "target",
            cl::desc("host (CPU worker threads) or cuda (one GPU per worker)"),
            cl::init("host"), cl::cat(category)),
        chunkRows("loss-chunk-rows",
                  cl::desc("rows of logits the fused loss holds at once"),
                  cl::location(o.chunkRows), cl::init(1024), cl::cat(category)),
        workers("workers", cl::desc("worker counts to plan for (N[,N...])"),
                cl::CommaSeparated, cl::location(o.plan.workers),
                cl::cat(category)),
        gpus("gpus",
             cl::desc("plan for this many GPUs of one machine (host: worker "
                      "threads x processes): weighs every layout of R "
                      "data-parallel replicas x N pipeline workers (R N = "
                      "GPUs) at the global --batch and compiles them all, "
                      "the fastest predicted as the trainer's default "
                      "(--explain lists them); instead of --workers"),
             cl::location(o.plan.gpus), cl::init(0), cl::cat(category)),
        layouts("layouts",
                cl::desc("with --gpus: only these layouts, RxN[,RxN...] "
                         "(R replicas of N workers)"),
                cl::CommaSeparated, cl::location(o.plan.layouts),
                cl::cat(category)),
        microbatches("microbatches",
                     cl::desc("microbatches per step (default: chosen by the "
                              "planner, at least workers + 1)"),
                     cl::location(o.plan.microbatches), cl::init(0),
                     cl::cat(category)),
        device("device",
               cl::desc("cost model: h100|h200|rtx4090|host|SPEC.json "
                        "(default: host for --target=host)"),
               cl::location(o.device), cl::init(""), cl::cat(category)),
        precision("precision",
                  cl::desc("fp32|bf16 (default: bf16 "
                           "on GPUs, fp32 on the host)"),
                  cl::location(o.precision), cl::init(""), cl::cat(category)),
        planStrategy("plan-strategy",
                     cl::desc("exact (default) or greedy (RoundPipe's)"),
                     cl::location(o.plan.strategy), cl::init("exact"),
                     cl::cat(category)),
        forcedStages(
            "stages",
            cl::desc("force the partition: fwd:A+B+...,tail:T,bwd:C+D+... "
                     "(layer counts in job order)"),
            cl::location(o.plan.stages), cl::init(""), cl::cat(category)),
        workerMemoryGB(
            "worker-memory-gb",
            cl::desc("device memory budget per worker in GB (default: "
                     "90% of the device's)"),
            cl::location(o.plan.workerMemoryGB), cl::init(0),
            cl::cat(category)),
        hostMemoryGB("host-memory-gb",
                     cl::desc("host memory budget in GB (default: the device "
                              "spec's host memory)"),
                     cl::location(o.plan.hostMemoryGB), cl::init(0),
                     cl::cat(category)),
        planReplicas(
            "replicas",
            cl::desc("plan for this many data-parallel replicas (trainer "
                     "--replicas): their gradient sums enter the predicted "
                     "step and --explain shows how throughput scales with "
                     "replicas"),
            cl::location(o.plan.replicas), cl::init(1), cl::cat(category)),
        replicaLinkGBps(
            "replica-link-gbps",
            cl::desc(
                "bandwidth between replicas in GB/s (default 25: 200 Gb/s)"),
            cl::location(o.plan.replicaLinkGBps), cl::init(25),
            cl::cat(category)),
        shardOptimizer(
            "shard-optimizer",
            cl::desc("on (default) or off: whether the replicas shard the "
                     "optimizer, as trainer --shard-optimizer; the plan costs "
                     "that mode and --explain shows both"),
            cl::location(o.shardOptimizer), cl::init("on"), cl::cat(category)),
        optimizerMode(
            "optimizer-mode",
            cl::desc("overlap (default), sync or stale: the trainer's default "
                     "--optimizer-mode; the plans minimise its predicted "
                     "step"),
            cl::location(o.plan.optimizerMode), cl::init("overlap"),
            cl::cat(category)),
        residency(
            "residency",
            cl::desc("auto (default), device or streamed: where parameters, "
                     "gradients and AdamW moments live; auto weighs streamed, "
                     "device-resident and mixed and takes the fastest that "
                     "fits (--explain lists them)"),
            cl::location(o.plan.residency), cl::init("auto"),
            cl::cat(category)),
        frozenStorage(
            "frozen-storage",
            cl::desc("bf16 (default in bf16 plans) or fp32: how frozen "
                     "weights that only matrix products read are held on "
                     "the host and in stage images; bf16 halves their "
                     "bytes and gives the same bits, fp32 is for A/B "
                     "comparisons; bf16 needs a bf16 plan"),
            cl::location(o.plan.frozenStorage), cl::init(""),
            cl::cat(category)),
        replicasPerHost(
            "replicas-per-host",
            cl::desc("replicas that share one host's cores for the optimizer "
                     "(default 1)"),
            cl::location(o.plan.replicasPerHost), cl::init(1),
            cl::cat(category)),
        explain("explain",
                cl::desc("explain the plan; with =DIR also write the plan, its "
                         "table and a timeline SVG into DIR"),
                cl::ValueOptional, cl::init(""), cl::cat(category)),
        summary("summary", cl::desc("print a summary of the model on stderr"),
                cl::location(o.summary), cl::init(false), cl::cat(category)),
        handoff("handoff",
                cl::desc("how activations move between workers: peer "
                         "(device-to-device) or host (staged through host "
                         "memory)"),
                cl::location(o.handoff), cl::init("peer"), cl::cat(category)),
        quiet("quiet",
              cl::desc("no progress lines on stderr (each phase with its "
                       "time, and what was written)"),
              cl::location(o.quiet), cl::init(false), cl::cat(category)),
        quietAlias("q", cl::desc("alias for --quiet"), cl::aliasopt(quiet),
                   cl::cat(category)) {}

  CompileOptions &options;
  cl::opt<std::string, true> inputFile;
  cl::opt<std::string, true> outputFile;
  cl::opt<int64_t, true> batch;
  cl::opt<int64_t, true> seqLen;
  cl::list<std::string, std::vector<std::string>> inputShapes;
  cl::opt<Emit, true> emit;
  cl::opt<std::string, true> loss;
  cl::opt<std::string, true> trainable;
  cl::opt<std::string, true> freeze;
  cl::opt<std::string> lora;
  cl::opt<std::string> target;
  cl::opt<int64_t, true> chunkRows;
  cl::list<int64_t, llvm::SmallVector<int64_t>> workers;
  cl::opt<int64_t, true> gpus;
  cl::list<std::string, llvm::SmallVector<std::string>> layouts;
  cl::opt<int64_t, true> microbatches;
  cl::opt<std::string, true> device;
  cl::opt<std::string, true> precision;
  cl::opt<std::string, true> planStrategy;
  cl::opt<std::string, true> forcedStages;
  cl::opt<double, true> workerMemoryGB;
  cl::opt<double, true> hostMemoryGB;
  cl::opt<int64_t, true> planReplicas;
  cl::opt<double, true> replicaLinkGBps;
  cl::opt<std::string, true> shardOptimizer;
  cl::opt<std::string, true> optimizerMode;
  cl::opt<std::string, true> residency;
  cl::opt<std::string, true> frozenStorage;
  cl::opt<int64_t, true> replicasPerHost;
  cl::opt<std::string> explain;
  cl::opt<bool, true> summary;
  cl::opt<std::string, true> handoff;
  cl::opt<bool, true> quiet;
  cl::alias quietAlias;
};

CompileFlags::CompileFlags(CompileOptions &options,
                           cl::OptionCategory &category)
    : impl(std::make_unique<Impl>(options, category)) {}

CompileFlags::~CompileFlags() = default;

bool CompileFlags::finish() {
  // These flags' unset value is a sentinel (0 or -1): a given value that is
  // not positive would read as "not given" and silently take the default.
  auto positive = [](const cl::Option &flag, double value) {
    if (!flag.getNumOccurrences() || (std::isfinite(value) && value > 0))
      return true;
    char text[32];
    std::snprintf(text, sizeof(text), "%g", value);
    llvm::errs() << "error: --" << flag.ArgStr << "=" << text
                 << " must be positive; leave the flag out for its default\n";
    return false;
  };
  bool valid = positive(impl->batch, impl->batch) &&
               positive(impl->seqLen, impl->seqLen) &&
               positive(impl->chunkRows, impl->chunkRows) &&
               positive(impl->microbatches, impl->microbatches) &&
               positive(impl->workerMemoryGB, impl->workerMemoryGB) &&
               positive(impl->hostMemoryGB, impl->hostMemoryGB);
  for (int64_t n : impl->options.plan.workers)
    valid = valid && positive(impl->workers, double(n));

  // Limits far above any real run, checked before the model is read: the
  // planner tries every microbatch count dividing --batch (1e12 rows spun
  // for minutes) and each worker count gets its own stage functions and
  // exec program (--workers 1000 grew past a gigabyte).
  auto atMost = [](const cl::Option &flag, int64_t value, int64_t limit,
                   llvm::StringRef unit) {
    if (value <= limit)
      return true;
    llvm::errs() << "error: --" << flag.ArgStr << "=" << value
                 << " is over the limit of " << limit << " " << unit << "\n";
    return false;
  };
  valid = valid && atMost(impl->batch, impl->batch, kMaxBatch, "rows per step");
  for (int64_t n : impl->options.plan.workers)
    valid = valid && atMost(impl->workers, n, kMaxWorkers, "workers");
  // Each worker count is one plan, named by it (plan_wN).
  llvm::SmallVector<int64_t> seen;
  for (int64_t n : impl->options.plan.workers) {
    if (valid && llvm::is_contained(seen, n)) {
      llvm::errs() << "error: --workers lists " << n
                   << " twice; give each worker count once\n";
      valid = false;
    }
    seen.push_back(n);
  }
  // --gpus chooses every layout's workers and replicas: checked before the
  // model is read (pipe-partition checks the same for rondo-opt).
  const auto &plan = impl->options.plan;
  if (valid && plan.gpus != 0 && !plan.workers.empty()) {
    llvm::errs() << "error: --gpus plans the workers of every layout itself; "
                    "drop --workers\n";
    valid = false;
  }
  if (valid && plan.gpus != 0 && plan.replicas != 1) {
    llvm::errs() << "error: --gpus plans the replicas of every layout "
                    "itself; drop --replicas\n";
    valid = false;
  }
  if (valid && plan.gpus == 0 && !plan.layouts.empty()) {
    llvm::errs() << "error: --layouts chooses among the layouts of --gpus, "
                    "which is not given\n";
    valid = false;
  }
  valid =
      valid && (plan.gpus == 0 || atMost(impl->gpus, plan.gpus, 4096, "GPUs"));
  const std::string &strategy = impl->options.plan.strategy;
  if (valid && strategy != "exact" && strategy != "greedy") {
    llvm::errs() << "error: --plan-strategy=" << strategy
                 << " is not one of exact, greedy\n";
    valid = false;
  }

  // --target=host and no --target differ: without it a GPU --device picks
  // the cuda backend (rondo/Driver/Target.h).
  if (impl->target.getNumOccurrences())
    impl->options.target = impl->target;
  if (impl->lora.getNumOccurrences())
    impl->options.lora = impl->lora;
  if (impl->explain.getNumOccurrences())
    impl->options.explain = impl->explain;
  return valid;
}
