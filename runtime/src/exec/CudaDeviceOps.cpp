//===- CudaDeviceOps.cpp - Workers on GPUs ----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA backend's DeviceOps: worker w runs on GPU gpus[w % gpus.size()]
// (so a plan for 4 workers also runs on one GPU, for testing). Every stream
// thread owns a non-blocking CUDA stream on its worker's device; an op is
// enqueued there and the thread synchronizes that stream alone, so copies in
// both directions and compute overlap across streams and devices exactly as
// the host backend's threads do. Arenas are allocated once per worker; the
// host pool and the master weights are page-locked, so no hot-path copy is
// pageable. Stage functions allocate their temporaries from the device's
// stream-ordered pool, which keeps freed memory for reuse.
//
// The optimizer's math on device-resident state (adamw, gradNormPartials,
// ...) comes from the optimizer and trainer threads: it runs on one more
// non-blocking stream per device, created on first use, and is synchronised
// before the call returns.
//
//===----------------------------------------------------------------------===//

#include "CudaStageGraphs.h"
#include "HostExec.h"
#include "rondo/runtime/DeviceOps.h"

#include "CudaKernels.h"
#include "rondo/runtime/Error.h"
#include "rondo/runtime/Replicas.h"

#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

namespace rondo::rt {
namespace {

void check(cudaError_t status, const char *call, int device) {
  if (status == cudaSuccess)
    return;
  std::ostringstream os;
  os << call << " failed on GPU " << device << ": "
     << cudaGetErrorName(status) << " (" << cudaGetErrorString(status) << ")";
  throw Error(os.str());
}

class PinnedHostPool final : public PinnedPool {
public:
  void *allocate(size_t bytes) override {
    void *p = nullptr;
    check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable),
          "cudaHostAlloc of the host pool", -1);
    std::memset(p, 0, bytes);
    return p;
  }
  void release(void *ptr) override { cudaFreeHost(ptr); }
};

class CudaDeviceOps final : public DeviceOps {
public:
  explicit CudaDeviceOps(std::vector<int> gpus) : gpus(std::move(gpus)) {
    // Hand-offs go device to device where the hardware allows it; the
    // driver stages the others through host memory.
    for (int a : this->gpus)
      for (int b : this->gpus) {
        if (a == b)
          continue;
        int can = 0;
        check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer",
              a);
        if (!can)
          continue;
        check(cudaSetDevice(a), "cudaSetDevice", a);
        cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled)
          cudaGetLastError();
        else
          check(e, "cudaDeviceEnablePeerAccess", a);
      }
    for (int d : this->gpus) {
      // Keep freed temporaries in the pool instead of returning them to
      // the driver after every synchronization.
      cudaMemPool_t pool;
      check(cudaDeviceGetDefaultMemPool(&pool, d), "cudaDeviceGetDefaultMemPool",
            d);
      uint64_t keep = UINT64_MAX;
      check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                    &keep),
            "cudaMemPoolSetAttribute", d);
    }
  }

  ~CudaDeviceOps() override {
    // Best effort: the work on them was synchronised by every call.
    for (auto &[d, stream] : optimizerStreams) {
      cudaSetDevice(d);
      cudaStreamDestroy(stream);
    }
  }

  const char *name() const override { return "cuda"; }

  std::unique_ptr<PinnedPool> makeHostPool() override {
    return std::make_unique<PinnedHostPool>();
  }

  void registerHostMemory(void *ptr, size_t bytes) override {
    if (bytes)
      check(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable),
            "cudaHostRegister of the master weights", -1);
  }
  void unregisterHostMemory(void *ptr) override { cudaHostUnregister(ptr); }

  std::string memoryReport() const override {
    std::string report;
    for (size_t w = 0; w < gpus.size(); ++w) {
      int d = gpus[w];
      cudaMemPool_t pool;
      uint64_t reserved = 0, graphs = 0;
      if (cudaDeviceGetDefaultMemPool(&pool, d) != cudaSuccess ||
          cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh,
                                  &reserved) != cudaSuccess ||
          cudaDeviceGetGraphMemAttribute(d, cudaGraphMemAttrReservedMemHigh,
                                         &graphs) != cudaSuccess)
        continue;
      const uint64_t used = poolPeakBytes(d);
      const double gb = 1e9;
      char line[320];
      std::snprintf(line, sizeof(line),
                    "%sGPU %d memory: arena %.2f GB (the plan's buffers), "
                    "temporaries peak %.2f GB (pool reserved %.2f GB; CUDA "
                    "graphs %.2f GB)",
                    report.empty() ? "rondo: " : "\nrondo: ", d,
                    double(arenaBytes[w]) / gb, double(used) / gb,
                    double(reserved) / gb, double(graphs) / gb);
      report += line;
    }
    std::string graphs = StageGraphs::summary();
    if (!graphs.empty())
      report += (report.empty() ? "" : "\n") + graphs;
    return report;
  }

  char *allocateArena(int32_t worker, size_t bytes) override {
    arenaBytes[size_t(worker) % gpus.size()] += bytes;
    int d = device(worker);
    check(cudaSetDevice(d), "cudaSetDevice", d);
    void *p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc of a worker arena", d);
    check(cudaMemset(p, 0, bytes), "cudaMemset of a worker arena", d);
    return static_cast<char *>(p);
  }
  void limitToPlannedMemory(int32_t worker, double bytes) override {
    const size_t g = size_t(worker) % gpus.size();
    plannedBytes[g] += bytes;
    StageGraphs::limitGraphPools(device(worker),
                                 plannedBytes[g] - double(arenaBytes[g]));
  }
  void releaseArena(int32_t worker, char *arena) override {
    cudaSetDevice(device(worker));
    cudaFree(arena);
  }

  void bindThread(int32_t worker, int32_t) override {
    ThreadState &t = state();
    t.device = worker >= 0 ? device(worker) : gpus.front();
    check(cudaSetDevice(t.device), "cudaSetDevice", t.device);
    if (!t.stream)
      check(cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags", t.device);
    cuda::setCurrentStream(t.stream);
  }

  void copy(int32_t, void *dst, const void *src, size_t bytes) override {
    ThreadState &t = state();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, t.stream),
          "cudaMemcpyAsync", t.device);
    check(cudaStreamSynchronize(t.stream), "cudaStreamSynchronize after a copy",
          t.device);
  }

  void zero(int32_t, void *dst, size_t bytes) override {
    ThreadState &t = state();
    check(cudaMemsetAsync(dst, 0, bytes, t.stream), "cudaMemsetAsync",
          t.device);
    check(cudaStreamSynchronize(t.stream), "cudaStreamSynchronize after a fill",
          t.device);
  }

  void launch(int32_t, rondo_stage_fn fn, void *const *io, size_t numIo,
              float lossScale) override {
    ThreadState &t = state();
    cuda::setCurrentStream(t.stream);
    t.graphs.run(fn, io, numIo, lossScale, t.stream, t.device);
  }

  // The optimizer's math on device-resident state: the kernels of
  // Optimizer.cu (CudaKernels.h), which give the host optimizer's bits
  // (gradNormPartials to ~1e-15 relative per block).

  void adamw(int32_t worker, const AdamWTensor *tensors, size_t count,
             const AdamWConfig &config, double lr, int64_t step) override {
    onOptimizerStream(worker, "the device AdamW", [&](cudaStream_t) {
      cuda::adamwUpdate(tensors, count, config, lr, step);
    });
  }

  void gradNormPartials(int32_t worker, const FloatSpan *spans, size_t count,
                        double *partials) override {
    std::vector<cuda::FloatSpan> list(count);
    for (size_t k = 0; k < count; ++k)
      list[k] = {spans[k].data, spans[k].n};
    onOptimizerStream(worker, "the device gradient norm", [&](cudaStream_t) {
      cuda::gradNormPartialsMany(list.data(), count, kGradNormBlock, partials);
    });
  }

  int firstNonFinite(int32_t worker, const FloatSpan *spans,
                     size_t count) override {
    std::vector<cuda::FloatSpan> list(count);
    for (size_t k = 0; k < count; ++k)
      list[k] = {spans[k].data, spans[k].n};
    int first = -1;
    onOptimizerStream(worker, "the device finiteness check", [&](cudaStream_t) {
      first = cuda::firstNonFiniteSpan(list.data(), count);
    });
    return first;
  }

  void scale(int32_t worker, float *data, int64_t n, float factor) override {
    onOptimizerStream(worker, "the device gradient scaling", [&](cudaStream_t) {
      cuda::scaleInPlace(data, n, factor);
    });
  }

  void toBf16(int32_t worker, const Bf16Copy *copies, size_t count) override {
    onOptimizerStream(worker, "the bf16 weight copies", [&](cudaStream_t) {
      for (size_t k = 0; k < count; ++k)
        cuda::toBf16(cpu::CFView{copies[k].src, cpu::Shape{copies[k].n}},
                     cpu::BView{copies[k].dst, cpu::Shape{copies[k].n}});
    });
  }

  void sumParts(int32_t worker, float *sum, const float *const *parts,
                int32_t count, int64_t n) override {
    onOptimizerStream(worker, "the device part sum", [&](cudaStream_t) {
      cuda::sumParts(sum, parts, count, n);
    });
  }

  void copyToWorker(int32_t worker, void *dst, const void *src,
                    size_t bytes) override {
    if (bytes == 0)
      return;
    onOptimizerStream(worker, "a copy to a worker", [&](cudaStream_t s) {
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s),
            "cudaMemcpyAsync to a worker", device(worker));
    });
  }

  void copyFromWorker(int32_t worker, void *dst, const void *src,
                      size_t bytes) override {
    if (bytes == 0)
      return;
    onOptimizerStream(worker, "a copy from a worker", [&](cudaStream_t s) {
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s),
            "cudaMemcpyAsync from a worker", device(worker));
    });
  }

private:
  /// Runs `work(stream)` on the worker's device and that device's optimizer
  /// stream, and waits for it. The callers are the optimizer and trainer
  /// threads, which are none of the stream threads: they get a stream of
  /// their own rather than the legacy default stream, which would serialise
  /// with every worker stream's copies and stages. The calling thread's
  /// device and current kernel stream are restored afterwards.
  template <typename Work>
  void onOptimizerStream(int32_t worker, const char *what, Work &&work) {
    const int d = device(worker);
    int previous = -1;
    check(cudaGetDevice(&previous), "cudaGetDevice", d);
    struct RestoreDevice {
      int device;
      ~RestoreDevice() {
        if (device >= 0)
          cudaSetDevice(device);
      }
    } restore{previous != d ? previous : -1};
    check(cudaSetDevice(d), "cudaSetDevice", d);
    cudaStream_t stream = optimizerStream(d);
    cuda::StreamGuard guard(stream);
    work(stream);
    check(cudaStreamSynchronize(stream), what, d);
  }

  /// Device d's optimizer stream, created on first use (d current).
  cudaStream_t optimizerStream(int d) {
    std::lock_guard<std::mutex> lock(optimizerStreamsMutex);
    cudaStream_t &stream = optimizerStreams[d];
    if (!stream)
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags for the optimizer", d);
    return stream;
  }

  struct ThreadState {
    int device = 0;
    cudaStream_t stream = nullptr;
    StageGraphs graphs; ///< This stream thread's stage functions as graphs.
  };
  static ThreadState &state() {
    thread_local ThreadState t;
    return t;
  }
  int device(int32_t worker) const {
    return gpus[size_t(worker) % gpus.size()];
  }

  std::vector<int> gpus;
  /// Arena bytes per entry of gpus.
  std::vector<size_t> arenaBytes = std::vector<size_t>(gpus.size(), 0);
  /// The plan's predicted memory of the workers on each entry of gpus.
  std::vector<double> plannedBytes = std::vector<double>(gpus.size(), 0.0);
  /// The optimizer streams by device (onOptimizerStream).
  std::mutex optimizerStreamsMutex;
  std::map<int, cudaStream_t> optimizerStreams;
};

/// GPU trainers sum their replicas' gradients over NCCL: this object file is
/// linked into every --target=cuda trainer (main names makeCudaDeviceOps).
const bool kNcclRegistered = [] {
  registerGpuReplicaFactory(&joinNcclReplicaGroup);
  return true;
}();

} // namespace

std::unique_ptr<DeviceOps> makeCudaDeviceOps(int32_t workers,
                                             const std::string &gpuList) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw Error(std::string("this trainer runs on GPUs, and none can be used") +
                (e != cudaSuccess ? std::string(": ") + cudaGetErrorString(e)
                                  : std::string()));
  std::vector<int> gpus;
  if (gpuList.empty()) {
    for (int d = 0; d < std::min(count, int(workers)); ++d)
      gpus.push_back(d);
  } else {
    std::stringstream ss(gpuList);
    std::string item;
    while (std::getline(ss, item, ',')) {
      char *end = nullptr;
      long d = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end || d < 0 || d >= count)
        throw Error("--gpus " + gpuList + ": '" + item +
                    "' is not a GPU index (this machine has " +
                    std::to_string(count) + ")");
      gpus.push_back(int(d));
    }
  }
  return std::make_unique<CudaDeviceOps>(std::move(gpus));
}

} // namespace rondo::rt
