//===- Context.cu - Streams, handles, errors and shared helpers -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The current stream is thread-local. cuBLAS handles live in a thread-local
// table keyed by device; each owns a fixed 32 MiB workspace (cuBLAS's advice
// for Hopper), so that the algorithms cuBLAS picks, and therefore the
// results, never depend on which stream or pool memory happened to be
// available. cublasSetStream resets the workspace to cuBLAS's own pool, so
// the workspace is set again whenever the bound stream changes.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

namespace rondo::cuda {

namespace {

thread_local cudaStream_t tlsStream = nullptr;

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct DeviceContext {
  int device = -1;
  cublasHandle_t handle = nullptr;
  void *workspace = nullptr;
  cudaStream_t boundStream = nullptr;
  bool bound = false;

  ~DeviceContext() {
    // Best effort at thread exit; errors cannot be reported here.
    if (!handle && !workspace)
      return;
    int previous = -1;
    if (cudaGetDevice(&previous) == cudaSuccess && previous != device)
      cudaSetDevice(device);
    if (handle)
      cublasDestroy(handle);
    if (workspace)
      cudaFree(workspace);
    if (previous >= 0 && previous != device)
      cudaSetDevice(previous);
  }
};

struct ThreadContexts {
  std::map<int, DeviceContext> byDevice;
};

thread_local ThreadContexts tlsContexts;

int currentDeviceOrMinus1() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess)
    return -1;
  return d;
}

} // namespace

namespace {
std::atomic<Precision> gPrecision{Precision::Fp32};
} // namespace

void setPrecision(Precision p) { gPrecision.store(p); }
Precision precision() { return gPrecision.load(); }

void setCurrentStream(cudaStream_t stream) { tlsStream = stream; }
cudaStream_t currentStream() { return tlsStream; }

void releaseThreadResources() { tlsContexts.byDevice.clear(); }

namespace detail {

void fail(const char *kernel, const char *call, const char *message) {
  std::string text = "rondo cuda kernels: ";
  text += kernel ? kernel : "?";
  text += " on device " + std::to_string(currentDeviceOrMinus1()) + ": ";
  text += call;
  text += " failed: ";
  text += message;
  throw std::runtime_error(text);
}

void contract(const char *kernel, const char *format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  std::string text = "rondo cuda kernels: ";
  text += kernel ? kernel : "?";
  text += " on device " + std::to_string(currentDeviceOrMinus1()) + ": ";
  text += buffer;
  throw std::runtime_error(text);
}

void check(cudaError_t status, const char *call, const char *kernel) {
  if (status != cudaSuccess) {
    std::string message = cudaGetErrorName(status);
    message += " (";
    message += cudaGetErrorString(status);
    message += ")";
    fail(kernel, call, message.c_str());
  }
}

void check(cublasStatus_t status, const char *call, const char *kernel) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(kernel, call, cublasGetStatusString(status));
}

void checkLaunch(const char *kernel) {
  check(cudaGetLastError(), "kernel launch", kernel);
}

cublasHandle_t cublas(const char *kernel) {
  int device = 0;
  RONDO_CHECK(cudaGetDevice(&device), kernel);
  DeviceContext &ctx = tlsContexts.byDevice[device];
  if (!ctx.handle) {
    ctx.device = device;
    RONDO_CHECK(cublasCreate(&ctx.handle), kernel);
    RONDO_CHECK(cublasSetMathMode(ctx.handle, CUBLAS_DEFAULT_MATH), kernel);
    RONDO_CHECK(cublasSetAtomicsMode(ctx.handle, CUBLAS_ATOMICS_NOT_ALLOWED),
                kernel);
    RONDO_CHECK(cublasSetPointerMode(ctx.handle, CUBLAS_POINTER_MODE_HOST),
                kernel);
    RONDO_CHECK(cudaMalloc(&ctx.workspace, kWorkspaceBytes), kernel);
  }
  cudaStream_t stream = currentStream();
  if (!ctx.bound || ctx.boundStream != stream) {
    RONDO_CHECK(cublasSetStream(ctx.handle, stream), kernel);
    RONDO_CHECK(cublasSetWorkspace(ctx.handle, ctx.workspace, kWorkspaceBytes),
                kernel);
    ctx.boundStream = stream;
    ctx.bound = true;
  }
  return ctx.handle;
}

Temp::Temp(size_t bytes, const char *kernel)
    : stream_(currentStream()), kernel_(kernel) {
  if (bytes == 0)
    return;
  check(cudaMallocAsync(&ptr_, bytes, stream_), "cudaMallocAsync", kernel);
}

Temp::~Temp() {
  if (ptr_)
    cudaFreeAsync(ptr_, stream_); // exception path only; see release()
}

void Temp::release() {
  if (!ptr_)
    return;
  void *p = ptr_;
  ptr_ = nullptr;
  check(cudaFreeAsync(p, stream_), "cudaFreeAsync", kernel_);
}

Bcast makeBcast(const Shape &out, const Shape *inputs, int numInputs,
                const char *kernel) {
  if (numInputs > 2)
    contract(kernel, "too many broadcast operands");
  int outRank = out.rank;
  int64_t outStrides[kMaxRank];
  contiguousStrides(out, outStrides);
  int64_t raw[2][kMaxRank] = {};
  for (int op = 0; op < numInputs; ++op)
    kernels::broadcastStrides(
        inputs[op], out, raw[op],
        [kernel](auto... args) { contract(kernel, args...); });
  Bcast s;
  int64_t lastOut = 0;
  for (int d = 0; d < outRank; ++d) {
    if (out.dims[d] == 1)
      continue;
    if (s.rank > 0) {
      bool mergeable = lastOut == outStrides[d] * out.dims[d];
      for (int op = 0; op < numInputs; ++op)
        if (s.strides[op][s.rank - 1] != raw[op][d] * out.dims[d])
          mergeable = false;
      if (mergeable) {
        s.dims[s.rank - 1] *= out.dims[d];
        for (int op = 0; op < numInputs; ++op)
          s.strides[op][s.rank - 1] = raw[op][d];
        lastOut = outStrides[d];
        continue;
      }
    }
    s.dims[s.rank] = out.dims[d];
    for (int op = 0; op < numInputs; ++op)
      s.strides[op][s.rank] = raw[op][d];
    lastOut = outStrides[d];
    ++s.rank;
  }
  return s;
}

Strided makeStrided(const Shape &shape, const int64_t *strides, int64_t base) {
  Strided s;
  s.base = base;
  for (int d = 0; d < shape.rank; ++d) {
    if (shape.dims[d] == 1)
      continue;
    if (s.rank > 0 && s.strides[s.rank - 1] == strides[d] * shape.dims[d]) {
      s.dims[s.rank - 1] *= shape.dims[d];
      s.strides[s.rank - 1] = strides[d];
      continue;
    }
    s.dims[s.rank] = shape.dims[d];
    s.strides[s.rank] = strides[d];
    ++s.rank;
  }
  return s;
}

__global__ void columnFinalKernel(int64_t width, int64_t parts,
                                  const double *partial, float *out) {
  RONDO_GRID_STRIDE(c, width) {
    double acc = 0.0;
    for (int64_t p = 0; p < parts; ++p)
      acc += partial[p * width + c];
    out[c] = float(acc);
  }
}

namespace {
__global__ void fillKernel(float *out, int64_t n, float value) {
  RONDO_GRID_STRIDE(i, n) { out[i] = value; }
}
} // namespace

void fillDevice(float *out, int64_t n, float value, const char *kernel) {
  if (n <= 0)
    return;
  fillKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(out, n, value);
  checkLaunch(kernel);
}

} // namespace detail
} // namespace rondo::cuda
