//===- TempBuffer.h - Uninitialised temporaries of host stage code -*- C++ -*-//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host twin of the CUDA backend's DeviceBuffer: the storage of one
// temporary of an emitted stage function. Every kernel writes its whole
// output before anything reads it (the CUDA backend relies on the same
// contract, its stream-ordered allocations are not cleared either), so the
// storage is left uninitialised. A std::vector here zero-filled every
// temporary: a quarter of the demo trainer's time on one worker went to
// clearing buffers about to be overwritten.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_KERNELS_CPU_TEMPBUFFER_H
#define RONDO_KERNELS_CPU_TEMPBUFFER_H

#include <cstdint>
#include <memory>
#include <utility>

namespace rondo::cpu {

template <class T> class TempBuffer {
public:
  TempBuffer() = default;
  explicit TempBuffer(int64_t count)
      : storage(count > 0 ? new T[static_cast<size_t>(count)] : nullptr) {}
  /// Releases the storage early, after the value's last use.
  void swap(TempBuffer &other) { std::swap(storage, other.storage); }
  T *data() const { return storage.get(); }

private:
  std::unique_ptr<T[]> storage;
};

} // namespace rondo::cpu

#endif // RONDO_KERNELS_CPU_TEMPBUFFER_H
