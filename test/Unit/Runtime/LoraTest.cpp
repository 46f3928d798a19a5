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

/// A model with one adapted linear (a [4, 3] weight stored [in, out], or
/// [out, in] when `transposed`) and one other linear weight.
struct LoraModel {
  explicit LoraModel(bool transposed) {
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
    spec.modelPath = "model.onnx";
    spec.inputName = "input_ids";
    spec.batch = 1;
    spec.seqLen = 1;
    spec.vocabSize = 0;
    spec.loss = LossKind::CausalLM;
    spec.params = params.data();
    spec.numParams = int(params.size());
    spec.lora = &lora;
    values.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      int64_t n = 1;
      for (int d = 0; d < params[i].rank; ++d)
        n *= params[i].dims[d];
      for (int64_t e = 0; e < n; ++e)
        values[i].push_back(float(int(i) * 10 + int(e)) * 0.125f - 1.0f);
      ptrs.push_back(values[i].data());
    }
  }
  std::vector<ParamSpec> params;
  LoraSpec lora{2, 3.0, 0.0, "up"};
  ModelSpec spec{};
  std::vector<std::vector<float>> values;
  std::vector<float *> ptrs;
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

} // namespace
