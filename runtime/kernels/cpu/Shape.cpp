//===- Shape.cpp - Shapes and shared kernel helpers -----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Broadcasting kernels iterate a merged ("coalesced") iteration space rather
// than the raw shapes: merging every run of dimensions that is contiguous for
// all operands turns the common cases (equal shapes, a scalar, a bias over the
// last axis) into one long inner loop that the compiler can vectorise, and
// leaves per-row index arithmetic only where the layout really needs it.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace rondo::cpu {

Shape::Shape(std::initializer_list<int64_t> list) {
  if (list.size() > size_t(kMaxRank))
    detail::fatal("shape rank %zu exceeds %d", list.size(), kMaxRank);
  rank = int(list.size());
  int i = 0;
  for (int64_t d : list)
    dims[i++] = d;
}

Shape::Shape(const int64_t *values, int rank) : rank(rank) {
  if (rank < 0 || rank > kMaxRank)
    detail::fatal("shape rank %d out of range", rank);
  for (int i = 0; i < rank; ++i)
    dims[i] = values[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape &other) const {
  if (rank != other.rank)
    return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != other.dims[i])
      return false;
  return true;
}

namespace detail {

namespace {
[[noreturn]] void vfatal(const char *kernel, const char *format, va_list args) {
  std::fprintf(stderr, "rondo kernels: ");
  if (kernel)
    std::fprintf(stderr, "%s: ", kernel);
  std::vfprintf(stderr, format, args);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::abort();
}
} // namespace

void fatal(const char *format, ...) {
  va_list args;
  va_start(args, format);
  vfatal(nullptr, format, args);
}

void contract(const char *kernel, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vfatal(kernel, format, args);
}

BroadcastSpace::BroadcastSpace(const Shape &out, const Shape *inputs,
                               int numInputs) {
  if (numInputs + 1 > kMaxOperands)
    fatal("too many broadcast operands");
  numOperands = numInputs + 1;
  int outRank = out.rank;
  int64_t rawStrides[kMaxOperands][kMaxRank] = {};
  contiguousStrides(out, rawStrides[0]);
  for (int op = 1; op < numOperands; ++op)
    kernels::broadcastStrides(inputs[op - 1], out, rawStrides[op],
                              [](auto... args) { fatal(args...); });
  // Drop unit dimensions, then merge each dimension into the one inside it
  // when that is contiguous for every operand.
  rank = 0;
  for (int d = 0; d < outRank; ++d) {
    if (out.dims[d] == 1)
      continue;
    if (rank > 0) {
      bool mergeable = true;
      for (int op = 0; op < numOperands; ++op)
        if (strides[op][rank - 1] != rawStrides[op][d] * out.dims[d])
          mergeable = false;
      if (mergeable) {
        dims[rank - 1] *= out.dims[d];
        for (int op = 0; op < numOperands; ++op)
          strides[op][rank - 1] = rawStrides[op][d];
        continue;
      }
    }
    dims[rank] = out.dims[d];
    for (int op = 0; op < numOperands; ++op)
      strides[op][rank] = rawStrides[op][d];
    ++rank;
  }
}

int64_t BroadcastSpace::rows() const {
  int64_t n = 1;
  for (int d = 0; d + 1 < rank; ++d)
    n *= dims[d];
  return n;
}

void BroadcastSpace::rowOffsets(int64_t row, int64_t *offsets) const {
  for (int op = 0; op < numOperands; ++op)
    offsets[op] = 0;
  for (int d = rank - 2; d >= 0; --d) {
    int64_t i = row % dims[d];
    row /= dims[d];
    for (int op = 0; op < numOperands; ++op)
      offsets[op] += i * strides[op][d];
  }
}

} // namespace detail
} // namespace rondo::cpu
