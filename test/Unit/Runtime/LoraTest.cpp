//===- LoraTest.cpp - LoRA adapters and safetensors files -----------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Lora.h"
#include "Init.h"
#include "Safetensors.h"

#include "TestUtil.h"

#include "rondo/runtime/Error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sys/stat.h>

using namespace rondo::rt;
using namespace rondo::test;
using ::testing::HasSubstr;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[size_t(i)] = char(v >> (8 * i));
  return s;
}

/// A safetensors file with `header` and `data`, as another writer makes it.
std::string fileOf(const std::string &header, const std::string &data) {
  return le64(header.size()) + header + data;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(Safetensors, RoundTripKeepsNamesShapesValuesAndAlignsTheData) {
  std::string dir = makeTempDir();
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-0.5f};
  writeSafetensors(dir + "/t.safetensors",
                   {{"x.weight", {2, 3}, a.data()}, {"y", {1}, b.data()}},
                   {{"format", "pt"}});
  std::string raw = readText(dir + "/t.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_THAT(raw.substr(8, n),
              HasSubstr("\"__metadata__\":{\"format\":\"pt\"}"));
  std::vector<FloatTensor> t = readSafetensors(dir + "/t.safetensors");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "x.weight");
  EXPECT_EQ(t[0].dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t[0].data, a);
  EXPECT_EQ(t[1].name, "y");
  EXPECT_EQ(t[1].data, b);
}

TEST(Safetensors, ReadsHalfBf16AndDoubleFromOtherWriters) {
  std::string dir = makeTempDir();
  std::string data;
  data += std::string("\x00\x3c", 2); // F16 1.0
  data += std::string("\x80\x3f", 2); // BF16 1.0
  double d = -2.25;
  data += std::string(reinterpret_cast<char *>(&d), 8);
  std::string header =
      "{\"h\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [0, 2]},"
      " \"b\": {\"dtype\": \"BF16\", \"shape\": [1, 1], \"data_offsets\": [2, "
      "4]}, \"d\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [4, "
      "12]}, \"__metadata__\": {\"k\": \"v\\u00e9\"}}";
  writeBytes(dir + "/t.safetensors", fileOf(header, data));
  std::vector<FloatTensor> t = readSafetensors(dir + "/t.safetensors");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "h");
  EXPECT_EQ(t[0].data[0], 1.0f);
  EXPECT_EQ(t[1].data[0], 1.0f);
  EXPECT_EQ(t[2].dims.size(), 0u);
  EXPECT_EQ(t[2].data[0], -2.25f);
}

TEST(Safetensors, DamagedFilesNameTheFileAndTensor) {
  std::string dir = makeTempDir(), path = dir + "/t.safetensors";
  writeBytes(path, le64(1000) + "{}");
  EXPECT_THAT(errorOf([&] { readSafetensors(path); }),
              HasSubstr("t.safetensors: not a safetensors file (its header "
                        "length 1000 exceeds the file's 10 bytes)"));
  writeBytes(path, fileOf("{\"a\": [1,}", ""));
  EXPECT_THAT(errorOf([&] { readSafetensors(path); }),
              HasSubstr("t.safetensors: invalid header JSON at byte"));
  writeBytes(path, fileOf("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], "
                          "\"data_offsets\": [0, 8]}}",
                          "1234"));
  EXPECT_THAT(errorOf([&] { readSafetensors(path); }),
              HasSubstr("tensor 'a': data_offsets [0, 8) do not hold 2 F32 "
                        "values inside the file's 4 data bytes"));
  writeBytes(path, fileOf("{\"a\": {\"dtype\": \"I32\", \"shape\": [1], "
                          "\"data_offsets\": [0, 4]}}",
                          "1234"));
  EXPECT_THAT(errorOf([&] { readSafetensors(path); }),
              HasSubstr("tensor 'a': dtype I32 is not a floating-point type"));
}

TEST(Safetensors, UnwritablePathIsAnErrorAndLeavesNothing) {
  std::string dir = makeTempDir();
  float x = 1;
  std::string path = dir + "/missing/t.safetensors";
  EXPECT_THAT(errorOf([&] {
                writeSafetensors(path, {{"x", {1}, &x}});
              }),
              HasSubstr(path + ": cannot create"));
  EXPECT_FALSE(exists(path));
}

/// A hand-built model with LoRA adapters: the constructor of each lists
/// `params`, then `finish` points `spec` at them and gives parameter i's
/// element e the value (i * stride + e) * step - 1.
struct AdaptedModel {
  explicit AdaptedModel(LoraSpec lora) : lora(lora) {}
  AdaptedModel(const AdaptedModel &) = delete; // `spec` points into it.

  void finish(int stride, float step) {
    spec.modelPath = "model.onnx";
    spec.inputName = "input_ids";
    spec.loss = LossKind::CausalLM;
    spec.params = params.data();
    spec.numParams = int(params.size());
    spec.lora = &lora;
    values.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      for (int64_t e = 0; e < numElements(params[i]); ++e)
        values[i].push_back(float(int(i) * stride + int(e)) * step - 1.0f);
      ptrs.push_back(values[i].data());
    }
  }

  std::vector<ParamSpec> params;
  LoraSpec lora;
  ModelSpec spec{};
  std::vector<std::vector<float>> values;
  std::vector<float *> ptrs;
};

/// A model with one adapted linear (a [4, 3] weight stored [in, out], or
/// [out, in] when `transposed`) and one other linear weight.
struct LoraModel : AdaptedModel {
  explicit LoraModel(bool transposed) : AdaptedModel({2, 3.0, 0.0, "up"}) {
    const char *w = "model.layers.0.mlp.up_proj.weight";
    const char *a = "model.layers.0.mlp.up_proj.lora_A.weight";
    const char *b = "model.layers.0.mlp.up_proj.lora_B.weight";
    params = {
        {"val_1", w, 2, {transposed ? 3 : 4, transposed ? 4 : 3}, false},
        {"a", a, 2, {4, 2}, true, LoraFactor::A, "val_1", transposed},
        {"b", b, 2, {2, 3}, true, LoraFactor::B, "val_1", transposed},
        {"val_2", "model.layers.1.mlp.up_proj.weight", 2, {4, 3}, false},
        {"norm", "model.norm.weight", 1, {3}, false},
    };
    spec.batch = 1;
    spec.seqLen = 1;
    finish(10, 0.125f);
  }
};

TEST(Lora, InitIsPeftsKaimingUniformForAAndZeroForB) {
  LoraModel m(false);
  ParamSpec a = m.params[1], b = m.params[2];
  a.dims[0] = 256;
  a.dims[1] = 64;
  std::vector<float> x(256 * 64), y(256 * 64), z(6, 1.0f);
  loraInit(a, 7, x.data());
  loraInit(a, 7, y.data());
  EXPECT_EQ(x, y);
  loraInit(a, 8, y.data());
  EXPECT_NE(x, y);
  const double bound = 1.0 / 16.0; // 1/sqrt(in)
  double mean = 0, square = 0, largest = 0;
  for (float v : x) {
    EXPECT_LE(std::abs(v), bound);
    mean += v;
    square += double(v) * v;
    largest = std::max(largest, double(std::abs(v)));
  }
  mean /= double(x.size());
  square /= double(x.size());
  EXPECT_NEAR(mean, 0.0, 3 * bound / std::sqrt(3.0 * double(x.size())));
  // Uniform on [-b, b]: variance b^2 / 3.
  EXPECT_NEAR(square, bound * bound / 3, 0.05 * bound * bound / 3);
  EXPECT_GT(largest, 0.99 * bound);
  loraInit(b, 7, z.data());
  EXPECT_EQ(z, std::vector<float>(6, 0.0f));
}

TEST(Lora, ExportAndLoadUsePeftNamesAndTransposedLayout) {
  std::string dir = makeTempDir();
  LoraModel m(false);
  exportLoraAdapters(dir + "/adapter_model.safetensors", m.spec, m.ptrs.data());
  std::vector<FloatTensor> t =
      readSafetensors(dir + "/adapter_model.safetensors");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name,
            "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight");
  EXPECT_EQ(t[0].dims, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t[1].name,
            "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight");
  EXPECT_EQ(t[1].dims, (std::vector<int64_t>{3, 2}));
  // lora_A.weight[k][i] = A[i][k].
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(t[0].data[size_t(k * 4 + i)], m.values[1][size_t(i * 2 + k)]);
  // layers.1 has an up_proj without adapters, so "up_proj" would select
  // too much: the config names the module by its full path.
  std::string config = readText(dir + "/adapter_config.json");
  EXPECT_THAT(config, HasSubstr("\"peft_type\": \"LORA\""));
  EXPECT_THAT(config, HasSubstr("\"task_type\": \"CAUSAL_LM\""));
  EXPECT_THAT(config, HasSubstr("\"r\": 2,"));
  EXPECT_THAT(config, HasSubstr("\"lora_alpha\": 3,"));
  EXPECT_THAT(config, HasSubstr("\"lora_dropout\": 0.0,"));
  EXPECT_THAT(
      config,
      HasSubstr("\"target_modules\": [\"model.layers.0.mlp.up_proj\"]"));

  LoraModel back(false);
  std::fill(back.values[1].begin(), back.values[1].end(), 0.0f);
  std::fill(back.values[2].begin(), back.values[2].end(), 0.0f);
  loadLoraAdapters(dir + "/adapter_model.safetensors", back.spec,
                   back.ptrs.data());
  EXPECT_EQ(back.values[1], m.values[1]);
  EXPECT_EQ(back.values[2], m.values[2]);
  EXPECT_EQ(back.values[0], m.values[0]); // Bases are not touched.
}

TEST(Lora, ConfigUsesShortNamesWhenTheySelectExactlyTheAdaptedLinears) {
  LoraModel m(false);
  m.params[3].displayName = "model.layers.1.mlp.down_proj.weight";
  EXPECT_THAT(loraAdapterConfig(m.spec),
              HasSubstr("\"target_modules\": [\"up_proj\"]"));
}

TEST(Lora, LoadNamesTheMissingWrongAndForeignTensors) {
  std::string dir = makeTempDir(), path = dir + "/a.safetensors";
  LoraModel m(false);
  std::vector<float> a(8), b(6);
  const std::string stem = "base_model.model.model.layers.0.mlp.up_proj.";
  writeSafetensors(path, {{stem + "lora_A.weight", {2, 4}, a.data()}});
  EXPECT_THAT(errorOf([&] { loadLoraAdapters(path, m.spec, m.ptrs.data()); }),
              HasSubstr("--load-lora " + path + ": no tensor '" + stem +
                        "lora_B.weight' (the adapter of 'val_1')"));
  writeSafetensors(path, {{stem + "lora_A.weight", {4, 2}, a.data()},
                          {stem + "lora_B.weight", {3, 2}, b.data()}});
  EXPECT_THAT(
      errorOf([&] { loadLoraAdapters(path, m.spec, m.ptrs.data()); }),
      HasSubstr("tensor '" + stem +
                "lora_A.weight' has shape [4, 2], expected [2, 4] (rank 2)"));
  writeSafetensors(path, {{stem + "lora_A.weight", {2, 4}, a.data()},
                          {stem + "lora_B.weight", {3, 2}, b.data()},
                          {"base_model.model.x.lora_A.weight", {1}, a.data()}});
  EXPECT_THAT(
      errorOf([&] { loadLoraAdapters(path, m.spec, m.ptrs.data()); }),
      HasSubstr("tensor 'base_model.model.x.lora_A.weight' is not an adapter "
                "of this trainer"));
}

TEST(Lora, MergeIsWPlusScaledABInTheStoredLayout) {
  for (bool transposed : {false, true}) {
    LoraModel m(transposed);
    std::vector<std::vector<float>> merged =
        mergeLoraWeights(m.spec, m.ptrs.data());
    ASSERT_EQ(merged.size(), m.params.size());
    EXPECT_TRUE(merged[1].empty() && merged[3].empty() && merged[4].empty());
    const double scale = 3.0 / 2.0;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) {
        double delta = 0;
        for (int k = 0; k < 2; ++k)
          delta += double(m.values[1][size_t(i * 2 + k)]) *
                   double(m.values[2][size_t(k * 3 + j)]);
        size_t at = size_t(transposed ? j * 4 + i : i * 3 + j);
        EXPECT_EQ(merged[0][at], float(double(m.values[0][at]) + scale * delta))
            << "transposed " << transposed << " at " << i << "," << j;
      }
  }
}

TEST(Lora, ValidateNamesInconsistentAdapters) {
  LoraModel m(false);
  EXPECT_EQ(errorOf([&] { validateLora(m.spec); }), "");
  m.params[2].dims[1] = 5;
  EXPECT_THAT(errorOf([&] { validateLora(m.spec); }),
              HasSubstr("the LoRA adapters of 'val_1' [4, 3] have shapes "
                        "[4, 2] and [2, 5] (rank 2)"));
  LoraModel orphan(false);
  orphan.params[1].loraBase = "nope";
  EXPECT_THAT(errorOf([&] { validateLora(orphan.spec); }),
              HasSubstr("LoRA adapter 'a' adapts 'nope', which is not a "
                        "parameter of the compiled model"));
  LoraModel noConfig(false);
  noConfig.spec.lora = nullptr;
  EXPECT_THAT(errorOf([&] { validateLora(noConfig.spec); }),
              HasSubstr("has LoRA adapters but no LoRA configuration"));
}

/// Stacked experts: gate_up_proj [E=2, 3, 4] and down_proj [2, 4, 3] of one
/// experts module, each with A [E, d1, r=2] and B [E, r, d2] (PEFT's
/// ParamWrapper: gate_up_proj wrapped first, so under ".base_layer"), and a
/// router adapted as a parameter too.
struct ExpertsModel : AdaptedModel {
  ExpertsModel() : AdaptedModel({2, 3.0, 0.0, "experts+router"}) {
    const std::string m = "model.layers.0.mlp.experts";
    names = {m + ".gate_up_proj",
             m + ".base_layer.lora_A.weight",
             m + ".base_layer.lora_B.weight",
             m + ".down_proj",
             m + ".lora_A.weight",
             m + ".lora_B.weight"};
    // An adapter PEFT targets as a parameter (loraParameter).
    auto adapter = [](const char *name, const char *display, ParamSpec shape,
                      LoraFactor factor, const char *base, bool transposed) {
      ParamSpec p = shape;
      p.name = name;
      p.displayName = display;
      p.trainable = true;
      p.lora = factor;
      p.loraBase = base;
      p.loraBaseTransposed = transposed;
      p.loraParameter = true;
      return p;
    };
    const char *gate = "model.layers.0.mlp.gate.weight";
    params = {
        {"val_1", names[0].c_str(), 3, {2, 3, 4}, false},
        adapter("a1", names[1].c_str(), {"", "", 3, {2, 3, 2}, true},
                LoraFactor::A, "val_1", false),
        adapter("b1", names[2].c_str(), {"", "", 3, {2, 2, 4}, true},
                LoraFactor::B, "val_1", false),
        {"val_2", names[3].c_str(), 3, {2, 4, 3}, false},
        adapter("a2", names[4].c_str(), {"", "", 3, {2, 4, 2}, true},
                LoraFactor::A, "val_2", false),
        adapter("b2", names[5].c_str(), {"", "", 3, {2, 2, 3}, true},
                LoraFactor::B, "val_2", false),
        {gate, "", 2, {2, 3}, false},
        adapter("model.layers.0.mlp.gate.lora_A.weight", "",
                {"", "", 2, {3, 2}, true}, LoraFactor::A, gate, true),
        adapter("model.layers.0.mlp.gate.lora_B.weight", "",
                {"", "", 2, {2, 2}, true}, LoraFactor::B, gate, true),
        {"val_3", "model.layers.0.self_attn.q_proj.weight", 2, {3, 3}, false},
    };
    finish(30, 0.0625f);
  }
  std::vector<std::string> names;
};

TEST(LoraExperts, ExportUsesPeftsParamWrapperLayoutAndLoadInvertsIt) {
  std::string dir = makeTempDir();
  ExpertsModel m;
  EXPECT_EQ(errorOf([&] { validateLora(m.spec); }), "");
  exportLoraAdapters(dir + "/adapter_model.safetensors", m.spec, m.ptrs.data());
  std::vector<FloatTensor> t =
      readSafetensors(dir + "/adapter_model.safetensors");
  ASSERT_EQ(t.size(), 6u);
  const std::string stem = "base_model.model.model.layers.0.mlp.";
  EXPECT_EQ(t[0].name, stem + "experts.base_layer.lora_A.weight");
  EXPECT_EQ(t[0].dims, (std::vector<int64_t>{4, 3})); // [E·r, d1]
  EXPECT_EQ(t[1].name, stem + "experts.base_layer.lora_B.weight");
  EXPECT_EQ(t[1].dims, (std::vector<int64_t>{4, 4})); // [d2, r·E]
  EXPECT_EQ(t[2].name, stem + "experts.lora_A.weight");
  EXPECT_EQ(t[2].dims, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(t[3].name, stem + "experts.lora_B.weight");
  EXPECT_EQ(t[3].dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(t[4].name, stem + "gate.lora_A.weight");
  EXPECT_EQ(t[4].dims, (std::vector<int64_t>{2, 3}));
  // PEFT's get_delta_weight views lora_A [E·r, d1] as [E, r, d1] and
  // lora_B [d2, r·E] as [d2, r, E].
  for (int e = 0; e < 2; ++e)
    for (int j = 0; j < 2; ++j) {
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(t[0].data[size_t((e * 2 + j) * 3 + i)],
                  m.values[1][size_t((e * 3 + i) * 2 + j)]);
      for (int o = 0; o < 4; ++o)
        EXPECT_EQ(t[1].data[size_t(o * 4 + j * 2 + e)],
                  m.values[2][size_t((e * 2 + j) * 4 + o)]);
    }
  // The experts and the router are parameters to PEFT; the attention's
  // q_proj of the same layer is not adapted.
  std::string config = readText(dir + "/adapter_config.json");
  EXPECT_THAT(config, HasSubstr("\"target_modules\": [],"));
  EXPECT_THAT(config,
              HasSubstr("\"target_parameters\": [\"experts.down_proj\", "
                        "\"experts.gate_up_proj\", \"gate.weight\"],"));

  ExpertsModel back;
  for (int i : {1, 2, 4, 5, 7, 8})
    std::fill(back.values[size_t(i)].begin(), back.values[size_t(i)].end(),
              0.0f);
  loadLoraAdapters(dir + "/adapter_model.safetensors", back.spec,
                   back.ptrs.data());
  EXPECT_EQ(back.values, m.values);
}

TEST(LoraExperts, InitIsKaimingUniformOverEachExpertsFanIn) {
  ExpertsModel m;
  ParamSpec a = m.params[4]; // [2 experts, d1 = 4, r = 2]
  std::vector<float> x(16), z(12, 1.0f);
  loraInit(a, 7, x.data());
  // PEFT's nn.Linear(d1, r·E): fan-in d1, bound 1/sqrt(4).
  for (float v : x) {
    EXPECT_LE(std::abs(v), 0.5f);
    EXPECT_NE(v, 0.0f);
  }
  loraInit(m.params[5], 7, z.data());
  EXPECT_EQ(z, std::vector<float>(12, 0.0f));
}

TEST(LoraExperts, MergeIsEachExpertsWPlusScaledAB) {
  ExpertsModel m;
  std::vector<std::vector<float>> merged =
      mergeLoraWeights(m.spec, m.ptrs.data());
  const double scale = 3.0 / 2.0;
  for (int w : {0, 3}) {
    const int64_t d1 = m.params[size_t(w)].dims[1],
                  d2 = m.params[size_t(w)].dims[2];
    const std::vector<float> &a = m.values[size_t(w + 1)],
                             &b = m.values[size_t(w + 2)],
                             &base = m.values[size_t(w)];
    for (int64_t e = 0; e < 2; ++e)
      for (int64_t i = 0; i < d1; ++i)
        for (int64_t o = 0; o < d2; ++o) {
          double delta = 0;
          for (int64_t k = 0; k < 2; ++k)
            delta += double(a[size_t((e * d1 + i) * 2 + k)]) *
                     double(b[size_t((e * 2 + k) * d2 + o)]);
          size_t at = size_t((e * d1 + i) * d2 + o);
          EXPECT_EQ(merged[size_t(w)][at],
                    float(double(base[at]) + scale * delta))
              << "weight " << w << " expert " << e;
        }
  }
  EXPECT_TRUE(merged[9].empty());
}

TEST(LoraExperts, ValidateAndLoadNameTheExpertShapes) {
  ExpertsModel m;
  m.params[2].dims[0] = 3;
  EXPECT_THAT(errorOf([&] { validateLora(m.spec); }),
              HasSubstr("the LoRA adapters of 'val_1' [2, 3, 4] have shapes "
                        "[2, 3, 2] and [3, 2, 4] (rank 2)"));
  std::string dir = makeTempDir(), path = dir + "/a.safetensors";
  ExpertsModel good;
  exportLoraAdapters(path, good.spec, good.ptrs.data());
  std::vector<FloatTensor> t = readSafetensors(path);
  std::vector<TensorToWrite<float>> edited;
  for (FloatTensor &x : t) {
    if (x.name.find("experts.base_layer.lora_A") != std::string::npos)
      std::swap(x.dims[0], x.dims[1]);
    edited.push_back({x.name, x.dims, x.data.data()});
  }
  writeSafetensors(path, edited);
  EXPECT_THAT(
      errorOf([&] { loadLoraAdapters(path, good.spec, good.ptrs.data()); }),
      HasSubstr("tensor 'base_model.model.model.layers.0.mlp.experts."
                "base_layer.lora_A.weight' has shape [3, 4], expected [4, 3] "
                "(rank 2, 2 experts)"));
}

} // namespace
