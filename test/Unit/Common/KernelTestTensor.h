//===- KernelTestTensor.h - Host tensors of the kernel tests ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host tensor and the seeded random inputs that the CPU kernel tests
// (test/Unit/Runtime) and the CUDA kernel tests (test/Unit/CudaKernels) both
// build on; each suite keeps its own seed.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_COMMON_KERNELTESTTENSOR_H
#define RONDO_TEST_UNIT_COMMON_KERNELTESTTENSOR_H

#include "Kernels.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace rondo::cpu::test {

struct Tensor {
  Shape shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(Shape s, float value = 0.0f)
      : shape(s), data(size_t(s.numel()), value) {}
  FView v() { return FView{data.data(), shape}; }
  CFView cv() const { return CFView{data.data(), shape}; }
  float &operator[](int64_t i) { return data[size_t(i)]; }
  float operator[](int64_t i) const { return data[size_t(i)]; }
  int64_t size() const { return int64_t(data.size()); }
};

/// The test binary's random generator, reseeded with `seed` (one per binary)
/// at the start of every test so that a test sees the same values whether it
/// runs alone (as under ctest) or in the full suite.
inline std::mt19937 &seededRng(std::mt19937::result_type seed) {
  static std::mt19937 gen;
  static const testing::TestInfo *seededFor = nullptr;
  const testing::TestInfo *current =
      testing::UnitTest::GetInstance()->current_test_info();
  if (current != seededFor) {
    seededFor = current;
    gen.seed(seed);
  }
  return gen;
}

/// A tensor of `s` filled uniformly in [lo, hi) from `gen`.
inline Tensor uniformFrom(std::mt19937 &gen, Shape s, float lo, float hi) {
  Tensor t(s);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float &x : t.data)
    x = dist(gen);
  return t;
}

} // namespace rondo::cpu::test

#endif // RONDO_TEST_UNIT_COMMON_KERNELTESTTENSOR_H
