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

/// The short names of the adapted bases of `pairs` (those `counts` keeps)
/// when they select exactly those bases, else their full names: PEFT
/// matches targets by name on load. `clashes(p, shortNames)` says whether
/// the short names would also select the other parameter p.
template <typename Counts, typename FullName, typename ShortName,
          typename Clashes>
std::vector<std::string> targetNames(const ModelSpec &model,
                                     const std::vector<AdapterPair> &pairs,
                                     Counts counts, FullName fullName,
                                     ShortName shortName, Clashes clashes) {
  std::set<std::string> full, shortNames;
  std::set<int> bases;
  for (const AdapterPair &pair : pairs)
    if (counts(pair)) {
      std::string name = fullName(model.params[pair.base]);
      full.insert(name);
      shortNames.insert(shortName(name));
      bases.insert(pair.base);
    }
  bool exact = true;
  for (int i = 0; i < model.numParams && exact; ++i) {
    const ParamSpec &p = model.params[i];
    if (!isLoraAdapter(p) && !bases.count(i))
      exact = !clashes(p, shortNames);
  }
  const std::set<std::string> &chosen = exact ? shortNames : full;
  return {chosen.begin(), chosen.end()};
}

/// PEFT's target_modules: the modules' last names (q_proj, ...) when they
/// select exactly the adapted linears of this model, else every adapted
/// module's full path, so that PEFT adapts the same linears on load.
std::vector<std::string> targetModules(const ModelSpec &model,
                                       const std::vector<AdapterPair> &pairs) {
  return targetNames(
      model, pairs, [](const AdapterPair &) { return true; }, modulePath,
      lastComponent,
      [](const ParamSpec &p, const std::set<std::string> &last) {
        return p.rank == 2 && last.count(lastComponent(modulePath(p)));
      });
}

/// The short form of a parameter target (its module's last name and its
/// own, "experts.gate_up_proj") when it selects exactly the adapted
/// parameters of this model (PEFT matches target_parameters as suffixes),
/// else every adapted parameter's full name.
std::vector<std::string>
targetParameters(const ModelSpec &model,
                 const std::vector<AdapterPair> &pairs) {
  auto shortName = [](const std::string &name) {
    size_t dot = name.find_last_of('.');
    if (dot == std::string::npos || dot == 0)
      return name;
    size_t before = name.find_last_of('.', dot - 1);
    return before == std::string::npos ? name : name.substr(before + 1);
  };
  auto fullName = [](const ParamSpec &p) {
    return std::string(p.displayName && *p.displayName ? p.displayName
                                                       : p.name);
  };
  auto isParameter = [&](const AdapterPair &pair) {
    return model.params[pair.a].loraParameter;
  };
  auto clashes = [&](const ParamSpec &p,
                     const std::set<std::string> &suffixes) {
    std::string name = fullName(p);
    for (const std::string &s : suffixes)
      if (name == s ||
          (name.size() > s.size() && name.compare(name.size() - s.size() - 1,
                                                  s.size() + 1, "." + s) == 0))
        return true;
    return false;
  };
  return targetNames(model, pairs, isParameter, fullName, shortName, clashes);
}

/// PEFT's shape of an adapter: nn.Linear weights, [r, in] and [out, r],
/// for a linear; for stacked experts (ParamWrapper) A [E·r, d1] whose row
/// e·r + j is expert e's A_e[:, j], and B [d2, r·E] whose column j·E + e is
/// expert e's B_e[j, :].
std::vector<int64_t> peftShape(const ParamSpec &p) {
  if (p.rank == 3)
    return p.lora == LoraFactor::A
               ? std::vector<int64_t>{p.dims[0] * p.dims[2], p.dims[1]}
               : std::vector<int64_t>{p.dims[2], p.dims[1] * p.dims[0]};
  return {p.dims[1], p.dims[0]};
}

/// For each element of `p` in the trainer's layout (row-major), its offset
/// in PEFT's tensor: `visit(ours, peft)`.
template <typename Fn> void forEachPeftOffset(const ParamSpec &p, Fn visit) {
  if (p.rank == 3) {
    const int64_t e = p.dims[0], rows = p.dims[1], cols = p.dims[2];
    for (int64_t x = 0; x < e; ++x)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t ours = (x * rows + i) * cols + j;
          // A [E, d1, r]: (x, i, j) -> row x·r + j, column i of [E·r, d1].
          // B [E, r, d2]: (x, i, j) -> row j, column i·E + x of [d2, r·E].
          const int64_t peft = p.lora == LoraFactor::A
                                   ? (x * cols + j) * rows + i
                                   : j * (rows * e) + i * e + x;
          visit(ours, peft);
        }
    return;
  }
  const int64_t rows = p.dims[0], cols = p.dims[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      visit(r * cols + c, c * rows + r);
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
    // Stacked experts: A [E, d1, r] and B [E, r, d2] on W [E, d1, d2].
    if (w.rank == 3)
      ok = a.rank == 3 && b.rank == 3 && !transposed && !b.loraBaseTransposed &&
           a.loraParameter && b.loraParameter && a.dims[0] == w.dims[0] &&
           b.dims[0] == w.dims[0] && a.dims[1] == w.dims[1] && a.dims[2] == r &&
           b.dims[1] == r && b.dims[2] == w.dims[2];
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
    const std::vector<int64_t> want = peftShape(p);
    if (t.dims != want)
      throw Error("--load-lora " + path + ": tensor '" + name + "' has shape " +
                  shapeText(t.dims.data(), t.dims.size()) + ", expected " +
                  shapeText(want.data(), want.size()) + " (rank " +
                  std::to_string(model.lora ? model.lora->rank : 0) +
                  (p.rank == 3 ? ", " + std::to_string(p.dims[0]) + " experts"
                               : std::string()) +
                  ")");
    float *dst = params[i];
    forEachPeftOffset(p, [&](int64_t ours, int64_t peft) {
      dst[ours] = t.data[size_t(peft)];
    });
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
  std::vector<AdapterPair> pairs = adapterPairs(model), modulePairs;
  for (const AdapterPair &pair : pairs)
    if (!model.params[pair.a].loraParameter)
      modulePairs.push_back(pair);
  auto jsonList = [](const std::vector<std::string> &items) {
    std::string list;
    for (size_t i = 0; i < items.size(); ++i)
      list += (i ? ", " : "") + jsonQuote(items[i]);
    return list;
  };
  std::string list = jsonList(targetModules(model, modulePairs));
  // Experts and routers, which PEFT adapts as parameters; the key only
  // when there are some, so a dense model's file is what it always was.
  std::vector<std::string> parameters = targetParameters(model, pairs);
  std::string parameterList =
      parameters.empty()
          ? std::string()
          : "  \"target_parameters\": [" + jsonList(parameters) + "],\n";
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
         list + "],\n" + parameterList +
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
  // PEFT's layout: [out, in] for a linear, each of ours transposed; the
  // ParamWrapper's stacked form for experts (peftShape).
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
    std::vector<float> t(size_t(numElements(p)));
    forEachPeftOffset(p, [&](int64_t ours, int64_t peft) {
      t[size_t(peft)] = params[i][ours];
    });
    storage.push_back(std::move(t));
    tensors.push_back({name, peftShape(p), storage.back().data()});
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
    // Stacked experts are E independent [d1, d2] = [d1, r]·[r, d2] merges.
    const bool stacked = a.rank == 3;
    const int64_t experts = stacked ? a.dims[0] : 1;
    const int64_t in = a.dims[stacked ? 1 : 0],
                  out = model.params[pair.b].dims[stacked ? 2 : 1];
    const bool transposed = a.loraBaseTransposed;
    std::vector<float> &dst = merged[size_t(pair.base)];
    dst.resize(size_t(numElements(model.params[pair.base])));
    for (int64_t e = 0; e < experts; ++e) {
      const float *w = params[pair.base] + e * in * out,
                  *pa = params[pair.a] + e * in * r,
                  *pb = params[pair.b] + e * r * out;
      float *to = dst.data() + e * in * out;
#pragma omp parallel for schedule(static) if (in * out > (int64_t(1) << 16))
      for (int64_t i = 0; i < in; ++i)
        for (int64_t j = 0; j < out; ++j) {
          double delta = 0;
          for (int64_t k = 0; k < r; ++k)
            delta += double(pa[i * r + k]) * double(pb[k * out + j]);
          const int64_t at = transposed ? j * in + i : i * out + j;
          to[at] = float(double(w[at]) + scale * delta);
        }
    }
  }
  return merged;
}

} // namespace rondo::rt
