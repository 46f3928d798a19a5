//===- OnnxWeightsTest.cpp - Loading, dumping and exporting weights -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/OnnxWeights.h"
#include "rondo/runtime/FloatConv.h"

#include "TestUtil.h"

#include <onnx/onnx_pb.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <vector>

using namespace rondo::rt;
using namespace rondo::test;
using ::testing::HasSubstr;

namespace {

ParamSpec spec(const char *name, std::vector<int64_t> dims,
               bool trainable = true) {
  ParamSpec p{name, "", int(dims.size()), {}, trainable};
  for (size_t i = 0; i < dims.size(); ++i)
    p.dims[i] = dims[i];
  return p;
}

onnx::TensorProto *addTensor(onnx::ModelProto &model, const std::string &name,
                             std::vector<int64_t> dims, int type) {
  onnx::TensorProto *t = model.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims)
    t->add_dims(d);
  return t;
}

template <typename T> std::string rawBytes(const std::vector<T> &values) {
  return std::string(reinterpret_cast<const char *>(values.data()),
                     values.size() * sizeof(T));
}

void saveModel(const onnx::ModelProto &model, const std::string &path) {
  std::ofstream out(path, std::ios::binary);
  ASSERT_TRUE(model.SerializeToOstream(&out));
}

onnx::ModelProto baseModel() {
  onnx::ModelProto model;
  model.set_ir_version(10);
  model.mutable_graph()->set_name("test");
  return model;
}

void setExternal(onnx::TensorProto *t, const std::string &location,
                 int64_t offset, int64_t length) {
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char *k, const std::string &v) {
    auto *e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  if (length >= 0)
    add("length", std::to_string(length));
}

// Exact in fp32, fp16 (0x1p-20 is a half subnormal) and mostly in bf16.
const std::vector<float> kValues = {1.0f,     -2.5f,   0.15625f,
                                    0x1p-20f, 1024.0f, -0.0f};

TEST(OnnxWeights, LoadsFloatBf16Fp16AndDouble) {
  std::string dir = makeTempDir();
  onnx::ModelProto model = baseModel();
  addTensor(model, "raw_f32", {2, 3}, onnx::TensorProto::FLOAT)
      ->set_raw_data(rawBytes(kValues));
  auto *typed = addTensor(model, "typed_f32", {6}, onnx::TensorProto::FLOAT);
  for (float v : kValues)
    typed->add_float_data(v);
  std::vector<uint16_t> bf16, fp16;
  for (float v : kValues) {
    bf16.push_back(floatToBf16(v));
    fp16.push_back(floatToHalf(v));
  }
  addTensor(model, "raw_bf16", {3, 2}, onnx::TensorProto::BFLOAT16)
      ->set_raw_data(rawBytes(bf16));
  auto *typedHalf =
      addTensor(model, "typed_f16", {6}, onnx::TensorProto::FLOAT16);
  for (uint16_t h : fp16)
    typedHalf->add_int32_data(h);
  addTensor(model, "raw_f16", {6}, onnx::TensorProto::FLOAT16)
      ->set_raw_data(rawBytes(fp16));
  std::vector<double> f64(kValues.begin(), kValues.end());
  addTensor(model, "raw_f64", {6}, onnx::TensorProto::DOUBLE)
      ->set_raw_data(rawBytes(f64));
  addTensor(model, "scalar", {}, onnx::TensorProto::FLOAT)
      ->set_raw_data(rawBytes(std::vector<float>{7.0f}));
  saveModel(model, dir + "/m.onnx");

  ParamSpec params[] = {spec("raw_f32", {2, 3}),  spec("typed_f32", {6}),
                        spec("raw_bf16", {3, 2}), spec("typed_f16", {6}),
                        spec("raw_f16", {6}),     spec("raw_f64", {6}),
                        spec("scalar", {})};
  std::vector<std::vector<float>> out(7, std::vector<float>(6, NAN));
  std::vector<float *> dst;
  for (auto &o : out)
    dst.push_back(o.data());
  loadOnnxWeights(dir + "/m.onnx", params, 7, dst.data());
  for (int i : {0, 1, 3, 4, 5}) // All values are exact in these types.
    EXPECT_EQ(out[i], kValues) << params[i].name;
  for (size_t e = 0; e < kValues.size(); ++e)
    EXPECT_EQ(out[2][e], bf16ToFloat(floatToBf16(kValues[e])));
  EXPECT_EQ(out[6][0], 7.0f);
}

TEST(OnnxWeights, LoadsExternalData) {
  std::string dir = makeTempDir();
  ASSERT_EQ(std::system(("mkdir -p '" + dir + "/sub'").c_str()), 0);
  std::vector<uint16_t> bf16;
  for (float v : kValues)
    bf16.push_back(floatToBf16(v));
  // Tensors at non-zero offsets, one in a subdirectory, one without length.
  writeBytes(dir + "/w.bin", "PAD!" + rawBytes(kValues) + rawBytes(bf16));
  writeBytes(dir + "/sub/x.bin", rawBytes(kValues));
  onnx::ModelProto model = baseModel();
  setExternal(addTensor(model, "a", {6}, onnx::TensorProto::FLOAT), "w.bin", 4,
              24);
  setExternal(addTensor(model, "b", {2, 3}, onnx::TensorProto::BFLOAT16),
              "w.bin", 28, -1);
  setExternal(addTensor(model, "c", {6}, onnx::TensorProto::FLOAT), "sub/x.bin",
              0, 24);
  saveModel(model, dir + "/m.onnx");

  ParamSpec params[] = {spec("a", {6}), spec("b", {2, 3}), spec("c", {6})};
  std::vector<float> a(6), b(6), c(6);
  float *dst[] = {a.data(), b.data(), c.data()};
  loadOnnxWeights(dir + "/m.onnx", params, 3, dst);
  EXPECT_EQ(a, kValues);
  EXPECT_EQ(c, kValues);
  for (size_t e = 0; e < kValues.size(); ++e)
    EXPECT_EQ(b[e], bf16ToFloat(bf16[e]));
}

TEST(OnnxWeights, ReportsBadModelsClearly) {
  std::string dir = makeTempDir();
  writeBytes(dir + "/w.bin", rawBytes(kValues));
  auto tryLoad = [&](onnx::ModelProto model, ParamSpec param) {
    saveModel(model, dir + "/m.onnx");
    std::vector<float> out(64);
    float *dst[] = {out.data()};
    return errorOf([&] { loadOnnxWeights(dir + "/m.onnx", &param, 1, dst); });
  };

  {
    onnx::ModelProto m = baseModel();
    EXPECT_THAT(tryLoad(m, spec("missing.weight", {6})),
                HasSubstr("initializer 'missing.weight' not found in " + dir +
                          "/m.onnx"));
  }
  {
    onnx::ModelProto m = baseModel();
    addTensor(m, "w", {2, 3}, onnx::TensorProto::FLOAT)
        ->set_raw_data(rawBytes(kValues));
    EXPECT_THAT(tryLoad(m, spec("w", {3, 2})),
                HasSubstr("initializer 'w' of " + dir +
                          "/m.onnx has shape [2,3], the compiled model "
                          "expects [3,2]"));
  }
  {
    onnx::ModelProto m = baseModel();
    addTensor(m, "ids", {6}, onnx::TensorProto::INT64)
        ->set_raw_data(std::string(48, '\0'));
    EXPECT_THAT(tryLoad(m, spec("ids", {6})), HasSubstr("data type INT64"));
  }
  {
    onnx::ModelProto m = baseModel();
    addTensor(m, "w", {6}, onnx::TensorProto::FLOAT)
        ->set_raw_data(std::string(20, '\0'));
    EXPECT_THAT(tryLoad(m, spec("w", {6})),
                HasSubstr("raw_data holds 20 bytes, expected 24"));
  }
  for (const char *escape : {"../w.bin", "/etc/passwd", "sub/../../w.bin"}) {
    onnx::ModelProto m = baseModel();
    setExternal(addTensor(m, "w", {6}, onnx::TensorProto::FLOAT), escape, 0,
                24);
    EXPECT_THAT(tryLoad(m, spec("w", {6})),
                HasSubstr("external data location '" + std::string(escape) +
                          "' is absolute or leaves the model's directory"));
  }
  {
    onnx::ModelProto m = baseModel();
    setExternal(addTensor(m, "w", {6}, onnx::TensorProto::FLOAT), "absent.data",
                0, 24);
    EXPECT_THAT(tryLoad(m, spec("w", {6})),
                HasSubstr("initializer 'w' of " + dir +
                          "/m.onnx: cannot open external data file '" + dir +
                          "/absent.data'"));
  }
  {
    onnx::ModelProto m = baseModel();
    setExternal(addTensor(m, "w", {6}, onnx::TensorProto::FLOAT), "w.bin", 8,
                24);
    EXPECT_THAT(tryLoad(m, spec("w", {6})), HasSubstr("is too short"));
  }
  {
    onnx::ModelProto m = baseModel();
    setExternal(addTensor(m, "w", {6}, onnx::TensorProto::FLOAT), "w.bin", 0,
                20);
    EXPECT_THAT(tryLoad(m, spec("w", {6})),
                HasSubstr("external data length 20 does not match 24"));
  }
  writeBytes(dir + "/junk.onnx", "this is not a protobuf \xff\xff\xff");
  ParamSpec p = spec("w", {6});
  std::vector<float> out(6);
  float *dst[] = {out.data()};
  EXPECT_THAT(errorOf([&] { loadOnnxWeights(dir + "/junk.onnx", &p, 1, dst); }),
              HasSubstr("junk.onnx: not a valid ONNX model"));
  EXPECT_THAT(
      errorOf([&] { loadOnnxWeights(dir + "/nothere.onnx", &p, 1, dst); }),
      HasSubstr("nothere.onnx: cannot open ONNX model"));
}

TEST(OnnxWeights, InitializerModelRoundTrips) {
  std::string dir = makeTempDir();
  std::vector<float> g1 = {0.5f, -1.0f, 2.0f, 4.0f, 8.0f, 16.0f}, g2 = {3.0f};
  std::vector<int64_t> ids = {1, 2, 3, 4};
  writeInitializerModel(
      dir + "/g.onnx",
      {{"layer.weight", {2, 3}, g1.data()}, {"bias", {1}, g2.data()}},
      {{"input_ids", {2, 2}, ids.data()}});
  std::vector<FloatTensor> back = readOnnxFloatInitializers(dir + "/g.onnx");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].name, "layer.weight");
  EXPECT_EQ(back[0].dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(back[0].data, g1);
  EXPECT_EQ(back[1].name, "bias");
  EXPECT_EQ(back[1].data, g2);

  onnx::ModelProto model;
  std::ifstream in(dir + "/g.onnx", std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&in));
  EXPECT_EQ(model.ir_version(), 10);
  ASSERT_EQ(model.opset_import_size(), 1);
  EXPECT_EQ(model.opset_import(0).domain(), "");
  EXPECT_EQ(model.opset_import(0).version(), 20);
  EXPECT_EQ(model.graph().node_size(), 0);
  ASSERT_EQ(model.graph().initializer_size(), 3);
  const onnx::TensorProto &t = model.graph().initializer(2);
  EXPECT_EQ(t.name(), "input_ids");
  EXPECT_EQ(t.data_type(), onnx::TensorProto::INT64);
  EXPECT_EQ(t.raw_data(), rawBytes(ids));
  // Atomic write: no temporary file is left behind.
  EXPECT_EQ(std::system(("ls '" + dir + "' | grep -q tmp").c_str()) == 0,
            false);
}

TEST(OnnxWeights, ExportKeepsTypesAndOtherInitializers) {
  std::string dir = makeTempDir();
  onnx::ModelProto model = baseModel();
  model.mutable_graph()->add_node()->set_op_type("Identity");
  std::vector<uint16_t> bf16(6, floatToBf16(1.0f));
  addTensor(model, "w_bf16", {2, 3}, onnx::TensorProto::BFLOAT16)
      ->set_raw_data(rawBytes(bf16));
  addTensor(model, "w_f32", {6}, onnx::TensorProto::FLOAT)
      ->set_raw_data(std::string(24, '\0'));
  std::vector<int64_t> shape = {4, 5};
  addTensor(model, "shape_const", {2}, onnx::TensorProto::INT64)
      ->set_raw_data(rawBytes(shape));
  writeBytes(dir + "/ext.bin", rawBytes(kValues));
  setExternal(addTensor(model, "rope_table", {6}, onnx::TensorProto::FLOAT),
              "ext.bin", 0, 24);
  saveModel(model, dir + "/m.onnx");

  ParamSpec params[] = {spec("w_bf16", {2, 3}), spec("w_f32", {6})};
  std::vector<float> trained = {1.0f,  1.00390625f, 1.01171875f,
                                -3.0f, 0.1f,        2.0f};
  const float *data[] = {trained.data(), trained.data()};
  for (int64_t threshold : {int64_t(1) << 30, int64_t(0)}) {
    ExportOptions options;
    options.externalDataThreshold = threshold;
    std::string out = dir + "/out" + std::to_string(threshold) + ".onnx";
    exportOnnxWeights(dir + "/m.onnx", out, params, 2, data, options);
    std::vector<FloatTensor> back = readOnnxFloatInitializers(out);
    ASSERT_EQ(back.size(), 3u);
    EXPECT_EQ(back[0].name, "w_bf16");
    for (size_t e = 0; e < 6; ++e)
      EXPECT_EQ(back[0].data[e], bf16ToFloat(floatToBf16(trained[e])));
    EXPECT_EQ(back[1].data, trained);
    EXPECT_EQ(back[2].name, "rope_table");
    EXPECT_EQ(back[2].data, kValues);

    onnx::ModelProto written;
    std::ifstream in(out, std::ios::binary);
    ASSERT_TRUE(written.ParseFromIstream(&in));
    EXPECT_EQ(written.graph().node_size(), 1);
    EXPECT_EQ(written.graph().initializer(0).data_type(),
              onnx::TensorProto::BFLOAT16);
    EXPECT_EQ(written.graph().initializer(2).raw_data(), rawBytes(shape));
    bool external = written.graph().initializer(0).data_location() ==
                    onnx::TensorProto::EXTERNAL;
    EXPECT_EQ(external, threshold == 0);
  }
  // A parameter the model does not have is an error naming it.
  ParamSpec bad[] = {spec("nope", {6})};
  EXPECT_THAT(errorOf([&] {
                exportOnnxWeights(dir + "/m.onnx", dir + "/x.onnx", bad, 1,
                                  data);
              }),
              HasSubstr("initializer 'nope' not found"));
}

} // namespace
