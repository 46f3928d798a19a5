//===- Attention.cu - Causal grouped-query attention ----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A simple tiled implementation, correct first (the fast fused path comes
// later). Tiles of BM query rows and BN keys are staged in shared memory
// (rows padded by one float against bank conflicts); every score is one
// thread's fma chain over D in ascending order.
//
// Forward: one block per (query tile, query head, batch), online softmax over
// the key tiles with the running row max, the row sum in double, and the
// output accumulated in shared memory; at the end out = acc / sum and
// lse = max + log(sum). Rows with no visible key get out = 0, lse = -inf.
//
// Backward, without atomics: delta_i = dO_i . O_i (double) first; then
//  - dQ: one block per (query tile, query head) walks the key tiles,
//    recomputing P = exp(s - lse) and dS = P (dP - delta), dQ += dS K;
//  - dK, dV: one block per (key tile, kv head) walks the query heads of its
//    group in ascending order and their query tiles in ascending order,
//    dV += P^T dO, dK += dS^T Q.
// Each output element is owned by one thread of one block and accumulated in
// a fixed order, so results are reproducible bit for bit. Tiles are 32 x 32
// (16 x 16 for head dimensions whose tiles would not fit in shared memory).
//
// Attention sinks (attentionSinks, both precisions): the head's sink logit
// starts each row's running max, with exp(0) = 1 as the starting row sum, so
// lse includes the sink and the backward's P = exp(s - lse) needs nothing
// else. dSinks[h] = -sum over (b, i) of exp(sink - lse) * delta: one block
// per head, each thread a fixed stride of rows in double, then a fixed tree.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <string>

namespace rondo::cuda {

using namespace detail;

namespace {

constexpr int kAttnThreads = 256;

struct AttnDims {
  int64_t B, Hq, Hkv, T, S, D, group;
};

AttnDims attnDims(const Shape &q, const Shape &k, const Shape &v,
                  const char *name) {
  if (q.rank != 4 || k.rank != 4 || v.rank != 4)
    contract(name, "q, k and v must be rank 4");
  AttnDims d{q.dims[0], q.dims[1], k.dims[1], q.dims[2],
             k.dims[2], q.dims[3], 1};
  if (d.Hkv <= 0 || d.Hq % d.Hkv != 0)
    contract(name, "%lld query heads not a multiple of %lld kv heads",
             (long long)d.Hq, (long long)d.Hkv);
  if (k.dims[0] != d.B || !(k == v) || k.dims[3] != d.D)
    contract(name, "k/v shapes do not match q");
  if (d.Hq > 65535 || d.B > 65535)
    contract(name, "too many heads or batch entries for the grid");
  d.group = d.Hq / d.Hkv;
  return d;
}

struct AttnArgs {
  const float *q, *k, *v, *o, *lse, *dout, *delta;
  const float *sinks; // [Hq] or null
  float *out, *lseOut, *dq, *dk, *dv;
  int64_t Hq, Hkv, T, S, D, group;
  bool causal;
  int64_t window; // > 0: sliding window (causal only)
  float scale;
  int BM, BN;
};

__device__ inline int64_t visibleKeys(const AttnArgs &a, int64_t i) {
  if (!a.causal)
    return a.S;
  int64_t n = i + a.S - a.T + 1;
  return n < 0 ? 0 : (n > a.S ? a.S : n);
}

/// The first key visible to query row i (non-decreasing in i).
__device__ inline int64_t firstKey(const AttnArgs &a, int64_t i) {
  if (a.window <= 0)
    return 0;
  int64_t n = visibleKeys(a, i) - a.window;
  return n < 0 ? 0 : n;
}

/// Whether query row i sees key j.
__device__ inline bool sees(const AttnArgs &a, int64_t i, int64_t j) {
  return j < visibleKeys(a, i) && j >= firstKey(a, i);
}

/// Copies `rows` rows of D floats (starting at row `row0` of a [limit, D]
/// matrix) into shared memory with row stride ld, zero past the end.
__device__ inline void loadTile(float *dst, int ld, const float *src,
                                int64_t row0, int rows, int64_t limit,
                                int64_t D) {
  for (int64_t idx = threadIdx.x; idx < int64_t(rows) * D; idx += blockDim.x) {
    int64_t r = idx / D, d = idx % D;
    dst[r * ld + d] = row0 + r < limit ? src[(row0 + r) * D + d] : 0.0f;
  }
}

__device__ inline float dotRows(const float *a, const float *b, int64_t D) {
  float acc = 0.0f;
  for (int64_t d = 0; d < D; ++d)
    acc = fmaf(a[d], b[d], acc);
  return acc;
}

__host__ __device__ inline size_t alignUp8(size_t bytes) {
  return (bytes + 7) & ~size_t(7);
}

__host__ __device__ inline size_t fwdFloats(int BM, int BN, int64_t D) {
  int64_t ld = D + 1;
  return size_t(BM * ld + 2 * BN * ld + BM * (BN + 1) + BM * D + 2 * BM);
}
size_t fwdSmem(int BM, int BN, int64_t D) {
  return alignUp8(fwdFloats(BM, BN, D) * 4) + size_t(BM) * sizeof(double);
}
size_t dqSmem(int BM, int BN, int64_t D) {
  int64_t ld = D + 1;
  return size_t(2 * BM * ld + 2 * BN * ld + BM * (BN + 1) + BM * D + 2 * BM) *
         4;
}
size_t dkvSmem(int BM, int BN, int64_t D) {
  int64_t ld = D + 1;
  return size_t(2 * BN * ld + 2 * BM * ld + 2 * BM * (BN + 1) + 2 * BN * D +
                2 * BM) *
         4;
}

__global__ void __launch_bounds__(kAttnThreads) attnFwdKernel(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smemRaw[];
  const int BM = a.BM, BN = a.BN;
  const int64_t D = a.D;
  const int ld = int(D + 1), lds = BN + 1;
  float *Qs = reinterpret_cast<float *>(smemRaw);
  float *Ks = Qs + BM * ld;
  float *Vs = Ks + BN * ld;
  float *Ss = Vs + BN * ld;
  float *Os = Ss + BM * lds;
  float *mRow = Os + BM * D;
  float *alphaRow = mRow + BM;
  double *lRow = reinterpret_cast<double *>(
      smemRaw + alignUp8(fwdFloats(BM, BN, D) * 4));

  const int64_t i0 = int64_t(blockIdx.x) * BM;
  const int64_t hq = blockIdx.y, b = blockIdx.z;
  const int64_t hk = hq / a.group;
  const int rowsHere = int(a.T - i0 < BM ? a.T - i0 : BM);
  const float *qh = a.q + (b * a.Hq + hq) * a.T * D;
  const float *kh = a.k + (b * a.Hkv + hk) * a.S * D;
  const float *vh = a.v + (b * a.Hkv + hk) * a.S * D;

  loadTile(Qs, ld, qh, i0, BM, a.T, D);
  for (int64_t idx = threadIdx.x; idx < int64_t(BM) * D; idx += blockDim.x)
    Os[idx] = 0.0f;
  // A sink is one more key with exp(sink - m) and no value (none at -inf).
  const float sink = a.sinks ? a.sinks[hq] : -INFINITY;
  for (int r = threadIdx.x; r < BM; r += blockDim.x) {
    mRow[r] = sink;
    lRow[r] = sink == -INFINITY ? 0.0 : 1.0;
  }
  const int64_t nMax = visibleKeys(a, i0 + rowsHere - 1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  // Key tiles wholly before the band of the block's first row are skipped.
  for (int64_t j0 = firstKey(a, i0) / BN * BN; j0 < nMax; j0 += BN) {
    __syncthreads();
    loadTile(Ks, ld, kh, j0, BN, a.S, D);
    loadTile(Vs, ld, vh, j0, BN, a.S, D);
    __syncthreads();
    for (int idx = threadIdx.x; idx < BM * BN; idx += blockDim.x) {
      int r = idx / BN, c = idx % BN;
      float s = -INFINITY;
      if (r < rowsHere && sees(a, i0 + r, j0 + c))
        s = dotRows(Qs + r * ld, Ks + c * ld, D) * a.scale;
      Ss[r * lds + c] = s;
    }
    __syncthreads();
    for (int r = warp; r < BM; r += warps) {
      float tileMax = -INFINITY;
      for (int c = lane; c < BN; c += 32)
        tileMax = fmaxf(tileMax, Ss[r * lds + c]);
      tileMax = warpMax(tileMax);
      float mOld = mRow[r];
      float mNew = fmaxf(mOld, tileMax);
      double tileSum = 0.0;
      float alpha = 1.0f;
      if (mNew == -INFINITY) {
        for (int c = lane; c < BN; c += 32)
          Ss[r * lds + c] = 0.0f;
      } else {
        for (int c = lane; c < BN; c += 32) {
          float s = Ss[r * lds + c];
          float p = s == -INFINITY ? 0.0f : expf(s - mNew);
          Ss[r * lds + c] = p;
          tileSum += double(p);
        }
        tileSum = warpSum(tileSum);
        alpha = mOld == -INFINITY ? 0.0f : expf(mOld - mNew);
      }
      __syncwarp();
      if (lane == 0) {
        lRow[r] = lRow[r] * double(alpha) + tileSum;
        mRow[r] = mNew;
        alphaRow[r] = alpha;
      }
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < int64_t(BM) * D; idx += blockDim.x) {
      int r = int(idx / D);
      int64_t d = idx % D;
      float acc = Os[idx] * alphaRow[r];
      const float *pr = Ss + r * lds;
      for (int c = 0; c < BN; ++c)
        acc = fmaf(pr[c], Vs[c * ld + d], acc);
      Os[idx] = acc;
    }
  }
  __syncthreads();
  float *oh = a.out + ((b * a.Hq + hq) * a.T + i0) * D;
  for (int64_t idx = threadIdx.x; idx < int64_t(rowsHere) * D;
       idx += blockDim.x) {
    int r = int(idx / D);
    double l = lRow[r];
    oh[idx] = l > 0.0 ? float(double(Os[idx]) / l) : 0.0f;
  }
  if (a.lseOut) {
    float *lh = a.lseOut + (b * a.Hq + hq) * a.T + i0;
    for (int r = threadIdx.x; r < rowsHere; r += blockDim.x) {
      double l = lRow[r];
      lh[r] = l > 0.0 ? float(double(mRow[r]) + log(l)) : -INFINITY;
    }
  }
}

/// delta[row] = sum_d dO[row, d] * O[row, d] (double, one warp per row).
__global__ void attnDeltaKernel(const float *dout, const float *o,
                                float *delta, int64_t rows, int64_t D) {
  int lane = threadIdx.x & 31;
  int64_t warpId = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  int64_t numWarps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = warpId; r < rows; r += numWarps) {
    double acc = 0.0;
    for (int64_t d = lane; d < D; d += 32)
      acc += double(dout[r * D + d]) * o[r * D + d];
    acc = warpSum(acc);
    if (lane == 0)
      delta[r] = float(acc);
  }
}

/// dSinks[h] = -sum_{b, i} exp(sinks[h] - lse) * delta over the rows of head
/// h: one block (kSinkThreads threads) per head, thread t takes the rows
/// t, t + kSinkThreads, ... in double, then a fixed tree. No atomics.
constexpr int kSinkThreads = 256;
__global__ void __launch_bounds__(kSinkThreads)
    attnSinkGradKernel(const float *sinks, const float *lse, const float *delta,
                       float *dSinks, int64_t B, int64_t Hq, int64_t T) {
  __shared__ double part[kSinkThreads];
  const int64_t h = blockIdx.x;
  const double sink = sinks[h];
  double acc = 0.0;
  for (int64_t idx = threadIdx.x; idx < B * T; idx += kSinkThreads) {
    int64_t row = ((idx / T) * Hq + h) * T + idx % T;
    float l = lse[row];
    if (!isinf(l))
      acc += exp(sink - double(l)) * double(delta[row]);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kSinkThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half)
      part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    dSinks[h] = float(-part[0]);
}

/// dS (and P) of one score: returns false for a masked or empty position.
__device__ inline bool gradScore(const AttnArgs &a, const float *qr,
                                 const float *dor, const float *kr,
                                 const float *vr, float l, float dl, float &p,
                                 float &ds) {
  if (isinf(l))
    return false;
  float s = dotRows(qr, kr, a.D) * a.scale;
  float dp = dotRows(dor, vr, a.D);
  p = expf(s - l);
  ds = p * (dp - dl);
  return true;
}

__global__ void __launch_bounds__(kAttnThreads) attnDqKernel(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smemRaw[];
  const int BM = a.BM, BN = a.BN;
  const int64_t D = a.D;
  const int ld = int(D + 1), lds = BN + 1;
  float *Qs = reinterpret_cast<float *>(smemRaw);
  float *dOs = Qs + BM * ld;
  float *Ks = dOs + BM * ld;
  float *Vs = Ks + BN * ld;
  float *dSs = Vs + BN * ld;
  float *acc = dSs + BM * lds;
  float *lseS = acc + BM * D;
  float *deltaS = lseS + BM;

  const int64_t i0 = int64_t(blockIdx.x) * BM;
  const int64_t hq = blockIdx.y, b = blockIdx.z;
  const int64_t hk = hq / a.group;
  const int rowsHere = int(a.T - i0 < BM ? a.T - i0 : BM);
  const int64_t rowBase = (b * a.Hq + hq) * a.T;
  const float *kh = a.k + (b * a.Hkv + hk) * a.S * D;
  const float *vh = a.v + (b * a.Hkv + hk) * a.S * D;

  loadTile(Qs, ld, a.q + rowBase * D, i0, BM, a.T, D);
  loadTile(dOs, ld, a.dout + rowBase * D, i0, BM, a.T, D);
  for (int r = threadIdx.x; r < BM; r += blockDim.x) {
    lseS[r] = r < rowsHere ? a.lse[rowBase + i0 + r] : -INFINITY;
    deltaS[r] = r < rowsHere ? a.delta[rowBase + i0 + r] : 0.0f;
  }
  for (int64_t idx = threadIdx.x; idx < int64_t(BM) * D; idx += blockDim.x)
    acc[idx] = 0.0f;
  const int64_t nMax = visibleKeys(a, i0 + rowsHere - 1);
  // Key tiles wholly before the band of the block's first row are skipped.
  for (int64_t j0 = firstKey(a, i0) / BN * BN; j0 < nMax; j0 += BN) {
    __syncthreads();
    loadTile(Ks, ld, kh, j0, BN, a.S, D);
    loadTile(Vs, ld, vh, j0, BN, a.S, D);
    __syncthreads();
    for (int idx = threadIdx.x; idx < BM * BN; idx += blockDim.x) {
      int r = idx / BN, c = idx % BN;
      float p = 0.0f, ds = 0.0f;
      if (r < rowsHere && sees(a, i0 + r, j0 + c))
        if (!gradScore(a, Qs + r * ld, dOs + r * ld, Ks + c * ld, Vs + c * ld,
                       lseS[r], deltaS[r], p, ds))
          ds = 0.0f;
      dSs[r * lds + c] = ds;
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < int64_t(BM) * D; idx += blockDim.x) {
      int r = int(idx / D);
      int64_t d = idx % D;
      float v = acc[idx];
      const float *dsr = dSs + r * lds;
      for (int c = 0; c < BN; ++c)
        v = fmaf(dsr[c], Ks[c * ld + d], v);
      acc[idx] = v;
    }
  }
  __syncthreads();
  float *dqh = a.dq + (rowBase + i0) * D;
  for (int64_t idx = threadIdx.x; idx < int64_t(rowsHere) * D;
       idx += blockDim.x)
    dqh[idx] = a.scale * acc[idx];
}

__global__ void __launch_bounds__(kAttnThreads) attnDkvKernel(AttnArgs a) {
  extern __shared__ __align__(16) unsigned char smemRaw[];
  const int BM = a.BM, BN = a.BN;
  const int64_t D = a.D;
  const int ld = int(D + 1), lds = BN + 1;
  float *Ks = reinterpret_cast<float *>(smemRaw);
  float *Vs = Ks + BN * ld;
  float *Qs = Vs + BN * ld;
  float *dOs = Qs + BM * ld;
  float *Ps = dOs + BM * ld;
  float *dSs = Ps + BM * lds;
  float *dKacc = dSs + BM * lds;
  float *dVacc = dKacc + BN * D;
  float *lseS = dVacc + BN * D;
  float *deltaS = lseS + BM;

  const int64_t j0 = int64_t(blockIdx.x) * BN;
  const int64_t hk = blockIdx.y, b = blockIdx.z;
  const int colsHere = int(a.S - j0 < BN ? a.S - j0 : BN);
  const int64_t kvBase = (b * a.Hkv + hk) * a.S;
  loadTile(Ks, ld, a.k + kvBase * D, j0, BN, a.S, D);
  loadTile(Vs, ld, a.v + kvBase * D, j0, BN, a.S, D);
  for (int64_t idx = threadIdx.x; idx < int64_t(BN) * D; idx += blockDim.x) {
    dKacc[idx] = 0.0f;
    dVacc[idx] = 0.0f;
  }
  // The first query that sees key j0.
  int64_t first = a.causal ? j0 - (a.S - a.T) : 0;
  if (first < 0)
    first = 0;
  const int64_t iStart = (first / BM) * BM;
  // With a window, queries after the last that sees the tile's last key
  // are skipped.
  int64_t iEnd = a.T;
  if (a.window > 0) {
    int64_t last = j0 + colsHere - 1 - (a.S - a.T) + a.window;
    iEnd = last < 0 ? 0 : (last < a.T ? last : a.T);
  }
  for (int64_t hl = 0; hl < a.group; ++hl) {
    const int64_t hq = hk * a.group + hl;
    const int64_t rowBase = (b * a.Hq + hq) * a.T;
    for (int64_t i0 = iStart; i0 < iEnd; i0 += BM) {
      const int rowsHere = int(a.T - i0 < BM ? a.T - i0 : BM);
      __syncthreads();
      loadTile(Qs, ld, a.q + rowBase * D, i0, BM, a.T, D);
      loadTile(dOs, ld, a.dout + rowBase * D, i0, BM, a.T, D);
      for (int r = threadIdx.x; r < BM; r += blockDim.x) {
        lseS[r] = r < rowsHere ? a.lse[rowBase + i0 + r] : -INFINITY;
        deltaS[r] = r < rowsHere ? a.delta[rowBase + i0 + r] : 0.0f;
      }
      __syncthreads();
      for (int idx = threadIdx.x; idx < BM * BN; idx += blockDim.x) {
        int r = idx / BN, c = idx % BN;
        float p = 0.0f, ds = 0.0f;
        if (r < rowsHere && c < colsHere && sees(a, i0 + r, j0 + c))
          if (!gradScore(a, Qs + r * ld, dOs + r * ld, Ks + c * ld,
                         Vs + c * ld, lseS[r], deltaS[r], p, ds)) {
            p = 0.0f;
            ds = 0.0f;
          }
        Ps[r * lds + c] = p;
        dSs[r * lds + c] = ds;
      }
      __syncthreads();
      for (int64_t idx = threadIdx.x; idx < int64_t(BN) * D;
           idx += blockDim.x) {
        int c = int(idx / D);
        int64_t d = idx % D;
        float accV = dVacc[idx], accK = dKacc[idx];
        for (int r = 0; r < BM; ++r) {
          accV = fmaf(Ps[r * lds + c], dOs[r * ld + d], accV);
          accK = fmaf(dSs[r * lds + c], Qs[r * ld + d], accK);
        }
        dVacc[idx] = accV;
        dKacc[idx] = accK;
      }
    }
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < int64_t(colsHere) * D;
       idx += blockDim.x) {
    if (a.dk)
      a.dk[(kvBase + j0) * D + idx] = a.scale * dKacc[idx];
    if (a.dv)
      a.dv[(kvBase + j0) * D + idx] = dVacc[idx];
  }
}

/// Picks the tile size (32, else 16) whose shared memory fits the device.
int pickTile(size_t (*smem)(int, int, int64_t), int64_t D, const char *name,
             size_t &bytes) {
  int device = 0;
  RONDO_CHECK(cudaGetDevice(&device), name);
  int limit = 0;
  RONDO_CHECK(cudaDeviceGetAttribute(
                  &limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
              name);
  for (int tile : {32, 16}) {
    bytes = smem(tile, tile, D);
    if (bytes <= size_t(limit))
      return tile;
  }
  contract(name, "head dimension %lld too large for shared memory",
           (long long)D);
}

template <typename Kernel>
void launchAttn(Kernel kernel, dim3 grid, size_t smem, const AttnArgs &args,
                const char *name) {
  RONDO_CHECK(cudaFuncSetAttribute(kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(smem)),
              name);
  kernel<<<grid, kAttnThreads, smem, currentStream()>>>(args);
  checkLaunch(name);
}

AttnArgs baseArgs(const AttnDims &d, bool causal, int64_t window,
                  float scale) {
  AttnArgs a{};
  a.Hq = d.Hq;
  a.Hkv = d.Hkv;
  a.T = d.T;
  a.S = d.S;
  a.D = d.D;
  a.group = d.group;
  a.causal = causal;
  a.window = window;
  a.scale = scale;
  return a;
}

FlashDims flashDims(const AttnDims &d, int64_t window,
                    const float *sinks = nullptr) {
  return FlashDims{d.B, d.Hq, d.Hkv, d.T, d.S, d.D, window, sinks};
}

/// sinks must be [Hq].
void checkSinks(const AttnDims &d, const Shape &sinks, const char *name) {
  if (sinks.rank != 1 || sinks.dims[0] != d.Hq)
    contract(name, "sinks must be [%lld], one per query head", (long long)d.Hq);
}

/// The share of the T x S score pairs attended (for the profile's FLOPs):
/// all, the causal triangle (counted as half), or the band of a window.
double attendedShare(const AttnDims &d, bool causal, int64_t window,
                     const char *name) {
  if (window < 0 || (window > 0 && !causal))
    contract(name, "window %lld needs causal attention", (long long)window);
  if (!causal || d.T * d.S == 0)
    return 1.0;
  if (window == 0 || window >= d.S)
    return 0.5;
  double pairs = 0;
  for (int64_t i = 0; i < d.T; ++i) {
    int64_t n = i + d.S - d.T + 1;
    pairs += double(n < 0 ? 0 : (n < window ? n : window));
  }
  return pairs / (double(d.T) * double(d.S));
}

void attentionImpl(CFView q, CFView k, CFView v, const float *sinks,
                   bool causal, int64_t window, float scale, FView out,
                   FView lse, const char *name) {
  AttnDims d = attnDims(q.shape, k.shape, v.shape, name);
  double share = attendedShare(d, causal, window, name);
  ProfileScope profileScope(
      std::string(name) +
          (precision() == Precision::Bf16 && flashAttentionSupports(d.D)
               ? " bf16"
               : " fp32"),
      2.0 * 2.0 * d.B * d.Hq * d.T * d.S * d.D * share);
  if (d.B * d.Hq == 0 || d.T == 0)
    return;
  if (precision() == Precision::Bf16 && flashAttentionSupports(d.D)) {
    flashAttentionForward(flashDims(d, window, sinks), q.data, k.data, v.data,
                          causal, scale, out.data, lse.data, name);
    return;
  }
  setLastAttentionImpl(AttentionImpl::Fp32);
  AttnArgs a = baseArgs(d, causal, window, scale);
  a.sinks = sinks;
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.out = out.data;
  a.lseOut = lse.data;
  size_t smem = 0;
  int tile = pickTile(fwdSmem, d.D, name, smem);
  a.BM = a.BN = tile;
  dim3 grid(unsigned((d.T + tile - 1) / tile), unsigned(d.Hq),
            unsigned(d.B));
  launchAttn(attnFwdKernel, grid, smem, a, name);
}

} // namespace

void attention(CFView q, CFView k, CFView v, bool causal, int64_t window,
               float scale, FView out, FView lse) {
  attentionImpl(q, k, v, nullptr, causal, window, scale, out, lse, "attention");
}

void attentionSinks(CFView q, CFView k, CFView v, CFView sinks, bool causal,
                    int64_t window, float scale, FView out, FView lse) {
  const char *name = "attentionSinks";
  checkSinks(attnDims(q.shape, k.shape, v.shape, name), sinks.shape, name);
  attentionImpl(q, k, v, sinks.data, causal, window, scale, out, lse, name);
}

void attentionBackward(CFView q, CFView k, CFView v, CFView out, CFView lse,
                       CFView dOut, bool causal, int64_t window, float scale,
                       FView dQ, FView dK, FView dV) {
  const char *name = "attentionBackward";
  AttnDims d = attnDims(q.shape, k.shape, v.shape, name);
  double share = attendedShare(d, causal, window, name);
  ProfileScope profileScope(
      std::string("attentionBackward") +
          (precision() == Precision::Bf16 && flashAttentionSupports(d.D)
               ? " bf16"
               : " fp32"),
      2.5 * 2.0 * 2.0 * d.B * d.Hq * d.T * d.S * d.D * share);
  bool empty = d.B * d.Hkv == 0 || d.T == 0;
  if (empty || d.S == 0) {
    if (dK.data)
      fillDevice(dK.data, dK.shape.numel(), 0.0f, name);
    if (dV.data)
      fillDevice(dV.data, dV.shape.numel(), 0.0f, name);
    if (dQ.data)
      fillDevice(dQ.data, dQ.shape.numel(), 0.0f, name);
    return;
  }
  if (!lse.data)
    contract(name, "lse is required");
  if (precision() == Precision::Bf16 && flashAttentionSupports(d.D)) {
    flashAttentionBackward(flashDims(d, window), q.data, k.data, v.data, out.data,
                           lse.data, dOut.data, causal, scale, dQ.data, dK.data,
                           dV.data, name);
    return;
  }
  setLastAttentionImpl(AttentionImpl::Fp32);
  int64_t rows = d.B * d.Hq * d.T;
  Temp delta(size_t(rows) * sizeof(float), name);
  attnDeltaKernel<<<gridFor(rows * 32), kThreads, 0, currentStream()>>>(
      dOut.data, out.data, delta.as<float>(), rows, d.D);
  checkLaunch(name);
  AttnArgs a = baseArgs(d, causal, window, scale);
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.o = out.data;
  a.lse = lse.data;
  a.dout = dOut.data;
  a.delta = delta.as<float>();
  a.dq = dQ.data;
  a.dk = dK.data;
  a.dv = dV.data;
  if (dQ.data) {
    size_t smem = 0;
    int tile = pickTile(dqSmem, d.D, name, smem);
    a.BM = a.BN = tile;
    dim3 grid(unsigned((d.T + tile - 1) / tile), unsigned(d.Hq),
              unsigned(d.B));
    launchAttn(attnDqKernel, grid, smem, a, name);
  }
  if (dK.data || dV.data) {
    size_t smem = 0;
    int tile = pickTile(dkvSmem, d.D, name, smem);
    a.BM = a.BN = tile;
    dim3 grid(unsigned((d.S + tile - 1) / tile), unsigned(d.Hkv),
              unsigned(d.B));
    launchAttn(attnDkvKernel, grid, smem, a, name);
  }
  delta.release();
}

namespace {

/// Attention's q, k and v stored in bf16 (kern-bf16-storage).
struct StoredQkv {
  CBView q, k, v;
  /// Whether cuDNN may read them as they are: bf16 attention at a head
  /// width it serves, on 16-byte aligned tensors (the arena's and pool's
  /// are).
  bool cudnnMayRead(const AttnDims &d) const {
    return precision() == Precision::Bf16 && flashAttentionSupports(d.D) &&
           aligned16(q.data) && aligned16(k.data) && aligned16(v.data);
  }
  StoredBf16Qkv pointers() const { return {q.data, k.data, v.data}; }
};

/// Their fp32 values for Rondo's kernels, which round them back to these
/// very bf16 values.
struct WidenedQkv {
  WidenedBf16 q, k, v;
  CBView qv, kv, vv;
  WidenedQkv(const StoredQkv &s, const char *name)
      : q(s.q.data, s.q.shape.numel(), name),
        k(s.k.data, s.k.shape.numel(), name),
        v(s.v.data, s.v.shape.numel(), name), qv(s.q), kv(s.k), vv(s.v) {}
  CFView qView() const { return CFView{q.data(), qv.shape}; }
  CFView kView() const { return CFView{k.data(), kv.shape}; }
  CFView vView() const { return CFView{v.data(), vv.shape}; }
  void release() {
    v.temp.release();
    k.temp.release();
    q.temp.release();
  }
};

} // namespace

void attentionBf16(CBView q, CBView k, CBView v, bool causal, int64_t window,
                   float scale, FView out, FView lse) {
  const char *name = "attentionBf16";
  AttnDims d = attnDims(q.shape, k.shape, v.shape, name);
  double share = attendedShare(d, causal, window, name);
  StoredQkv stored{q, k, v};
  if (stored.cudnnMayRead(d) && d.B * d.Hq > 0 && d.T > 0) {
    // Profiled as `attention` is: the same work, without the rounding.
    ProfileScope profileScope(std::string("attention bf16"),
                              2.0 * 2.0 * d.B * d.Hq * d.T * d.S * d.D * share);
    if (cudnnAttentionForward(flashDims(d, window), nullptr, nullptr, nullptr,
                              causal, scale, out.data, lse.data, name,
                              stored.pointers()))
      return;
    profileScope.discard();
  }
  WidenedQkv widened(stored, name);
  attentionImpl(widened.qView(), widened.kView(), widened.vView(), nullptr,
                causal, window, scale, out, lse, "attention");
  widened.release();
}

void attentionBackwardBf16(CBView q, CBView k, CBView v, CFView out, CFView lse,
                           CFView dOut, bool causal, int64_t window,
                           float scale, FView dQ, FView dK, FView dV) {
  const char *name = "attentionBackwardBf16";
  AttnDims d = attnDims(q.shape, k.shape, v.shape, name);
  double share = attendedShare(d, causal, window, name);
  StoredQkv stored{q, k, v};
  if (stored.cudnnMayRead(d) && d.B * d.Hkv > 0 && d.T > 0 && d.S > 0 &&
      lse.data && (dQ.data || dK.data || dV.data)) {
    ProfileScope profileScope(std::string("attentionBackward bf16"),
                              2.5 * 2.0 * 2.0 * d.B * d.Hq * d.T * d.S * d.D *
                                  share);
    if (cudnnAttentionBackward(flashDims(d, window), nullptr, nullptr, nullptr,
                               out.data, lse.data, dOut.data, causal, scale,
                               dQ.data, dK.data, dV.data, name,
                               stored.pointers()))
      return;
    profileScope.discard();
  }
  WidenedQkv widened(stored, name);
  ::rondo::cuda::attentionBackward(widened.qView(), widened.kView(),
                                   widened.vView(), out, lse, dOut, causal,
                                   window, scale, dQ, dK, dV);
  widened.release();
}

namespace {

/// cuDNN's forward of the bf16 q, k and v into the bf16 out (v and out
/// token-major with `tokens`, else heads-major); false where Rondo's
/// kernels must run instead.
bool cudnnForwardStored(const AttnDims &d, const StoredQkv &stored, bool causal,
                        int64_t window, float scale, BView out, FView lse,
                        bool tokens, const char *name) {
  double share = attendedShare(d, causal, window, name);
  if (!stored.cudnnMayRead(d) || !aligned16(out.data) || d.B * d.Hq == 0 ||
      d.T == 0)
    return false;
  ProfileScope profileScope(std::string("attention bf16"),
                            2.0 * 2.0 * d.B * d.Hq * d.T * d.S * d.D * share);
  StoredBf16Qkv io = stored.pointers();
  io.outStore = out.data;
  io.vTokens = io.outTokens = tokens;
  if (cudnnAttentionForward(flashDims(d, window), nullptr, nullptr, nullptr,
                            causal, scale, nullptr, lse.data, name, io))
    return true;
  profileScope.discard();
  return false;
}

/// cuDNN's backward from the bf16 out and dOut into the bf16 gradients (v,
/// out, dOut and dV token-major with `tokens`); false where Rondo's kernels
/// must run instead.
bool cudnnBackwardStored(const AttnDims &d, const StoredQkv &stored, CBView out,
                         CFView lse, CBView dOut, bool causal, int64_t window,
                         float scale, BView dQ, BView dK, BView dV, bool tokens,
                         const char *name) {
  double share = attendedShare(d, causal, window, name);
  if (!stored.cudnnMayRead(d) || !aligned16(out.data) ||
      !aligned16(dOut.data) || !aligned16(dQ.data) || !aligned16(dK.data) ||
      !aligned16(dV.data) || d.B * d.Hkv == 0 || d.T == 0 || d.S == 0 ||
      !lse.data || !(dQ.data || dK.data || dV.data))
    return false;
  ProfileScope profileScope(std::string("attentionBackward bf16"),
                            2.5 * 2.0 * 2.0 * d.B * d.Hq * d.T * d.S * d.D *
                                share);
  StoredBf16Qkv io = stored.pointers();
  io.out = out.data;
  io.dOut = dOut.data;
  io.dQStore = dQ.data;
  io.dKStore = dK.data;
  io.dVStore = dV.data;
  io.vTokens = io.outTokens = tokens;
  if (cudnnAttentionBackward(flashDims(d, window), nullptr, nullptr, nullptr,
                             nullptr, lse.data, nullptr, causal, scale, nullptr,
                             nullptr, nullptr, name, io))
    return true;
  profileScope.discard();
  return false;
}

} // namespace

void attentionBf16ToBf16(CBView q, CBView k, CBView v, bool causal,
                         int64_t window, float scale, BView out, FView lse) {
  const char *name = "attentionBf16ToBf16";
  AttnDims d = attnDims(q.shape, k.shape, v.shape, name);
  if (cudnnForwardStored(d, StoredQkv{q, k, v}, causal, window, scale, out, lse,
                         /*tokens=*/false, name))
    return;
  // Rondo's kernels write fp32: rounded as it is stored.
  Temp o(size_t(out.shape.numel()) * sizeof(float), name);
  ::rondo::cuda::attentionBf16(q, k, v, causal, window, scale,
                               FView{o.as<float>(), out.shape}, lse);
  roundToBf16Copy(o.as<float>(), out.data, out.shape.numel(), name);
  o.release();
}

void attentionBackwardBf16ToBf16(CBView q, CBView k, CBView v, CBView out,
                                 CFView lse, CBView dOut, bool causal,
                                 int64_t window, float scale, BView dQ,
                                 BView dK, BView dV) {
  const char *name = "attentionBackwardBf16ToBf16";
  AttnDims d = attnDims(q.shape, k.shape, v.shape, name);
  if (cudnnBackwardStored(d, StoredQkv{q, k, v}, out, lse, dOut, causal, window,
                          scale, dQ, dK, dV, /*tokens=*/false, name))
    return;
  // Rondo's kernels read and write fp32: out and dOut widened, the
  // gradients rounded as they are stored.
  WidenedBf16 o(out.data, out.shape.numel(), name),
      g(dOut.data, dOut.shape.numel(), name);
  auto result = [&](const BView &r) {
    return size_t(r.data ? r.shape.numel() : 0) * sizeof(float);
  };
  Temp gq(result(dQ), name), gk(result(dK), name), gv(result(dV), name);
  ::rondo::cuda::attentionBackwardBf16(
      q, k, v, CFView{o.data(), out.shape}, lse, CFView{g.data(), dOut.shape},
      causal, window, scale,
      FView{dQ.data ? gq.as<float>() : nullptr, dQ.shape},
      FView{dK.data ? gk.as<float>() : nullptr, dK.shape},
      FView{dV.data ? gv.as<float>() : nullptr, dV.shape});
  if (dQ.data)
    roundToBf16Copy(gq.as<float>(), dQ.data, dQ.shape.numel(), name);
  if (dK.data)
    roundToBf16Copy(gk.as<float>(), dK.data, dK.shape.numel(), name);
  if (dV.data)
    roundToBf16Copy(gv.as<float>(), dV.data, dV.shape.numel(), name);
  gv.release();
  gk.release();
  gq.release();
  g.temp.release();
  o.temp.release();
}

namespace {

constexpr int64_t kSwapHeadsAndTokens[4] = {0, 2, 1, 3};

/// [B, L, H, D] as [B, H, L, D] (or back): the shape a token-major operand
/// has heads-major.
Shape swappedHeads(const Shape &s, const char *name) {
  if (s.rank != 4)
    contract(name, "token-major operands must be rank 4");
  return Shape{s.dims[0], s.dims[2], s.dims[1], s.dims[3]};
}

/// A bf16 operand moved to the other layout in a temporary.
struct MovedBf16 {
  Temp temp;
  Shape shape;
  MovedBf16(CBView x, const char *name)
      : temp(size_t(x.shape.numel()) * 2, name),
        shape(swappedHeads(x.shape, name)) {
    ::rondo::cuda::transposeBf16(x, kSwapHeadsAndTokens, view());
  }
  explicit MovedBf16(const Shape &s, const char *name)
      : temp(size_t(s.numel()) * 2, name), shape(swappedHeads(s, name)) {}
  BView view() { return BView{temp.as<uint16_t>(), shape}; }
  CBView cview() { return CBView{temp.as<uint16_t>(), shape}; }
};

} // namespace

void attentionBf16ToBf16Tokens(CBView q, CBView k, CBView v, bool causal,
                               int64_t window, float scale, BView out,
                               FView lse) {
  // v as its projection wrote it and out as the output projection reads it:
  // cuDNN takes both through strides, where transposes moved them before.
  const char *name = "attentionBf16ToBf16Tokens";
  Shape vHeads = swappedHeads(v.shape, name),
        outHeads = swappedHeads(out.shape, name);
  AttnDims d = attnDims(q.shape, k.shape, vHeads, name);
  if (!(outHeads == q.shape))
    contract(name, "out is not q's shape token-major");
  if (cudnnForwardStored(d, StoredQkv{q, k, CBView{v.data, vHeads}}, causal,
                         window, scale, out, lse, /*tokens=*/true, name))
    return;
  // Rondo's kernels read and write heads-major: v and out moved.
  MovedBf16 vh(v, name), oh(out.shape, name);
  ::rondo::cuda::attentionBf16ToBf16(q, k, vh.cview(), causal, window, scale,
                                     oh.view(), lse);
  ::rondo::cuda::transposeBf16(oh.cview(), kSwapHeadsAndTokens, out);
  oh.temp.release();
  vh.temp.release();
}

void attentionBackwardBf16ToBf16Tokens(CBView q, CBView k, CBView v,
                                       CBView out, CFView lse, CBView dOut,
                                       bool causal, int64_t window, float scale,
                                       BView dQ, BView dK, BView dV) {
  const char *name = "attentionBackwardBf16ToBf16Tokens";
  Shape vHeads = swappedHeads(v.shape, name);
  AttnDims d = attnDims(q.shape, k.shape, vHeads, name);
  if (!(swappedHeads(out.shape, name) == q.shape) ||
      !(swappedHeads(dOut.shape, name) == q.shape) ||
      !(dV.shape == v.shape))
    contract(name, "out, dOut or dV is not token-major");
  if (cudnnBackwardStored(d, StoredQkv{q, k, CBView{v.data, vHeads}}, out, lse,
                          dOut, causal, window, scale, dQ, dK, dV,
                          /*tokens=*/true, name))
    return;
  MovedBf16 vh(v, name), oh(out, name), gh(dOut, name), dvh(dV.shape, name);
  ::rondo::cuda::attentionBackwardBf16ToBf16(
      q, k, vh.cview(), oh.cview(), lse, gh.cview(), causal, window, scale, dQ,
      dK, dV.data ? dvh.view() : BView{nullptr, dvh.shape});
  if (dV.data)
    ::rondo::cuda::transposeBf16(dvh.cview(), kSwapHeadsAndTokens, dV);
  dvh.temp.release();
  gh.temp.release();
  oh.temp.release();
  vh.temp.release();
}

void attentionSinksBackward(CFView q, CFView k, CFView v, CFView sinks,
                            CFView out, CFView lse, CFView dOut, bool causal,
                            int64_t window, float scale, FView dQ, FView dK,
                            FView dV, FView dSinks) {
  const char *name = "attentionSinksBackward";
  AttnDims d = attnDims(q.shape, k.shape, v.shape, name);
  checkSinks(d, sinks.shape, name);
  // P = exp(s - lse) already carries the sink: the dQ/dK/dV pass is
  // attention's.
  if (dQ.data || dK.data || dV.data) // qualified: ADL also finds cpu's
    rondo::cuda::attentionBackward(q, k, v, out, lse, dOut, causal, window,
                                   scale, dQ, dK, dV);
  if (!dSinks.data)
    return;
  int64_t rows = d.B * d.Hq * d.T;
  if (rows == 0) {
    fillDevice(dSinks.data, d.Hq, 0.0f, name);
    return;
  }
  if (!lse.data)
    contract(name, "lse is required");
  ProfileScope profileScope(name, 2.0 * double(rows) * double(d.D));
  Temp delta(size_t(rows) * sizeof(float), name);
  attnDeltaKernel<<<gridFor(rows * 32), kThreads, 0, currentStream()>>>(
      dOut.data, out.data, delta.as<float>(), rows, d.D);
  checkLaunch(name);
  attnSinkGradKernel<<<unsigned(d.Hq), kSinkThreads, 0, currentStream()>>>(
      sinks.data, lse.data, delta.as<float>(), dSinks.data, d.B, d.Hq, d.T);
  checkLaunch(name);
  delta.release();
}

} // namespace rondo::cuda
