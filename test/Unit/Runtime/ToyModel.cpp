//===- ToyModel.cpp - A hand-written "emitted model" for tests ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "ToyModel.h"

#include "rondo/runtime/OnnxWeights.h"

#include <random>

namespace rondo::toy {

using rt::LossKind;
using rt::ModelSpec;
using rt::ParamSpec;
using rt::StepArgs;
using rt::StepResult;

namespace {

const ParamSpec kParams[kNumParams] = {
    {"emb.weight", "model.embed.weight", 2, {kVocab, kDim}, true},
    {"norm.scale", "", 1, {kDim}, false},
    {"proj.weight", "model.proj.weight", 2, {kDim, kVocab}, true},
    {"proj.bias", "model.proj.bias", 1, {kVocab}, true},
};

ModelSpec gSpec;
std::string gPath;

} // namespace

const ModelSpec &toyModel(int64_t batch, int64_t seqLen, LossKind loss,
                          const std::string &modelPath) {
  gPath = modelPath;
  gSpec.modelPath = gPath.c_str();
  gSpec.inputName = "input_ids";
  gSpec.batch = batch;
  gSpec.seqLen = seqLen;
  gSpec.vocabSize = kVocab;
  gSpec.loss = loss;
  gSpec.params = kParams;
  gSpec.numParams = kNumParams;
  return gSpec;
}

std::vector<std::vector<float>> writeRandomWeights(const ModelSpec &spec,
                                                   const std::string &path,
                                                   unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<std::vector<float>> weights;
  std::vector<rt::TensorToWrite<float>> tensors;
  for (int i = 0; i < spec.numParams; ++i) {
    std::vector<float> w(size_t(rt::numElements(spec.params[i])));
    for (float &x : w)
      x = i == kNorm ? 1.0f + 0.25f * normal(rng) : normal(rng);
    weights.push_back(w);
  }
  for (int i = 0; i < spec.numParams; ++i) {
    const ParamSpec &p = spec.params[i];
    tensors.push_back({p.name, std::vector<int64_t>(p.dims, p.dims + p.rank),
                       weights[size_t(i)].data()});
  }
  rt::writeInitializerModel(path, tensors);
  return weights;
}

StepResult toyStep(const StepArgs &args) {
  const int64_t B = gSpec.batch, T = gSpec.seqLen;
  const float *emb = args.params[kEmb], *norm = args.params[kNorm],
              *proj = args.params[kProj], *bias = args.params[kBias];
  float *gEmb = args.grads[kEmb], *gProj = args.grads[kProj],
        *gBias = args.grads[kBias];

  // Targets: position t predicts labels[t + 1] (the causal shift).
  int64_t count = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t)
      count += args.labels[b * T + t + 1] != -100;
  const bool graphLoss = gSpec.loss == LossKind::GraphOutput;
  // GraphOutput: the graph's loss is its own batch mean, so its gradient
  // carries 1/count in addition to the runtime's scale.
  const double gradScale = graphLoss
                               ? (count ? args.lossScale / double(count) : 0.0)
                               : double(args.lossScale);

  double lossSum = 0;
  std::vector<double> h(kDim), logits(kVocab), dlogits(kVocab);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int64_t y = args.labels[b * T + t + 1];
      if (y == -100)
        continue;
      const int64_t x = args.inputIds[b * T + t];
      for (int64_t d = 0; d < kDim; ++d)
        h[d] = double(emb[x * kDim + d]) * norm[d];
      lossSum +=
          headCrossEntropy(h.data(), proj, bias, y, gradScale, logits, dlogits);
      for (int64_t v = 0; v < kVocab; ++v)
        gBias[v] += float(dlogits[v]);
      for (int64_t d = 0; d < kDim; ++d) {
        double dh = 0;
        for (int64_t v = 0; v < kVocab; ++v) {
          gProj[d * kVocab + v] += float(h[d] * dlogits[v]);
          dh += proj[d * kVocab + v] * dlogits[v];
        }
        gEmb[x * kDim + d] += float(dh * norm[d]);
      }
    }
  }
  if (graphLoss)
    return {count ? lossSum / double(count) : 0.0, 1};
  return {lossSum, count};
}

} // namespace rondo::toy
