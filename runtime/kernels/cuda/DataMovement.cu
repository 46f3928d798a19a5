//===- DataMovement.cu - Transpose, slice, concat and gather kernels ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// transpose, slice and sliceBackward are one strided copy over a merged
// iteration space, one thread per element of the contiguous side.
//
// gatherRowsBackward is a deterministic scatter-add without atomics: the ids
// are normalised into destination rows, the (row, position) pairs are sorted
// with CUB's stable radix sort (so each row's positions stay in index order),
// and each run of equal rows is reduced by one block, one thread per column,
// in double starting from the existing dTable value, exactly the CPU's order.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <climits>

namespace rondo::cuda {

using namespace detail;

namespace {

__global__ void gatherKernel(const float *from, float *to, int64_t n,
                             Strided s) {
  RONDO_GRID_STRIDE(i, n) { to[i] = from[stridedOffset(s, i)]; }
}

__global__ void scatterKernel(const float *from, float *to, int64_t n,
                              Strided s) {
  RONDO_GRID_STRIDE(i, n) { to[stridedOffset(s, i)] = from[i]; }
}

void stridedCopy(bool scatter, const float *from, float *to, int64_t base,
                 const int64_t *strides, const Shape &shape,
                 const char *name) {
  int64_t n = shape.numel();
  if (n == 0)
    return;
  Strided s = makeStrided(shape, strides, base);
  if (scatter)
    scatterKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(from, to, n,
                                                                s);
  else
    gatherKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(from, to, n,
                                                               s);
  checkLaunch(name);
}

__global__ void concatKernel(const float *in, float *out, int64_t outer,
                             int64_t chunk, int64_t outRow, int64_t offset) {
  RONDO_GRID_STRIDE(i, outer * chunk) {
    int64_t o = i / chunk, c = i % chunk;
    out[o * outRow + offset + c] = in[i];
  }
}

__global__ void gatherRowsKernel(const float *table, const int64_t *ids,
                                 float *out, int64_t n, int64_t rows,
                                 int64_t width, int *badId) {
  RONDO_GRID_STRIDE(i, n * width) {
    int64_t k = i / width, c = i % width;
    int64_t id = ids[k];
    int64_t r = id < 0 ? id + rows : id;
    if (r < 0 || r >= rows) {
      out[i] = __int_as_float(0x7fc00000);
      if (badId && c == 0)
        *badId = 1;
    } else {
      out[i] = table[r * width + c];
    }
  }
}

/// keys[i] = destination row of ids[i] (rows for an invalid id), vals[i] = i.
__global__ void scatterKeysKernel(const int64_t *ids, int64_t n, int64_t rows,
                                  int *keys, int *vals) {
  RONDO_GRID_STRIDE(i, n) {
    int64_t id = ids[i];
    int64_t r = id < 0 ? id + rows : id;
    keys[i] = (r < 0 || r >= rows) ? int(rows) : int(r);
    vals[i] = int(i);
  }
}

/// One block per sorted position; a block that starts a run of equal keys
/// reduces the run into its table row.
__global__ void scatterAddKernel(const int *keys, const int *vals, int64_t n,
                                 int64_t rows, int64_t width,
                                 const float *dOut, float *dTable) {
  int64_t k = blockIdx.x;
  int key = keys[k];
  if (key >= rows || (k > 0 && keys[k - 1] == key))
    return;
  int64_t end = k + 1;
  while (end < n && keys[end] == key)
    ++end;
  float *row = dTable + int64_t(key) * width;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    double acc = row[c];
    for (int64_t j = k; j < end; ++j)
      acc += dOut[int64_t(vals[j]) * width + c];
    row[c] = float(acc);
  }
}

void tableGeometry(const Shape &table, int64_t &rows, int64_t &width,
                   const char *name) {
  if (table.rank < 1)
    contract(name, "table must have rank >= 1");
  rows = table.dims[0];
  width = rows ? table.numel() / rows : 0;
}

} // namespace

void transpose(CFView x, const int64_t *perm, FView out) {
  ProfileScope profileScope("transpose");
  int64_t xStrides[kMaxRank], strides[kMaxRank];
  contiguousStrides(x.shape, xStrides);
  if (out.shape.rank != x.shape.rank)
    contract("transpose", "rank mismatch");
  for (int i = 0; i < out.shape.rank; ++i)
    strides[i] = xStrides[perm[i]];
  stridedCopy(false, x.data, out.data, 0, strides, out.shape, "transpose");
}

void slice(CFView x, const int64_t *starts, const int64_t *steps, FView out) {
  ProfileScope profileScope("slice");
  int64_t xStrides[kMaxRank], strides[kMaxRank];
  contiguousStrides(x.shape, xStrides);
  int64_t base = 0;
  for (int d = 0; d < x.shape.rank; ++d) {
    base += starts[d] * xStrides[d];
    strides[d] = steps[d] * xStrides[d];
  }
  stridedCopy(false, x.data, out.data, base, strides, out.shape, "slice");
}

void sliceBackward(CFView dOut, const int64_t *starts, const int64_t *steps,
                   FView dX) {
  ProfileScope profileScope("sliceBackward");
  fillDevice(dX.data, dX.shape.numel(), 0.0f, "sliceBackward");
  int64_t xStrides[kMaxRank], strides[kMaxRank];
  contiguousStrides(dX.shape, xStrides);
  int64_t base = 0;
  for (int d = 0; d < dX.shape.rank; ++d) {
    base += starts[d] * xStrides[d];
    strides[d] = steps[d] * xStrides[d];
  }
  stridedCopy(true, dOut.data, dX.data, base, strides, dOut.shape,
              "sliceBackward");
}

void concat(const CFView *inputs, int numInputs, int axis, FView out) {
  ProfileScope profileScope("concat");
  const char *name = "concat";
  int rank = out.shape.rank;
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    contract(name, "axis %d out of range for rank %d", axis, rank);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d)
    outer *= out.shape.dims[d];
  for (int d = axis + 1; d < rank; ++d)
    inner *= out.shape.dims[d];
  int64_t outRow = out.shape.dims[axis] * inner;
  if (outer == 0 || outRow == 0)
    return;
  int64_t offset = 0;
  for (int i = 0; i < numInputs; ++i) {
    int64_t chunk = inputs[i].shape.dims[axis] * inner;
    if (chunk > 0) {
      concatKernel<<<gridFor(outer * chunk), kThreads, 0, currentStream()>>>(
          inputs[i].data, out.data, outer, chunk, outRow, offset);
      checkLaunch(name);
    }
    offset += chunk;
  }
  if (offset != outRow)
    contract(name, "input extents do not add up to the output's");
}

void gatherRows(CFView table, IView ids, FView out, int *badId) {
  ProfileScope profileScope("gatherRows");
  const char *name = "gatherRows";
  int64_t rows, width;
  tableGeometry(table.shape, rows, width, name);
  int64_t n = ids.shape.numel();
  if (n == 0 || width == 0)
    return;
  gatherRowsKernel<<<gridFor(n * width), kThreads, 0, currentStream()>>>(
      table.data, ids.data, out.data, n, rows, width, badId);
  checkLaunch(name);
}

void gatherRowsBackward(IView ids, CFView dOut, FView dTable) {
  ProfileScope profileScope("gatherRowsBackward");
  const char *name = "gatherRowsBackward";
  int64_t rows, width;
  tableGeometry(dTable.shape, rows, width, name);
  int64_t n = ids.shape.numel();
  if (n == 0 || width == 0 || rows == 0)
    return;
  if (rows >= INT_MAX || n >= INT_MAX)
    contract(name, "too many rows or ids for 32-bit sort keys");
  cudaStream_t st = currentStream();
  int endBit = 1;
  while (endBit < 31 && (int64_t(1) << endBit) <= rows)
    ++endBit;
  Temp keys(size_t(n) * sizeof(int) * 4, name);
  int *keysIn = keys.as<int>(), *keysOut = keysIn + n;
  int *valsIn = keysOut + n, *valsOut = valsIn + n;
  scatterKeysKernel<<<gridFor(n), kThreads, 0, st>>>(ids.data, n, rows,
                                                     keysIn, valsIn);
  checkLaunch(name);
  size_t tempBytes = 0;
  RONDO_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, tempBytes, keysIn,
                                              keysOut, valsIn, valsOut, int(n),
                                              0, endBit, st),
              name);
  Temp sortTemp(tempBytes, name);
  RONDO_CHECK(cub::DeviceRadixSort::SortPairs(sortTemp.as<void>(), tempBytes,
                                              keysIn, keysOut, valsIn, valsOut,
                                              int(n), 0, endBit, st),
              name);
  int threads = rowThreads(width, 256);
  scatterAddKernel<<<unsigned(n), threads, 0, st>>>(keysOut, valsOut, n, rows,
                                                    width, dOut.data,
                                                    dTable.data);
  checkLaunch(name);
  sortTemp.release();
  keys.release();
}

} // namespace rondo::cuda
