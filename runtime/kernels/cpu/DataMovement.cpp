//===- DataMovement.cpp - Transpose, slice, concat and gather kernels -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// transpose, slice and sliceBackward are all one strided copy: the output (or
// for sliceBackward the scattered-into tensor) is walked contiguously and the
// other side by a per-dimension stride, with dimensions merged where the
// strides allow so that e.g. a head split copies whole rows.
//
// gatherRowsBackward groups the ids by destination row (stable, so each
// group keeps the ids' index order) and gives each destination row to one
// thread. That keeps the documented per-row accumulation order without
// serialising the whole scatter, and writes each row contiguously. The sum
// for a row is carried in double, starting from the existing dTable value.
//
// Out-of-range gather ids abort: the kernels have no error channel and a
// silently zeroed embedding would hide a data bug.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace rondo::cpu {

using detail::parallelBlocks;

namespace {

/// A merged strided walk: `dims` are iterated row-major on the contiguous
/// side; `strides` step the strided side.
struct StridedSpace {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  StridedSpace(const Shape &shape, const int64_t *rawStrides) {
    for (int d = 0; d < shape.rank; ++d) {
      if (shape.dims[d] == 1)
        continue;
      if (rank > 0 && strides[rank - 1] == rawStrides[d] * shape.dims[d]) {
        dims[rank - 1] *= shape.dims[d];
        strides[rank - 1] = rawStrides[d];
        continue;
      }
      dims[rank] = shape.dims[d];
      strides[rank] = rawStrides[d];
      ++rank;
    }
  }
  int64_t inner() const { return rank ? dims[rank - 1] : 1; }
  int64_t innerStride() const { return rank ? strides[rank - 1] : 0; }
  int64_t rowOffset(int64_t row) const {
    int64_t off = 0;
    for (int d = rank - 2; d >= 0; --d) {
      off += (row % dims[d]) * strides[d];
      row /= dims[d];
    }
    return off;
  }
};

/// Copies between a contiguous tensor of shape `shape` and a strided view
/// (element offset base + sum(i_d * strides[d])). Gather (Scatter = false):
/// to[contiguous] = from[strided]; scatter: to[strided] = from[contiguous].
template <bool Scatter, typename T>
void stridedCopy(const T *from, T *to, int64_t base, const int64_t *strides,
                 const Shape &shape) {
  int64_t numel = shape.numel();
  if (numel == 0)
    return;
  StridedSpace space(shape, strides);
  int64_t inner = space.inner();
  int64_t s = space.innerStride();
  auto move = [&](int64_t contiguous, int64_t strided) {
    if (Scatter)
      to[strided] = from[contiguous];
    else
      to[contiguous] = from[strided];
  };

  // A transpose-like walk: the strided side is contiguous along some outer
  // dimension p instead of the innermost one. Copy in square tiles of
  // (p, innermost) so that both sides are read and written a cache line at a
  // time.
  int p = -1;
  for (int d = 0; d + 1 < space.rank && s != 1; ++d)
    if (space.strides[d] == 1)
      p = d;
  if (p >= 0) {
    constexpr int64_t kTile = 32;
    int rank = space.rank;
    int64_t contStrides[kMaxRank];
    for (int64_t d = rank - 1, c = 1; d >= 0; --d) {
      contStrides[d] = c;
      c *= space.dims[d];
    }
    int64_t P = space.dims[p], L = inner;
    int64_t pBlocks = (P + kTile - 1) / kTile;
    int64_t outer = numel / (P * L);
    parallelBlocks(outer * pBlocks, 1, kTile * L, [&](int64_t lo, int64_t) {
      int64_t o = lo / pBlocks, p0 = (lo % pBlocks) * kTile;
      int64_t p1 = std::min(P, p0 + kTile);
      int64_t cOff = 0, sOff = base;
      for (int d = rank - 2; d >= 0; --d) {
        if (d == p)
          continue;
        int64_t i = o % space.dims[d];
        o /= space.dims[d];
        cOff += i * contStrides[d];
        sOff += i * space.strides[d];
      }
      for (int64_t l0 = 0; l0 < L; l0 += kTile) {
        int64_t l1 = std::min(L, l0 + kTile);
        for (int64_t pp = p0; pp < p1; ++pp)
          for (int64_t l = l0; l < l1; ++l)
            move(cOff + pp * contStrides[p] + l, sOff + pp + l * s);
      }
    });
    return;
  }

  auto doRow = [&](int64_t row, int64_t c0, int64_t n) {
    int64_t sOff = base + space.rowOffset(row) + c0 * s;
    int64_t cOff = row * inner + c0;
    if (s == 1) {
      if (Scatter)
        std::memcpy(to + sOff, from + cOff, size_t(n) * sizeof(T));
      else
        std::memcpy(to + cOff, from + sOff, size_t(n) * sizeof(T));
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      move(cOff + i, sOff + i * s);
  };
  int64_t rows = numel / inner;
  if (rows == 1) {
    parallelBlocks(inner, 1 << 14, 1,
                   [&](int64_t lo, int64_t hi) { doRow(0, lo, hi - lo); });
    return;
  }
  parallelBlocks(rows, std::max<int64_t>(1, 4096 / inner), inner,
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t r = lo; r < hi; ++r)
                     doRow(r, 0, inner);
                 });
}

template <typename T>
void transposeImpl(View<const T> x, const int64_t *perm, View<T> out) {
  int64_t strides[kMaxRank];
  kernels::transposeStrides(x.shape, perm, out.shape.rank, strides);
  stridedCopy<false>(x.data, out.data, 0, strides, out.shape);
}

template <typename T>
void sliceImpl(View<const T> x, const int64_t *starts, const int64_t *steps,
               View<T> out) {
  int64_t strides[kMaxRank];
  int64_t base = kernels::sliceStrides(x.shape, starts, steps, strides);
  stridedCopy<false>(x.data, out.data, base, strides, out.shape);
}

template <typename T>
void concatImpl(const View<const T> *inputs, int numInputs, int axis,
                View<T> out) {
  kernels::ConcatRows r =
      kernels::concatRows(out.shape, axis, [](auto... args) {
        detail::contract("concat", args...);
      });
  if (r.outer == 0 || r.outRow == 0)
    return;
  parallelBlocks(r.outer, std::max<int64_t>(1, 4096 / r.outRow), r.outRow,
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t o = lo; o < hi; ++o) {
                     T *dst = out.data + o * r.outRow;
                     for (int i = 0; i < numInputs; ++i) {
                       int64_t chunk = inputs[i].shape.dims[axis] * r.inner;
                       std::memcpy(dst, inputs[i].data + o * chunk,
                                   size_t(chunk) * sizeof(T));
                       dst += chunk;
                     }
                   }
                 });
}

} // namespace

void transpose(CFView x, const int64_t *perm, FView out) {
  transposeImpl(x, perm, out);
}

void slice(CFView x, const int64_t *starts, const int64_t *steps, FView out) {
  sliceImpl(x, starts, steps, out);
}

void sliceBackward(CFView dOut, const int64_t *starts, const int64_t *steps,
                   FView dX) {
  fill(dX, 0.0f);
  int64_t strides[kMaxRank];
  int64_t base = kernels::sliceStrides(dX.shape, starts, steps, strides);
  stridedCopy<true>(dOut.data, dX.data, base, strides, dOut.shape);
}

void concat(const CFView *inputs, int numInputs, int axis, FView out) {
  concatImpl(inputs, numInputs, axis, out);
}

void transposeInts(IView x, const int64_t *perm, MIView out) {
  transposeImpl(x, perm, out);
}

void sliceInts(IView x, const int64_t *starts, const int64_t *steps,
               MIView out) {
  sliceImpl(x, starts, steps, out);
}

void concatInts(const IView *inputs, int numInputs, int axis, MIView out) {
  concatImpl(inputs, numInputs, axis, out);
}

void broadcastInts(IView x, MIView out) {
  int64_t strides[kMaxRank] = {};
  kernels::broadcastStrides(x.shape, out.shape, strides,
                            [](auto... args) { detail::fatal(args...); });
  stridedCopy<false>(x.data, out.data, 0, strides, out.shape);
}

void causalMask(FView out, int64_t window) {
  int rank = out.shape.rank;
  if (rank < 2)
    detail::fatal("causalMask: rank %d < 2", rank);
  if (window < 0)
    detail::fatal("causalMask: window %lld < 0", (long long)window);
  int64_t rows = out.shape.dims[rank - 2], cols = out.shape.dims[rank - 1];
  int64_t outer = rows * cols != 0 ? out.shape.numel() / (rows * cols) : 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t last = i + (cols - rows); // the last key row i sees
        bool attend = j <= last && (window == 0 || j > last - window);
        out.data[(o * rows + i) * cols + j] =
            attend ? 0.0f : -std::numeric_limits<float>::infinity();
      }
}

namespace {

/// Table rows and row width: table is [rows, ...] flattened to 2-D.
void tableGeometry(const Shape &table, int64_t &rows, int64_t &width) {
  if (table.rank < 1)
    detail::fatal("gatherRows: table must have rank >= 1");
  rows = table.dims[0];
  width = rows ? table.numel() / rows : 0;
}

int64_t normaliseId(int64_t id, int64_t rows) {
  int64_t r = id < 0 ? id + rows : id;
  if (r < 0 || r >= rows)
    detail::fatal("gatherRows: id %lld out of range for %lld rows",
                  (long long)id, (long long)rows);
  return r;
}

} // namespace

void gatherRows(CFView table, IView ids, FView out, int *badId) {
  int64_t rows, width;
  tableGeometry(table.shape, rows, width);
  int64_t n = ids.shape.numel();
  parallelBlocks(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(width, 1)),
                 width, [&](int64_t lo, int64_t hi) {
                   for (int64_t i = lo; i < hi; ++i) {
                     int64_t id = ids.data[i];
                     if (badId && (id < -rows || id >= rows)) {
                       // The CUDA kernel's contract: a NaN row and the flag.
                       std::fill_n(out.data + i * width, width,
                                   std::numeric_limits<float>::quiet_NaN());
                       __atomic_store_n(badId, 1, __ATOMIC_RELAXED);
                       continue;
                     }
                     int64_t r = normaliseId(id, rows);
                     std::memcpy(out.data + i * width, table.data + r * width,
                                 size_t(width) * sizeof(float));
                   }
                 });
}

namespace {

/// gatherRowsBackward's scatter; `addSum`: each row's sum starts from zero
/// and is added to dTable in fp32 (gatherRowsBackwardAdd) rather than
/// carried from dTable's value in double.
void scatterRows(IView ids, CFView dOut, FView dTable, bool addSum) {
  int64_t rows, width;
  tableGeometry(dTable.shape, rows, width);
  int64_t n = ids.shape.numel();
  if (n == 0 || width == 0)
    return;
  // Stable sort of the id positions by destination row.
  std::vector<int64_t> dest(static_cast<size_t>(n)),
      order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    dest[size_t(i)] = normaliseId(ids.data[i], rows);
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return dest[size_t(a)] < dest[size_t(b)];
  });
  std::vector<int64_t> groupStart;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 ||
        dest[size_t(order[size_t(i)])] != dest[size_t(order[size_t(i - 1)])])
      groupStart.push_back(i);
  int64_t numGroups = int64_t(groupStart.size());
  groupStart.push_back(n);
  detail::parallelFor(numGroups, width * (n / numGroups), [&](int64_t g) {
    int64_t begin = groupStart[size_t(g)], end = groupStart[size_t(g + 1)];
    float *row = dTable.data + dest[size_t(order[size_t(begin)])] * width;
    constexpr int64_t kCols = 256;
    double acc[kCols];
    for (int64_t c0 = 0; c0 < width; c0 += kCols) {
      int64_t nc = std::min(kCols, width - c0);
      for (int64_t c = 0; c < nc; ++c)
        acc[c] = addSum ? 0.0 : row[c0 + c];
      for (int64_t k = begin; k < end; ++k) {
        const float *src = dOut.data + order[size_t(k)] * width + c0;
        for (int64_t c = 0; c < nc; ++c)
          acc[c] += src[c];
      }
      for (int64_t c = 0; c < nc; ++c)
        row[c0 + c] = addSum ? row[c0 + c] + float(acc[c]) : float(acc[c]);
    }
  });
}

} // namespace

void gatherRowsBackward(IView ids, CFView dOut, FView dTable) {
  scatterRows(ids, dOut, dTable, /*addSum=*/false);
}

void gatherRowsBackwardAdd(IView ids, CFView dOut, FView dTable) {
  scatterRows(ids, dOut, dTable, /*addSum=*/true);
}

} // namespace rondo::cpu
