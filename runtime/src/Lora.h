//===- Lora.h - LoRA adapters in the trainer --------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A trainer compiled with `rondo-compile --lora` has parameters the ONNX
// model does not: its adapters (ParamSpec::lora). The trainer initialises
// them as PEFT does (Init.h, loraInit), may start them from a PEFT file
// (--load-lora), writes them for PEFT (--export-lora) and can merge them into
// the base weights of an exported ONNX model (--merge-lora).
//
// Layouts. The compiled step computes x·W + s·(x·A)·B with A [in, r],
// B [r, out] and s = alpha / r. PEFT stores nn.Linear weights, [out, in]:
// lora_A.weight [r, in] = A^T and lora_B.weight [out, r] = B^T, named
// "base_model.model.<module>.lora_A.weight" where <module> is the PyTorch
// module path of the adapted linear (the adapter's displayName is
// "<module>.lora_A.weight").
//
// Stacked experts W [E, d1, d2] (ParamSpec::loraParameter, rank 3): the step
// computes W_e + s·A_e·B_e with A [E, d1, r] and B [E, r, d2] on the stored
// layout, as PEFT's ParamWrapper (`target_parameters`) does; PEFT stores
// lora_A.weight [E·r, d1] (row e·r + j is A_e[:, j]) and lora_B.weight
// [d2, r·E] (column j·E + e is B_e[j, :]), under the module that holds the
// parameter, with ".base_layer" once per parameter of that module wrapped
// after it ("<module>.base_layer.lora_A.weight" for gate_up_proj when
// down_proj is adapted too).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_LORA_H
#define RONDO_RUNTIME_SRC_LORA_H

#include "rondo/runtime/Model.h"

#include <string>
#include <vector>

namespace rondo::rt {

inline bool isLoraAdapter(const ParamSpec &p) {
  return p.lora != LoraFactor::None;
}

/// Checks that every adapter names an existing base weight, that each base
/// has one A [in, r] and one B [r, out] of the compiled rank whose product
/// has the base's shape, and that the model has a LoraSpec when it has
/// adapters. Throws rt::Error naming the parameter otherwise.
void validateLora(const ModelSpec &model);

/// The name PEFT saves `adapter` under.
std::string peftTensorName(const ParamSpec &adapter);

/// Sets every adapter of `model` (params[i], in the trainer's layout) from
/// the PEFT safetensors file at `path`. Every adapter must be there under
/// its PEFT name with PEFT's shape, and every tensor there must be an
/// adapter of this trainer; throws rt::Error naming the file and the tensor
/// otherwise. Other parameters are not touched.
void loadLoraAdapters(const std::string &path, const ModelSpec &model,
                      float *const *params);

/// Writes the adapters of `model` to `path` as PEFT saves them
/// (adapter_model.safetensors) and PEFT's adapter_config.json into the same
/// directory, each atomically.
void exportLoraAdapters(const std::string &path, const ModelSpec &model,
                        const float *const *params);

/// The adapter_config.json of `model`'s adapters (PEFT's LoraConfig).
std::string loraAdapterConfig(const ModelSpec &model);

/// --merge-lora: for every base weight q, W + (alpha/r)·A·B in W's stored
/// layout (per expert for stacked experts), accumulated in double and rounded
/// once to fp32, in result[q]; result[i] is empty for every other parameter.
std::vector<std::vector<float>> mergeLoraWeights(const ModelSpec &model,
                                                 const float *const *params);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_LORA_H
