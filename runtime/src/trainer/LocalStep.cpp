//===- LocalStep.cpp - One step of a single-process StepFn ----------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// rondo-compile emits programs only; the runtime's unit tests still drive
// the trainer with a hand-written StepFn (test/Unit/Runtime/ToyModel.h),
// called once per microbatch of --grad-accum on the trainer thread.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Error.h"
#include "trainer/Trainer.h"

#include <cmath>
#include <limits>

namespace rondo::rt {

double Trainer::runStepLocal(int64_t step, StepRecord &record) {
  const std::vector<GradTensor> &trainableGrads = store.trainableGradients();
  for (const GradTensor &g : trainableGrads)
    parallelZero(g.data, g.numel);
  feed.gatherStep(step);

  const int64_t seq = model.seqLen, K = opts.gradAccum;
  const bool causal = model.loss == LossKind::CausalLM;
  const int64_t count = causal ? feed.countTargets() : 0;
  const float lossScale = feed.lossScaleFor(count, K);

  double lossSum = 0;
  int64_t lossCount = 0;
  microbatchLosses.assign(size_t(K), 0.0);
  for (int64_t k = 0; k < K; ++k) {
    StepArgs args;
    args.params = store.data();
    args.grads = store.gradients();
    args.inputIds = &feed.ids()[size_t(k * model.batch * seq)];
    args.labels = &feed.labelsOfBatch()[size_t(k * model.batch * seq)];
    args.lossScale = lossScale;
    StepResult result = stepFn(args);
    microbatchLosses[size_t(k)] = result.lossSum;
    lossSum += result.lossSum;
    lossCount += result.lossCount;
  }
  double loss;
  if (causal) {
    if (lossCount != count)
      throw Error("the compiled step counted " + std::to_string(lossCount) +
                  " non-ignored targets in " + stepName(step) +
                  ", the trainer " + std::to_string(count) +
                  "; the step and the runtime disagree on the loss");
    loss = count > 0 ? lossSum / double(count)
                     : std::numeric_limits<double>::quiet_NaN();
  } else {
    loss = lossSum / double(K);
  }

  if (step == 0 && !opts.dumpGradients.empty()) {
    const float *const *g = store.gradients();
    dumpGradients(loss, std::vector<const float *>(g, g + model.numParams));
  }

  double norm = gradNorm(trainableGrads.data(), trainableGrads.size());
  std::string bad;
  if (!std::isfinite(norm)) {
    for (const OptParam &o : optimizer.tensors()) {
      if (!allFinite(o.grad, o.numel)) {
        bad = stepName(step) + ": non-finite gradient of parameter " +
              model.params[o.index].name + " (first in table order)";
        break;
      }
    }
  }
  if (bad.empty())
    bad = nonFiniteLoss(microbatchLosses, step);
  if (!bad.empty()) {
    nan.stopIfStop(bad);
    optimizer.skip(step, bad);
  } else {
    optimizer.clipAndUpdate(step, norm);
  }

  record.step = step;
  record.loss = loss;
  record.tokens = feed.rowsPerStep() * seq;
  record.lr = optimizer.lrAt(step);
  record.gradNorm = norm;
  return loss;
}

double Trainer::evaluateLocal(int64_t count) {
  const bool causal = model.loss == LossKind::CausalLM;
  const int64_t seq = model.seqLen;
  double lossSum = 0;
  // The gradient buffers are scratch here: a step zeroes them first.
  for (int64_t k = 0; k < opts.gradAccum; ++k) {
    StepArgs args;
    args.params = store.data();
    args.grads = store.gradients();
    args.inputIds = &feed.ids()[size_t(k * model.batch * seq)];
    args.labels = &feed.labelsOfBatch()[size_t(k * model.batch * seq)];
    args.lossScale = feed.lossScaleFor(count, opts.gradAccum);
    StepResult r = stepFn(args);
    lossSum += causal ? r.lossSum : r.lossSum / double(opts.gradAccum);
  }
  return lossSum;
}

} // namespace rondo::rt
