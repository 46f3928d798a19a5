//===- Norms.cu - Softmax, normalisation and rotary kernels ---------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One block per row of the last axis. Row statistics are carried in double
// like the CPU's, reduced by a fixed tree (each thread sums a strided subset
// in ascending order, then lanes and warps in a fixed order), so results
// depend only on the shape. Weight gradients are column sums (columnSums in
// Internal.cuh): row parts summed in order by one thread per column, parts
// summed in order.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

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

__global__ void rmsNormKernel(const float *x, const float *w, float eps,
                              float *y, int64_t rows, int64_t width) {
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * width;
    float *yr = y + r * width;
    double ss = rowSumSquares(xr, width, dscratch);
    float inv = float(1.0 / sqrt(ss / double(width) + double(eps)));
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
      yr[c] = w ? xr[c] * inv * w[c] : xr[c] * inv;
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

void rmsNorm(CFView x, CFView w, float eps, FView y) {
  ProfileScope profileScope("rmsNorm");
  int64_t rows, width;
  rowsOf(x.shape, rows, width);
  if (rows == 0)
    return;
  rmsNormKernel<<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
      x.data, w.data, eps, y.data, rows, width);
  checkLaunch("rmsNorm");
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
  Temp inv(dW.data ? size_t(rows) * sizeof(float) : 0, name);
  if (dX.data || dW.data) {
    rmsNormBwdKernel<<<rowGrid(rows), rowThreads(width), 0, currentStream()>>>(
        x.data, w.data, eps, dY.data, dX.data, inv.as<float>(), rows, width);
    checkLaunch(name);
  }
  if (dW.data)
    columnSums(rows, width, dW.data,
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
    columnSums(rows, width, dW.data,
               LnDwTerm{dY.data, x.data, means, rstds, width}, name);
  if (dB.data)
    columnSums(rows, width, dB.data, LnDbTerm{dY.data, width}, name);
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
