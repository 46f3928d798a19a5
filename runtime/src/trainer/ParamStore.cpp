//===- ParamStore.cpp - The model's fp32 master weights -------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/ParamStore.h"
#include "rondo/runtime/Error.h"
#include "rondo/runtime/FloatConv.h"
#include "rondo/runtime/OnnxWeights.h"

#include "FileUtil.h"
#include "HfExport.h"
#include "Init.h"
#include "Lora.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sys/stat.h>
#include <unistd.h>

namespace rondo::rt {

namespace {

/// The parameters the ONNX model holds: all but LoRA adapters.
std::vector<ParamSpec> onnxParams(const ModelSpec &model) {
  std::vector<ParamSpec> result;
  for (int i = 0; i < model.numParams; ++i)
    if (!isLoraAdapter(model.params[i]))
      result.push_back(model.params[i]);
  return result;
}

/// Names the way out of a weights file that cannot be read.
[[noreturn]] void rethrowWithAdvice(const Error &e) {
  throw Error(std::string(e.what()) +
              " (choose other weights with --weights FILE.onnx, or "
              "--init=random)");
}

bool heldInBf16(const ParamSpec &p) { return p.storage == ParamStorage::Bf16; }

/// Rounds `n` floats to bf16 (nearest even, toBf16's bits) in parallel.
void roundToBf16(const float *src, int64_t n, uint16_t *dst) {
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t e = 0; e < n; ++e)
    dst[e] = floatToBf16(src[e]);
}

} // namespace

void ParamStore::mapFrozenWeights(const TrainerOptions &opts,
                                  const std::string &path, const StepLog &log) {
  std::vector<ParamSpec> fromOnnx = onnxParams(model);
  std::vector<bool> wanted(fromOnnx.size());
  int64_t frozenBytes = 0;
  for (size_t k = 0; k < fromOnnx.size(); ++k) {
    // A weight held in bf16 is converted as it loads: an fp32 file cannot
    // be used in place as bf16.
    wanted[k] = !fromOnnx[k].trainable && !heldInBf16(fromOnnx[k]);
    if (wanted[k])
      frozenBytes += numElements(fromOnnx[k]) * int64_t(sizeof(float));
  }
  const double hostBytes =
      double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  if (frozenBytes == 0 || (opts.mapWeights == MapWeights::Auto &&
                           double(frozenBytes) <= hostBytes / 2))
    return;
  MappedWeights found;
  try {
    found = mapOnnxWeights(path, fromOnnx.data(), int(fromOnnx.size()), wanted);
  } catch (const Error &e) {
    rethrowWithAdvice(e);
  }
  mapped.assign(size_t(model.numParams), nullptr);
  int count = 0;
  for (int i = 0, k = 0; i < model.numParams; ++i) {
    if (isLoraAdapter(model.params[i]))
      continue;
    mapped[size_t(i)] = found.data[size_t(k++)];
    count += mapped[size_t(i)] != nullptr;
  }
  mappings = std::move(found.keepAlive);
  char line[256];
  const double bytes = double(found.bytes);
  std::snprintf(line, sizeof(line),
                "rondo: %d frozen weights (%.*f %s) used in place from their "
                "external data files, not copied (--map-weights)",
                count, bytes >= 1e9 ? 2 : 1,
                bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6,
                bytes >= 1e9 ? "GB" : "MB");
  log.say(line);
}

void ParamStore::initialise(const TrainerOptions &opts, const StepLog &log) {
  const int n = model.numParams;
  const std::string path =
      opts.weights.empty() ? model.modelPath : opts.weights;
  if (opts.init == InitKind::Onnx && opts.mapWeights != MapWeights::Off)
    mapFrozenWeights(opts, path, log);
  if (opts.init == InitKind::Onnx && opts.mapWeights == MapWeights::On) {
    int held = 0;
    for (int i = 0; i < n; ++i)
      held += heldInBf16(model.params[i]);
    if (held > 0)
      log.say("rondo: " + std::to_string(held) +
              " frozen weights held in bf16 are rounded as they load, not "
              "mapped (--map-weights uses fp32 files in place; "
              "rondo-compile --frozen-storage=fp32 keeps them fp32)");
  }
  auto isMapped = [&](int i) { return !mapped.empty() && mapped[size_t(i)]; };
  params.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    const ParamSpec &p = model.params[i];
    if (isMapped(i)) {
      // Read-only: nothing writes a frozen weight.
      params.emplace_back();
      ptrs.push_back(const_cast<float *>(mapped[size_t(i)]));
    } else if (heldInBf16(p)) {
      // Two bf16 elements per float of the (aligned, pinnable) buffer.
      params.emplace_back((numElements(p) + 1) / 2);
      ptrs.push_back(nullptr);
    } else {
      params.emplace_back(numElements(p));
      ptrs.push_back(params.back().data());
    }
    storedPtrs.push_back(ptrs.back() ? static_cast<const void *>(ptrs.back())
                                     : params.back().data());
  }
  auto bf16Of = [&](int i) {
    return reinterpret_cast<uint16_t *>(params[size_t(i)].data());
  };
  // LoRA adapters are not in the model: PEFT's initialisation (B = 0, so
  // step 0 is the base model), or a PEFT file.
  for (int i = 0; i < n; ++i)
    if (isLoraAdapter(model.params[i]))
      loraInit(model.params[i], opts.seed, params[size_t(i)].data());
  if (opts.init == InitKind::Random) {
    std::vector<float> drawn;
    for (int i = 0; i < n; ++i) {
      const ParamSpec &p = model.params[i];
      if (isLoraAdapter(p))
        continue;
      if (!heldInBf16(p)) {
        randomInit(p, opts.seed, params[size_t(i)].data());
        continue;
      }
      drawn.assign(size_t(numElements(p)), 0.0f);
      randomInit(p, opts.seed, drawn.data());
      roundToBf16(drawn.data(), numElements(p), bf16Of(i));
    }
  } else {
    std::vector<ParamSpec> fromOnnx = onnxParams(model);
    std::vector<int> index; // model index of each fromOnnx entry
    for (int i = 0; i < n; ++i)
      if (!isLoraAdapter(model.params[i]))
        index.push_back(i);
    auto load = [&](const std::vector<float *> &dst) {
      try {
        loadOnnxWeights(path, fromOnnx.data(), int(fromOnnx.size()),
                        dst.data());
      } catch (const Error &e) {
        rethrowWithAdvice(e);
      }
    };
    // The fp32 weights in place; then the bf16 ones through fp32 buffers
    // of at most ~4 GB at a time, so that loading never holds the fp32
    // copy the bf16 storage exists to avoid.
    std::vector<float *> dst(fromOnnx.size(), nullptr);
    bool anyBf16 = false;
    for (size_t k = 0; k < fromOnnx.size(); ++k) {
      const int i = index[k];
      anyBf16 |= heldInBf16(model.params[i]);
      if (!isMapped(i) && !heldInBf16(model.params[i]))
        dst[k] = params[size_t(i)].data();
    }
    load(dst);
    constexpr int64_t kBatchElements = int64_t(1) << 30;
    for (size_t k = 0; anyBf16 && k < fromOnnx.size();) {
      std::fill(dst.begin(), dst.end(), nullptr);
      std::vector<std::pair<size_t, std::vector<float>>> batch;
      int64_t elements = 0;
      for (;
           k < fromOnnx.size() && (batch.empty() || elements < kBatchElements);
           ++k) {
        if (!heldInBf16(model.params[index[k]]))
          continue;
        const int64_t numel = numElements(fromOnnx[k]);
        batch.emplace_back(k, std::vector<float>(size_t(numel)));
        dst[k] = batch.back().second.data();
        elements += numel;
      }
      if (batch.empty())
        break;
      load(dst);
      for (auto &[at, values] : batch)
        roundToBf16(values.data(), int64_t(values.size()), bf16Of(index[at]));
    }
  }
  if (!opts.loadLora.empty())
    loadLoraAdapters(opts.loadLora, model, ptrs.data());
}

const float *ParamStore::fp32(int i, std::vector<float> &scratch) const {
  if (ptrs[size_t(i)])
    return ptrs[size_t(i)];
  const int64_t n = numElements(model.params[i]);
  const uint16_t *bits =
      reinterpret_cast<const uint16_t *>(storedPtrs[size_t(i)]);
  scratch.resize(size_t(n));
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t e = 0; e < n; ++e)
    scratch[size_t(e)] = bf16ToFloat(bits[e]);
  return scratch.data();
}

std::vector<bool> ParamStore::pageable() const {
  std::vector<bool> result(size_t(model.numParams), false);
  for (size_t i = 0; i < mapped.size(); ++i)
    result[i] = mapped[i] != nullptr;
  return result;
}

uint64_t ParamStore::checksum() const {
  // A sum of the weights' bit patterns, each multiplied by an odd number
  // from its position; a weight held in bf16 contributes its 16 bits.
  uint64_t total = 0;
  for (int i = 0; i < model.numParams; ++i) {
    const int64_t n = numElements(model.params[i]);
    uint64_t sum = 0;
    if (heldInBf16(model.params[i])) {
      const uint16_t *bits =
          reinterpret_cast<const uint16_t *>(storedPtrs[size_t(i)]);
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n >= (int64_t(1) << 20))
      for (int64_t e = 0; e < n; ++e)
        sum += uint64_t(bits[e]) * (2 * uint64_t(e) + 1);
    } else {
      const uint32_t *bits = reinterpret_cast<const uint32_t *>(ptrs[i]);
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n >= (int64_t(1) << 20))
      for (int64_t e = 0; e < n; ++e)
        sum += uint64_t(bits[e]) * (2 * uint64_t(e) + 1);
    }
    total = total * 1000003 + sum;
  }
  return total;
}

void ParamStore::exportWeights(const TrainerOptions &opts,
                               const StepLog &log) const {
  // A failure names the flag whose destination failed.
  auto naming = [](const char *flag, const std::function<void()> &write) {
    try {
      write();
    } catch (const Error &e) {
      throw Error(std::string(flag) + ": " + e.what());
    }
  };
  // Weights held in bf16 are written widened to fp32 (exactly their bf16
  // values), widened only when an export wants them.
  const bool exportsBase =
      !opts.exportOnnx.empty() || !opts.exportSafetensors.empty();
  std::vector<std::vector<float>> widened(size_t(model.numParams));
  std::vector<float *> full(ptrs);
  for (int i = 0; exportsBase && i < model.numParams; ++i)
    if (!ptrs[size_t(i)])
      full[size_t(i)] = const_cast<float *>(fp32(i, widened[size_t(i)]));
  std::vector<std::vector<float>> merged;
  if (opts.mergeLora && exportsBase)
    merged = mergeLoraWeights(model, full.data());
  auto baseWeights = [&](int i) -> const float * {
    return opts.mergeLora && !merged.empty() && !merged[size_t(i)].empty()
               ? merged[size_t(i)].data()
               : full[size_t(i)];
  };
  const std::string whatWeights =
      !model.lora      ? "trained weights"
      : opts.mergeLora ? "the base weights merged with the LoRA adapters"
                       : "the frozen base weights";
  const std::string withoutAdapters =
      model.lora && !opts.mergeLora
          ? " (without the adapters: --export-lora writes them, "
            "--merge-lora merges them in)"
          : "";
  if (!opts.exportOnnx.empty()) {
    // The model has no adapters to write into: its base weights, as they
    // are (frozen) or merged with their adapters.
    std::vector<ParamSpec> toWrite = onnxParams(model);
    std::vector<const float *> data;
    for (int i = 0; i < model.numParams; ++i)
      if (!isLoraAdapter(model.params[i]))
        data.push_back(baseWeights(i));
    naming("--export-onnx", [&] {
      exportOnnxWeights(model.modelPath, opts.exportOnnx, toWrite.data(),
                        int(toWrite.size()), data.data());
    });
    log.say("rondo: wrote " + whatWeights + " to " + opts.exportOnnx +
            withoutAdapters);
  }
  if (!opts.exportSafetensors.empty()) {
    std::vector<const float *> data;
    for (int i = 0; i < model.numParams; ++i)
      data.push_back(baseWeights(i));
    naming("--export-safetensors", [&] {
      exportHuggingFace(opts.exportSafetensors, opts.hfConfig, model,
                        data.data());
    });
    log.say("rondo: wrote " + whatWeights + " in Hugging Face's layout to " +
            opts.exportSafetensors + "/model.safetensors" +
            (opts.hfConfig.empty()
                 ? " without config.json, which transformers' "
                   "from_pretrained needs: give --hf-config FILE (the "
                   "model's config.json) to copy it there"
                 : " with " + opts.hfConfig + " as config.json") +
            withoutAdapters);
  }
  if (!opts.exportLora.empty()) {
    naming("--export-lora", [&] {
      // Its directory is created, one level, as --export-safetensors's is.
      const std::string dir = parentDirectory(opts.exportLora);
      if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
        throw Error("cannot create directory '" + dir +
                    "': " + std::strerror(errno));
      exportLoraAdapters(opts.exportLora, model, ptrs.data());
    });
    log.say("rondo: wrote the LoRA adapters to " + opts.exportLora + " and " +
            parentDirectory(opts.exportLora) + "/adapter_config.json");
  }
}

} // namespace rondo::rt
