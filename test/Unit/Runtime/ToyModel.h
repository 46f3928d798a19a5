//===- ToyModel.h - A hand-written "emitted model" for tests ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The model the runtime's tests train: a bigram softmax regression,
// logits[t] = (emb[x_t] * norm) W + bias, CausalLM or GraphOutput loss.
// Its parameter table and weights are here; its compiled form (stage
// functions and exec programs, as rondo-compile would emit them) is
// ToyPipeline.h. The frozen `norm.scale` checks that frozen parameters
// get no gradient.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_RUNTIME_TOYMODEL_H
#define RONDO_TEST_UNIT_RUNTIME_TOYMODEL_H

#include "rondo/runtime/Trainer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace rondo::toy {

constexpr int64_t kVocab = 16;
constexpr int64_t kDim = 8;

/// Parameter indices in the spec's table.
enum : int { kEmb = 0, kNorm = 1, kProj = 2, kBias = 3, kNumParams = 4 };

/// Configures the toy (the generated code's functions have no context
/// argument) and returns its spec. Valid until the next call.
const rt::ModelSpec &toyModel(int64_t batch, int64_t seqLen, rt::LossKind loss,
                              const std::string &modelPath);

/// Holds the frozen scale in bf16 (ParamStorage::Bf16), as a bf16 plan
/// holds a frozen weight that only products read: the next toyModel's
/// table says so, and the pipelined toy's images carry it in bf16. Stays
/// until changed.
void toyNormInBf16(bool on);
bool toyNormIsBf16();

/// Writes random initial weights for SPEC into the ONNX model at PATH and
/// returns them. The frozen scale is not all ones, so that a missing factor
/// in a backward shows.
std::vector<std::vector<float>> writeRandomWeights(const rt::ModelSpec &spec,
                                                   const std::string &path,
                                                   unsigned seed);

/// The head both toys share, for one position with hidden state H: the
/// logits H proj + bias into LOGITS, their cross-entropy against Y
/// (returned) and its gradient times SCALE into DLOGITS.
template <typename T>
double headCrossEntropy(const T *h, const float *proj, const float *bias,
                        int64_t y, double scale, std::vector<double> &logits,
                        std::vector<double> &dlogits) {
  double maxLogit = -HUGE_VAL;
  for (int64_t v = 0; v < kVocab; ++v) {
    double z = bias[v];
    for (int64_t d = 0; d < kDim; ++d)
      z += double(h[d]) * proj[d * kVocab + v];
    logits[v] = z;
    maxLogit = std::max(maxLogit, z);
  }
  double sumExp = 0;
  for (int64_t v = 0; v < kVocab; ++v)
    sumExp += std::exp(logits[v] - maxLogit);
  const double lse = maxLogit + std::log(sumExp);
  for (int64_t v = 0; v < kVocab; ++v)
    dlogits[v] = (std::exp(logits[v] - lse) - (v == y ? 1.0 : 0.0)) * scale;
  return lse - logits[y];
}

} // namespace rondo::toy

#endif // RONDO_TEST_UNIT_RUNTIME_TOYMODEL_H
