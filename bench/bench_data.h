//===- bench_data.h - Test data for the stand-alone CUDA benchmarks --------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_BENCH_BENCH_DATA_H
#define RONDO_BENCH_BENCH_DATA_H

#include <cuda_bf16.h>

#include <cstddef>
#include <vector>

/// n normal-ish bf16 values (sums of four uniforms, scaled by 0.05) from a
/// fixed linear congruential sequence: GEMMs on zeros draw less power and
/// run faster than on data, so the timed products read these.
inline std::vector<__nv_bfloat16> normalishBf16(size_t n) {
  std::vector<__nv_bfloat16> host(n);
  unsigned x = 1;
  for (auto &v : host) {
    float u = 0;
    for (int k = 0; k < 4; ++k) {
      x = x * 1664525u + 1013904223u;
      u += float(x >> 8) / float(1 << 24) - 0.5f;
    }
    v = __float2bfloat16(u * 0.05f);
  }
  return host;
}

#endif // RONDO_BENCH_BENCH_DATA_H
