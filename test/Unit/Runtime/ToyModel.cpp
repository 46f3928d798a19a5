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

namespace {

const ParamSpec kParams[kNumParams] = {
    {"emb.weight", "model.embed.weight", 2, {kVocab, kDim}, true},
    {"norm.scale", "", 1, {kDim}, false},
    {"proj.weight", "model.proj.weight", 2, {kDim, kVocab}, true},
    {"proj.bias", "model.proj.bias", 1, {kVocab}, true},
};

const ParamSpec kParamsNormBf16[kNumParams] = {
    kParams[kEmb],
    {"norm.scale",
     "",
     1,
     {kDim},
     false,
     rt::LoraFactor::None,
     nullptr,
     false,
     "",
     false,
     false,
     rt::ParamStorage::Bf16},
    kParams[kProj],
    kParams[kBias],
};
bool gNormBf16 = false;

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
  gSpec.params = gNormBf16 ? kParamsNormBf16 : kParams;
  gSpec.numParams = kNumParams;
  return gSpec;
}

void toyNormInBf16(bool on) { gNormBf16 = on; }
bool toyNormIsBf16() { return gNormBf16; }

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

} // namespace rondo::toy
