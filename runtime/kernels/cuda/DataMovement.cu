//===- DataMovement.cu - Transpose, slice, concat and gather kernels ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// transpose, slice and sliceBackward are one strided copy over a merged
// iteration space, one thread per element of the contiguous side, with two
// fast paths (pure copies, so bitwise identical to the general kernel):
//  - Inner run kept (the merged walk's innermost stride is 1: transposes with
//    perm[last] == last such as [B,T,H,D] <-> [B,H,T,D], slices with step 1
//    on the last axis): rows of the inner run copied by float4 when the run
//    length, the base and every outer stride are multiples of 4 and both
//    pointers are 16-byte aligned; row offsets with 32-bit index arithmetic
//    when the row count allows.
//  - Transposes whose merged walk is [batch,] P x Q with the strided side's
//    P stride 1 (a batched 2-D transpose of the last two merged dims, e.g.
//    [R, C] -> [C, R] or [B, T, HD] -> [B, HD, T]): 32 x 32 tiles staged
//    through padded shared memory, so both the reads and the writes are
//    coalesced; ragged edges are bounds-checked.
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

template <typename T>
__global__ void gatherKernel(const T *from, T *to, int64_t n, Strided s) {
  RONDO_GRID_STRIDE(i, n) { to[i] = from[stridedOffset(s, i)]; }
}

__global__ void scatterKernel(const float *from, float *to, int64_t n,
                              Strided s) {
  RONDO_GRID_STRIDE(i, n) { to[stridedOffset(s, i)] = from[i]; }
}

/// Byte offset of the row `row` of the outer dims of a strided walk (all its
/// dims but the innermost); Small: every index fits 32 bits.
template <bool Small>
__device__ inline int64_t outerOffset(const Strided &s, int64_t row) {
  int64_t off = s.base;
#pragma unroll
  for (int d = kMaxRank - 2; d >= 0; --d) {
    if (d < s.rank - 1) {
      int64_t c;
      if (Small) {
        uint32_t q = uint32_t(row) / uint32_t(s.dims[d]);
        c = int64_t(uint32_t(row) - q * uint32_t(s.dims[d]));
        row = int64_t(q);
      } else {
        c = row % s.dims[d];
        row /= s.dims[d];
      }
      off += c * s.strides[d];
    }
  }
  return off;
}

/// Copies rows of the inner run (stride 1, length 4 * runVec) by float4:
/// gather to[v] = from[outer(row) + q], scatter the reverse.
template <bool Small, typename To = float, typename From = float>
__global__ void runCopyVecKernel(const From *from, To *to, int64_t nv,
                                 int64_t runVec, Strided s, bool scatter) {
  RONDO_GRID_STRIDE(v, nv) {
    int64_t row, q;
    if (Small) {
      uint32_t r32 = uint32_t(v) / uint32_t(runVec);
      row = r32;
      q = v - row * runVec;
    } else {
      row = v / runVec;
      q = v - row * runVec;
    }
    int64_t off = outerOffset<Small>(s, row) + q * 4;
    if (scatter)
      store4(to + off, load4(from + v * 4));
    else
      store4(to + v * 4, load4(from + off));
  }
}

/// out[b][p][q] = in[b * sb + q * ld + p] for a [batch, P, Q] output, by
/// 32 x 32 tiles through shared memory padded to 33 columns.
__global__ void transposeTileKernel(const float *in, float *out,
                                    int64_t batch, int64_t P, int64_t Q,
                                    int64_t ld, int64_t sb) {
  __shared__ float tile[32][33];
  int64_t q0 = int64_t(blockIdx.x) * 32, p0 = int64_t(blockIdx.y) * 32;
  int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const float *src = in + b * sb;
    float *dst = out + b * P * Q;
    // Read along p (contiguous in the input).
    for (int j = ty; j < 32; j += 8) {
      int64_t q = q0 + j, p = p0 + tx;
      if (q < Q && p < P)
        tile[j][tx] = src[q * ld + p];
    }
    __syncthreads();
    // Write along q (contiguous in the output).
    for (int j = ty; j < 32; j += 8) {
      int64_t p = p0 + j, q = q0 + tx;
      if (p < P && q < Q)
        dst[p * Q + q] = tile[tx][j];
    }
    __syncthreads();
  }
}

/// Whether a walk keeps its inner run (stride 1) and can be copied by
/// runCopyVecKernel: run, base and outer strides multiples of 4, both
/// pointers 16-byte aligned.
bool innerRunVectorisable(const Strided &s, const void *from, const void *to) {
  if (s.rank < 1 || s.strides[s.rank - 1] != 1)
    return false;
  bool ok = s.dims[s.rank - 1] % 4 == 0 && s.base % 4 == 0 &&
            aligned16(from) && aligned16(to);
  for (int d = 0; d + 1 < s.rank; ++d)
    ok = ok && s.strides[d] % 4 == 0;
  return ok;
}

/// runCopyVecKernel over the n elements of a vectorisable walk.
template <typename To, typename From = float>
void runCopyVec(bool scatter, const From *from, To *to, const Strided &s,
                int64_t n, const char *name) {
  int64_t nv = n / 4, runVec = s.dims[s.rank - 1] / 4;
  if (nv <= int64_t(0xffffffff))
    runCopyVecKernel<true, To, From>
        <<<gridFor(nv), kThreads, 0, currentStream()>>>(from, to, nv, runVec, s,
                                                        scatter);
  else
    runCopyVecKernel<false, To, From>
        <<<gridFor(nv), kThreads, 0, currentStream()>>>(from, to, nv, runVec, s,
                                                        scatter);
  checkLaunch(name);
}

/// The fast paths of stridedCopy; false when none applies.
bool stridedCopyFast(bool scatter, const float *from, float *to,
                     const Strided &s, int64_t n, bool allowTiles,
                     const char *name) {
  cudaStream_t st = currentStream();
  if (s.rank >= 1 && s.strides[s.rank - 1] == 1) {
    if (!innerRunVectorisable(s, from, to))
      return false;
    runCopyVec(scatter, from, to, s, n, name);
    return true;
  }
  if (!allowTiles || scatter || (s.rank != 2 && s.rank != 3) ||
      s.strides[s.rank - 2] != 1)
    return false;
  int64_t P = s.dims[s.rank - 2], Q = s.dims[s.rank - 1];
  int64_t batch = s.rank == 3 ? s.dims[0] : 1;
  int64_t sb = s.rank == 3 ? s.strides[0] : 0;
  int64_t ld = s.strides[s.rank - 1];
  int64_t gx = (Q + 31) / 32, gy = (P + 31) / 32;
  if (gy > 65535 || gx > 0x7fffffff)
    return false;
  dim3 grid(unsigned(gx), unsigned(gy),
            unsigned(batch < 65535 ? batch : 65535));
  transposeTileKernel<<<grid, dim3(32, 8), 0, st>>>(from + s.base, to, batch,
                                                    P, Q, ld, sb);
  checkLaunch(name);
  return true;
}

void stridedCopy(bool scatter, const float *from, float *to, int64_t base,
                 const int64_t *strides, const Shape &shape,
                 const char *name) {
  int64_t n = shape.numel();
  if (n == 0)
    return;
  Strided s = makeStrided(shape, strides, base);
  if (stridedCopyFast(scatter, from, to, s, n, !scatter, name))
    return;
  if (scatter)
    scatterKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(from, to, n,
                                                                s);
  else
    gatherKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(from, to, n,
                                                               s);
  checkLaunch(name);
}

template <typename T>
__global__ void concatKernel(const T *in, T *out, int64_t outer, int64_t chunk,
                             int64_t outRow, int64_t offset) {
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
template <bool AddSum>
__global__ void scatterAddKernel(const int *keys, const int *vals, int64_t n,
                                 int64_t rows, int64_t width, const float *dOut,
                                 float *dTable) {
  int64_t k = blockIdx.x;
  int key = keys[k];
  if (key >= rows || (k > 0 && keys[k - 1] == key))
    return;
  int64_t end = k + 1;
  while (end < n && keys[end] == key)
    ++end;
  float *row = dTable + int64_t(key) * width;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    double acc = AddSum ? 0.0 : row[c];
    for (int64_t j = k; j < end; ++j)
      acc += dOut[int64_t(vals[j]) * width + c];
    row[c] = AddSum ? __fadd_rn(row[c], float(acc)) : float(acc);
  }
}

/// The integer tensors' strided copy (ids, labels, masks: small, so the
/// general kernel only).
void gatherInts(const int64_t *from, int64_t *to, int64_t base,
                const int64_t *strides, const Shape &shape, const char *name) {
  int64_t n = shape.numel();
  if (n == 0)
    return;
  Strided s = makeStrided(shape, strides, base);
  gatherKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(from, to, n, s);
  checkLaunch(name);
}

template <typename T>
void concatImpl(const View<const T> *inputs, int numInputs, int axis,
                View<T> out, const char *name) {
  auto [outer, inner, outRow] = kernels::concatRows(
      out.shape, axis, [name](auto... args) { contract(name, args...); });
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

__global__ void causalMaskKernel(float *out, int64_t n, int64_t rows,
                                 int64_t cols, int64_t window) {
  RONDO_GRID_STRIDE(k, n) {
    int64_t j = k % cols, i = (k / cols) % rows;
    int64_t last = i + (cols - rows); // the last key row i sees
    bool attend = j <= last && (window == 0 || j > last - window);
    out[k] = attend ? 0.0f : -INFINITY;
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
  if (out.shape.rank != x.shape.rank)
    contract("transpose", "rank mismatch");
  int64_t strides[kMaxRank];
  kernels::transposeStrides(x.shape, perm, out.shape.rank, strides);
  stridedCopy(false, x.data, out.data, 0, strides, out.shape, "transpose");
}

void slice(CFView x, const int64_t *starts, const int64_t *steps, FView out) {
  ProfileScope profileScope("slice");
  int64_t strides[kMaxRank];
  int64_t base = kernels::sliceStrides(x.shape, starts, steps, strides);
  stridedCopy(false, x.data, out.data, base, strides, out.shape, "slice");
}

void sliceBackward(CFView dOut, const int64_t *starts, const int64_t *steps,
                   FView dX) {
  ProfileScope profileScope("sliceBackward");
  fillDevice(dX.data, dX.shape.numel(), 0.0f, "sliceBackward");
  int64_t strides[kMaxRank];
  int64_t base = kernels::sliceStrides(dX.shape, starts, steps, strides);
  stridedCopy(true, dOut.data, dX.data, base, strides, dOut.shape,
              "sliceBackward");
}

void concat(const CFView *inputs, int numInputs, int axis, FView out) {
  ProfileScope profileScope("concat");
  concatImpl(inputs, numInputs, axis, out, "concat");
}

namespace {

/// A gather into bf16 storage, one thread per element.
template <typename From>
__global__ void gatherToBf16Kernel(const From *from, __nv_bfloat16 *to,
                                   int64_t n, Strided s) {
  RONDO_GRID_STRIDE(i, n) {
    storeOut(to + i, loadIn(from + stridedOffset(s, i)));
  }
}

/// transposeToBf16 and transposeBf16: the strided walk of `perm` from x
/// (fp32, or bf16 moved exactly) into bf16.
template <typename From>
void transposeIntoBf16(const From *x, const Shape &xShape, const int64_t *perm,
                       BView out, const char *name) {
  if (out.shape.rank != xShape.rank)
    contract(name, "rank mismatch");
  int64_t strides[kMaxRank];
  kernels::transposeStrides(xShape, perm, out.shape.rank, strides);
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  Strided s = makeStrided(out.shape, strides, 0);
  __nv_bfloat16 *to = bf16Data(out);
  // The inner run kept ([B,H,T,D] -> [B,T,H,D]): four elements a thread,
  // as transpose's fast path.
  if (innerRunVectorisable(s, x, to)) {
    runCopyVec(false, x, to, s, n, name);
    return;
  }
  gatherToBf16Kernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x, to, n, s);
  checkLaunch(name);
}

} // namespace

void transposeToBf16(CFView x, const int64_t *perm, BView out) {
  ProfileScope profileScope("transposeToBf16");
  transposeIntoBf16(x.data, x.shape, perm, out, "transposeToBf16");
}

void transposeBf16(CBView x, const int64_t *perm, BView out) {
  ProfileScope profileScope("transposeBf16");
  transposeIntoBf16(bf16Data(x), x.shape, perm, out, "transposeBf16");
}

void fromBf16(CBView x, FView out) {
  ProfileScope profileScope("fromBf16");
  if (x.shape.numel() != out.shape.numel())
    contract("fromBf16", "input and output sizes differ");
  widenBf16Into(x.data, out.data, out.shape.numel(), "fromBf16");
}

void transposeInts(IView x, const int64_t *perm, MIView out) {
  ProfileScope profileScope("transposeInts");
  if (out.shape.rank != x.shape.rank)
    contract("transposeInts", "rank mismatch");
  int64_t strides[kMaxRank];
  kernels::transposeStrides(x.shape, perm, out.shape.rank, strides);
  gatherInts(x.data, out.data, 0, strides, out.shape, "transposeInts");
}

void sliceInts(IView x, const int64_t *starts, const int64_t *steps,
               MIView out) {
  ProfileScope profileScope("sliceInts");
  int64_t strides[kMaxRank];
  int64_t base = kernels::sliceStrides(x.shape, starts, steps, strides);
  gatherInts(x.data, out.data, base, strides, out.shape, "sliceInts");
}

void broadcastInts(IView x, MIView out) {
  ProfileScope profileScope("broadcastInts");
  int64_t strides[kMaxRank] = {};
  kernels::broadcastStrides(
      x.shape, out.shape, strides,
      [](auto... args) { contract("broadcastInts", args...); });
  gatherInts(x.data, out.data, 0, strides, out.shape, "broadcastInts");
}

void concatInts(const IView *inputs, int numInputs, int axis, MIView out) {
  ProfileScope profileScope("concatInts");
  concatImpl(inputs, numInputs, axis, out, "concatInts");
}

void causalMask(FView out, int64_t window) {
  ProfileScope profileScope("causalMask");
  int rank = out.shape.rank;
  if (rank < 2)
    contract("causalMask", "rank %d < 2", rank);
  if (window < 0)
    contract("causalMask", "window %lld < 0", (long long)window);
  int64_t rows = out.shape.dims[rank - 2], cols = out.shape.dims[rank - 1];
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  causalMaskKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      out.data, n, rows, cols, window);
  checkLaunch("causalMask");
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

namespace {

template <bool AddSum>
void scatterRows(IView ids, CFView dOut, FView dTable, const char *name) {
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
  scatterAddKernel<AddSum><<<unsigned(n), threads, 0, st>>>(
      keysOut, valsOut, n, rows, width, dOut.data, dTable.data);
  checkLaunch(name);
  sortTemp.release();
  keys.release();
}

} // namespace

void gatherRowsBackward(IView ids, CFView dOut, FView dTable) {
  ProfileScope profileScope("gatherRowsBackward");
  scatterRows<false>(ids, dOut, dTable, "gatherRowsBackward");
}

void gatherRowsBackwardAdd(IView ids, CFView dOut, FView dTable) {
  // The embedding gradient's microbatch sum, added where it lands: no fill
  // of the whole table and no pass over it to accumulate (W1: 1.24 GB
  // each, eight times a step).
  ProfileScope profileScope("gatherRowsBackward");
  scatterRows<true>(ids, dOut, dTable, "gatherRowsBackwardAdd");
}

} // namespace rondo::cuda
