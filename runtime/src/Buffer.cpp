//===- Buffer.cpp - Aligned, first-touch-initialised fp32 buffers ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Buffer.h"
#include "rondo/runtime/Error.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace rondo::rt {

namespace {
constexpr size_t kAlignment = 64;
} // namespace

void parallelZero(float *data, int64_t numel) {
  // Static chunks: pages are first touched by all threads, not just this one.
#pragma omp parallel for schedule(static) if (numel > (int64_t(1) << 16))
  for (int64_t i = 0; i < numel; ++i)
    data[i] = 0.0f;
}

FloatBuffer::FloatBuffer(int64_t n) : numel(n) {
  if (n < 0)
    throw Error("negative buffer size " + std::to_string(n));
  size_t bytes = size_t(n) * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (bytes == 0)
    bytes = kAlignment;
  ptr = static_cast<float *>(std::aligned_alloc(kAlignment, bytes));
  if (!ptr)
    throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  parallelZero(ptr, n);
}

FloatBuffer::~FloatBuffer() { std::free(ptr); }

FloatBuffer::FloatBuffer(FloatBuffer &&other) noexcept
    : ptr(std::exchange(other.ptr, nullptr)),
      numel(std::exchange(other.numel, 0)) {}

FloatBuffer &FloatBuffer::operator=(FloatBuffer &&other) noexcept {
  if (this != &other) {
    std::free(ptr);
    ptr = std::exchange(other.ptr, nullptr);
    numel = std::exchange(other.numel, 0);
  }
  return *this;
}

void FloatBuffer::zero() { parallelZero(ptr, numel); }

} // namespace rondo::rt
