//===- ToyPipeline.h - A hand-written pipelined "emitted model" -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The toy model of ToyModel.h cut into three stages as rondo-compile would
// cut it, with hand-written stage functions and issue functions:
//
//   job 0, F0 (forward):  h = emb[x] * norm; checkpoints its token ids
//   job 1, T  (tail):     logits = h proj + bias, loss sums, d h; grads of
//                         proj and bias, plus an all-zero part of emb's
//                         gradient (so emb has two parts, as a tied
//                         embedding would, finalised by B1)
//   job 2, B1 (backward): reloads the ids, d emb[x] += d h * norm
//
// with parameter uploads (F0's in two chunks that cut a piece), input
// uploads, handoffs, checkpoint/reload, loss and gradient downloads, and
// per-step events, for 1, 2 and 3 workers in sync, overlap and stale mode
// (the stale programs last).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_RUNTIME_TOYPIPELINE_H
#define RONDO_TEST_UNIT_RUNTIME_TOYPIPELINE_H

#include "rondo/runtime/Exec.h"
#include "rondo/runtime/Trainer.h"

#include <string>
#include <vector>

namespace rondo::toy {

struct ToyPipeline {
  const rt::ModelSpec *model;
  /// w1 sync, w1 overlap, w2 ..., w3 overlap, then w1 stale .. w3 stale.
  std::vector<rondo_program> programs;
};

/// Configures the pipelined toy: `microbatches` x `rows` rows of `seqLen`
/// tokens per step. With LossKind::GraphOutput the tail outputs each
/// microbatch's mean loss. Valid until the next call.
const ToyPipeline &toyPipeline(int32_t microbatches, int32_t rows,
                               int64_t seqLen, const std::string &modelPath,
                               rt::LossKind loss = rt::LossKind::CausalLM);

/// Makes F0 throw on its `n`-th launch (counting from 1; 0: never).
void toyPipelineFailAtLaunch(int n);
/// Makes the issue function copy past the end of a buffer in step `step`
/// (-1: never).
void toyPipelineBadCopyAtStep(int64_t step);

/// Makes B1's first launch in step `step` await an event that no op of the
/// overlap programs completes (-1: never).
void toyPipelineDeadlockAtStep(int64_t step);

/// Runs `action` on F0's `n`-th launch (counting from 1; 0: never), e.g. to
/// sleep past a watchdog or to raise a signal mid-step.
void toyPipelineAtLaunch(int n, void (*action)());

/// Non-finite values in training step `step` (counting T and B1 launches,
/// so no evaluation may run before it): NaN in T's gradient of proj, +inf
/// in B1's gradient of emb, NaN in microbatch 1's loss (bit flags).
enum : int { kNanProjGrad = 1, kInfEmbGrad = 2, kNanLoss = 4 };
void toyPipelineNonFiniteAtStep(int64_t step, int where);
/// The same in training step `step` and every one after it.
void toyPipelineNonFiniteFromStep(int64_t step, int where);

/// Stage indices and parameter image sizes, for trace checks.
enum : int { kStageF0 = 0, kStageT = 1, kStageB1 = 2 };
int64_t toyStageParamBytes(int stage);
int64_t toyStageGradBytes(int stage);

/// The reference the tests compare the trainer with: the toy on `rows`
/// rows of `seqLen` tokens (ids and labels [rows x seqLen]) as one program
/// step of microbatches of one row computes it, by calling the stage
/// functions row by row in order on the weights `params` (one per
/// parameter) with `lossScale`. Adds each trainable parameter's gradient
/// into grads[param] (its parts summed in table order, as the host sums
/// them) and returns the loss each microbatch's tail stored. Changes no
/// state of the configured pipeline.
std::vector<float> toyReferenceStep(const float *const *params,
                                    float *const *grads, const int64_t *ids,
                                    const int64_t *labels, int64_t rows,
                                    int64_t seqLen, rt::LossKind loss,
                                    float lossScale);

} // namespace rondo::toy

#endif // RONDO_TEST_UNIT_RUNTIME_TOYPIPELINE_H
