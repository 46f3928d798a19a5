//===- CudaStageGraphs.cpp - Stage functions replayed as CUDA graphs ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "CudaStageGraphs.h"

#include "rondo/runtime/Error.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>

namespace rondo::rt {
namespace {

/// Graphs one stream thread keeps at most: a plan's (job, microbatch,
/// parameter slot) combinations, far below this; a trainer whose operands
/// kept moving would otherwise record without end.
constexpr size_t kMaxGraphs = 1024;

void check(cudaError_t status, const char *call, int device) {
  if (status == cudaSuccess)
    return;
  std::ostringstream os;
  os << call << " failed on GPU " << device << ": " << cudaGetErrorName(status)
     << " (" << cudaGetErrorString(status) << ")";
  throw Error(os.str());
}

std::atomic<int64_t> eagerLaunches{0}, replayedLaunches{0}, recordedGraphs{0},
    refusedGraphs{0}, unplannedGraphs{0};

std::mutex peakMutex;
std::map<int, uint64_t> peaks;
/// Per device: the bound on the recorded graphs' pools (limitGraphPools;
/// absent: none), and what the graphs recorded so far took, each its eager
/// run's temporaries (a graph's pool holds its own).
std::map<int, double> graphPoolLimits;
std::map<int, uint64_t> graphPoolBytes;

cudaMemPool_t defaultPool(int device) {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, device),
        "cudaDeviceGetDefaultMemPool", device);
  return pool;
}

uint64_t poolAttribute(int device, cudaMemPoolAttr attr) {
  uint64_t value = 0;
  check(cudaMemPoolGetAttribute(defaultPool(device), attr, &value),
        "cudaMemPoolGetAttribute", device);
  return value;
}

} // namespace

uint64_t poolPeakBytes(int device) {
  uint64_t now = poolAttribute(device, cudaMemPoolAttrUsedMemHigh);
  std::lock_guard<std::mutex> lock(peakMutex);
  return std::max(peaks[device], now);
}

void StageGraphs::limitGraphPools(int device, double bytes) {
  std::lock_guard<std::mutex> lock(peakMutex);
  graphPoolLimits[device] = bytes;
}

/// What graphs may take beyond the plan's prediction on a device: a small
/// plan's prediction is below its arena's aligned buffers, and the graphs
/// that matter most, those of small stage functions, take a few MB (2 x 32
/// tokens of qwen3-deep-tiny: 0.03 GB for both).
constexpr double kGraphPoolAllowance = 64.0 * (1 << 20);

/// Claims `bytes` of `device`'s graph pools when the plan's memory holds
/// them beside the eager temporaries' peak.
static bool claimGraphPool(int device, uint64_t bytes) {
  uint64_t eagerPeak = poolPeakBytes(device);
  std::lock_guard<std::mutex> lock(peakMutex);
  auto limit = graphPoolLimits.find(device);
  if (limit != graphPoolLimits.end() &&
      double(eagerPeak + graphPoolBytes[device] + bytes) >
          std::max(limit->second, 0.0) + kGraphPoolAllowance)
    return false;
  graphPoolBytes[device] += bytes;
  return true;
}

bool StageGraphs::enabled() {
  static const bool on = [] {
    const char *graphs = std::getenv("RONDO_CUDA_GRAPHS");
    const char *profile = std::getenv("RONDO_PROFILE_KERNELS");
    bool off =
        graphs && (!std::strcmp(graphs, "0") || !std::strcmp(graphs, "off"));
    bool profiling = profile && *profile && std::strcmp(profile, "0");
    return !off && !profiling;
  }();
  return on;
}

bool StageGraphs::Key::operator<(const Key &o) const {
  if (fn != o.fn)
    return std::less<rondo_stage_fn>()(fn, o.fn);
  if (lossScale != o.lossScale)
    return lossScale < o.lossScale;
  return io < o.io;
}

StageGraphs::~StageGraphs() {
  for (auto &[key, entry] : graphs)
    if (entry.exec)
      cudaGraphExecDestroy(entry.exec);
}

void StageGraphs::run(rondo_stage_fn fn, void *const *io, size_t numIo,
                      float lossScale, cudaStream_t stream, int device) {
  if (!enabled()) {
    ++eagerLaunches;
    fn(io, lossScale);
    check(cudaGetLastError(), "a kernel launch of a stage function", device);
    check(cudaStreamSynchronize(stream),
          "cudaStreamSynchronize after a stage function", device);
    return;
  }
  Key key{fn, lossScale, std::vector<void *>(io, io + numIo)};
  auto found = graphs.find(key);
  if (found == graphs.end()) {
    if (graphs.size() >= kMaxGraphs) {
      Entry scratch;
      runEagerly(fn, io, lossScale, stream, device, scratch);
      return;
    }
    found = graphs.emplace(std::move(key), Entry{}).first;
  }
  Entry &entry = found->second;
  if (!entry.exec && !entry.refused && entry.eagerRuns > 0) {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", device);
    if (entry.temporaries <= free / 4) {
      if (!claimGraphPool(device, entry.temporaries)) {
        entry.refused = true; // for good: its pool was not planned for
        ++unplannedGraphs;
      } else if (record(fn, io, lossScale, stream, entry)) {
        ++recordedGraphs;
      } else {
        entry.refused = true;
        ++refusedGraphs;
      }
    }
  }
  if (!entry.exec) {
    runEagerly(fn, io, lossScale, stream, device, entry);
    return;
  }
  check(cudaGraphLaunch(entry.exec, stream), "cudaGraphLaunch of a stage",
        device);
  check(cudaStreamSynchronize(stream),
        "cudaStreamSynchronize after a stage function", device);
  ++replayedLaunches;
}

std::string StageGraphs::summary() {
  int64_t eager = eagerLaunches, replayed = replayedLaunches;
  if (eager + replayed == 0)
    return "";
  std::ostringstream os;
  os << "rondo: CUDA graphs: " << replayed << " of " << (eager + replayed)
     << " stage launches replayed from " << recordedGraphs << " graphs";
  if (!enabled())
    os << " (off: RONDO_CUDA_GRAPHS=0 or RONDO_PROFILE_KERNELS)";
  if (refusedGraphs > 0)
    os << "; " << refusedGraphs << " launch sequences could not be recorded";
  if (unplannedGraphs > 0)
    os << "; " << unplannedGraphs
       << " kept eager: their graphs' memory exceeds the plan's";
  return os.str();
}

void StageGraphs::runEagerly(rondo_stage_fn fn, void *const *io,
                             float lossScale, cudaStream_t stream, int device,
                             Entry &entry) {
  // The pool's high-water mark, reset to what is in use now, says what this
  // function allocated at most (other threads' temporaries on the same
  // device only add to it: an overestimate keeps a function eager).
  uint64_t before = poolAttribute(device, cudaMemPoolAttrUsedMemCurrent);
  {
    uint64_t high = poolAttribute(device, cudaMemPoolAttrUsedMemHigh);
    std::lock_guard<std::mutex> lock(peakMutex);
    peaks[device] = std::max(peaks[device], high);
    uint64_t zero = 0;
    check(cudaMemPoolSetAttribute(defaultPool(device),
                                  cudaMemPoolAttrUsedMemHigh, &zero),
          "cudaMemPoolSetAttribute", device);
  }
  fn(io, lossScale);
  check(cudaGetLastError(), "a kernel launch of a stage function", device);
  check(cudaStreamSynchronize(stream),
        "cudaStreamSynchronize after a stage function", device);
  uint64_t high = poolAttribute(device, cudaMemPoolAttrUsedMemHigh);
  {
    std::lock_guard<std::mutex> lock(peakMutex);
    peaks[device] = std::max(peaks[device], high);
  }
  entry.temporaries =
      std::max(entry.temporaries, size_t(high > before ? high - before : 0));
  ++entry.eagerRuns;
  ++eagerLaunches;
}

bool StageGraphs::record(rondo_stage_fn fn, void *const *io, float lossScale,
                         cudaStream_t stream, Entry &entry) {
  // Thread-local mode: the other stream threads' copies and allocations
  // go on while this thread records.
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) !=
      cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  bool launched = true;
  try {
    fn(io, lossScale);
  } catch (const std::exception &) {
    // A call the capture refused fails the kernel wrapper's check: the
    // eager run that follows reports a real error, if there is one.
    launched = false;
  }
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaError_t pending = cudaGetLastError();
  bool ok = launched && ended == cudaSuccess && pending == cudaSuccess && graph;
  if (ok && cudaGraphInstantiateWithFlags(
                &entry.exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch) !=
                cudaSuccess) {
    cudaGetLastError();
    entry.exec = nullptr;
    ok = false;
  }
  if (graph)
    cudaGraphDestroy(graph);
  return ok;
}

} // namespace rondo::rt
