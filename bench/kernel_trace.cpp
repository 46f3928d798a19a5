//===- kernel_trace.cpp - GPU kernel time per kernel name, from CUPTI -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A CUDA injection library (CUDA_INJECTION64_PATH) that times every kernel
// of any CUDA process with CUPTI's activity records: the GPU's own start and
// end stamps, no events between kernels and no synchronisation, so a Rondo
// trainer and a PyTorch process are measured by the same tool and neither is
// perturbed (RONDO_PROFILE_KERNELS's events add a few microseconds a kernel;
// torch.profiler is CUPTI too). At exit it writes, for the kernels that
// started in the last KERNEL_TRACE_LAST_MS milliseconds of the process's GPU
// activity (all of them without it), one row per kernel name and launch
// shape: calls, total ms, mean us, grid and block; the window's span and
// busy time; and its idle time, with its longest gaps and the kernels on
// either side of each (where a step waits for its host).
//
//   g++ -O2 -shared -fPIC bench/kernel_trace.cpp -I$CUDA/include \
//     -L$CUDA/lib64 -lcupti -o libkernel_trace.so
//   CUDA_INJECTION64_PATH=$PWD/libkernel_trace.so KERNEL_TRACE_OUT=t.%p.txt \
//     KERNEL_TRACE_LAST_MS=5000 ./w1.trainer ...
//
// "%p" in KERNEL_TRACE_OUT becomes the process id (PyTorch starts helper
// processes that touch CUDA too). KERNEL_TRACE_SEQUENCE=N appends the
// window's first N kernels in start order (offset, duration, name): one
// layer's kernels side by side with another program's, where the per-name
// sums cannot tell which call a shared cuBLAS kernel served. A bench tool,
// not part of the product.
//
//===----------------------------------------------------------------------===//

#include <cupti.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace {

struct Record {
  uint32_t name;
  uint64_t start, end;
  uint32_t grid[3], block[3];
};

struct Trace {
  std::mutex mutex;
  std::vector<Record> records;
  std::map<std::string, uint32_t> nameIds;
  std::vector<std::string> names;
};

Trace &trace() {
  static Trace *t = new Trace; // Outlives the static destructors at exit.
  return *t;
}

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI bufferRequested(uint8_t **buffer, size_t *size,
                              size_t *maxNumRecords) {
  *buffer = static_cast<uint8_t *>(aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *maxNumRecords = 0;
}

void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t *buffer, size_t,
                              size_t validSize) {
  Trace &t = trace();
  std::lock_guard<std::mutex> lock(t.mutex);
  CUpti_Activity *record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, validSize, &record) ==
         CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    auto *k = reinterpret_cast<CUpti_ActivityKernel10 *>(record);
    std::string name = k->name ? k->name : "?";
    auto [it, added] = t.nameIds.emplace(name, uint32_t(t.names.size()));
    if (added)
      t.names.push_back(name);
    t.records.push_back(
        {it->second,
         k->start,
         k->end,
         {uint32_t(k->gridX), uint32_t(k->gridY), uint32_t(k->gridZ)},
         {uint32_t(k->blockX), uint32_t(k->blockY), uint32_t(k->blockZ)}});
  }
  free(buffer);
}

std::string outputPath() {
  const char *pattern = std::getenv("KERNEL_TRACE_OUT");
  std::string p = pattern ? pattern : "kernel-trace.%p.txt";
  size_t at = p.find("%p");
  if (at != std::string::npos)
    p.replace(at, 2, std::to_string(getpid()));
  return p;
}

void report() {
  cuptiActivityFlushAll(1);
  Trace &t = trace();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.records.empty())
    return;
  uint64_t last = 0;
  for (const Record &r : t.records)
    last = std::max(last, r.end);
  const char *lastMs = std::getenv("KERNEL_TRACE_LAST_MS");
  uint64_t from = 0;
  if (lastMs) {
    uint64_t window = uint64_t(std::atof(lastMs) * 1e6);
    from = last > window ? last - window : 0;
  }
  struct Row {
    long long calls = 0;
    double ns = 0;
  };
  using Key = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                         uint32_t, uint32_t>;
  std::map<Key, Row> rows;
  struct Span {
    uint64_t start, end;
    uint32_t name;
  };
  std::vector<Span> spans;
  uint64_t first = ~uint64_t(0);
  for (const Record &r : t.records) {
    if (r.start < from)
      continue;
    first = std::min(first, r.start);
    Row &row = rows[Key{r.name, r.grid[0], r.grid[1], r.grid[2], r.block[0],
                        r.block[1], r.block[2]}];
    ++row.calls;
    row.ns += double(r.end - r.start);
    spans.push_back({r.start, r.end, r.name});
  }
  // Busy time: the union of the kernels' intervals (streams may overlap);
  // the idle gaps between them, the longest with the kernels around them.
  std::sort(spans.begin(), spans.end(),
            [](const Span &a, const Span &b) { return a.start < b.start; });
  double busy = 0, all = 0;
  uint64_t curStart = spans.empty() ? 0 : spans[0].start;
  uint64_t curEnd = curStart;
  uint32_t lastName = 0;
  struct Gap {
    uint64_t ns;
    uint32_t before, after;
  };
  std::vector<Gap> gaps;
  for (const Span &sp : spans) {
    if (sp.start > curEnd) {
      busy += double(curEnd - curStart);
      gaps.push_back({sp.start - curEnd, lastName, sp.name});
      curStart = sp.start;
      curEnd = sp.end;
      lastName = sp.name;
    } else if (sp.end >= curEnd) {
      curEnd = sp.end;
      lastName = sp.name;
    }
  }
  busy += double(curEnd - curStart);
  std::sort(gaps.begin(), gaps.end(),
            [](const Gap &a, const Gap &b) { return a.ns > b.ns; });
  std::vector<std::pair<Key, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto &a, const auto &b) {
    return a.second.ns > b.second.ns;
  });
  for (const auto &r : sorted)
    all += r.second.ns;
  FILE *f = std::fopen(outputPath().c_str(), "w");
  if (!f)
    return;
  std::fprintf(
      f,
      "# window %.1f ms (last %s ms of GPU activity), kernels %.1f ms, "
      "busy %.1f ms\n",
      double(last - first) / 1e6, lastMs ? lastMs : "all", all / 1e6,
      busy / 1e6);
  std::fprintf(f, "%10s %8s %10s  %-16s %-12s %s\n", "ms", "calls", "mean_us",
               "grid", "block", "kernel");
  double idle = 0;
  for (const Gap &g : gaps)
    idle += double(g.ns);
  std::fprintf(f, "# idle %.1f ms in %zu gaps; the longest:\n", idle / 1e6,
               gaps.size());
  for (size_t k = 0; k < gaps.size() && k < 12; ++k)
    std::fprintf(f, "#   %.3f ms after %.80s before %.80s\n",
                 double(gaps[k].ns) / 1e6, t.names[gaps[k].before].c_str(),
                 t.names[gaps[k].after].c_str());
  for (const auto &[key, row] : sorted) {
    auto [name, gx, gy, gz, bx, by, bz] = key;
    char grid[48], block[48];
    std::snprintf(grid, sizeof(grid), "%ux%ux%u", gx, gy, gz);
    std::snprintf(block, sizeof(block), "%ux%ux%u", bx, by, bz);
    std::fprintf(f, "%10.2f %8lld %10.1f  %-16s %-12s %.200s\n", row.ns / 1e6,
                 row.calls, row.ns / 1e3 / double(row.calls), grid, block,
                 t.names[name].c_str());
  }
  if (const char *sequence = std::getenv("KERNEL_TRACE_SEQUENCE")) {
    size_t count =
        std::min<size_t>(std::strtoull(sequence, nullptr, 10), spans.size());
    std::fprintf(f, "# sequence: the window's first %zu kernels\n", count);
    std::fprintf(f, "%12s %10s  %s\n", "start_us", "dur_us", "kernel");
    for (size_t k = 0; k < count; ++k)
      std::fprintf(f, "%12.1f %10.1f  %.160s\n",
                   double(spans[k].start - first) / 1e3,
                   double(spans[k].end - spans[k].start) / 1e3,
                   t.names[spans[k].name].c_str());
  }
  std::fclose(f);
}

} // namespace

extern "C" int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted) !=
          CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) !=
          CUPTI_SUCCESS)
    return 0;
  std::atexit(report);
  return 1;
}
