//===- Lora.cpp - LoRA adapters in the trainer ----------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Lora.h"

#include "FileUtil.h"
#include "Log.h"
#include "Safetensors.h"
#include "rondo/runtime/Error.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace rondo::rt {

namespace {

/// The adapters of one base weight, as parameter indices.
struct AdapterPair {
  int base = -1, a = -1, b = -1;
};

/// Base weight index -> its adapters, in table order of the bases.
std::vector<AdapterPair> adapterPairs(const ModelSpec &model) {
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < model.numParams; ++i)
    if (!isLoraAdapter(model.params[i]))
      index.emplace(model.params[i].name, i);
  std::map<int, AdapterPair> pairs;
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (!isLoraAdapter(p))
      continue;
    auto it = index.find(p.loraBase ? p.loraBase : "");
    if (it == index.end())
      throw Error(std::string("LoRA adapter '") + p.name + "' adapts '" +
                  (p.loraBase ? p.loraBase : "") +
                  "', which is not a parameter of the compiled model");
    AdapterPair &pair = pairs[it->second];
    pair.base = it->second;
    int &slot = p.lora == LoraFactor::A ? pair.a : pair.b;
    if (slot >= 0)
      throw Error(std::string("the compiled model has two LoRA ") +
                  (p.lora == LoraFactor::A ? "A" : "B") + " factors for '" +
                  p.loraBase + "'");
    slot = i;
  }
  std::vector<AdapterPair> result;
  for (auto &[base, pair] : pairs)
    result.push_back(pair);
  return result;
}

std::string shapeText(const int64_t *dims, size_t rank) {
  std::string s = "[";
  for (size_t i = 0; i < rank; ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

/// The PyTorch module path of a base weight: its name without ".weight".
std::string modulePath(const ParamSpec &p) {
  std::string name = p.displayName && *p.displayName ? p.displayName : p.name;
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    name.resize(name.size() - suffix.size());
  return name;
}

std::string lastComponent(const std::string &path) {
  size_t dot = path.find_last_of('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

/// PEFT's target_modules: the modules' last names (q_proj, ...) when they
/// select exactly the adapted linears of this model, else every adapted
/// module's full path, so that PEFT adapts the same linears on load.
std::vector<std::string> targetModules(const ModelSpec &model,
                                       const std::vector<AdapterPair> &pairs) {
  std::set<std::string> full, last;
  std::set<int> bases;
  for (const AdapterPair &pair : pairs) {
    std::string path = modulePath(model.params[pair.base]);
    full.insert(path);
    last.insert(lastComponent(path));
    bases.insert(pair.base);
  }
  bool exact = true;
  for (int i = 0; i < model.numParams && exact; ++i) {
    const ParamSpec &p = model.params[i];
    if (isLoraAdapter(p) || p.rank != 2 || bases.count(i))
      continue;
    exact = !last.count(lastComponent(modulePath(p)));
  }
  const std::set<std::string> &chosen = exact ? last : full;
  return {chosen.begin(), chosen.end()};
}

/// A JSON number that Python reads as a float (PEFT's lora_dropout is
/// one).
std::string floatNumber(double value) {
  std::string s = jsonNumber(value);
  if (s.find_first_of(".eEn") == std::string::npos)
    s += ".0";
  return s;
}

} // namespace

void validateLora(const ModelSpec &model) {
  std::vector<AdapterPair> pairs = adapterPairs(model);
  if (pairs.empty())
    return;
  if (!model.lora || model.lora->rank < 1)
    throw Error("the compiled model has LoRA adapters but no LoRA "
                "configuration");
  const int64_t r = model.lora->rank;
  for (const AdapterPair &pair : pairs) {
    const ParamSpec &w = model.params[pair.base];
    if (pair.a < 0 || pair.b < 0)
      throw Error(std::string("the LoRA adapters of '") + w.name +
                  "' lack their " + (pair.a < 0 ? "A" : "B") + " factor");
    const ParamSpec &a = model.params[pair.a], &b = model.params[pair.b];
    bool transposed = a.loraBaseTransposed;
    bool ok = w.rank == 2 && a.rank == 2 && b.rank == 2 && a.dims[1] == r &&
              b.dims[0] == r && a.loraBaseTransposed == b.loraBaseTransposed &&
              w.dims[transposed ? 1 : 0] == a.dims[0] &&
              w.dims[transposed ? 0 : 1] == b.dims[1];
    if (!ok)
      throw Error(std::string("the LoRA adapters of '") + w.name + "' " +
                  shapeText(w.dims, size_t(w.rank)) + " have shapes " +
                  shapeText(a.dims, size_t(a.rank)) + " and " +
                  shapeText(b.dims, size_t(b.rank)) + " (rank " +
                  std::to_string(r) + ")");
  }
}

std::string peftTensorName(const ParamSpec &adapter) {
  return std::string("base_model.model.") +
         (adapter.displayName && *adapter.displayName ? adapter.displayName
                                                      : adapter.name);
}

void loadLoraAdapters(const std::string &path, const ModelSpec &model,
                      float *const *params) {
  std::vector<FloatTensor> tensors = readSafetensors(path);
  std::unordered_map<std::string, const FloatTensor *> byName;
  for (const FloatTensor &t : tensors)
    byName.emplace(t.name, &t);
  std::set<std::string> used;
  std::string example;
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (!isLoraAdapter(p))
      continue;
    const std::string name = peftTensorName(p);
    if (example.empty())
      example = name;
    auto it = byName.find(name);
    if (it == byName.end())
      throw Error("--load-lora " + path + ": no tensor '" + name +
                  "' (the adapter of '" + p.loraBase +
                  "'); the file must hold every adapter this trainer was "
                  "compiled with (rondo-compile --lora targets)");
    const FloatTensor &t = *it->second;
    // PEFT's layout is ours transposed.
    const int64_t rows = p.dims[0], cols = p.dims[1];
    const int64_t want[2] = {cols, rows};
    if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows)
      throw Error("--load-lora " + path + ": tensor '" + name + "' has shape " +
                  shapeText(t.dims.data(), t.dims.size()) + ", expected " +
                  shapeText(want, 2) + " (rank " +
                  std::to_string(model.lora ? model.lora->rank : 0) + ")");
    float *dst = params[i];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        dst[r * cols + c] = t.data[size_t(c * rows + r)];
    used.insert(name);
  }
  for (const FloatTensor &t : tensors)
    if (!used.count(t.name))
      throw Error("--load-lora " + path + ": tensor '" + t.name +
                  "' is not an adapter of this trainer (its adapters are "
                  "named like '" +
                  example +
                  "'); was the file trained with other --lora targets?");
}

std::string loraAdapterConfig(const ModelSpec &model) {
  const LoraSpec &lora = *model.lora;
  std::vector<std::string> modules = targetModules(model, adapterPairs(model));
  std::string list;
  for (size_t i = 0; i < modules.size(); ++i)
    list += (i ? ", " : "") + jsonQuote(modules[i]);
  return "{\n"
         "  \"peft_type\": \"LORA\",\n"
         "  \"task_type\": \"CAUSAL_LM\",\n"
         "  \"r\": " +
         std::to_string(lora.rank) +
         ",\n"
         "  \"lora_alpha\": " +
         jsonNumber(lora.alpha) +
         ",\n"
         "  \"lora_dropout\": " +
         floatNumber(lora.dropout) +
         ",\n"
         "  \"target_modules\": [" +
         list +
         "],\n"
         "  \"bias\": \"none\",\n"
         "  \"fan_in_fan_out\": false,\n"
         "  \"inference_mode\": true,\n"
         "  \"init_lora_weights\": true,\n"
         "  \"use_rslora\": false,\n"
         "  \"use_dora\": false,\n"
         "  \"modules_to_save\": null,\n"
         "  \"base_model_name_or_path\": null\n"
         "}\n";
}

void exportLoraAdapters(const std::string &path, const ModelSpec &model,
                        const float *const *params) {
  if (!model.lora)
    throw Error("--export-lora: this trainer has no LoRA adapters");
  // PEFT's layout, [out, in]: each of ours transposed.
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite<float>> tensors;
  std::vector<std::pair<std::string, int>> order;
  for (int i = 0; i < model.numParams; ++i)
    if (isLoraAdapter(model.params[i]))
      order.push_back({peftTensorName(model.params[i]), i});
  std::sort(order.begin(), order.end());
  storage.reserve(order.size());
  for (const auto &[name, i] : order) {
    const ParamSpec &p = model.params[i];
    const int64_t rows = p.dims[0], cols = p.dims[1];
    std::vector<float> t(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        t[size_t(c * rows + r)] = params[i][r * cols + c];
    storage.push_back(std::move(t));
    tensors.push_back({name, {cols, rows}, storage.back().data()});
  }
  writeSafetensors(path, tensors, {{"format", "pt"}});
  std::string config = loraAdapterConfig(model);
  writeFileAtomically(parentDirectory(path) + "/adapter_config.json",
                      config.data(), config.size());
}

std::vector<std::vector<float>> mergeLoraWeights(const ModelSpec &model,
                                                 const float *const *params) {
  std::vector<std::vector<float>> merged(size_t(model.numParams));
  if (!model.lora)
    return merged;
  const double scale = model.lora->alpha / double(model.lora->rank);
  const int64_t r = model.lora->rank;
  for (const AdapterPair &pair : adapterPairs(model)) {
    const ParamSpec &a = model.params[pair.a];
    const int64_t in = a.dims[0], out = model.params[pair.b].dims[1];
    const bool transposed = a.loraBaseTransposed;
    const float *w = params[pair.base], *pa = params[pair.a],
                *pb = params[pair.b];
    std::vector<float> &dst = merged[size_t(pair.base)];
    dst.resize(size_t(numElements(model.params[pair.base])));
#pragma omp parallel for schedule(static) if (in * out > (int64_t(1) << 16))
    for (int64_t i = 0; i < in; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double delta = 0;
        for (int64_t k = 0; k < r; ++k)
          delta += double(pa[i * r + k]) * double(pb[k * out + j]);
        const int64_t at = transposed ? j * in + i : i * out + j;
        dst[size_t(at)] = float(double(w[at]) + scale * delta);
      }
  }
  return merged;
}

} // namespace rondo::rt
