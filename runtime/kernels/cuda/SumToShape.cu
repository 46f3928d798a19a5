//===- SumToShape.cu - Reduction to a broadcastable shape
//------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// sumToShape sums in double: each output element's reduced range is cut into
// parts whose number depends only on the shapes, every part is summed in
// ascending order by one thread, and the parts are summed in ascending order
// by a second kernel. Fast paths, bitwise identical to that order's result
// for their shapes:
//  - [R, C] to [C] (column sums): the tiled two-stage column sum of
//    Internal.cuh (blocks of 32 columns x a tile of rows, fixed lane order,
//    then tiles in order);
//  - [R, C] to [R, 1] (row sums): a warp per row.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

namespace rondo::cuda {

using namespace detail;

namespace {

//===----------------------------------------------------------------------===//
// sumToShape
//===----------------------------------------------------------------------===//

/// Kept and reduced dimensions of x (merged), as index -> offset maps.
struct Odo {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

__device__ inline int64_t odoOffset(const Odo &o, int64_t r) {
  int64_t off = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < o.rank) {
      off += (r % o.dims[d]) * o.strides[d];
      r /= o.dims[d];
    }
  }
  return off;
}

/// partial[p * O + o] = sum of x over reduced indices [p * per, (p+1) * per)
/// (ascending) at kept index o. With parts == 1 writes the float result to
/// out directly.
__global__ void sumPartialKernel(const float *x, Odo kept, Odo reduced,
                                 int64_t O, int64_t R, int64_t per,
                                 int64_t parts, double *partial, float *out) {
  RONDO_GRID_STRIDE(i, O * parts) {
    int64_t o = i % O, p = i / O;
    int64_t base = odoOffset(kept, o);
    int64_t r0 = p * per, r1 = r0 + per < R ? r0 + per : R;
    // Walk the reduced odometer incrementally from r0.
    int64_t idx[kMaxRank];
    int64_t off = 0;
    {
      int64_t r = r0;
#pragma unroll
      for (int d = kMaxRank - 1; d >= 0; --d) {
        if (d < reduced.rank) {
          idx[d] = r % reduced.dims[d];
          r /= reduced.dims[d];
          off += idx[d] * reduced.strides[d];
        } else {
          idx[d] = 0;
        }
      }
    }
    double acc = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      acc += x[base + off];
#pragma unroll
      for (int d = kMaxRank - 1; d >= 0; --d) {
        if (d < reduced.rank) {
          off += reduced.strides[d];
          if (++idx[d] < reduced.dims[d])
            break;
          off -= reduced.strides[d] * reduced.dims[d];
          idx[d] = 0;
        }
      }
    }
    if (parts == 1)
      out[o] = float(acc);
    else
      partial[p * O + o] = acc;
  }
}

__global__ void sumFinalKernel(const double *partial, int64_t O, int64_t parts,
                               float *out) {
  RONDO_GRID_STRIDE(o, O) {
    double acc = 0.0;
    for (int64_t p = 0; p < parts; ++p)
      acc += partial[p * O + o];
    out[o] = float(acc);
  }
}

/// Row sums of a contiguous [rows, width]: a warp per row, lanes striding the
/// row in ascending order in double, then the fixed warp tree.
__global__ void rowSumKernel(const float *x, int64_t rows, int64_t width,
                             float *out) {
  int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  int lane = threadIdx.x & 31;
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       r < rows; r += warps) {
    const float *xr = x + r * width;
    double acc = 0.0;
    for (int64_t c = lane; c < width; c += 32)
      acc += xr[c];
    acc = warpSum(acc);
    if (lane == 0)
      out[r] = float(acc);
  }
}

/// Column-sum term of a contiguous [rows, width].
struct ColumnTerm {
  const float *x;
  int64_t width;
  __device__ double operator()(int64_t r, int64_t c) const {
    return double(x[r * width + c]);
  }
};

} // namespace

void sumToShape(CFView x, FView out) {
  ProfileScope profileScope("sumToShape");
  const char *name = "sumToShape";
  const Shape &xs = x.shape;
  int rank = xs.rank;
  if (out.shape.rank > rank)
    contract(name, "output rank %d exceeds input rank %d", out.shape.rank,
             rank);
  int64_t O = out.shape.numel();
  if (O == 0)
    return;
  if (xs.numel() == 0) {
    fillDevice(out.data, O, 0.0f, name);
    return;
  }
  Odo kept, reduced;
  kernels::splitSumDims(xs, out.shape, kept, reduced,
                        [name](auto... args) { contract(name, args...); });
  cudaStream_t st = currentStream();
  if (reduced.rank == 0) {
    RONDO_CHECK(cudaMemcpyAsync(out.data, x.data, size_t(O) * sizeof(float),
                                cudaMemcpyDeviceToDevice, st),
                name);
    return;
  }
  int64_t R = 1;
  for (int d = 0; d < reduced.rank; ++d)
    R *= reduced.dims[d];
  if (kept.rank == 1 && reduced.rank == 1) {
    int64_t C = kept.dims[0];
    if (kept.strides[0] == 1 && reduced.strides[0] == C) {
      // x is [R, C] summed over rows: tiled column sums.
      tiledColumnSums(R, C, out.data, ColumnTerm{x.data, C}, name);
      return;
    }
    if (reduced.strides[0] == 1 && kept.strides[0] == R) {
      // x is [C, R] summed over its contiguous rows: a warp per row.
      rowSumKernel<<<gridFor(C * 32), kThreads, 0, st>>>(x.data, C, R,
                                                         out.data);
      checkLaunch(name);
      return;
    }
  }
  // Parts: enough threads to fill the GPU when there are few outputs, each
  // part at least 256 elements long. A function of (O, R) only.
  int64_t parts = 1;
  if (O < 16384 && R > 512) {
    parts = (16384 + O - 1) / O;
    int64_t maxParts = (R + 255) / 256;
    if (parts > maxParts)
      parts = maxParts;
  }
  int64_t per = (R + parts - 1) / parts;
  parts = (R + per - 1) / per;
  Temp partial(parts > 1 ? size_t(parts * O) * sizeof(double) : 0, name);
  sumPartialKernel<<<gridFor(O * parts), kThreads, 0, st>>>(
      x.data, kept, reduced, O, R, per, parts, partial.as<double>(), out.data);
  checkLaunch(name);
  if (parts > 1) {
    sumFinalKernel<<<gridFor(O), kThreads, 0, st>>>(partial.as<double>(), O,
                                                    parts, out.data);
    checkLaunch(name);
  }
  partial.release();
}

} // namespace rondo::cuda
