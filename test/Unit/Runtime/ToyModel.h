//===- ToyModel.h - A hand-written "emitted model" for tests ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Stands in for the compiler's output so trainerMain can be tested end to
// end: a bigram softmax regression, logits[t] = (emb[x_t] * norm) W + bias,
// with a hand-written backward that honours the StepFn contract (adds
// lossScale-scaled gradients, CausalLM or GraphOutput loss). The frozen
// `norm.scale` checks that frozen parameters get no gradient buffer.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_RUNTIME_TOYMODEL_H
#define RONDO_TEST_UNIT_RUNTIME_TOYMODEL_H

#include "rondo/runtime/Trainer.h"

#include <string>

namespace rondo::toy {

constexpr int64_t kVocab = 16;
constexpr int64_t kDim = 8;

/// Parameter indices in the spec's table.
enum : int { kEmb = 0, kNorm = 1, kProj = 2, kBias = 3, kNumParams = 4 };

/// Configures the toy (the StepFn has no context argument, like the
/// generated code) and returns its spec. Valid until the next call.
const rt::ModelSpec &toyModel(int64_t batch, int64_t seqLen, rt::LossKind loss,
                              const std::string &modelPath);

/// The compiled step of the configured toy.
rt::StepResult toyStep(const rt::StepArgs &args);

} // namespace rondo::toy

#endif // RONDO_TEST_UNIT_RUNTIME_TOYMODEL_H
