//===- CudaStageGraphs.h - Stage functions replayed as CUDA graphs -*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A stage function issues the same kernels with the same arguments every
// time it runs on the same buffers: its launch sequence is static. On small
// microbatches the host's launch calls, not the kernels, set its pace, so
// the CUDA backend records each (stage function, operands, loss scale) once
// as a CUDA graph and replays it with one launch afterwards.
//
// When a launch is captured:
//  - never on its first run: that run makes the lazy one-time set-ups
//    (cuBLAS handles, constants, kernel attributes) outside any capture, and
//    measures the temporaries the function allocates;
//  - only when those temporaries fit four times in the device's free memory:
//    a graph's allocations come from the graph memory pool, beside the
//    stream-ordered pool the eager runs keep (W1's 27 GB of temporaries per
//    microbatch stay eager; replaying them would save nothing anyway, its
//    kernels are long);
//  - never while RONDO_PROFILE_KERNELS times kernels with events, nor with
//    RONDO_CUDA_GRAPHS=0;
//  - a function whose capture fails (a call that cannot be captured) runs
//    eagerly from then on.
// A replay runs the kernels the eager run would, with the same arguments:
// the same bits (test/GPU checks losses with and without).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_EXEC_CUDASTAGEGRAPHS_H
#define RONDO_RUNTIME_EXEC_CUDASTAGEGRAPHS_H

#include "rondo/runtime/Exec.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rondo::rt {

/// The graphs of one stream thread (one worker's compute stream).
class StageGraphs {
public:
  StageGraphs() = default;
  StageGraphs(const StageGraphs &) = delete;
  StageGraphs &operator=(const StageGraphs &) = delete;
  ~StageGraphs();

  /// Whether this process replays stage functions as graphs
  /// (RONDO_CUDA_GRAPHS, RONDO_PROFILE_KERNELS).
  static bool enabled();

  /// Runs fn(io, lossScale) on `stream` (device `device` current), eagerly
  /// or as its graph, and waits for it.
  void run(rondo_stage_fn fn, void *const *io, size_t numIo, float lossScale,
           cudaStream_t stream, int device);

  /// What every thread's graphs did so far, for the trainer's summary:
  /// "" before any stage ran, else one line.
  static std::string summary();

  /// Bounds the pools of the graphs recorded on `device`: with the eager
  /// temporaries' peak they stay within `bytes` (the plan's predicted
  /// memory less the arena). A function that would pass it runs eagerly, as
  /// its memory was planned. Without a bound only free memory limits them.
  static void limitGraphPools(int device, double bytes);

private:
  struct Key {
    rondo_stage_fn fn;
    float lossScale;
    std::vector<void *> io;
    bool operator<(const Key &o) const;
  };
  struct Entry {
    int eagerRuns = 0;
    size_t temporaries = 0; ///< Pool bytes the eager run allocated at most.
    bool refused = false;
    cudaGraphExec_t exec = nullptr;
  };

  void runEagerly(rondo_stage_fn fn, void *const *io, float lossScale,
                  cudaStream_t stream, int device, Entry &entry);
  /// Records fn's launches as entry.exec; false (and the stream's capture
  /// ended) when it cannot be recorded.
  bool record(rondo_stage_fn fn, void *const *io, float lossScale,
              cudaStream_t stream, Entry &entry);

  std::map<Key, Entry> graphs;
};

/// The stream-ordered pool's peak in use on `device` since the process
/// started: StageGraphs resets the pool's own high-water mark to measure
/// each function, and keeps what it saw here.
uint64_t poolPeakBytes(int device);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_EXEC_CUDASTAGEGRAPHS_H
