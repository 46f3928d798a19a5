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

#include "NormRows.cuh"
#include "Profile.cuh"

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
      dr[c] =
          w ? a * (gr[c] * w[c]) - bcoef * xr[c] : a * gr[c] - bcoef * xr[c];
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
    rotateFourPairs(x + r * D, cosT + t * D, sinT + t * D, y + r * D, q * 4, h,
                    backward);
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
    rotaryVecKernel<<<gridFor(rows * (D / 8)), kThreads, 0, currentStream()>>>(
        in, cosT, sinT, out, rows, T, D, backward);
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

/// rmsNormBwdVecKernel over `rc`'s rows: tiles of normTileRows rows, dX
/// through `dx`, and dW (when wanted) from the tiles' column sums, staged in
/// double and added in tile order when there are several.
template <typename Load, typename DxStore>
void rmsNormBackwardRows(const RowConfig &rc, const float *x, const float *w,
                         float eps, Load dy, DxStore dx, int64_t rows,
                         int64_t width, float *dW, const char *name) {
  int64_t tileRows = normTileRows(rows, rc.warpRows ? 8 : 1);
  int64_t tiles = (rows + tileRows - 1) / tileRows;
  bool staged = dW && tiles > 1;
  Temp partial(staged ? size_t(tiles * width) * sizeof(double) : 0, name);
  double *part = staged ? partial.as<double>() : nullptr;
  float *direct = dW && !staged ? dW : nullptr;
  dispatchRows(rc, [&](auto v, auto warpRows) {
    rmsNormBwdVecKernel<decltype(v)::value, decltype(warpRows)::value>
        <<<unsigned(tiles), rc.threads, 0, currentStream()>>>(
            x, w, eps, dy, dx, rows, width, tileRows, part, direct);
  });
  checkLaunch(name);
  if (staged)
    finishColumnTiles(part, tiles, width, dW, name);
  partial.release();
}

/// rmsNormVecKernel over `rc`'s rows, read through `load` (the rows, or a
/// residual add's sums) and stored to y (fp32, or bf16 rounded).
template <typename Load, typename OutT>
void rmsNormRows(const RowConfig &rc, Load load, const float *w, float eps,
                 OutT *y, int64_t rows, int64_t width, const char *name) {
  unsigned grid = rc.warpRows ? gridFor(rows, rc.threads / 32) : rowGrid(rows);
  dispatchRows(rc, [&](auto v, auto warpRows) {
    rmsNormVecKernel<decltype(v)::value, decltype(warpRows)::value>
        <<<grid, rc.threads, 0, currentStream()>>>(
            load, w, eps, PlainRowStore<OutT>{y}, rows, width);
  });
  checkLaunch(name);
}

template <typename OutT>
void rmsNormImpl(CFView x, CFView w, float eps, OutT *y, const char *name) {
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  if (rows == 0)
    return;
  RowConfig rc;
  if (rowConfig(width, rc) && rowsAligned({x.data, w.data, y})) {
    rmsNormRows(rc, PlainRowLoad{x.data}, w.data, eps, y, rows, width, name);
    return;
  }
  rmsNormKernel<OutT><<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
      x.data, w.data, eps, y, rows, width);
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

namespace {

/// rmsNormBackward of an fp32 dY or (rmsNormBackwardBf16) a bf16 one: the
/// row kernels read either; the general kernels read fp32, so a bf16 dY is
/// widened for them.
template <typename DyT>
void rmsNormBackwardImpl(CFView x, CFView w, float eps, const DyT *dY,
                         int64_t dYNumel, FView dX, FView dW,
                         const char *name) {
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
  if (rowConfig(width, rc) && rowsAligned({x.data, w.data, dY, dX.data})) {
    rmsNormBackwardRows(rc, x.data, w.data, eps, RowLoadOf<DyT>{dY},
                        PlainDxStore{dX.data}, rows, width, dW.data, name);
    return;
  }
  if constexpr (!std::is_same_v<DyT, float>) {
    WidenedBf16 wide(dY, dYNumel, name);
    rmsNormBackwardImpl(x, w, eps, wide.data(), dYNumel, dX, dW, name);
  } else {
    Temp inv(dW.data ? size_t(rows) * sizeof(float) : 0, name);
    rmsNormBwdKernel<<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
        x.data, w.data, eps, dY, dX.data, inv.as<float>(), rows, width);
    checkLaunch(name);
    if (dW.data)
      tiledColumnSums(rows, width, dW.data,
                      RmsDwTerm{dY, x.data, inv.as<float>(), width}, name);
    inv.release();
  }
}

} // namespace

void rmsNormBackwardBf16(CFView x, CFView w, float eps, CBView dY, FView dX,
                         FView dW) {
  ProfileScope profileScope("rmsNormBackwardBf16");
  if (dY.shape.numel() != x.shape.numel())
    contract("rmsNormBackwardBf16", "dY differs in size from x");
  rmsNormBackwardImpl(x, w, eps, bf16Data(dY), dY.shape.numel(), dX, dW,
                      "rmsNormBackwardBf16");
}

void rmsNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                     FView dW) {
  ProfileScope profileScope("rmsNormBackward");
  rmsNormBackwardImpl(x, w, eps, dY.data, dY.shape.numel(), dX, dW,
                      "rmsNormBackward");
}

namespace {

/// b in fp32 or, stored by its product in bf16, widened as it is loaded.
template <typename BT, typename OutT>
void addRmsNormImpl(CFView a, const BT *b, int64_t bNumel, CFView w, float eps,
                    FView sum, OutT *y, const char *name) {
  if (a.shape.numel() != sum.shape.numel() || bNumel != sum.shape.numel())
    contract(name, "a, b and sum differ in size (the add does not broadcast)");
  int64_t rows, width;
  rowsOf(sum.shape, rows, width);
  if (rows == 0)
    return;
  RowConfig rc;
  if (rowConfig(width, rc) && rowsAligned({a.data, b, sum.data, w.data, y})) {
    rmsNormRows(rc, AddRowLoad<BT>{a.data, b, sum.data}, w.data, eps, y, rows,
                width, name);
    return;
  }
  // The general kernels: the add, then the norm of the sum.
  if constexpr (std::is_same_v<BT, float>) {
    ::rondo::cuda::binary(BinaryKind::Add, a, CFView{b, sum.shape}, sum);
  } else {
    WidenedBf16 wide(b, bNumel, name);
    ::rondo::cuda::binary(BinaryKind::Add, a, CFView{wide.data(), sum.shape},
                          sum);
  }
  rmsNormImpl(CFView{sum.data, sum.shape}, w, eps, y, name);
}

/// rmsNormBackward's dX added to r (and rounded into copy when set), of an
/// fp32 dY or (rmsNormBackwardBf16Add[WithBf16]) a bf16 one.
template <typename DyT>
void rmsNormBackwardAddImpl(CFView x, CFView w, float eps, const DyT *dY,
                            int64_t dYNumel, CFView r, FView sum,
                            __nv_bfloat16 *copy, FView dW, const char *name) {
  if (r.shape.numel() != x.shape.numel() ||
      sum.shape.numel() != x.shape.numel() || dYNumel != x.shape.numel())
    contract(name, "dY, r and sum differ in size from x");
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  RowConfig rc;
  if (rows > 0 && rowConfig(width, rc) &&
      rowsAligned({x.data, w.data, dY, r.data, sum.data, copy})) {
    rmsNormBackwardRows(rc, x.data, w.data, eps, RowLoadOf<DyT>{dY},
                        AddDxStore{r.data, sum.data, copy}, rows, width,
                        dW.data, name);
    return;
  }
  // The general kernels: the backward, the add, the rounding.
  Temp dX(size_t(x.shape.numel()) * sizeof(float), name);
  if constexpr (std::is_same_v<DyT, float>) {
    ::rondo::cuda::rmsNormBackward(x, w, eps, CFView{dY, x.shape},
                                   FView{dX.as<float>(), x.shape}, dW);
  } else {
    WidenedBf16 wide(dY, dYNumel, name);
    ::rondo::cuda::rmsNormBackward(x, w, eps, CFView{wide.data(), x.shape},
                                   FView{dX.as<float>(), x.shape}, dW);
  }
  ::rondo::cuda::binary(BinaryKind::Add, r, CFView{dX.as<float>(), x.shape},
                        sum);
  if (copy)
    roundToBf16Copy(sum.data, copy, sum.shape.numel(), name);
  dX.release();
}

} // namespace

void addRmsNorm(CFView a, CFView b, CFView w, float eps, FView sum, FView y) {
  ProfileScope profileScope("addRmsNorm");
  addRmsNormImpl(a, b.data, b.shape.numel(), w, eps, sum, y.data, "addRmsNorm");
}

void addRmsNormToBf16(CFView a, CFView b, CFView w, float eps, FView sum,
                      BView y) {
  ProfileScope profileScope("addRmsNormToBf16");
  addRmsNormImpl(a, b.data, b.shape.numel(), w, eps, sum, bf16Data(y),
                 "addRmsNormToBf16");
}

void addRmsNormBf16(CFView a, CBView b, CFView w, float eps, FView sum,
                    FView y) {
  ProfileScope profileScope("addRmsNormBf16");
  addRmsNormImpl(a, bf16Data(b), b.shape.numel(), w, eps, sum, y.data,
                 "addRmsNormBf16");
}

void addRmsNormBf16ToBf16(CFView a, CBView b, CFView w, float eps, FView sum,
                          BView y) {
  ProfileScope profileScope("addRmsNormBf16ToBf16");
  addRmsNormImpl(a, bf16Data(b), b.shape.numel(), w, eps, sum, bf16Data(y),
                 "addRmsNormBf16ToBf16");
}

void rmsNormBackwardAdd(CFView x, CFView w, float eps, CFView dY, CFView r,
                        FView sum, FView dW) {
  ProfileScope profileScope("rmsNormBackwardAdd");
  rmsNormBackwardAddImpl(x, w, eps, dY.data, dY.shape.numel(), r, sum, nullptr,
                         dW, "rmsNormBackwardAdd");
}

void rmsNormBackwardBf16Add(CFView x, CFView w, float eps, CBView dY, CFView r,
                            FView sum, FView dW) {
  ProfileScope profileScope("rmsNormBackwardBf16Add");
  rmsNormBackwardAddImpl(x, w, eps, bf16Data(dY), dY.shape.numel(), r, sum,
                         nullptr, dW, "rmsNormBackwardBf16Add");
}

void rmsNormBackwardBf16AddWithBf16(CFView x, CFView w, float eps, CBView dY,
                                    CFView r, FView sum, BView sumBf16,
                                    FView dW) {
  ProfileScope profileScope("rmsNormBackwardBf16Add");
  rmsNormBackwardAddImpl(x, w, eps, bf16Data(dY), dY.shape.numel(), r, sum,
                         bf16Data(sumBf16), dW,
                         "rmsNormBackwardBf16AddWithBf16");
}

void rmsNormBackwardAddWithBf16(CFView x, CFView w, float eps, CFView dY,
                                CFView r, FView sum, BView sumBf16, FView dW) {
  ProfileScope profileScope("rmsNormBackwardAdd");
  rmsNormBackwardAddImpl(x, w, eps, dY.data, dY.shape.numel(), r, sum,
                         bf16Data(sumBf16), dW, "rmsNormBackwardAddWithBf16");
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
              x.data, w.data, eps, dY.data, dX.data, rows, width, tileRows, pw,
              directW, pb, directB);
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
                                            dX.data, means, rstds, rows, width);
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
