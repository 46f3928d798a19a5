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

constexpr int kMaxSliceRank = 8;
struct SliceArgs {
  int rank;
  int64_t xShape[kMaxSliceRank], outShape[kMaxSliceRank], starts[kMaxSliceRank],
      steps[kMaxSliceRank];
};

__global__ void sliceIntsKernel(const int64_t *x, int64_t *out, int64_t n,
                                SliceArgs a) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = k, src = 0, stride = 1;
    for (int d = a.rank - 1; d >= 0; --d) {
      int64_t idx = rem % a.outShape[d];
      rem /= a.outShape[d];
      src += (a.starts[d] + idx * a.steps[d]) * stride;
      stride *= a.xShape[d];
    }
    out[k] = x[src];
  }
}

__global__ void causalMaskKernel(float *out, int64_t n, int64_t rows,
                                 int64_t cols) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    int64_t j = k % cols, i = (k / cols) % rows;
    out[k] = j <= i + (cols - rows) ? 0.0f : -INFINITY;
  }
}

unsigned blocksFor(int64_t n) {
  int64_t b = (n + 255) / 256;
  return unsigned(b < 1 ? 1 : (b > 65535 ? 65535 : b));
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

void sliceInts(const int64_t *x, const int64_t *xShape, int64_t *out,
               const int64_t *outShape, int rank, const int64_t *starts,
               const int64_t *steps) {
  if (rank > kMaxSliceRank)
    throw std::runtime_error("sliceInts: rank " + std::to_string(rank) +
                             " exceeds " + std::to_string(kMaxSliceRank));
  SliceArgs a{};
  a.rank = rank;
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    a.xShape[d] = xShape[d];
    a.outShape[d] = outShape[d];
    a.starts[d] = starts[d];
    a.steps[d] = steps[d];
    n *= outShape[d];
  }
  if (n == 0)
    return;
  sliceIntsKernel<<<blocksFor(n), 256, 0, currentStream()>>>(x, out, n, a);
  check(cudaGetLastError(), "the sliceInts kernel");
}

void causalMask(float *out, int64_t outer, int64_t rows, int64_t cols) {
  int64_t n = outer * rows * cols;
  if (n == 0)
    return;
  causalMaskKernel<<<blocksFor(n), 256, 0, currentStream()>>>(out, n, rows,
                                                              cols);
  check(cudaGetLastError(), "the causalMask kernel");
}

} // namespace rondo::cuda
