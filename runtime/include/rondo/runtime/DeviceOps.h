//===- DeviceOps.h - Where workers' memory lives, how data moves -*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The executor's scheduling (streams as FIFOs, events, awaits, host tasks,
// tracing, the watchdog) is the same on every backend; what differs is what
// a worker is. DeviceOps is that difference: host memory and memcpy for the
// host backend, one GPU per worker (round-robin over the visible devices)
// for the CUDA backend. Every call returns when its work is complete, so the
// executor's events keep their meaning; on a GPU the stream thread enqueues
// on its own CUDA stream and synchronizes that stream only.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_DEVICEOPS_H
#define RONDO_RUNTIME_DEVICEOPS_H

#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/Exec.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rondo::rt {

/// n floats at data, in some worker's memory.
struct FloatSpan {
  const float *data = nullptr;
  int64_t n = 0;
};

/// A tensor and its bf16 copy (device-resident weights, exec.resident's
/// `bf16`), both in one worker's memory.
struct Bf16Copy {
  const float *src = nullptr;
  uint16_t *dst = nullptr;
  int64_t n = 0;
};

class PinnedPool;

class DeviceOps {
public:
  virtual ~DeviceOps() = default;
  /// "host" or "cuda", for messages.
  virtual const char *name() const = 0;
  /// The host pool: page-locked on GPUs.
  virtual std::unique_ptr<PinnedPool> makeHostPool() = 0;
  /// Makes `bytes` of host memory at `ptr` (the master weights) fast to copy
  /// from; a no-op on the host.
  virtual void registerHostMemory(void *ptr, size_t bytes) = 0;
  virtual void unregisterHostMemory(void *ptr) = 0;
  /// A worker's arena, zeroed.
  virtual char *allocateArena(int32_t worker, size_t bytes) = 0;
  virtual void releaseArena(int32_t worker, char *arena) = 0;
  /// The plan's predicted memory of `worker` (rondo_program's
  /// predictedWorkerBytes, after its arena is allocated): the CUDA backend
  /// records stage functions as graphs only while their pools fit what the
  /// prediction leaves beside the arena and the temporaries.
  virtual void limitToPlannedMemory(int32_t worker, double bytes) {
    (void)worker;
    (void)bytes;
  }
  /// Called on each stream thread before its first op (role: rondo_stream).
  virtual void bindThread(int32_t worker, int32_t role) = 0;
  /// Whether a worker's copies and kernels run on the host's own cores (the
  /// host backend): then one thread serves all of a worker's streams.
  virtual bool streamsShareCores() const { return false; }
  virtual void copy(int32_t worker, void *dst, const void *src,
                    size_t bytes) = 0;
  virtual void zero(int32_t worker, void *dst, size_t bytes) = 0;
  /// Runs fn(io, lossScale) (numIo operands) and returns when it is done.
  virtual void launch(int32_t worker, rondo_stage_fn fn, void *const *io,
                      size_t numIo, float lossScale) = 0;
  /// What the workers' memory peaked at, one line per device ("" on the
  /// host), for the trainer's summary: the plan's arena against everything
  /// else (stage temporaries, kernel scratch).
  virtual std::string memoryReport() const { return ""; }

  /// The optimizer's math on a worker's memory, for device-resident state:
  /// every pointer is in `worker`'s memory. The optimizer and trainer
  /// threads call these (not the worker's stream threads): an
  /// implementation selects the worker's device itself and returns once the
  /// work is complete. The defaults are the host optimizer's own functions,
  /// right for the host backend, whose arenas are host memory: resident and
  /// streamed state then give the same bits.
  virtual void adamw(int32_t worker, const AdamWTensor *tensors, size_t count,
                     const AdamWConfig &config, double lr, int64_t step);
  /// gradNormPartials of every span, concatenated: span k's
  /// gradNormBlocks(n_k) partials follow span k - 1's. One call for all of
  /// a worker's gradients (a GPU then launches and synchronises once).
  virtual void gradNormPartials(int32_t worker, const FloatSpan *spans,
                                size_t count, double *partials);
  /// The index of the first span holding a NaN or an infinity, or -1.
  virtual int firstNonFinite(int32_t worker, const FloatSpan *spans,
                             size_t count);
  /// data[i] = data[i] * factor (clipping).
  virtual void scale(int32_t worker, float *data, int64_t n, float factor);
  /// Rounds each copy's source into its bf16 copy, with the bits of the
  /// `toBf16` kernel the stage functions would otherwise run.
  virtual void toBf16(int32_t worker, const Bf16Copy *copies, size_t count);
  /// sum[i] = parts[0][i] + parts[1][i] + ..., added in that order.
  virtual void sumParts(int32_t worker, float *sum, const float *const *parts,
                        int32_t count, int64_t n);
  /// Copies between host memory and the worker's memory from a thread that
  /// is not one of the worker's streams (set-up, checkpoints, exports).
  virtual void copyToWorker(int32_t worker, void *dst, const void *src,
                            size_t bytes);
  virtual void copyFromWorker(int32_t worker, void *dst, const void *src,
                              size_t bytes);
};

/// Makes the DeviceOps of a backend for a plan of `workers` workers on the
/// GPUs of `--gpus` (empty: the first `workers` visible ones).
using DeviceOpsFactory =
    std::unique_ptr<DeviceOps> (*)(int32_t workers, const std::string &gpus);

std::unique_ptr<DeviceOps> makeHostDeviceOps(int32_t workers,
                                             const std::string &gpus);
/// One GPU per worker; throws rt::Error when no GPU can be used. Only in
/// builds with the CUDA runtime (RONDO_ENABLE_CUDA).
std::unique_ptr<DeviceOps> makeCudaDeviceOps(int32_t workers,
                                             const std::string &gpuList);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_DEVICEOPS_H
