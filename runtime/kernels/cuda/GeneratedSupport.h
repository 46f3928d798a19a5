//===- GeneratedSupport.h - What generated CUDA stage code needs -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Generated stage functions for --target=cuda are the host ones with device
// memory: temporaries are DeviceBuffers from the device's stream-ordered
// pool, constants are uploaded once per device, results are copied into
// the launch's buffers on the current stream. Nothing here synchronizes.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_GENERATEDSUPPORT_H
#define RONDO_RUNTIME_KERNELS_CUDA_GENERATEDSUPPORT_H

#include <cstddef>
#include <cstdint>
#include <utility>

namespace rondo::cuda {

/// Zeroed device memory from the current device's stream-ordered pool,
/// allocated and freed on the current stream.
void *allocateAsync(size_t bytes);
void freeAsync(void *ptr);

template <class T> class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t count)
      : ptr(count > 0 ? static_cast<T *>(allocateAsync(size_t(count) *
                                                       sizeof(T)))
                      : nullptr) {}
  ~DeviceBuffer() {
    if (ptr)
      freeAsync(ptr);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void swap(DeviceBuffer &other) { std::swap(ptr, other.ptr); }
  T *data() const { return ptr; }

private:
  T *ptr = nullptr;
};

/// The copy of `bytes` host bytes at `host` on the current device, made on
/// first use and kept for the process (the table is keyed by address).
const void *constantOnDevice(const void *host, size_t bytes);

/// Device-to-device copy on the current stream.
void copyOut(void *dst, const void *src, size_t bytes);

} // namespace rondo::cuda

#endif // RONDO_RUNTIME_KERNELS_CUDA_GENERATEDSUPPORT_H
