//===- ParamStoreTest.cpp - Frozen weights held in bf16 -----------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A bf16 trainer holds the frozen weights that only matrix products read in
// bf16 alone (ParamStorage::Bf16). What users rely on: the bits are those
// the toBf16 kernel gives the fp32 weights (so training does not change),
// exports widen them back exactly, the checksum that replicas compare sees
// them, and random initialisation rounds the same draws.
//
//===----------------------------------------------------------------------===//

#include "trainer/ParamStore.h"
#include "trainer/StepLog.h"

#include "Kernels.h"
#include "rondo/runtime/FloatConv.h"
#include "rondo/runtime/OnnxWeights.h"

#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace rondo::rt;
using namespace rondo::test;

namespace {

ParamSpec spec(const char *name, std::vector<int64_t> dims, bool trainable,
               ParamStorage storage) {
  ParamSpec p{name, "", int(dims.size()), {}, trainable};
  for (size_t i = 0; i < dims.size(); ++i)
    p.dims[i] = dims[i];
  p.storage = storage;
  return p;
}

/// Values that round differently under truncation, ties-away and
/// ties-to-even, plus the extremes.
std::vector<float> awkwardValues(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  const uint32_t patterns[] = {
      0x3f808000u, // tie, even below: stays 0x3f80
      0x3f818000u, // tie, odd below: rounds up to 0x3f82
      0x3f80ffffu, // just under the next: rounds up
      0x3f807fffu, // just under the tie: rounds down
      0xbf818001u, // negative, above the tie
      0x7f7fffffu, // largest finite: rounds up to infinity
      0x00000001u, // smallest subnormal
      0x80000000u, // -0
  };
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = i < int64_t(std::size(patterns))
                       ? bitsToFloat(patterns[i])
                       : 0.37f * float(i) - 2.0f + 1e-3f / float(i + 1);
  return v;
}

struct Fixture {
  std::string dir = makeTempDir();
  std::string path = dir + "/model.onnx";
  std::vector<float> w = awkwardValues(6 * 5), b = awkwardValues(7);
  std::vector<ParamSpec> params;
  ModelSpec model{};
  TrainerOptions opts;

  explicit Fixture(ParamStorage wStorage) {
    writeInitializerModel(path,
                          {{"w", {6, 5}, w.data()}, {"b", {7}, b.data()}});
    params = {spec("w", {6, 5}, false, wStorage),
              spec("b", {7}, false, ParamStorage::F32)};
    model.modelPath = path.c_str();
    model.inputName = "input_ids";
    model.batch = 1;
    model.seqLen = 1;
    model.params = params.data();
    model.numParams = int(params.size());
    opts.quiet = true;
    opts.mapWeights = MapWeights::Off;
  }
};

/// toBf16's bits of `x`: the CPU kernel that bf16 plans round with.
std::vector<uint16_t> kernelBf16(const std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  rondo::cpu::Shape shape{int64_t(x.size())};
  rondo::cpu::toBf16({x.data(), shape}, {out.data(), shape});
  return out;
}

TEST(ParamStoreTest, HoldsFrozenWeightsAsToBf16Bits) {
  Fixture f(ParamStorage::Bf16);
  StepLog log(f.opts);
  ParamStore store(f.model);
  store.initialise(f.opts, log);
  // No fp32 copy of the bf16 weight exists; its bits are the kernel's.
  EXPECT_EQ(store.data()[0], nullptr);
  const auto *bits = static_cast<const uint16_t *>(store.stored()[0]);
  EXPECT_EQ(std::vector<uint16_t>(bits, bits + f.w.size()), kernelBf16(f.w));
  // The fp32 one stays as loaded.
  ASSERT_NE(store.data()[1], nullptr);
  EXPECT_EQ(std::memcmp(store.data()[1], f.b.data(), f.b.size() * 4), 0);
  EXPECT_EQ(store.stored()[1], store.data()[1]);
  // Its fp32 view is the exact widening.
  std::vector<float> scratch;
  const float *wide = store.fp32(0, scratch);
  for (size_t i = 0; i < f.w.size(); ++i)
    EXPECT_EQ(floatToBits(wide[i]), uint32_t(bits[i]) << 16) << "element " << i;
}

TEST(ParamStoreTest, ChecksumSeesTheBf16Bits) {
  Fixture f(ParamStorage::Bf16);
  StepLog log(f.opts);
  ParamStore store(f.model);
  store.initialise(f.opts, log);
  // The documented sum: each element's held bits times an odd number from
  // its position, per parameter in table order.
  auto sumOf = [](const auto *bits, size_t n) {
    uint64_t sum = 0;
    for (size_t e = 0; e < n; ++e)
      sum += uint64_t(bits[e]) * (2 * uint64_t(e) + 1);
    return sum;
  };
  const uint64_t w =
      sumOf(static_cast<const uint16_t *>(store.stored()[0]), f.w.size());
  const uint64_t b =
      sumOf(reinterpret_cast<const uint32_t *>(store.data()[1]), f.b.size());
  EXPECT_EQ(store.checksum(), w * 1000003 + b);

  Fixture g(ParamStorage::F32);
  ParamStore fp32Store(g.model);
  fp32Store.initialise(g.opts, log);
  EXPECT_NE(store.checksum(), fp32Store.checksum());
}

TEST(ParamStoreTest, ExportWidensTheBf16Weights) {
  Fixture f(ParamStorage::Bf16);
  StepLog log(f.opts);
  ParamStore store(f.model);
  store.initialise(f.opts, log);
  f.opts.exportOnnx = f.dir + "/exported.onnx";
  store.exportWeights(f.opts, log);

  std::vector<float> w(f.w.size()), b(f.b.size());
  float *dst[] = {w.data(), b.data()};
  std::vector<ParamSpec> asFp32 = f.params;
  asFp32[0].storage = ParamStorage::F32;
  loadOnnxWeights(f.opts.exportOnnx, asFp32.data(), 2, dst);
  const std::vector<uint16_t> rounded = kernelBf16(f.w);
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_EQ(floatToBits(w[i]), uint32_t(rounded[i]) << 16) << "element " << i;
  EXPECT_EQ(std::memcmp(b.data(), f.b.data(), b.size() * 4), 0);
}

TEST(ParamStoreTest, RandomInitRoundsTheSameDraws) {
  Fixture f(ParamStorage::Bf16), g(ParamStorage::F32);
  f.opts.init = g.opts.init = InitKind::Random;
  f.opts.seed = g.opts.seed = 7;
  StepLog log(f.opts);
  ParamStore bf16Store(f.model), fp32Store(g.model);
  bf16Store.initialise(f.opts, log);
  fp32Store.initialise(g.opts, log);
  std::vector<float> drawn(fp32Store.data()[0],
                           fp32Store.data()[0] + f.w.size());
  const auto *bits = static_cast<const uint16_t *>(bf16Store.stored()[0]);
  EXPECT_EQ(std::vector<uint16_t>(bits, bits + f.w.size()), kernelBf16(drawn));
}

} // namespace
