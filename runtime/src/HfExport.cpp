//===- HfExport.cpp - Full fine-tunes in Hugging Face's layout ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "HfExport.h"

#include "FileUtil.h"
#include "Lora.h"
#include "Safetensors.h"
#include "rondo/runtime/Error.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sys/stat.h>

namespace rondo::rt {

namespace {

/// The PyTorch names of a parameter: its aliases (a tied embedding is two
/// modules' weight), else its display name; empty when the importer could
/// not recover one.
std::vector<std::string> huggingFaceNames(const ParamSpec &p) {
  std::vector<std::string> names;
  std::string aliases = p.torchAliases ? p.torchAliases : "";
  for (size_t start = 0; start < aliases.size();) {
    size_t end = aliases.find(',', start);
    if (end == std::string::npos)
      end = aliases.size();
    names.push_back(aliases.substr(start, end - start));
    start = end + 1;
  }
  if (names.empty() && p.displayName && *p.displayName)
    names.push_back(p.displayName);
  // Norm and embedding weights keep their PyTorch names in the graph.
  if (names.empty() && std::strchr(p.name, '.'))
    names.push_back(p.name);
  return names;
}

void makeDirectory(const std::string &dir) {
  if (::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      return;
    throw Error("--export-safetensors " + dir +
                ": exists and is not a "
                "directory");
  }
  throw Error("--export-safetensors " + dir +
              ": cannot create the "
              "directory (" +
              std::strerror(errno) + ")");
}

} // namespace

std::vector<std::vector<std::string>>
checkHuggingFaceNames(const ModelSpec &model) {
  std::vector<std::vector<std::string>> names(size_t(model.numParams));
  std::set<std::string> seen;
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (isLoraAdapter(p))
      continue;
    names[size_t(i)] = huggingFaceNames(p);
    if (names[size_t(i)].empty())
      throw Error("--export-safetensors: the model's initializer '" +
                  std::string(p.name) +
                  "' has no PyTorch name (the exporter's node metadata "
                  "did not name it); only models exported by "
                  "torch.onnx.export(dynamo=True) can be written in Hugging "
                  "Face's layout");
    if (p.torchTransposed && p.rank != 2)
      throw Error("--export-safetensors: '" + std::string(p.name) +
                  "' is marked transposed but has rank " +
                  std::to_string(p.rank));
    for (const std::string &n : names[size_t(i)])
      if (!seen.insert(n).second)
        throw Error("--export-safetensors: two initializers are both "
                    "PyTorch's '" +
                    n + "' (the second is '" + p.name + "')");
  }
  return names;
}

void exportHuggingFace(const std::string &dir, const std::string &configPath,
                       const ModelSpec &model, const float *const *data) {
  // Every name first, so that a model we cannot name writes nothing.
  const std::vector<std::vector<std::string>> names =
      checkHuggingFaceNames(model);
  std::string config;
  if (!configPath.empty()) {
    std::ifstream in(configPath, std::ios::binary);
    if (!in)
      throw Error("--hf-config " + configPath + ": cannot be read");
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  makeDirectory(dir);

  std::vector<std::vector<float>> transposed(size_t(model.numParams));
  std::vector<TensorToWrite<float>> tensors;
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (names[size_t(i)].empty())
      continue;
    std::vector<int64_t> dims(p.dims, p.dims + p.rank);
    const float *values = data[i];
    if (p.torchTransposed) {
      // Stored [in, out] for MatMul; PyTorch's nn.Linear holds [out, in].
      const int64_t rows = p.dims[0], cols = p.dims[1];
      std::vector<float> &t = transposed[size_t(i)];
      t.resize(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          t[size_t(c * rows + r)] = values[r * cols + c];
      values = t.data();
      dims = {cols, rows};
    }
    for (const std::string &n : names[size_t(i)])
      tensors.push_back({n, dims, values});
  }
  writeSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  if (!configPath.empty())
    writeFileAtomically(dir + "/config.json", config.data(), config.size());
}

} // namespace rondo::rt
