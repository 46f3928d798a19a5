//===- ProgramStep.cpp - One step of a compiled program -------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The trainer thread issues a step and reads its losses; the executor's
// host threads call back to load the batch and to run the optimizer tasks,
// which sum the gradients across replicas, look for non-finite values
// before they update anything, and update. With --grad-accum K an
// optimizer step is K program steps on consecutive batches: the tasks of
// the first K-1 add their gradients to the accumulators, those of the
// last add theirs and update.
//
//===----------------------------------------------------------------------===//

#include "trainer/Trainer.h"

#include "rondo/runtime/Error.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace rondo::rt {

namespace {

/// Byte distance between microbatch m and m + 1 in a host buffer: its
/// slots when it has one per microbatch, else packed.
int64_t microbatchStride(const rondo_program &p, int32_t buffer,
                         int64_t packed) {
  const rondo_buffer_desc &d = p.buffers[buffer];
  return d.count >= p.microbatches && d.bytes >= packed ? d.bytes : packed;
}

/// Sharded optimizer task: the replicas agree on whether the gradients of
/// `parts` are finite (each saw only its shards) and, with `sumSquares`,
/// on the squared norm of the gradients of `which`. Returns the first
/// non-finite gradient in job order over all replicas, or "".
std::string agreeOnShards(const ProgramGrads &grads,
                          const OptimizerState &optimizer,
                          ReplicaSync &replicas,
                          const std::vector<int32_t> &parts,
                          const std::vector<int> &which, double *sumSquares) {
  if (sumSquares) {
    const double norm = optimizer.ownedGradNorm(which);
    *sumSquares = norm * norm;
  }
  const int first =
      replicas.agreeOnShards(grads.firstNonFinite(parts), sumSquares);
  return first < 0 ? "" : grads.describe(parts, first);
}

} // namespace

void Trainer::setUpProgram(int64_t firstStep) {
  info = analyseProgram(*program, model);
  staleMode = std::string(program->optimizer) == "stale";
  syncMode = std::string(program->optimizer) == "sync";
  // The first step's stale update has nothing to apply: a checkpoint
  // holds the weights after every update before it.
  staleApplied = firstStep - 1;
  exec = std::make_unique<HostExec>(
      *program, model, info, store.stored(), *this, !opts.trace.empty(),
      firstStep,
      deviceFactory ? deviceFactory(program->workers, opts.gpus) : nullptr,
      store.pageable());
  resident = std::make_unique<ResidentState>(*program, model, info, *exec,
                                             store.stored());
  if (resident->active()) {
    // The sums read the worker's memory: host memory on the host backend,
    // the GPU's own for the NCCL engine; MPI cannot read a GPU's.
    if (replicas.active() && std::string(exec->backendName()) != "host" &&
        !replicas.takesDeviceMemory())
      throw Error(std::string("--replicas: the program '") + program->name +
                  "' keeps its parameters on the GPU, which the " +
                  opts.replicaEngine +
                  " engine cannot read; use --replica-engine=nccl (the "
                  "default for GPU trainers) or compile with "
                  "--residency=streamed");
    resident->bind(optimizer);
  }
  // A stale program's update reads the previous step's gradients, which
  // its stash task copied aside.
  grads = std::make_unique<ProgramGrads>(
      *program, model, info, replicas,
      exec->hostBuffer(staleMode ? program->gradStashBuffer
                                 : program->hostGradsBuffer),
      exec->hostBuffer(program->hostGradsBuffer), *resident,
      int32_t(opts.gradAccum));
  grads->bind(optimizer);
  if (resident->active())
    resident->push(optimizer);
  deferUpdate = syncMode && nan.skips();
  exec->setWatchdog(opts.watchdogSeconds);
}

void Trainer::loadBatch(const StepTag &tag) {
  const int64_t rows = program->rowsPerMicrobatch * model.seqLen;
  const int64_t bytes = rows * int64_t(sizeof(int64_t));
  // Program step `pass` of the optimizer step trains the pass-th batch of
  // its rows.
  const int64_t first = int64_t(tag.pass) * program->microbatches;
  for (auto [buffer, source] :
       {std::pair(program->idsBuffer, &feed.ids()),
        std::pair(program->labelsBuffer, &feed.labelsOfBatch())}) {
    char *base = exec->hostBuffer(buffer);
    const int64_t stride = microbatchStride(*program, buffer, bytes);
    for (int32_t m = 0; m < program->microbatches; ++m)
      std::memcpy(base + m * stride, source->data() + (first + m) * rows,
                  size_t(bytes));
  }
}

void Trainer::optimize(const StepTag &tag, int32_t stage) {
  if (tag.eval)
    return;
  if (stage >= 0)
    optimizeStage(tag, stage);
  else
    optimizeAll(tag);
}

int64_t Trainer::optimizeStashed(const StepTag &tag) {
  // The stash holds the gradients of the step issued before this one;
  // a drain may have applied them already (and did before an evaluation).
  const int64_t step = tag.step - 1;
  if (tag.eval || step <= staleApplied)
    return -1;
  StepTag of = tag;
  of.step = step;
  optimizeAll(of);
  staleApplied = step;
  return step;
}

void Trainer::applyPendingStaleUpdate() {
  if (!staleMode || lastTrainIssued <= staleApplied)
    return;
  StepTag tag;
  tag.step = lastTrainIssued;
  optimizeAll(tag);
  staleApplied = lastTrainIssued;
}

void Trainer::optimizeStage(const StepTag &tag, int32_t stage) {
  // A non-finite gradient stops before any update that reads it, and no
  // later task updates anything either: the run stops.
  if (nan.foundIn(-1) && !replicas.active())
    return;
  const std::vector<int32_t> &parts = grads->readBy(stage);
  const std::vector<int> &which = grads->finalisedBy(stage);
  const bool last = tag.pass + 1 >= tag.passes;
  grads->sumAcrossReplicas(parts, replicas);
  // Every replica takes part in the same collectives and then makes the
  // same decision.
  std::string bad =
      replicas.sharded()
          ? agreeOnShards(*grads, optimizer, replicas, parts, which, nullptr)
          : std::string();
  if (nan.foundIn(-1))
    return;
  if (!replicas.sharded())
    bad = grads->nonFinite(parts);
  if (!bad.empty()) {
    nan.record(tag.step, bad);
    return;
  }
  for (int i : which)
    if (grads->accumulates())
      grads->accumulate(optimizer.tensors()[size_t(i)], tag.pass == 0);
    else
      grads->prepare(optimizer.tensors()[size_t(i)]);
  if (last)
    optimizer.update(which, tag.step);
}

void Trainer::optimizeAll(const StepTag &tag) {
  grads->sumAcrossReplicas(grads->all(), replicas);
  if (grads->accumulates()) {
    // This program step's gradients into the sums; the last one updates
    // (or skips) with the sums unless an earlier one found a non-finite
    // gradient.
    for (const OptParam &o : optimizer.tensors())
      grads->accumulate(o, tag.pass == 0);
    if (std::string bad = grads->nonFinite(grads->all()); !bad.empty())
      nan.record(tag.step, bad);
    if (tag.pass + 1 < tag.passes)
      return;
    syncNorm = optimizer.ownedGradNorm(optimizer.all());
    if (dumpNow && opts.clipGradNorm)
      stashGradients();
    if (nan.foundIn(tag.step) || deferUpdate)
      return;
    optimizer.clipAndUpdate(tag.step, syncNorm);
    return;
  }
  for (const OptParam &o : optimizer.tensors())
    grads->prepare(o);
  std::string bad;
  if (replicas.sharded()) {
    double sumSquares = 0;
    bad = agreeOnShards(*grads, optimizer, replicas, grads->all(),
                        optimizer.all(), &sumSquares);
    syncNorm = std::sqrt(sumSquares);
  } else {
    bad = grads->nonFinite(grads->all());
    syncNorm = optimizer.ownedGradNorm(optimizer.all());
  }
  if (!bad.empty())
    nan.record(tag.step, bad);
  if (dumpNow && opts.clipGradNorm) {
    // The dump shows the gradients before clipping; the trainer writes it
    // once the loss is known.
    stashGradients();
  }
  if (!bad.empty() || deferUpdate)
    return; // The trainer thread decides (runStepPipelined).
  optimizer.clipAndUpdate(tag.step, syncNorm);
}

void Trainer::stashGradients() {
  for (const OptParam &o : optimizer.tensors()) {
    dumpStash.emplace_back(o.numel);
    const size_t bytes = size_t(o.numel) * sizeof(float);
    if (o.resident())
      resident->device().copyFromWorker(o.worker, dumpStash.back().data(),
                                        o.workerGrad, bytes);
    else
      std::memcpy(dumpStash.back().data(), o.grad, bytes);
  }
}

double Trainer::issuePipelined(int64_t step, bool eval, float lossScale,
                               int32_t pass, int32_t passes) {
  exec->beginStep(step, eval, lossScale, pass, passes);
  program->issue(exec.get());
  if (log.hasPending()) {
    // This step's stale update applies the previous step's gradients; log
    // that step once it has run, while the GPUs compute this one.
    exec->waitForUpdate();
    exec->checkError();
    log.logPending(syncNorm);
  }
  exec->barrier();
  exec->checkError();
  const char *losses = exec->hostBuffer(program->lossBuffer);
  const int64_t stride =
      microbatchStride(*program, program->lossBuffer, sizeof(float));
  double sum = 0;
  if (pass == 0)
    microbatchLosses.clear();
  for (int32_t m = 0; m < program->microbatches; ++m) {
    float loss;
    std::memcpy(&loss, losses + m * stride, sizeof(float));
    microbatchLosses.push_back(loss);
    sum += double(loss);
  }
  return sum;
}

double Trainer::pipelinedGradNorm() {
  // With replicas the last optimizer task may still be summing gradients in
  // place; the norm is of the sums.
  if (replicas.active())
    exec->drainHost();
  const double norm = grads->normForLog(optimizer);
  if (!replicas.sharded())
    return norm;
  // Logged only, so the order of the replicas' sum does not matter.
  double sumSquares = norm * norm;
  replicas.sum(&sumSquares, 1);
  return std::sqrt(sumSquares);
}

double Trainer::stepLoss(int64_t step, int64_t count, double lossSum,
                         std::string &badLoss) {
  const bool causal = model.loss == LossKind::CausalLM;
  auto lossOf = [&](int64_t microbatches) {
    return causal ? (count > 0 ? lossSum / double(count)
                               : std::numeric_limits<double>::quiet_NaN())
                  : lossSum / double(microbatches);
  };
  double loss = lossOf(program->microbatches * opts.gradAccum);
  badLoss = nonFiniteLoss(microbatchLosses, step);
  if (replicas.active()) {
    // One loss for all, and one decision about a non-finite one.
    double both[2] = {lossSum, badLoss.empty() ? 0.0 : 1.0};
    replicas.sum(both, 2);
    lossSum = both[0];
    loss = lossOf(program->microbatches * replicas.count());
    if (badLoss.empty() && both[1] > 0)
      badLoss = "non-finite loss on another replica in " + stepName(step);
  }
  return loss;
}

void Trainer::finishUpdate(int64_t step, const std::string &badLoss) {
  // Non-finite values: the gradient message wins (the tasks looked at the
  // gradients before any update), then the loss.
  if (!badLoss.empty() || syncMode) {
    drain();
    if (!badLoss.empty())
      nan.stopIfStop(badLoss);
  }
  if (deferUpdate) {
    std::string bad = nan.take(step);
    if (bad.empty())
      bad = badLoss;
    if (bad.empty())
      optimizer.clipAndUpdate(step, syncNorm);
    else
      optimizer.skip(step, bad);
  }
}

double Trainer::runStepPipelined(int64_t step, StepRecord &record) {
  // The data thread may still read the previous batch.
  exec->drainData();
  exec->checkError();
  feed.gatherStep(step);
  int64_t count = model.loss == LossKind::CausalLM ? feed.countTargets() : 0;
  if (replicas.active()) {
    // The loss is the mean over the global batch: every replica scales by
    // the global count of targets.
    double global = double(count);
    replicas.sum(&global, 1);
    count = int64_t(global);
  }
  dumpNow = step == 0 && !opts.dumpGradients.empty();
  lastTrainIssued = step;
  // --grad-accum K: K program steps, one update; the loss is the mean over
  // every microbatch of the K batches.
  const int32_t passes = int32_t(opts.gradAccum);
  const float lossScale = feed.lossScaleFor(
      count, program->microbatches * replicas.count() * passes);
  double lossSum = 0;
  for (int32_t pass = 0; pass < passes; ++pass)
    lossSum += issuePipelined(step, false, lossScale, pass, passes);
  std::string badLoss;
  const double loss = stepLoss(step, count, lossSum, badLoss);
  finishUpdate(step, badLoss);
  double norm;
  if (syncMode) {
    norm = syncNorm;
  } else if (staleMode) {
    norm = std::numeric_limits<double>::quiet_NaN(); // Its update logs it.
  } else if (grads->accumulates()) {
    // The norm of the sums, once the last program step's tasks made them.
    exec->drainHost();
    exec->checkError();
    norm = optimizer.ownedGradNorm(optimizer.all());
  } else {
    // Only logged: the tasks read the same gradients, nothing writes them
    // until the next step is issued.
    norm = pipelinedGradNorm();
  }
  if (dumpNow) {
    const std::vector<OptParam> &opt = optimizer.tensors();
    if (dumpStash.empty() && resident->active()) {
      // The worker's gradients, once the tasks that sum parts have run.
      drain();
      stashGradients();
    }
    std::vector<const float *> g(size_t(model.numParams), nullptr);
    for (size_t i = 0; i < opt.size(); ++i)
      g[size_t(opt[i].index)] =
          dumpStash.empty() ? opt[i].grad : dumpStash[i].data();
    dumpGradients(loss, g);
    dumpStash.clear();
    dumpNow = false;
  }
  record.step = step;
  record.loss = loss;
  record.tokens = feed.rowsPerStep() * replicas.count() * model.seqLen;
  record.lr = optimizer.lrAt(step);
  record.gradNorm = norm;
  return loss;
}

} // namespace rondo::rt
