//===- Profile.cu - Per-kernel GPU time, on demand ------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Records are resolved (their stop events waited for) in batches, so a long
// run keeps a bounded number of live events; resolving waits for the GPU,
// which perturbs the run slightly, acceptable for a profiling mode.
//
//===----------------------------------------------------------------------===//

#include "Profile.cuh"

#include "CudaKernels.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace rondo::cuda::detail {

namespace {

struct Pending {
  std::string key;
  double flops;
  cudaEvent_t start, stop;
};

struct Totals {
  long long calls = 0;
  double ms = 0, flops = 0;
};

struct Profile {
  std::mutex mutex;
  std::vector<Pending> pending;
  std::map<std::string, Totals> totals;
  bool reportRegistered = false;

  // The caller holds the mutex.
  void resolve() {
    for (Pending &p : pending) {
      float ms = 0;
      if (cudaEventSynchronize(p.stop) == cudaSuccess &&
          cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
        Totals &t = totals[p.key];
        ++t.calls;
        t.ms += ms;
        t.flops += p.flops;
      }
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.stop);
    }
    pending.clear();
  }
};

Profile &profile() {
  static Profile *p = new Profile; // Outlives every static destructor.
  return *p;
}

void report() {
  Profile &p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.resolve();
  std::vector<std::pair<std::string, Totals>> rows(p.totals.begin(),
                                                   p.totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.ms > b.second.ms;
  });
  double all = 0;
  for (const auto &r : rows)
    all += r.second.ms;
  std::fprintf(stderr,
               "rondo: GPU time per kernel (RONDO_PROFILE_KERNELS), %.1f ms "
               "in all\n%10s %8s %6s %9s  %s\n",
               all, "ms", "calls", "%", "TFLOP/s", "kernel");
  for (const auto &[key, t] : rows) {
    char rate[32] = "";
    if (t.flops > 0 && t.ms > 0)
      std::snprintf(rate, sizeof(rate), "%9.1f", t.flops / (t.ms * 1e9));
    std::fprintf(stderr, "%10.2f %8lld %6.2f %9s  %s\n", t.ms, t.calls,
                 all > 0 ? 100 * t.ms / all : 0.0, rate, key.c_str());
  }
}

} // namespace

bool profiling() {
  static const bool on = [] {
    const char *v = std::getenv("RONDO_PROFILE_KERNELS");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

void ProfileScope::begin(const std::string &key, double flops) {
  key_ = key;
  flops_ = flops;
  cudaStream_t stream = currentStream();
  if (cudaEventCreate(&start_) != cudaSuccess) {
    start_ = nullptr;
    return;
  }
  cudaEventRecord(start_, stream);
}

void ProfileScope::discard() {
  if (start_)
    cudaEventDestroy(start_);
  start_ = nullptr;
}

void ProfileScope::end() {
  cudaEvent_t stop;
  if (cudaEventCreate(&stop) != cudaSuccess) {
    cudaEventDestroy(start_);
    return;
  }
  cudaEventRecord(stop, currentStream());
  Profile &p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.reportRegistered) {
    p.reportRegistered = true;
    std::atexit(report);
  }
  p.pending.push_back({std::move(key_), flops_, start_, stop});
  if (p.pending.size() >= 16384)
    p.resolve();
}

} // namespace rondo::cuda::detail
