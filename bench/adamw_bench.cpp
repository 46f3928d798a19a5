//===- adamw_bench.cpp - Throughput of the host AdamW update --------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Measures rondo::rt::adamwUpdate on one tensor of several sizes with several
// OpenMP thread counts and prints params/s and params/s per core. The update
// streams 28 bytes per parameter (reads p, g, m, v; writes p, m, v), so large
// sizes show the memory bandwidth the optimizer threads get and small sizes
// the fork/join overhead.
//
// Usage: rondo-adamw-bench [OUT.json] [--sizes N,N,...] [--threads T,T,...]
//                          [--min-seconds S]
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/Buffer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <omp.h>

namespace {

std::vector<int64_t> parseList(const char *text) {
  std::vector<int64_t> values;
  std::string s = text;
  size_t start = 0;
  while (start < s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos)
      comma = s.size();
    values.push_back(std::atoll(s.substr(start, comma - start).c_str()));
    start = comma + 1;
  }
  return values;
}

struct Result {
  int64_t numel;
  int threads;
  double seconds; ///< Median seconds per update.
};

} // namespace

int main(int argc, char **argv) {
  std::string jsonPath;
  std::vector<int64_t> sizes = {int64_t(1) << 12, int64_t(1) << 16,
                                int64_t(1) << 20, int64_t(1) << 24,
                                int64_t(1) << 26};
  std::vector<int64_t> threadCounts;
  double minSeconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--sizes" && i + 1 < argc)
      sizes = parseList(argv[++i]);
    else if (arg == "--threads" && i + 1 < argc)
      threadCounts = parseList(argv[++i]);
    else if (arg == "--min-seconds" && i + 1 < argc)
      minSeconds = std::atof(argv[++i]);
    else if (arg == "-h" || arg == "--help") {
      std::printf("usage: %s [OUT.json] [--sizes N,...] [--threads T,...] "
                  "[--min-seconds S]\n",
                  argv[0]);
      return 0;
    } else if (!arg.empty() && arg[0] != '-')
      jsonPath = arg;
    else {
      std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], arg.c_str());
      return 2;
    }
  }
  const int maxThreads = omp_get_max_threads();
  if (threadCounts.empty()) {
    for (int t = 1; t < maxThreads; t *= 2)
      threadCounts.push_back(t);
    threadCounts.push_back(maxThreads);
  }

  std::printf("%12s %8s %12s %14s %16s %10s\n", "params", "threads", "ms/step",
              "params/s", "params/s/core", "GB/s");
  std::vector<Result> results;
  for (int64_t n : sizes) {
    rondo::rt::FloatBuffer p(n), g(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = float(i % 977) * 1e-3f;
      g[i] = float(i % 331) * 1e-4f - 0.01f;
    }
    rondo::rt::AdamWTensor t;
    t.param = p.data();
    t.grad = g.data();
    t.expAvg = m.data();
    t.expAvgSq = v.data();
    t.numel = n;
    t.weightDecay = 0.01;
    for (int64_t threads : threadCounts) {
      omp_set_num_threads(int(threads));
      int64_t step = 1;
      rondo::rt::adamwUpdate(&t, 1, {}, 1e-3, step++); // Warm-up.
      std::vector<double> times;
      double spent = 0;
      while (spent < minSeconds || times.size() < 5) {
        auto start = std::chrono::steady_clock::now();
        rondo::rt::adamwUpdate(&t, 1, {}, 1e-3, step++);
        double s = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
        times.push_back(s);
        spent += s;
      }
      std::sort(times.begin(), times.end());
      double median = times[times.size() / 2];
      results.push_back({n, int(threads), median});
      std::printf("%12lld %8lld %12.4f %14.4g %16.4g %10.2f\n", (long long)n,
                  (long long)threads, median * 1e3, double(n) / median,
                  double(n) / median / double(threads),
                  28.0 * double(n) / median / 1e9);
      std::fflush(stdout);
    }
  }

  if (!jsonPath.empty()) {
    std::FILE *f = std::fopen(jsonPath.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "%s: cannot write %s\n", argv[0], jsonPath.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"benchmark\": \"adamw\", \"max_threads\": %d, "
                 "\"bytes_per_param\": 28, \"results\": [",
                 maxThreads);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result &r = results[i];
      std::fprintf(f,
                   "%s\n  {\"params\": %lld, \"threads\": %d, "
                   "\"seconds_per_step\": %.9g, \"params_per_s\": %.6g, "
                   "\"params_per_s_per_core\": %.6g, \"gbytes_per_s\": %.4g}",
                   i ? "," : "", (long long)r.numel, r.threads, r.seconds,
                   double(r.numel) / r.seconds,
                   double(r.numel) / r.seconds / r.threads,
                   28.0 * double(r.numel) / r.seconds / 1e9);
    }
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
  return 0;
}
