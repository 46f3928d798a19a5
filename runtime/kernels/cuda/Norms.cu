//===- Norms.cu - Softmax, normalisation and rotary kernels ---------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One block per row of the last axis. Row statistics are carried in double
// like the CPU's, reduced by a fixed tree (each thread sums a strided subset
// in ascending order, then lanes and warps in a fixed order), so results
// depend only on the shape.
//
// Fast paths for rows of width % 4 == 0 with 16-byte aligned pointers (and
// width <= 8192; otherwise the general kernels below, unchanged):
//  - rmsNorm: one pass per row, the row held in registers (float4 loads), a
//    warp per row for width <= 512, a block per row above.
//  - rmsNormBackward / layerNormBackward: one fused kernel reads x and dY once:
//    per row the statistics, dX, and the weight-gradient terms, which each
//    thread accumulates (double) for the columns it owns over the rows of its
//    block's tile in ascending order (warps of a block own interleaved rows
//    and are added in warp order); stage 2 (finishColumnTiles) adds the
//    per-tile partials [tiles, width] in ascending tile order. The number of
//    tiles depends on the shape only, so the sums are reproducible. Per
//    element the kernel reads 8 bytes and writes 4 (the general path read x
//    and dY twice, and its column pass had one thread per column).
//  - rotary / rotaryBackward: one thread per four pairs (j, j + D/2), float4,
//    when D % 8 == 0 and every pointer is aligned.
// Every formula is the general kernels'; only the order of the double row
// sums (lanes, then the warp / block tree) and of the column sums differ.
// The general weight gradients use tiledColumnSums (Internal.cuh).
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <initializer_list>
#include <type_traits>

namespace rondo::cuda {

using namespace detail;

namespace {

unsigned rowGrid(int64_t rows) {
  return unsigned(rows < (int64_t(1) << 20) ? rows : (int64_t(1) << 20));
}

__global__ void softmaxKernel(const float *x, float *y, int64_t rows,
                              int64_t width) {
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * width;
    float *yr = y + r * width;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      m = fmaxf(m, xr[c]);
    m = blockMax(m, fscratch);
    if (m == -INFINITY)
      m = 0.0f;
    double sum = 0.0;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      sum += double(expf(xr[c] - m));
    sum = blockSum(sum, dscratch);
    double inv = 1.0 / sum;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      yr[c] = float(double(expf(xr[c] - m)) * inv);
  }
}

__global__ void softmaxBwdKernel(const float *y, const float *g, float *dx,
                                 int64_t rows, int64_t width) {
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *yr = y + r * width, *gr = g + r * width;
    float *dr = dx + r * width;
    double dot = 0.0;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      dot += double(yr[c]) * gr[c];
    float d = float(blockSum(dot, dscratch));
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      dr[c] = yr[c] * (gr[c] - d);
  }
}

__device__ inline double rowSumSquares(const float *xr, int64_t width,
                                       double *scratch) {
  double ss = 0.0;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
    ss += double(xr[c]) * xr[c];
  return blockSum(ss, scratch);
}

/// OutT float, or __nv_bfloat16 for rmsNormToBf16 (the same fp32 values,
/// rounded as they are stored).
template <typename OutT>
__global__ void rmsNormKernel(const float *x, const float *w, float eps,
                              OutT *y, int64_t rows, int64_t width) {
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * width;
    OutT *yr = y + r * width;
    double ss = rowSumSquares(xr, width, dscratch);
    float inv = float(1.0 / sqrt(ss / double(width) + double(eps)));
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      storeOut(yr + c, w ? xr[c] * inv * w[c] : xr[c] * inv);
  }
}

__global__ void rmsNormBwdKernel(const float *x, const float *w, float eps,
                                 const float *g, float *dx, float *invOut,
                                 int64_t rows, int64_t width) {
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * width, *gr = g + r * width;
    double ss = rowSumSquares(xr, width, dscratch);
    double rinv = 1.0 / sqrt(ss / double(width) + double(eps));
    if (invOut && threadIdx.x == 0)
      invOut[r] = float(rinv);
    if (!dx)
      continue;
    double dot = 0.0;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      dot += double(w ? gr[c] * w[c] : gr[c]) * xr[c];
    dot = blockSum(dot, dscratch);
    float a = float(rinv);
    float bcoef = float(rinv * rinv * rinv * dot / double(width));
    float *dr = dx + r * width;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      dr[c] = w ? a * (gr[c] * w[c]) - bcoef * xr[c] : a * gr[c] - bcoef * xr[c];
  }
}

__device__ inline void rowMeanRstd(const float *xr, int64_t width, float eps,
                                   double *scratch, double &mean,
                                   double &rstd) {
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
    s += xr[c];
  mean = blockSum(s, scratch) / double(width);
  double v = 0.0;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
    double d = xr[c] - mean;
    v += d * d;
  }
  v = blockSum(v, scratch);
  rstd = 1.0 / sqrt(v / double(width) + double(eps));
}

__global__ void layerNormKernel(const float *x, const float *w, const float *b,
                                float eps, float *y, int64_t rows,
                                int64_t width) {
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * width;
    float *yr = y + r * width;
    double mean, rstd;
    rowMeanRstd(xr, width, eps, dscratch, mean, rstd);
    float m = float(mean), s = float(rstd);
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      float v = (xr[c] - m) * s;
      if (w)
        v *= w[c];
      if (b)
        v += b[c];
      yr[c] = v;
    }
  }
}

__global__ void layerNormBwdKernel(const float *x, const float *w, float eps,
                                   const float *g, float *dx, float *means,
                                   float *rstds, int64_t rows, int64_t width) {
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * width, *gr = g + r * width;
    double mean, rstd;
    rowMeanRstd(xr, width, eps, dscratch, mean, rstd);
    if (means && threadIdx.x == 0) {
      means[r] = float(mean);
      rstds[r] = float(rstd);
    }
    if (!dx)
      continue;
    double sg = 0.0, sgx = 0.0;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      double gv = w ? gr[c] * w[c] : gr[c];
      sg += gv;
      sgx += gv * ((xr[c] - mean) * rstd);
    }
    sg = blockSum(sg, dscratch);
    sgx = blockSum(sgx, dscratch);
    float mg = float(sg / double(width));
    float mgx = float(sgx / double(width));
    float m = float(mean), s = float(rstd);
    float *dr = dx + r * width;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      float gv = w ? gr[c] * w[c] : gr[c];
      float xhat = (xr[c] - m) * s;
      dr[c] = s * (gv - mg - xhat * mgx);
    }
  }
}

struct RmsDwTerm {
  const float *dy, *x, *inv;
  int64_t width;
  __device__ double operator()(int64_t r, int64_t c) const {
    return double(dy[r * width + c]) * x[r * width + c] * inv[r];
  }
};

struct LnDwTerm {
  const float *dy, *x, *means, *rstds;
  int64_t width;
  __device__ double operator()(int64_t r, int64_t c) const {
    float xhat = (x[r * width + c] - means[r]) * rstds[r];
    return double(dy[r * width + c]) * xhat;
  }
};

struct LnDbTerm {
  const float *dy;
  int64_t width;
  __device__ double operator()(int64_t r, int64_t c) const {
    return double(dy[r * width + c]);
  }
};

__global__ void rotaryKernel(const float *x, const float *cosT,
                             const float *sinT, float *y, int64_t n, int64_t T,
                             int64_t D, bool backward) {
  int64_t h = D / 2;
  RONDO_GRID_STRIDE(i, n) {
    int64_t r = i / D, j = i % D;
    int64_t t = r % T;
    const float *xr = x + r * D;
    const float *c = cosT + t * D, *s = sinT + t * D;
    float v;
    if (!backward)
      v = j < h ? xr[j] * c[j] - xr[j + h] * s[j]
                : xr[j] * c[j] + xr[j - h] * s[j];
    else
      v = j < h ? xr[j] * c[j] + xr[j + h] * s[j + h]
                : xr[j] * c[j] - xr[j - h] * s[j - h];
    y[i] = v;
  }
}

//===----------------------------------------------------------------------===//
// Fast paths: rows in registers
//===----------------------------------------------------------------------===//

/// Widest row of the register-row kernels (4 float4 per thread, 512 threads).
constexpr int64_t kMaxVecWidth = 8192;

/// A row is handled by a group: a warp (WarpRows, blocks of 256 threads, rows
/// of width <= 512) or the whole block. Thread `lane` of the group owns the
/// float4 chunks q = lane + k * groupSize, k < V, q < width / 4.
template <bool WarpRows> struct RowGroup {
  int size, lane, index, count; // threads, thread in group, group in block,
                                // groups per block
  __device__ RowGroup() {
    if (WarpRows) {
      size = 32;
      lane = threadIdx.x & 31;
      index = threadIdx.x >> 5;
      count = blockDim.x >> 5;
    } else {
      size = blockDim.x;
      lane = threadIdx.x;
      index = 0;
      count = 1;
    }
  }
};

template <bool WarpRows>
__device__ inline double groupSum(double v, double *scratch) {
  if (WarpRows)
    return warpSum(v);
  return blockSum(v, scratch);
}

/// Loads the owned chunks of a row (zeros past the end).
template <int V>
__device__ inline void loadRow(const float *row, int64_t nq, int lane,
                               int size, float4 (&v)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    int64_t q = lane + int64_t(k) * size;
    v[k] = q < nq ? load4(row + q * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

__device__ inline double sumSquares4(float4 v) {
  double s = double(v.x) * v.x;
  s += double(v.y) * v.y;
  s += double(v.z) * v.z;
  s += double(v.w) * v.w;
  return s;
}

template <int V, bool WarpRows, typename OutT>
__global__ void __launch_bounds__(512)
    rmsNormVecKernel(const float *x, const float *w, float eps, OutT *y,
                     int64_t rows, int64_t width) {
  __shared__ double scratch[32];
  RowGroup<WarpRows> g;
  int64_t nq = width / 4;
  int64_t step = int64_t(gridDim.x) * g.count;
  for (int64_t r = int64_t(blockIdx.x) * g.count + g.index; r < rows;
       r += step) {
    float4 xv[V];
    loadRow<V>(x + r * width, nq, g.lane, g.size, xv);
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < V; ++k)
      ss += sumSquares4(xv[k]);
    ss = groupSum<WarpRows>(ss, scratch);
    float inv = float(1.0 / sqrt(ss / double(width) + double(eps)));
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * g.size;
      if (q >= nq)
        continue;
      float4 o, xk = xv[k];
      if (w) {
        float4 wk = load4(w + q * 4);
        o = make_float4(xk.x * inv * wk.x, xk.y * inv * wk.y,
                        xk.z * inv * wk.z, xk.w * inv * wk.w);
      } else {
        o = make_float4(xk.x * inv, xk.y * inv, xk.z * inv, xk.w * inv);
      }
      store4(y + r * width + q * 4, o);
    }
  }
}

/// Rows per tile of the fused backward kernels: about 512 tiles (a few blocks
/// per SM; the per-tile partials stay a few percent of the traffic), at
/// least minRows (a warp-row block has 8 warps) and at most 256 rows.
/// Depends on the shape only.
inline int64_t normTileRows(int64_t rows, int64_t minRows) {
  int64_t t = (rows + 511) / 512;
  if (t < minRows)
    t = minRows;
  if (t > 256)
    t = 256;
  return t;
}

/// Writes a block's per-column tile sums: acc[k][i] is column 4 q + i of the
/// calling thread's chunk q = lane + k * groupSize. With warp rows the 8 warps'
/// sums (interleaved rows of the tile) are added in warp order through shared
/// memory. Output: partial[blockIdx.x * width + c] (double) when partial, else
/// direct[c] (float, the single-tile case). Called by every thread.
template <int V, bool WarpRows>
__device__ inline void writeTileSums(const double (&acc)[V][4],
                                     const RowGroup<WarpRows> &g,
                                     int64_t width, double *partial,
                                     float *direct) {
  int64_t nq = width / 4;
  if constexpr (WarpRows) {
    __shared__ double sums[8][32 * 4 * V];
    __syncthreads(); // a previous call may still be reading sums
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * 32;
      if (q < nq) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          sums[g.index][q * 4 + i] = acc[k][i];
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      double t = sums[0][c];
      for (int i = 1; i < g.count; ++i)
        t += sums[i][c];
      if (partial)
        partial[int64_t(blockIdx.x) * width + c] = t;
      else
        direct[c] = float(t);
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * g.size;
      if (q >= nq)
        continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (partial)
          partial[int64_t(blockIdx.x) * width + q * 4 + i] = acc[k][i];
        else
          direct[q * 4 + i] = float(acc[k][i]);
      }
    }
  }
}

/// Fused rmsNorm backward over one tile of rows per block: dX (if dx) and,
/// if partial (or direct, with a single tile), the dW column sums of the
/// tile: partial[blockIdx.x * width + c] (double) or direct[c] (float).
template <int V, bool WarpRows>
__global__ void __launch_bounds__(512)
    rmsNormBwdVecKernel(const float *x, const float *w, float eps,
                        const float *dy, float *dx, int64_t rows,
                        int64_t width, int64_t tileRows, double *partial,
                        float *direct) {
  __shared__ double scratch[32];
  RowGroup<WarpRows> g;
  int64_t nq = width / 4;
  bool wantW = partial || direct;
  int64_t r0 = int64_t(blockIdx.x) * tileRows;
  int64_t r1 = r0 + tileRows < rows ? r0 + tileRows : rows;
  double acc[V][4];
#pragma unroll
  for (int k = 0; k < V; ++k)
    acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0;
  for (int64_t r = r0 + g.index; r < r1; r += g.count) {
    float4 xv[V], gv[V];
    loadRow<V>(x + r * width, nq, g.lane, g.size, xv);
    loadRow<V>(dy + r * width, nq, g.lane, g.size, gv);
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < V; ++k)
      ss += sumSquares4(xv[k]);
    ss = groupSum<WarpRows>(ss, scratch);
    double rinv = 1.0 / sqrt(ss / double(width) + double(eps));
    float inv = float(rinv);
    if (dx) {
      float4 wv[V];
      if (w)
        loadRow<V>(w, nq, g.lane, g.size, wv);
      double dot = 0.0;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float4 a = gv[k], b = xv[k];
        if (w) {
          a = make_float4(a.x * wv[k].x, a.y * wv[k].y, a.z * wv[k].z,
                          a.w * wv[k].w);
        }
        dot += double(a.x) * b.x;
        dot += double(a.y) * b.y;
        dot += double(a.z) * b.z;
        dot += double(a.w) * b.w;
      }
      dot = groupSum<WarpRows>(dot, scratch);
      float ac = float(rinv);
      float bcoef = float(rinv * rinv * rinv * dot / double(width));
#pragma unroll
      for (int k = 0; k < V; ++k) {
        int64_t q = g.lane + int64_t(k) * g.size;
        if (q >= nq)
          continue;
        float4 gk = gv[k], xk = xv[k], o;
        if (w) {
          float4 wk = wv[k];
          o = make_float4(ac * (gk.x * wk.x) - bcoef * xk.x,
                          ac * (gk.y * wk.y) - bcoef * xk.y,
                          ac * (gk.z * wk.z) - bcoef * xk.z,
                          ac * (gk.w * wk.w) - bcoef * xk.w);
        } else {
          o = make_float4(ac * gk.x - bcoef * xk.x, ac * gk.y - bcoef * xk.y,
                          ac * gk.z - bcoef * xk.z, ac * gk.w - bcoef * xk.w);
        }
        store4(dx + r * width + q * 4, o);
      }
    }
    if (wantW) {
      double di = double(inv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        acc[k][0] += double(gv[k].x) * xv[k].x * di;
        acc[k][1] += double(gv[k].y) * xv[k].y * di;
        acc[k][2] += double(gv[k].z) * xv[k].z * di;
        acc[k][3] += double(gv[k].w) * xv[k].w * di;
      }
    }
  }
  if (wantW)
    writeTileSums<V, WarpRows>(acc, g, width, partial, direct);
}

/// Fused layerNorm backward (as rmsNormBwdVecKernel): dX if dx; the dW and
/// dB column sums of the tile if their partial or direct outputs are set.
template <int V, bool WarpRows>
__global__ void __launch_bounds__(512)
    layerNormBwdVecKernel(const float *x, const float *w, float eps,
                          const float *dy, float *dx, int64_t rows,
                          int64_t width, int64_t tileRows, double *partialW,
                          float *directW, double *partialB, float *directB) {
  __shared__ double scratch[32];
  RowGroup<WarpRows> g;
  int64_t nq = width / 4;
  bool wantW = partialW || directW, wantB = partialB || directB;
  int64_t r0 = int64_t(blockIdx.x) * tileRows;
  int64_t r1 = r0 + tileRows < rows ? r0 + tileRows : rows;
  double accW[V][4], accB[V][4];
#pragma unroll
  for (int k = 0; k < V; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      accW[k][i] = accB[k][i] = 0.0;
  for (int64_t r = r0 + g.index; r < r1; r += g.count) {
    float4 xv[V], gv[V];
    loadRow<V>(x + r * width, nq, g.lane, g.size, xv);
    loadRow<V>(dy + r * width, nq, g.lane, g.size, gv);
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      sum += xv[k].x;
      sum += xv[k].y;
      sum += xv[k].z;
      sum += xv[k].w;
    }
    double mean = groupSum<WarpRows>(sum, scratch) / double(width);
    double var = 0.0;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (g.lane + int64_t(k) * g.size >= nq)
        continue;
      const float *e = &xv[k].x;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        double d = e[i] - mean;
        var += d * d;
      }
    }
    var = groupSum<WarpRows>(var, scratch);
    double rstd = 1.0 / sqrt(var / double(width) + double(eps));
    float m = float(mean), sd = float(rstd);
    if (dx) {
      float4 wv[V];
      if (w)
        loadRow<V>(w, nq, g.lane, g.size, wv);
      double sg = 0.0, sgx = 0.0;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        if (g.lane + int64_t(k) * g.size >= nq)
          continue;
        const float *xe = &xv[k].x, *ge = &gv[k].x, *we = &wv[k].x;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          double gd = w ? ge[i] * we[i] : ge[i];
          sg += gd;
          sgx += gd * ((xe[i] - mean) * rstd);
        }
      }
      sg = groupSum<WarpRows>(sg, scratch);
      sgx = groupSum<WarpRows>(sgx, scratch);
      float mg = float(sg / double(width));
      float mgx = float(sgx / double(width));
#pragma unroll
      for (int k = 0; k < V; ++k) {
        int64_t q = g.lane + int64_t(k) * g.size;
        if (q >= nq)
          continue;
        const float *xe = &xv[k].x, *ge = &gv[k].x, *we = &wv[k].x;
        float o[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float gf = w ? ge[i] * we[i] : ge[i];
          float xhat = (xe[i] - m) * sd;
          o[i] = sd * (gf - mg - xhat * mgx);
        }
        store4(dx + r * width + q * 4, make_float4(o[0], o[1], o[2], o[3]));
      }
    }
    if (wantW || wantB) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float *xe = &xv[k].x, *ge = &gv[k].x;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float xhat = (xe[i] - m) * sd;
          accW[k][i] += double(ge[i]) * xhat;
          accB[k][i] += double(ge[i]);
        }
      }
    }
  }
  if (wantW)
    writeTileSums<V, WarpRows>(accW, g, width, partialW, directW);
  if (wantB)
    writeTileSums<V, WarpRows>(accB, g, width, partialB, directB);
}

/// The register-row configuration of a row width: float4 chunks per thread
/// (1, 2 or 4), a warp or a block per row, threads per block. False when the
/// width does not qualify (width % 4 != 0, or wider than kMaxVecWidth).
struct RowConfig {
  int v = 1;
  bool warpRows = false;
  int threads = 256;
};

bool rowConfig(int64_t width, RowConfig &c) {
  if (width <= 0 || width % 4 != 0 || width > kMaxVecWidth)
    return false;
  int64_t nq = width / 4;
  if (nq <= 128) {
    // 256 threads = 8 warps (writeTileSums' shared sums assume 8).
    c.warpRows = true;
    c.threads = 256;
    c.v = nq <= 32 ? 1 : (nq <= 64 ? 2 : 4);
    return true;
  }
  // A block per row: one chunk per thread up to 512 threads (V = 1 keeps the
  // backward kernels near 50 registers; V = 2 / 4 take about 94 / 128).
  c.warpRows = false;
  c.threads = nq <= 256 ? 256 : 512;
  c.v = nq <= 512 ? 1 : (nq <= 1024 ? 2 : 4);
  return true;
}

/// Calls launch(V, WarpRows) with compile-time constants for a config.
template <typename Launch>
void dispatchRows(const RowConfig &c, Launch &&launch) {
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Four = std::integral_constant<int, 4>;
  if (c.warpRows) {
    if (c.v == 1)
      launch(One{}, std::true_type{});
    else if (c.v == 2)
      launch(Two{}, std::true_type{});
    else
      launch(Four{}, std::true_type{});
  } else {
    if (c.v == 1)
      launch(One{}, std::false_type{});
    else if (c.v == 2)
      launch(Two{}, std::false_type{});
    else
      launch(Four{}, std::false_type{});
  }
}

/// Whether the fast row kernels may touch these pointers as float4.
bool rowsAligned(std::initializer_list<const void *> ptrs) {
  for (const void *p : ptrs)
    if (!aligned16(p))
      return false;
  return true;
}

__device__ inline void rotatePair(float a, float b, float ca, float cb,
                                  float sa, float sb, bool backward, float &ya,
                                  float &yb) {
  // a = x[j], b = x[j + D/2]: the general kernel's two formulas.
  if (!backward) {
    ya = a * ca - b * sa;
    yb = b * cb + a * sb;
  } else {
    ya = a * ca + b * sb;
    yb = b * cb - a * sa;
  }
}

/// One thread per four pairs (j..j+3, j+D/2..j+D/2+3); D % 8 == 0 and every
/// pointer 16-byte aligned. In place is safe (a thread reads both halves
/// before writing them).
__global__ void rotaryVecKernel(const float *x, const float *cosT,
                                const float *sinT, float *y, int64_t rows,
                                int64_t T, int64_t D, bool backward) {
  int64_t h = D / 2, hv = h / 4;
  RONDO_GRID_STRIDE(v, rows * hv) {
    int64_t r, q, tq, t;
    divMod(v, hv, r, q);
    divMod(r, T, tq, t);
    int64_t j = q * 4;
    const float *xr = x + r * D, *c = cosT + t * D, *s = sinT + t * D;
    float4 a = load4(xr + j), b = load4(xr + j + h);
    float4 ca = load4(c + j), cb = load4(c + j + h);
    float4 sa = load4(s + j), sb = load4(s + j + h);
    float4 ya, yb;
    rotatePair(a.x, b.x, ca.x, cb.x, sa.x, sb.x, backward, ya.x, yb.x);
    rotatePair(a.y, b.y, ca.y, cb.y, sa.y, sb.y, backward, ya.y, yb.y);
    rotatePair(a.z, b.z, ca.z, cb.z, sa.z, sb.z, backward, ya.z, yb.z);
    rotatePair(a.w, b.w, ca.w, cb.w, sa.w, sb.w, backward, ya.w, yb.w);
    store4(y + r * D + j, ya);
    store4(y + r * D + j + h, yb);
  }
}

void rotaryImpl(const Shape &shape, const float *in, const float *cosT,
                const float *sinT, float *out, bool backward,
                const char *name) {
  if (shape.rank < 2)
    contract(name, "input must have rank >= 2");
  int64_t T = shape.dims[shape.rank - 2], D = shape.dims[shape.rank - 1];
  if (D % 2 != 0)
    contract(name, "head dimension %lld is odd", (long long)D);
  int64_t n = shape.numel();
  if (n == 0)
    return;
  if (D % 8 == 0 && rowsAligned({in, cosT, sinT, out})) {
    int64_t rows = n / D;
    rotaryVecKernel<<<gridFor(rows * (D / 8)), kThreads, 0,
                      currentStream()>>>(in, cosT, sinT, out, rows, T, D,
                                         backward);
    checkLaunch(name);
    return;
  }
  rotaryKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      in, cosT, sinT, out, n, T, D, backward);
  checkLaunch(name);
}

} // namespace

void softmax(CFView x, FView out) {
  ProfileScope profileScope("softmax");
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  if (rows == 0)
    return;
  softmaxKernel<<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
      x.data, out.data, rows, width);
  checkLaunch("softmax");
}

void softmaxBackward(CFView y, CFView dY, FView dX) {
  ProfileScope profileScope("softmaxBackward");
  int64_t rows, width;
  rowsOf(y.shape, rows, width);
  if (rows == 0)
    return;
  softmaxBwdKernel<<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
      y.data, dY.data, dX.data, rows, width);
  checkLaunch("softmaxBackward");
}

namespace {

template <typename OutT>
void rmsNormImpl(CFView x, CFView w, float eps, OutT *y, const char *name) {
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  if (rows == 0)
    return;
  RowConfig rc;
  if (rowConfig(width, rc) && rowsAligned({x.data, w.data, y})) {
    unsigned grid = rc.warpRows ? gridFor(rows, rc.threads / 32) : rowGrid(rows);
    dispatchRows(rc, [&](auto v, auto warpRows) {
      rmsNormVecKernel<decltype(v)::value, decltype(warpRows)::value, OutT>
          <<<grid, rc.threads, 0, currentStream()>>>(x.data, w.data, eps, y,
                                                     rows, width);
    });
    checkLaunch(name);
    return;
  }
  rmsNormKernel<OutT><<<rowGrid(rows), rowThreads(width), 0,
                        currentStream()>>>(x.data, w.data, eps, y, rows,
                                           width);
  checkLaunch(name);
}

} // namespace

void rmsNorm(CFView x, CFView w, float eps, FView y) {
  ProfileScope profileScope("rmsNorm");
  rmsNormImpl(x, w, eps, y.data, "rmsNorm");
}

void rmsNormToBf16(CFView x, CFView w, float eps, BView y) {
  ProfileScope profileScope("rmsNormToBf16");
  rmsNormImpl(x, w, eps, bf16Data(y), "rmsNormToBf16");
}

void rmsNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                     FView dW) {
  ProfileScope profileScope("rmsNormBackward");
  const char *name = "rmsNormBackward";
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  if (rows == 0) {
    if (dW.data)
      fillDevice(dW.data, dW.shape.numel(), 0.0f, name);
    return;
  }
  if (!dX.data && !dW.data)
    return;
  RowConfig rc;
  if (rowConfig(width, rc) &&
      rowsAligned({x.data, w.data, dY.data, dX.data})) {
    int64_t tileRows = normTileRows(rows, rc.warpRows ? 8 : 1);
    int64_t tiles = (rows + tileRows - 1) / tileRows;
    bool staged = dW.data && tiles > 1;
    Temp partial(staged ? size_t(tiles * width) * sizeof(double) : 0, name);
    double *part = staged ? partial.as<double>() : nullptr;
    float *direct = dW.data && !staged ? dW.data : nullptr;
    dispatchRows(rc, [&](auto v, auto warpRows) {
      rmsNormBwdVecKernel<decltype(v)::value, decltype(warpRows)::value>
          <<<unsigned(tiles), rc.threads, 0, currentStream()>>>(
              x.data, w.data, eps, dY.data, dX.data, rows, width, tileRows,
              part, direct);
    });
    checkLaunch(name);
    if (staged)
      finishColumnTiles(part, tiles, width, dW.data, name);
    partial.release();
    return;
  }
  Temp inv(dW.data ? size_t(rows) * sizeof(float) : 0, name);
  rmsNormBwdKernel<<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
      x.data, w.data, eps, dY.data, dX.data, inv.as<float>(), rows, width);
  checkLaunch(name);
  if (dW.data)
    tiledColumnSums(rows, width, dW.data,
                    RmsDwTerm{dY.data, x.data, inv.as<float>(), width}, name);
  inv.release();
}

void layerNorm(CFView x, CFView w, CFView b, float eps, FView y) {
  ProfileScope profileScope("layerNorm");
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  if (rows == 0)
    return;
  layerNormKernel<<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
      x.data, w.data, b.data, eps, y.data, rows, width);
  checkLaunch("layerNorm");
}

void layerNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                       FView dW, FView dB) {
  ProfileScope profileScope("layerNormBackward");
  const char *name = "layerNormBackward";
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  if (rows == 0) {
    if (dW.data)
      fillDevice(dW.data, dW.shape.numel(), 0.0f, name);
    if (dB.data)
      fillDevice(dB.data, dB.shape.numel(), 0.0f, name);
    return;
  }
  RowConfig rc;
  if ((dX.data || dW.data || dB.data) && rowConfig(width, rc) &&
      rowsAligned({x.data, w.data, dY.data, dX.data})) {
    int64_t tileRows = normTileRows(rows, rc.warpRows ? 8 : 1);
    int64_t tiles = (rows + tileRows - 1) / tileRows;
    bool staged = tiles > 1;
    size_t part = staged ? size_t(tiles * width) * sizeof(double) : 0;
    Temp partialW(dW.data ? part : 0, name), partialB(dB.data ? part : 0, name);
    double *pw = dW.data && staged ? partialW.as<double>() : nullptr;
    double *pb = dB.data && staged ? partialB.as<double>() : nullptr;
    float *directW = dW.data && !staged ? dW.data : nullptr;
    float *directB = dB.data && !staged ? dB.data : nullptr;
    dispatchRows(rc, [&](auto v, auto warpRows) {
      layerNormBwdVecKernel<decltype(v)::value, decltype(warpRows)::value>
          <<<unsigned(tiles), rc.threads, 0, currentStream()>>>(
              x.data, w.data, eps, dY.data, dX.data, rows, width, tileRows,
              pw, directW, pb, directB);
    });
    checkLaunch(name);
    if (pw)
      finishColumnTiles(pw, tiles, width, dW.data, name);
    if (pb)
      finishColumnTiles(pb, tiles, width, dB.data, name);
    partialW.release();
    partialB.release();
    return;
  }
  Temp stats(dW.data ? size_t(rows) * 2 * sizeof(float) : 0, name);
  float *means = dW.data ? stats.as<float>() : nullptr;
  float *rstds = dW.data ? stats.as<float>() + rows : nullptr;
  if (dX.data || dW.data) {
    layerNormBwdKernel<<<rowGrid(rows), rowThreads(width), 0,
                         currentStream()>>>(x.data, w.data, eps, dY.data,
                                            dX.data, means, rstds, rows,
                                            width);
    checkLaunch(name);
  }
  if (dW.data)
    tiledColumnSums(rows, width, dW.data,
                    LnDwTerm{dY.data, x.data, means, rstds, width}, name);
  if (dB.data)
    tiledColumnSums(rows, width, dB.data, LnDbTerm{dY.data, width}, name);
  stats.release();
}

void rotary(CFView x, CFView cos, CFView sin, FView y) {
  ProfileScope profileScope("rotary");
  rotaryImpl(x.shape, x.data, cos.data, sin.data, y.data, false, "rotary");
}

void rotaryBackward(CFView dY, CFView cos, CFView sin, FView dX) {
  ProfileScope profileScope("rotaryBackward");
  rotaryImpl(dY.shape, dY.data, cos.data, sin.data, dX.data, true,
             "rotaryBackward");
}

} // namespace rondo::cuda
