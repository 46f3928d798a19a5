//===- HfExport.h - Full fine-tunes in Hugging Face's layout ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The trainer's --export-safetensors DIR: every weight of the model under the
// name PyTorch gave it (recovered by the importer from the exporter's node
// metadata), in PyTorch's layout (nn.Linear weights that the exporter stored
// pre-transposed are transposed back), as `DIR/model.safetensors`, so that
// `AutoModelForCausalLM.from_pretrained(DIR)` loads it next to the model's
// original config.json.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_HFEXPORT_H
#define RONDO_RUNTIME_SRC_HFEXPORT_H

#include "rondo/runtime/Model.h"

#include <string>
#include <vector>

namespace rondo::rt {

/// The names of every parameter of `model` (empty for LoRA adapters), or an
/// rt::Error naming the initializer that has none, or two that claim one
/// name: the trainer checks this before it trains.
std::vector<std::vector<std::string>>
checkHuggingFaceNames(const ModelSpec &model);

/// Writes `dir`/model.safetensors from `data` (one pointer per parameter of
/// `model`, LoRA adapters skipped) and, when `configPath` is not empty, copies
/// it to `dir`/config.json. Creates `dir` when missing. Throws rt::Error
/// naming the parameter that has no PyTorch name, or the file that could not
/// be written; files already in `dir` are then untouched.
void exportHuggingFace(const std::string &dir, const std::string &configPath,
                       const ModelSpec &model, const float *const *data);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_HFEXPORT_H
