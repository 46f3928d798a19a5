//===- Buffer.h - Aligned, first-touch-initialised fp32 buffers -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Parameters, gradients and optimizer moments of a large model are tens of
// GiB. They are allocated cache-line aligned, so vector loads never split a
// line and optimizer threads rarely share one at chunk edges, and zeroed by
// OpenMP threads in static chunks, so on a NUMA host their pages spread over
// the nodes of the threads that stream through them rather than all landing
// on the allocating thread's node.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_BUFFER_H
#define RONDO_RUNTIME_BUFFER_H

#include <cstddef>
#include <cstdint>

namespace rondo::rt {

class FloatBuffer {
public:
  FloatBuffer() = default;
  /// Allocates `numel` zeroed floats; throws rt::Error when out of memory.
  explicit FloatBuffer(int64_t numel);
  ~FloatBuffer();
  FloatBuffer(FloatBuffer &&other) noexcept;
  FloatBuffer &operator=(FloatBuffer &&other) noexcept;
  FloatBuffer(const FloatBuffer &) = delete;
  FloatBuffer &operator=(const FloatBuffer &) = delete;

  float *data() { return ptr; }
  const float *data() const { return ptr; }
  int64_t size() const { return numel; }
  float &operator[](int64_t i) { return ptr[i]; }
  float operator[](int64_t i) const { return ptr[i]; }

  /// Sets every element to zero, in parallel.
  void zero();

private:
  float *ptr = nullptr;
  int64_t numel = 0;
};

/// Zeroes `numel` floats in parallel (static chunks).
void parallelZero(float *data, int64_t numel);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_BUFFER_H
