//===- GeneratedSupport.cu - What generated CUDA stage code needs -===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "GeneratedSupport.h"

#include "CudaKernels.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace rondo::cuda {
namespace {

void check(cudaError_t status, const char *what) {
  if (status == cudaSuccess)
    return;
  int device = -1;
  cudaGetDevice(&device);
  throw std::runtime_error(std::string(what) + " failed on GPU " +
                           std::to_string(device) + ": " +
                           cudaGetErrorString(status));
}

} // namespace

void *allocateAsync(size_t bytes) {
  void *p = nullptr;
  // Not zeroed: every kernel overwrites its whole output (the emitter zeroes
  // the one accumulating destination, gatherRowsBackward's, with fill), and
  // a memset of every temporary cost about 5% of a training step.
  check(cudaMallocAsync(&p, bytes, currentStream()),
        "cudaMallocAsync of a stage temporary");
  return p;
}

void freeAsync(void *ptr) { cudaFreeAsync(ptr, currentStream()); }

const void *constantOnDevice(const void *host, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void *, int>, void *> table;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  void *&slot = table[{host, device}];
  if (!slot) {
    check(cudaMalloc(&slot, bytes ? bytes : 1), "cudaMalloc of a constant");
    // Synchronous: the constant is shared by every stream of the device.
    check(cudaMemcpy(slot, host, bytes, cudaMemcpyHostToDevice),
          "cudaMemcpy of a constant");
  }
  return slot;
}

void copyOut(void *dst, const void *src, size_t bytes) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                        currentStream()),
        "cudaMemcpyAsync of a stage result");
}

} // namespace rondo::cuda
