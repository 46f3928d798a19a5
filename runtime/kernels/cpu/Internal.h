//===- Internal.h - Helpers shared by the CPU kernels ----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Not part of the kernel contract; only the kernel .cpp files include this.
//
// Parallel loops split their iteration space into fixed-size blocks whose
// boundaries depend only on the problem size, never on the number of threads,
// so a given element always goes through the same code path (vectorised body
// or scalar remainder) and results stay bitwise identical for any thread
// count.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CPU_INTERNAL_H
#define RONDO_RUNTIME_KERNELS_CPU_INTERNAL_H

#include "Kernels.h"
#include "ScalarOps.h"

#include <cstdint>

namespace rondo::cpu::detail {

/// Prints "rondo kernels: <message>" and aborts. Used for contract violations
/// that a void kernel cannot report (e.g. an out-of-range gather id).
[[noreturn]] void fatal(const char *format, ...);

/// fatal("<kernel>: <message>"), the form the shared shape rules
/// (ScalarOps.h) report a kernel's contract violations in.
[[noreturn]] void contract(const char *kernel, const char *format, ...);

using kernels::contiguousStrides;

/// The work (iterations times cost per iteration, roughly element
/// operations) from which a kernel forks a thread team. In a trainer a
/// team's second thread usually sleeps between kernels (its worker's other
/// streams share the cores), so a fork is a futex wake-up and a join: on a
/// 2-core machine, 2^15 made a small model's kernels fork ~2,000 times a
/// step and run 1.3x slower than on one thread.
inline constexpr int64_t kParallelWork = int64_t(1) << 18;

/// Calls fn(begin, end) for consecutive blocks [begin, end) of [0, n) of
/// `block` iterations each (the last may be shorter), in parallel when the
/// total work (n * costPerIter) is large enough to pay for a thread team.
template <typename Fn>
void parallelBlocks(int64_t n, int64_t block, int64_t costPerIter, Fn &&fn) {
  if (n <= 0)
    return;
  if (block < 1)
    block = 1;
  int64_t numBlocks = (n + block - 1) / block;
  // The same blocks either way, so the bits do not depend on the team.
  auto runBlock = [&](int64_t b) {
    int64_t begin = b * block;
    int64_t end = begin + block < n ? begin + block : n;
    fn(begin, end);
  };
  if (numBlocks == 1 || n * costPerIter < kParallelWork) {
    // Not even a team of one: libgomp's `if (false)` region still took
    // futex calls to park the team's idle threads.
    for (int64_t b = 0; b < numBlocks; ++b)
      runBlock(b);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < numBlocks; ++b)
    runBlock(b);
}

/// Calls fn(i) for every i in [0, n), in parallel when n * costPerIter is
/// large enough. Each index is one independent unit of work.
template <typename Fn>
void parallelFor(int64_t n, int64_t costPerIter, Fn &&fn) {
  if (n <= 0)
    return;
  if (n == 1 || n * costPerIter < kParallelWork) {
    for (int64_t i = 0; i < n; ++i)
      fn(i);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i)
    fn(i);
}

/// An iteration space shared by an output and up to three inputs that
/// broadcast to it, with adjacent dimensions merged where every operand is
/// contiguous across them. Dimension `rank - 1` is the innermost; strides are
/// in elements (0 for broadcast dimensions).
struct BroadcastSpace {
  static constexpr int kMaxOperands = 4;
  int rank = 0;
  int numOperands = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxOperands][kMaxRank] = {};

  /// Operand 0 is `out` itself (contiguous); the others broadcast to it.
  BroadcastSpace(const Shape &out, const Shape *inputs, int numInputs);

  int64_t inner() const { return rank ? dims[rank - 1] : 1; }
  int64_t innerStride(int operand) const {
    return rank ? strides[operand][rank - 1] : 0;
  }
  /// Number of inner rows (product of all but the innermost dimension).
  int64_t rows() const;
  /// Element offsets of every operand at the start of inner row `row`.
  void rowOffsets(int64_t row, int64_t *offsets) const;
};

} // namespace rondo::cpu::detail

#endif // RONDO_RUNTIME_KERNELS_CPU_INTERNAL_H
