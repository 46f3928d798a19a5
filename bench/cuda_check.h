//===- cuda_check.h - Status checks for the stand-alone CUDA benchmarks ---===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_BENCH_CUDA_CHECK_H
#define RONDO_BENCH_CUDA_CHECK_H

#include <cstdio>
#include <cstdlib>

/// Exits with the call, file and line when a CUDA, cuBLAS or cuBLASLt
/// status is not success (0 in each).
#define CK(x)                                                                  \
  do {                                                                         \
    auto s_ = (x);                                                             \
    if (int(s_) != 0) {                                                        \
      std::fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x,         \
                   int(s_));                                                   \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

#endif // RONDO_BENCH_CUDA_CHECK_H
