//===- Optimizer.cu - AdamW and gradient clipping on device state ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host optimizer's math (runtime/src/AdamW.cpp) on GPU memory, for
// optimizer state that stays on the device.
//
// AdamW is bitwise equal to rt::adamwUpdate: the library is compiled with
// --fmad=false and IEEE division and square root, so every operation of the
// update rounds as on the host (built with -ffp-contract=off), and the one
// fused operation, lerp's fmaf, is exact on both sides. The fp32 scalars are
// computed here in double in AdamW.cpp's order and rounded where it rounds
// them; this file's host code is compiled with -ffp-contract=off as well
// (CMakeLists.txt), or 1 - lr * wd could become an FMA on hosts (aarch64)
// whose compiler contracts by default.
//
// The update streams p, g, m, v once (28 bytes per parameter), so it is
// bound by memory bandwidth; a model has a few hundred tensors, many of them
// small, so it is one launch over fixed-size chunks of all of them. The
// tensor descriptors travel as a __grid_constant__ kernel parameter (CUDA
// 12.1+ allows 32 KiB on sm_70+): no upload, no temporary, and no host buffer
// that must outlive the call.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <algorithm>
#include <vector>

#include <climits>
#include <cmath>
#include <memory>

namespace rondo::cuda {

using namespace detail;

namespace {

__device__ inline bool aligned16Device(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

constexpr int kAdamWThreads = 256;
/// Elements per block: 16 float4 per thread. Small enough that the last wave
/// of blocks is short next to a whole update (W1's 1.7e9 parameters are about
/// 100K chunks), large enough that finding the chunk's tensor costs nothing.
constexpr int64_t kAdamWChunk = 16384;
/// Tensors per launch: the batch below must stay within the 32764 bytes of
/// kernel parameters.
constexpr int kAdamWMaxTensors = 512;

struct AdamWArgs {
  float *p;
  const float *g;
  float *m;
  float *v;
  int64_t numel;
  float decayFactor; ///< f32(1 - lr * wd)
  float negStepSize; ///< f32(-(lr / (1 - b1^t)))
};

struct AdamWBatch {
  int32_t count;
  float lerpWeight; ///< f32(1 - b1), or f32(1 - b1) - 1 on the large branch
  float beta2;
  float oneMinusBeta2;
  float bc2Sqrt; ///< f32(sqrt(1 - b2^t))
  float eps;
  /// firstChunk[t]: the first block of tensor t; firstChunk[count]: the grid.
  int32_t firstChunk[kAdamWMaxTensors + 1];
  /// Whether tensor t has weight decay (PyTorch skips the multiply at 0).
  uint8_t decay[kAdamWMaxTensors];
  AdamWArgs tensors[kAdamWMaxTensors];
};
static_assert(sizeof(AdamWBatch) <= 32764,
              "AdamWBatch exceeds the kernel parameter limit");

/// One element, in AdamW.cpp's adamwLoop order (see AdamW.h).
template <bool SmallLerpWeight>
__device__ __forceinline__ void
adamwElement(float &p, float g, float &m, float &v, bool decay,
             float decayFactor, float w, float b2, float c2, float bc2Sqrt,
             float eps, float negStep) {
  if (decay)
    p = p * decayFactor;
  // at::lerp_vec: fmadd(weight, end - start, start) for |weight| < 0.5, else
  // fmadd(weight - 1, end - start, end).
  m = SmallLerpWeight ? fmaf(w, g - m, m) : fmaf(w, g - m, g);
  // addcmul_ and addcdiv_ evaluate left to right; --fmad=false keeps the
  // products and sums apart.
  v = v * b2 + c2 * g * g;
  float denom = sqrtf(v) / bc2Sqrt + eps;
  p = p + negStep * m / denom;
}

/// Block b updates chunk b: elements [k * kAdamWChunk, +kAdamWChunk), with
/// k = b - firstChunk[t], of the tensor t whose chunks
/// [firstChunk[t], firstChunk[t + 1]) hold b.
template <bool SmallLerpWeight>
__global__ void __launch_bounds__(kAdamWThreads)
    adamwKernel(const __grid_constant__ AdamWBatch batch) {
  const int32_t chunk = int32_t(blockIdx.x);
  // The last tensor whose first chunk is <= chunk (the batch holds no empty
  // tensors, so that is the one that owns it). Uniform across the block.
  int lo = 0, hi = batch.count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (batch.firstChunk[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  const AdamWArgs &t = batch.tensors[lo];
  const int64_t begin = int64_t(chunk - batch.firstChunk[lo]) * kAdamWChunk;
  const int64_t rest = t.numel - begin;
  const int len = int(rest < kAdamWChunk ? rest : kAdamWChunk);
  float *__restrict__ p = t.p + begin;
  const float *__restrict__ g = t.g + begin;
  float *__restrict__ m = t.m + begin;
  float *__restrict__ v = t.v + begin;
  const bool decay = batch.decay[lo] != 0;
  const float decayFactor = t.decayFactor, negStep = t.negStepSize;
  const float w = batch.lerpWeight, b2 = batch.beta2, c2 = batch.oneMinusBeta2,
              bc2Sqrt = batch.bc2Sqrt, eps = batch.eps;
  auto update = [&](float &pi, float gi, float &mi, float &vi) {
    adamwElement<SmallLerpWeight>(pi, gi, mi, vi, decay, decayFactor, w, b2, c2,
                                  bc2Sqrt, eps, negStep);
  };
  int i = threadIdx.x;
  // Chunks start at multiples of 4 elements, so a tensor's chunks are all
  // aligned or all not; unaligned tensors (sub-views) take the scalar loop,
  // which computes the same bits.
  if (aligned16Device(p) && aligned16Device(g) && aligned16Device(m) &&
      aligned16Device(v)) {
    const int nv = len >> 2;
    for (; i < nv; i += kAdamWThreads) {
      float4 pv = load4(p + 4 * i), gv = load4(g + 4 * i);
      float4 mv = load4(m + 4 * i), vv = load4(v + 4 * i);
      update(pv.x, gv.x, mv.x, vv.x);
      update(pv.y, gv.y, mv.y, vv.y);
      update(pv.z, gv.z, mv.z, vv.z);
      update(pv.w, gv.w, mv.w, vv.w);
      store4(p + 4 * i, pv);
      store4(m + 4 * i, mv);
      store4(v + 4 * i, vv);
    }
    i = 4 * nv + threadIdx.x;
  }
  for (; i < len; i += kAdamWThreads) {
    float pi = p[i], mi = m[i], vi = v[i];
    update(pi, g[i], mi, vi);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

void launchAdamW(const AdamWBatch &batch, bool small) {
  const unsigned blocks = unsigned(batch.firstChunk[batch.count]);
  if (small)
    adamwKernel<true><<<blocks, kAdamWThreads, 0, currentStream()>>>(batch);
  else
    adamwKernel<false><<<blocks, kAdamWThreads, 0, currentStream()>>>(batch);
  checkLaunch("adamwUpdate");
}

//===----------------------------------------------------------------------===//
// Gradient norm partials
//===----------------------------------------------------------------------===//

constexpr int kNormThreads = 256;

/// partials[b] = sum of the squares of data[b * blockElems, +blockElems) in
/// double. Thread t adds elements 4q, 4q + 1, 4q + 2, 4q + 3 for q = t,
/// t + kNormThreads, ... in that order (float4 or scalar loads alike, so the
/// bits do not depend on alignment), then blockSum's fixed tree adds the
/// threads: the order depends on n and blockElems only.
__device__ double blockSumSquares(const float *x, int64_t len,
                                  double *scratch) {
  const bool vec = aligned16Device(x);
  double acc = 0.0;
  for (int64_t e = 4 * int64_t(threadIdx.x); e < len; e += 4 * kNormThreads) {
    float x0, x1, x2, x3;
    if (vec && e + 4 <= len) {
      float4 f = load4(x + e);
      x0 = f.x, x1 = f.y, x2 = f.z, x3 = f.w;
    } else {
      // Padding adds +0.0, which leaves the (non-negative) sum unchanged.
      x0 = x[e];
      x1 = e + 1 < len ? x[e + 1] : 0.0f;
      x2 = e + 2 < len ? x[e + 2] : 0.0f;
      x3 = e + 3 < len ? x[e + 3] : 0.0f;
    }
    // A float's square is exact in double, as on the host.
    acc += double(x0) * double(x0);
    acc += double(x1) * double(x1);
    acc += double(x2) * double(x2);
    acc += double(x3) * double(x3);
  }
  return blockSum(acc, scratch);
}

/// One block of one span: partials[i] = its sum of squares.
struct NormBlock {
  const float *data;
  int64_t len;
};

/// partials[b] = sum of the squares of block b (blocks[b]: blockElems
/// elements of a span, fewer at its end). Thread t adds elements 4q,
/// 4q + 1, 4q + 2, 4q + 3 for q = t, t + kNormThreads, ... in that order
/// (float4 or scalar loads alike, so the bits do not depend on alignment),
/// then blockSum's fixed tree adds the threads: the order depends on the
/// block's length only.
__global__ void __launch_bounds__(kNormThreads)
    sumSquaresKernel(const NormBlock *blocks, double *partials) {
  __shared__ double scratch[32];
  NormBlock b = blocks[blockIdx.x];
  double acc = blockSumSquares(b.data, b.len, scratch);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = acc;
}

//===----------------------------------------------------------------------===//
// Finiteness
//===----------------------------------------------------------------------===//

__device__ inline bool nonFinite(float x) {
  return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
}

/// Sets *flag to 1 when some element is NaN or infinite. Every writer writes
/// the same value, so the result does not depend on which one lands.
__global__ void nonFiniteKernel(const float *data, int64_t n, bool vec,
                                int *flag) {
  bool bad = false;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t i = first;
  if (vec) {
    const int64_t nv = n / 4;
    RONDO_GRID_STRIDE(q, nv) {
      float4 f = load4(data + 4 * q);
      bad |= nonFinite(f.x) | nonFinite(f.y) | nonFinite(f.z) | nonFinite(f.w);
    }
    i = 4 * nv + first;
    if (i < n)
      bad |= nonFinite(data[i]);
  } else {
    RONDO_GRID_STRIDE(e, n) { bad |= nonFinite(data[e]); }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0)
    *flag = 1;
}

//===----------------------------------------------------------------------===//
// Part sums
//===----------------------------------------------------------------------===//

/// Parts per launch; more are added by further launches that continue from
/// `sum`, which rounds alike (each addition is rounded to fp32 either way).
constexpr int kPartsPerLaunch = 16;

struct PartList {
  const float *p[kPartsPerLaunch];
  int count;
  /// 1: sum = sum + p[0] + ... (a continuation); 0: sum = p[0] + p[1] + ...
  int accumulate;
};

__global__ void sumPartsKernel(float *sum, const __grid_constant__ PartList l,
                               int64_t n, bool vec) {
  const int first = l.accumulate ? 0 : 1;
  if (vec) {
    const int64_t nv = n / 4;
    RONDO_GRID_STRIDE(q, nv) {
      float4 s = load4((l.accumulate ? sum : l.p[0]) + 4 * q);
      for (int k = first; k < l.count; ++k) {
        float4 x = load4(l.p[k] + 4 * q);
        s.x = s.x + x.x;
        s.y = s.y + x.y;
        s.z = s.z + x.z;
        s.w = s.w + x.w;
      }
      store4(sum + 4 * q, s);
    }
    const int64_t i = 4 * nv + int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
      float s = (l.accumulate ? sum : l.p[0])[i];
      for (int k = first; k < l.count; ++k)
        s = s + l.p[k][i];
      sum[i] = s;
    }
    return;
  }
  RONDO_GRID_STRIDE(i, n) {
    float s = (l.accumulate ? sum : l.p[0])[i];
    for (int k = first; k < l.count; ++k)
      s = s + l.p[k][i];
    sum[i] = s;
  }
}

} // namespace

void adamwUpdate(const AdamWTensor *tensors, size_t count,
                 const AdamWConfig &hyper, double lr, int64_t step) {
  ProfileScope profileScope("adamwUpdate");
  // AdamW.cpp's scalars, in its order (Python evaluates them in double; the
  // kernels take fp32 scalars).
  const double bias1 = 1.0 - std::pow(hyper.beta1, double(step));
  const double bias2 = 1.0 - std::pow(hyper.beta2, double(step));
  const double lerpWeight = 1.0 - hyper.beta1;
  const bool small = std::fabs(float(lerpWeight)) < 0.5f;

  // ~27 KB: on the heap rather than a worker thread's stack. A launch copies
  // its parameters when it is enqueued, so the batch is refilled at once.
  auto owned = std::make_unique<AdamWBatch>();
  AdamWBatch &batch = *owned;
  batch.lerpWeight = small ? float(lerpWeight) : float(lerpWeight) - 1.0f;
  batch.beta2 = float(hyper.beta2);
  batch.oneMinusBeta2 = float(1.0 - hyper.beta2);
  batch.bc2Sqrt = float(std::sqrt(bias2));
  batch.eps = float(hyper.eps);
  batch.count = 0;
  batch.firstChunk[0] = 0;
  for (size_t i = 0; i < count; ++i) {
    const AdamWTensor &x = tensors[i];
    if (x.numel <= 0)
      continue;
    const int64_t chunks = (x.numel + kAdamWChunk - 1) / kAdamWChunk;
    if (chunks > INT_MAX)
      contract("adamwUpdate", "tensor %zu of %lld elements is too large", i,
               (long long)x.numel);
    // The grid (one block per chunk) must stay below 2^31 blocks.
    if (batch.count == kAdamWMaxTensors ||
        int64_t(batch.firstChunk[batch.count]) + chunks > INT_MAX) {
      launchAdamW(batch, small);
      batch.count = 0;
      batch.firstChunk[0] = 0;
    }
    const double groupLr = lr * x.lrScale;
    const int c = batch.count;
    AdamWArgs &a = batch.tensors[c];
    a.p = x.param;
    a.g = x.grad;
    a.m = x.expAvg;
    a.v = x.expAvgSq;
    a.numel = x.numel;
    a.decayFactor = float(1.0 - groupLr * x.weightDecay);
    a.negStepSize = float(-(groupLr / bias1));
    batch.decay[c] = x.weightDecay != 0.0;
    batch.firstChunk[c + 1] = batch.firstChunk[c] + int32_t(chunks);
    batch.count = c + 1;
  }
  if (batch.count > 0)
    launchAdamW(batch, small);
}

void gradNormPartialsMany(const FloatSpan *spans, size_t count,
                          int64_t blockElems, double *partials) {
  ProfileScope profileScope("gradNormPartials");
  const char *name = "gradNormPartials";
  if (blockElems <= 0)
    contract(name, "blockElems %lld must be positive", (long long)blockElems);
  std::vector<NormBlock> blocks;
  for (size_t k = 0; k < count; ++k)
    for (int64_t b = 0; b < spans[k].n; b += blockElems)
      blocks.push_back({spans[k].data + b, std::min(blockElems, spans[k].n - b)});
  if (blocks.empty())
    return;
  if (blocks.size() > size_t(INT_MAX))
    contract(name, "%zu blocks are too many", blocks.size());
  cudaStream_t stream = currentStream();
  Temp table(blocks.size() * sizeof(NormBlock), name);
  Temp device(blocks.size() * sizeof(double), name);
  RONDO_CHECK(cudaMemcpyAsync(table.as<NormBlock>(), blocks.data(),
                              blocks.size() * sizeof(NormBlock),
                              cudaMemcpyHostToDevice, stream),
              name);
  sumSquaresKernel<<<unsigned(blocks.size()), kNormThreads, 0, stream>>>(
      table.as<NormBlock>(), device.as<double>());
  checkLaunch(name);
  RONDO_CHECK(cudaMemcpyAsync(partials, device.as<double>(),
                              blocks.size() * sizeof(double),
                              cudaMemcpyDeviceToHost, stream),
              name);
  table.release();
  device.release();
  RONDO_CHECK(cudaStreamSynchronize(stream), name);
}

void gradNormPartials(const float *data, int64_t n, int64_t blockElems,
                      double *partials) {
  FloatSpan span{data, n};
  gradNormPartialsMany(&span, 1, blockElems, partials);
}

int firstNonFiniteSpan(const FloatSpan *spans, size_t count) {
  ProfileScope profileScope("allFinite");
  const char *name = "allFinite";
  if (count == 0)
    return -1;
  cudaStream_t stream = currentStream();
  Temp flags(count * sizeof(int), name);
  RONDO_CHECK(cudaMemsetAsync(flags.as<int>(), 0, count * sizeof(int), stream),
              name);
  // One launch per span, one synchronisation for all of them.
  for (size_t k = 0; k < count; ++k) {
    int64_t n = spans[k].n;
    if (n <= 0)
      continue;
    const bool vec = aligned16(spans[k].data);
    nonFiniteKernel<<<gridFor(vec ? (n / 4 > 0 ? n / 4 : 1) : n), kThreads, 0,
                      stream>>>(spans[k].data, n, vec, flags.as<int>() + k);
    checkLaunch(name);
  }
  std::vector<int> bad(count);
  RONDO_CHECK(cudaMemcpyAsync(bad.data(), flags.as<int>(), count * sizeof(int),
                              cudaMemcpyDeviceToHost, stream),
              name);
  flags.release();
  RONDO_CHECK(cudaStreamSynchronize(stream), name);
  for (size_t k = 0; k < count; ++k)
    if (bad[k])
      return int(k);
  return -1;
}

bool allFinite(const float *data, int64_t n) {
  FloatSpan span{data, n};
  return firstNonFiniteSpan(&span, 1) < 0;
}

void scaleInPlace(float *data, int64_t n, float factor) {
  // The library's scale (out[i] = x[i] * factor, one read and one write of
  // each element by the same thread) is safe in place.
  if (n <= 0)
    return;
  ::rondo::cuda::scale(CFView{data, Shape{n}}, factor, FView{data, Shape{n}});
}

void sumParts(float *sum, const float *const *parts, int32_t count, int64_t n) {
  ProfileScope profileScope("sumParts");
  if (count <= 0 || n <= 0)
    return;
  for (int32_t begin = 0; begin < count; begin += kPartsPerLaunch) {
    PartList l;
    l.count = count - begin < kPartsPerLaunch ? count - begin : kPartsPerLaunch;
    l.accumulate = begin > 0;
    bool vec = aligned16(sum);
    for (int k = 0; k < l.count; ++k) {
      l.p[k] = parts[begin + k];
      vec = vec && aligned16(l.p[k]);
    }
    for (int k = l.count; k < kPartsPerLaunch; ++k)
      l.p[k] = nullptr;
    sumPartsKernel<<<gridFor(vec ? (n / 4 > 0 ? n / 4 : 1) : n), kThreads, 0,
                     currentStream()>>>(sum, l, n, vec);
    checkLaunch("sumParts");
  }
}

} // namespace rondo::cuda
