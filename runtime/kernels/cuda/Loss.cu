//===- Loss.cu - Cross-entropy kernels ------------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One block per logits row: the row max and sum(exp(x - max)) in double in
// one pass (running per-thread maxima, then a fixed tree), and the loss
// lse - x[label] in double; the CPU takes two passes, so the two agree to
// rounding. The per-row losses go to a double buffer and one block sums them
// with a fixed tree over the non-ignored rows; an invalid label anywhere
// makes the sum 0 and raises *badLabel (the CPU's `false`).
//
// linearCrossEntropy computes logits chunk by chunk ([chunkRows, V] at a time,
// a stream-ordered temporary) with cuBLAS. The fp32 backward follows the
// CPU: dLogits in place, dH = dLogits W^T per chunk, dW zeroed and then
// accumulated over chunks in chunk order with beta = 1. Under bf16 the
// logits themselves are stored in bf16 by their product, as autocast's
// lm_head output is, and the loss and its gradient read them so; the
// backward replaces them in place by dLogits in bf16 and accumulates dW per
// group of chunks (bf16Chunks). The *Add kernels add dW to what the
// buffer holds (the first product's beta is 1 too): a GPU trainer's stage
// function passes its gradient slot, as its weight-gradient products do,
// instead of a temporary and an accumulate pass over the [V, D] table.
// Unlike the CPU it
// cannot skip chunks whose rows are all ignored (that needs the labels on the
// host); those chunks contribute exact zeros. linearCrossEntropyWithGrad is
// the backward's loop with each row's loss taken from the statistics its
// gradient is computed from: one logits product per chunk where the forward
// and the backward took one each (a quarter of the LM head's GEMM time).
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <memory>
#include <optional>

#include <algorithm>

namespace rondo::cuda {

using namespace detail;

namespace {

constexpr int kLossThreads = 512;

__device__ inline bool validLabel(int64_t l, int64_t ignoreIndex, int64_t V) {
  return l != ignoreIndex && l >= 0 && l < V;
}

/// Row max and sum(exp(x - max)) of a row, for every thread of the block,
/// from one read of the row (a vocabulary row is far larger than the cache,
/// so each pass is a pass over memory): each thread keeps its running max
/// and its sum relative to it, rescaled when the max grows; the block's max
/// is then taken and the threads' sums, rescaled to it, added by the fixed
/// tree. A NaN propagates into the sum as in two passes.
template <typename InT>
__device__ inline void rowMaxSum(const InT *x, int64_t V, float *fscratch,
                                 double *dscratch, float &m, double &sum) {
  float mt = -INFINITY;
  double st = 0.0;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    float v = loadIn(x + c);
    if (v > mt) {
      st = st * double(expf(mt - v)) + 1.0;
      mt = v;
    } else if (v != -INFINITY) {
      st += double(expf(v - mt));
    }
  }
  m = blockMax(mt, fscratch);
  double s = st == 0.0 ? 0.0 : st * double(expf(mt - m));
  sum = blockSum(s, dscratch);
}

/// Eight bf16 logits (16 bytes) widened.
__device__ inline void load8(const __nv_bfloat16 *p, float (&v)[8]) {
  uint4 bits = *reinterpret_cast<const uint4 *>(p);
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&bits);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float2 f = __bfloat1622float2(h[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}

/// rowMaxSum of a row of bf16 logits whose length is a multiple of eight
/// and whose start is 16-byte aligned, eight at a time: each thread keeps
/// its running max, rescaled once per eight values, and adds their
/// exponentials (in fp32, relative to the eight's max) to its double sum;
/// then the same block max and fixed tree. The scalar loop spent its time
/// on a branch and a double add per value (bf16 rows ran no faster than
/// fp32 ones).
__device__ inline void rowMaxSumBf16x8(const __nv_bfloat16 *x, int64_t V,
                                       float *fscratch, double *dscratch,
                                       float &m, double &sum) {
  float mt = -INFINITY;
  double st = 0.0;
  for (int64_t c = 8 * int64_t(threadIdx.x); c < V; c += 8 * blockDim.x) {
    float v[8];
    load8(x + c, v);
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < 8; ++k)
      vm = fmaxf(vm, v[k]);
    if (vm == -INFINITY)
      continue; // eight -inf logits add nothing
    if (vm > mt) {
      st = st == 0.0 ? 0.0 : st * double(expf(mt - vm));
      mt = vm;
    }
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      part += expf(v[k] - mt);
    st += double(part);
  }
  m = blockMax(mt, fscratch);
  double s = st == 0.0 ? 0.0 : st * double(expf(mt - m));
  sum = blockSum(s, dscratch);
}

/// Whether a bf16 row kernel may take rows eight values at a time.
bool rowsOf8(const void *p, const void *q, int64_t V) {
  return V % 8 == 0 && aligned16(p) && aligned16(q);
}

/// Row r's statistics (max and sum of exponentials), from the scalar loop
/// or eight bf16 values at a time (Eight: rowsOf8), and with `loss` the
/// row's loss, lse - x[l], written by thread 0: the one prologue of the
/// loss-row kernels.
template <bool Eight, typename InT>
__device__ inline void rowStats(const InT *x, int64_t V, int64_t l,
                                double *loss, float *fscratch, double *dscratch,
                                float &m, double &sum) {
  if constexpr (Eight)
    rowMaxSumBf16x8(x, V, fscratch, dscratch, m, sum);
  else
    rowMaxSum(x, V, fscratch, dscratch, m, sum);
  if (loss && threadIdx.x == 0)
    *loss = double(m) + log(sum) - double(loadIn(x + l));
}

/// losses[r0 + r] = loss of row r of `logits` (0 for ignored/invalid rows);
/// logits in fp32, or in bf16 as the bf16 LM head's product stores them,
/// eight at a time where rowsOf8 (Eight).
template <bool Eight = false, typename InT>
__global__ void rowLossKernel(const InT *logits, int64_t n, int64_t V,
                              const int64_t *labels, int64_t r0,
                              int64_t ignoreIndex, double *losses) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    int64_t l = labels[r0 + r];
    if (!validLabel(l, ignoreIndex, V)) {
      if (threadIdx.x == 0)
        losses[r0 + r] = 0.0;
      continue;
    }
    const InT *x = logits + r * V;
    float m;
    double sum;
    rowStats<Eight>(x, V, l, losses + r0 + r, fscratch, dscratch, m, sum);
  }
}

/// out = scale * (softmax(logits) - onehot(label)), zero rows for ignored
/// or invalid labels; out may be logits itself (in place: fp32, or the bf16
/// LM head's bf16 logits) or a bf16 buffer (the rounding the backward's
/// products read, stored directly). With `losses`, each row's loss as
/// rowLossKernel computes it, from the same max and sum.
template <typename InT, typename OutT>
__global__ void rowGradKernel(const InT *logits, OutT *out, int64_t n,
                              int64_t V, const int64_t *labels, int64_t r0,
                              int64_t ignoreIndex, float scale,
                              double *losses) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    int64_t l = labels[r0 + r];
    const InT *x = logits + r * V;
    OutT *y = out + r * V;
    if (!validLabel(l, ignoreIndex, V)) {
      if (losses && threadIdx.x == 0)
        losses[r0 + r] = 0.0;
      for (int64_t c = threadIdx.x; c < V; c += blockDim.x)
        storeOut(y + c, 0.0f);
      continue;
    }
    float m;
    double sum;
    rowStats<false>(x, V, l, losses ? losses + r0 + r : nullptr, fscratch,
                    dscratch, m, sum);
    double inv = double(scale) / sum;
    __syncthreads(); // the row and its label's logit are read before rewriting
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
      float v = float(double(expf(loadIn(x + c) - m)) * inv);
      if (c == l)
        v -= scale;
      storeOut(y + c, v);
    }
  }
}

/// rowGradKernel for bf16 logits and gradient eight at a time (rowsOf8), in
/// place or not: the loss and the row's statistics as rowLossKernel<true>,
/// each gradient value expf(x - m) * (scale / sum) in fp32 then rounded.
__global__ void rowGradBf16x8Kernel(const __nv_bfloat16 *logits,
                                    __nv_bfloat16 *out, int64_t n, int64_t V,
                                    const int64_t *labels, int64_t r0,
                                    int64_t ignoreIndex, float scale,
                                    double *losses) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    int64_t l = labels[r0 + r];
    const __nv_bfloat16 *x = logits + r * V;
    __nv_bfloat16 *y = out + r * V;
    if (!validLabel(l, ignoreIndex, V)) {
      if (losses && threadIdx.x == 0)
        losses[r0 + r] = 0.0;
      for (int64_t c = 8 * int64_t(threadIdx.x); c < V; c += 8 * blockDim.x)
        *reinterpret_cast<uint4 *>(y + c) = make_uint4(0, 0, 0, 0);
      continue;
    }
    float m;
    double sum;
    rowStats<true>(x, V, l, losses ? losses + r0 + r : nullptr, fscratch,
                   dscratch, m, sum);
    float inv = float(double(scale) / sum);
    __syncthreads(); // the row and its label's logit are read before rewriting
    for (int64_t c = 8 * int64_t(threadIdx.x); c < V; c += 8 * blockDim.x) {
      float v[8];
      load8(x + c, v);
      uint4 bits;
      __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&bits);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float a = expf(v[2 * k] - m) * inv, b = expf(v[2 * k + 1] - m) * inv;
        if (c + 2 * k == l)
          a -= scale;
        if (c + 2 * k + 1 == l)
          b -= scale;
        h[k] = __floats2bfloat162_rn(a, b);
      }
      *reinterpret_cast<uint4 *>(y + c) = bits;
    }
  }
}

/// *lossSum = sum over non-ignored rows (fixed tree), or 0 with *badLabel = 1
/// when a label is invalid.
__global__ void lossSumKernel(const double *losses, const int64_t *labels,
                              int64_t n, int64_t V, int64_t ignoreIndex,
                              float *lossSum, int *badLabel) {
  __shared__ double dscratch[32];
  double acc = 0.0;
  int bad = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    int64_t l = labels[r];
    if (l == ignoreIndex)
      continue;
    if (l < 0 || l >= V)
      bad = 1;
    else
      acc += losses[r];
  }
  bad = __syncthreads_or(bad);
  acc = blockSum(acc, dscratch);
  if (threadIdx.x == 0) {
    *lossSum = bad ? 0.0f : float(acc);
    if (bad && badLabel)
      *badLabel = 1;
  }
}

unsigned rowGrid(int64_t rows) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(rows, 1 << 20)));
}

struct LinearDims {
  int64_t N, D, V;
};

LinearDims linearDims(const Shape &h, const Shape &w, bool transW,
                      const char *name) {
  LinearDims d;
  rowsOf(h, d.N, d.D);
  if (w.rank != 2)
    contract(name, "weight must be rank 2");
  int64_t wD = transW ? w.dims[1] : w.dims[0];
  d.V = transW ? w.dims[0] : w.dims[1];
  if (wD != d.D)
    contract(name, "hidden size %lld does not match %lld", (long long)d.D,
             (long long)wD);
  return d;
}

/// logits[n, V] = h[r0 : r0 + n] . W.
/// Under Precision::Bf16 the weight, read by every chunk's products, is
/// rounded to bf16 once per call rather than once per product: for a
/// 151936 x 2048 LM head and 1024-row chunks that was a third of the
/// backward's time. Null in fp32.
/// A weight already stored in bf16 (`rounded`: a resident weight's bf16
/// copy, the *Bf16W kernels) is read as it is.
class RoundedWeight {
public:
  RoundedWeight(CFView w, const void *rounded, const char *name) {
    if (precision() != Precision::Bf16)
      return;
    if (rounded) {
      given_ = rounded;
      return;
    }
    temp_ = std::make_unique<Temp>(size_t(w.shape.numel()) * 2, name);
    roundToBf16Copy(w.data, temp_->as<void>(), w.shape.numel(), name);
  }
  const void *get() const { return temp_ ? temp_->as<void>() : given_; }
  void release() {
    if (temp_)
      temp_->release();
  }

private:
  std::unique_ptr<Temp> temp_;
  const void *given_ = nullptr;
};

/// The fp32 LM head's logits of rows [r0, r0 + n): h rows . op(W).
void chunkLogits(CFView h, CFView w, bool transW, const LinearDims &d,
                 int64_t r0, int64_t n, float *logits, const char *name) {
  gemmRowMajor(false, transW, n, d.V, d.D, 1.0f, h.data + r0 * d.D, d.D, 0,
               w.data, transW ? d.D : d.V, 0, 0.0f, logits, d.V, 0, 1, name);
}

/// The bf16 LM head's logits of rows [r0, r0 + n): the rows rounded to
/// bf16, the product stored in bf16 (cuBLAS rounds its fp32 accumulators as
/// autocast's logits are rounded), half the bytes the loss rows then read.
void chunkLogitsBf16(const float *rows, int64_t n, const void *w16, bool transW,
                     const LinearDims &d, __nv_bfloat16 *logits,
                     const char *name) {
  Temp a16(size_t(n * d.D) * 2, name);
  roundToBf16Copy(rows, a16.as<void>(), n * d.D, name);
  gemmRowMajorBf16As(CUDA_R_16BF, false, transW, n, d.V, d.D, 1.0f,
                     a16.as<void>(), d.D, 0, w16, transW ? d.D : d.V, 0, 0.0f,
                     logits, d.V, 0, 1, name);
  a16.release();
}

void finishLoss(const double *losses, IView labels, int64_t N, int64_t V,
                int64_t ignoreIndex, float *lossSum, int *badLabel,
                const char *name) {
  lossSumKernel<<<1, 1024, 0, currentStream()>>>(
      losses, labels.data, N, V, ignoreIndex, lossSum, badLabel);
  checkLaunch(name);
}

} // namespace

void crossEntropy(CFView logits, IView labels, int64_t ignoreIndex,
                  float *lossSum, int *badLabel) {
  ProfileScope profileScope("crossEntropy");
  const char *name = "crossEntropy";
  int64_t N, V;
  rowsOf(logits.shape, N, V);
  Temp losses(size_t(std::max<int64_t>(N, 1)) * sizeof(double), name);
  if (N > 0) {
    rowLossKernel<<<rowGrid(N), kLossThreads, 0, currentStream()>>>(
        logits.data, N, V, labels.data, 0, ignoreIndex, losses.as<double>());
    checkLaunch(name);
  }
  finishLoss(losses.as<double>(), labels, N, V, ignoreIndex, lossSum, badLabel,
             name);
  losses.release();
}

void crossEntropyBackward(CFView logits, IView labels, int64_t ignoreIndex,
                          float gradScale, FView dLogits) {
  ProfileScope profileScope("crossEntropyBackward");
  const char *name = "crossEntropyBackward";
  int64_t N, V;
  rowsOf(logits.shape, N, V);
  if (N == 0 || V == 0)
    return;
  ::rondo::cuda::copy(logits, dLogits);
  rowGradKernel<<<rowGrid(N), kLossThreads, 0, currentStream()>>>(
      dLogits.data, dLogits.data, N, V, labels.data, 0, ignoreIndex, gradScale,
      nullptr);
  checkLaunch(name);
}

namespace {

/// linearCrossEntropy of an fp32 weight, or (w16 non-null, under bf16) of
/// its bf16 form.
void linearCrossEntropyImpl(CFView h, CFView w, const void *w16Given,
                            bool transW, IView labels, int64_t ignoreIndex,
                            int64_t chunkRows, float *lossSum, int *badLabel,
                            const char *name) {
  LinearDims d = linearDims(h.shape, w.shape, transW, name);
  Temp losses(size_t(std::max<int64_t>(d.N, 1)) * sizeof(double), name);
  if (d.N > 0 && d.V > 0) {
    int64_t chunk = chunkRows <= 0 ? d.N : std::min(chunkRows, d.N);
    RoundedWeight w16(w, w16Given, name);
    // bf16 logits under Precision::Bf16, as the backward's (bf16Chunks).
    Temp logits(size_t(chunk * d.V) * (w16.get() ? 2 : sizeof(float)), name);
    for (int64_t r0 = 0; r0 < d.N; r0 += chunk) {
      int64_t n = std::min(chunk, d.N - r0);
      if (w16.get()) {
        auto *l16 = logits.as<__nv_bfloat16>();
        chunkLogitsBf16(h.data + r0 * d.D, n, w16.get(), transW, d, l16, name);
        if (rowsOf8(l16, l16, d.V))
          rowLossKernel<true><<<rowGrid(n), kLossThreads, 0, currentStream()>>>(
              l16, n, d.V, labels.data, r0, ignoreIndex, losses.as<double>());
        else
          rowLossKernel<<<rowGrid(n), kLossThreads, 0, currentStream()>>>(
              l16, n, d.V, labels.data, r0, ignoreIndex, losses.as<double>());
      } else {
        chunkLogits(h, w, transW, d, r0, n, logits.as<float>(), name);
        rowLossKernel<<<rowGrid(n), kLossThreads, 0, currentStream()>>>(
            logits.as<float>(), n, d.V, labels.data, r0, ignoreIndex,
            losses.as<double>());
      }
      checkLaunch(name);
    }
    logits.release();
    w16.release();
  } else if (d.N > 0) {
    RONDO_CHECK(cudaMemsetAsync(losses.as<double>(), 0,
                                size_t(d.N) * sizeof(double), currentStream()),
                name);
  }
  finishLoss(losses.as<double>(), labels, d.N, d.V, ignoreIndex, lossSum,
             badLabel, name);
  losses.release();
}

/// Chunks whose bf16 logits gradients are kept together for one dW
/// product (Precision::Bf16): dW, an fp32 [V, D] read and written by every
/// accumulating product, then moves once per group instead of once per
/// chunk, and the product's K is the group's rows. Eight 1024-row chunks
/// are W1's microbatch of 8192 tokens (one dW product per microbatch on
/// the H100 plan; a group of four moved 2.5 GB more a microbatch, 0.5 ms
/// on the H200, where its products ran 3.76 ms). The cost model's
/// workspace of the fused LM head counts the group (compiler/CostModel).
constexpr int64_t kDwGroupChunks = 8;

/// The fp32 backward: per chunk, the logits gradient in place, its dH rows
/// and its dW part.
void fp32Chunks(CFView h, CFView w, bool transW, const LinearDims &d,
                IView labels, int64_t ignoreIndex, float gradScale,
                int64_t chunk, double *losses, FView dH, FView dW, bool addToDW,
                const char *name) {
  if (dW.data && !addToDW)
    fillDevice(dW.data, dW.shape.numel(), 0.0f, name);
  Temp grads(size_t(chunk * d.V) * sizeof(float), name);
  float *g = grads.as<float>();
  for (int64_t r0 = 0; r0 < d.N; r0 += chunk) {
    int64_t n = std::min(chunk, d.N - r0);
    chunkLogits(h, w, transW, d, r0, n, g, name);
    rowGradKernel<<<rowGrid(n), kLossThreads, 0, currentStream()>>>(
        g, g, n, d.V, labels.data, r0, ignoreIndex, gradScale, losses);
    checkLaunch(name);
    if (dH.data) // dH = dLogits . W^T ([D, V] weight) or dLogits . W ([V, D]).
      gemmRowMajor(false, !transW, n, d.D, d.V, 1.0f, g, d.V, 0, w.data,
                   transW ? d.D : d.V, 0, 0.0f, dH.data + r0 * d.D, d.D, 0, 1,
                   name);
    if (dW.data && transW) // dW[V, D] += dLogits^T . h
      gemmRowMajor(true, false, d.V, d.D, n, 1.0f, g, d.V, 0, h.data + r0 * d.D,
                   d.D, 0, 1.0f, dW.data, d.D, 0, 1, name);
    else if (dW.data) // dW[D, V] += h^T . dLogits
      gemmRowMajor(true, false, d.D, d.V, n, 1.0f, h.data + r0 * d.D, d.D, 0, g,
                   d.V, 0, 1.0f, dW.data, d.V, 0, 1, name);
  }
  grads.release();
}

/// The bf16 backward: the weight rounded once per call, each group's h rows
/// once for its logits and dW products, each chunk's logits stored in bf16
/// by their product (as autocast stores them) into the group's buffer and
/// replaced there by their gradient (the rounding both products read), dH
/// per chunk, dW per group (the first group writes it, beta = 0, unless
/// addToDW).
void bf16Chunks(CFView h, CFView w, const void *w16Given, bool transW,
                const LinearDims &d, IView labels, int64_t ignoreIndex,
                float gradScale, int64_t chunk, double *losses, FView dH,
                FView dW, bool addToDW, const char *name) {
  RoundedWeight w16(w, w16Given, name);
  int64_t groupRows = std::min(d.N, chunk * kDwGroupChunks);
  int64_t ldw = transW ? d.D : d.V;
  Temp g16(size_t(groupRows * d.V) * 2, name),
      h16(size_t(groupRows * d.D) * 2, name);
  auto *gb = g16.as<__nv_bfloat16>();
  auto *hb = h16.as<__nv_bfloat16>();
  for (int64_t q0 = 0; q0 < d.N; q0 += groupRows) {
    int64_t m = std::min(groupRows, d.N - q0);
    roundToBf16Copy(h.data + q0 * d.D, hb, m * d.D, name);
    for (int64_t r0 = q0; r0 < q0 + m; r0 += chunk) {
      int64_t n = std::min(chunk, q0 + m - r0);
      __nv_bfloat16 *gc = gb + (r0 - q0) * d.V;
      gemmRowMajorBf16As(CUDA_R_16BF, false, transW, n, d.V, d.D, 1.0f,
                         hb + (r0 - q0) * d.D, d.D, 0, w16.get(), ldw, 0, 0.0f,
                         gc, d.V, 0, 1, name);
      if (rowsOf8(gc, gc, d.V))
        rowGradBf16x8Kernel<<<rowGrid(n), kLossThreads, 0, currentStream()>>>(
            gc, gc, n, d.V, labels.data, r0, ignoreIndex, gradScale, losses);
      else
        rowGradKernel<<<rowGrid(n), kLossThreads, 0, currentStream()>>>(
            gc, gc, n, d.V, labels.data, r0, ignoreIndex, gradScale, losses);
      checkLaunch(name);
      if (dH.data)
        gemmRowMajorBf16(false, !transW, n, d.D, d.V, 1.0f, gc, d.V, 0,
                         w16.get(), ldw, 0, 0.0f, dH.data + r0 * d.D, d.D, 0, 1,
                         name);
    }
    float beta = q0 == 0 && !addToDW ? 0.0f : 1.0f;
    if (dW.data && transW) // dW[V, D] += dLogits^T . h over the group
      gemmRowMajorBf16(true, false, d.V, d.D, m, 1.0f, gb, d.V, 0, hb, d.D, 0,
                       beta, dW.data, d.D, 0, 1, name);
    else if (dW.data) // dW[D, V] += h^T . dLogits
      gemmRowMajorBf16(true, false, d.D, d.V, m, 1.0f, hb, d.D, 0, gb, d.V, 0,
                       beta, dW.data, d.V, 0, 1, name);
  }
  g16.release();
  h16.release();
  w16.release();
}

/// The gradient of (gradScale * lossSum) chunk by chunk, and with `losses`
/// each row's loss on the way.
void linearBackwardChunks(CFView h, CFView w, const void *w16Given, bool transW,
                          IView labels, int64_t ignoreIndex, int64_t chunkRows,
                          float gradScale, double *losses, FView dH, FView dW,
                          bool addToDW, const char *name) {
  LinearDims d = linearDims(h.shape, w.shape, transW, name);
  if (d.N == 0 || d.V == 0) {
    if (dW.data && !addToDW)
      fillDevice(dW.data, dW.shape.numel(), 0.0f, name);
    if (dH.data && d.N > 0)
      fillDevice(dH.data, d.N * d.D, 0.0f, name);
    if (losses && d.N > 0)
      RONDO_CHECK(cudaMemsetAsync(losses, 0, size_t(d.N) * sizeof(double),
                                  currentStream()),
                  name);
    return;
  }
  int64_t chunk = chunkRows <= 0 ? d.N : std::min(chunkRows, d.N);
  if (precision() == Precision::Bf16)
    bf16Chunks(h, w, w16Given, transW, d, labels, ignoreIndex, gradScale, chunk,
               losses, dH, dW, addToDW, name);
  else
    fp32Chunks(h, w, transW, d, labels, ignoreIndex, gradScale, chunk, losses,
               dH, dW, addToDW, name);
}

void linearCrossEntropyWithGradImpl(CFView h, CFView w, const void *w16Given,
                                    bool transW, IView labels,
                                    int64_t ignoreIndex, int64_t chunkRows,
                                    float gradScale, float *lossSum,
                                    int *badLabel, FView dH, FView dW,
                                    bool addToDW, const char *name) {
  int64_t N, D;
  rowsOf(h.shape, N, D);
  Temp losses(size_t(std::max<int64_t>(N, 1)) * sizeof(double), name);
  linearBackwardChunks(h, w, w16Given, transW, labels, ignoreIndex, chunkRows,
                       gradScale, losses.as<double>(), dH, dW, addToDW, name);
  int64_t V = transW ? w.shape.dims[0] : w.shape.dims[1];
  finishLoss(losses.as<double>(), labels, N, V, ignoreIndex, lossSum, badLabel,
             name);
  losses.release();
}

/// The weight of a *Bf16W kernel: under bf16 the stored values as they are
/// (fp32 view without data, for its shape), under fp32 widened.
struct Bf16Weight {
  std::optional<WidenedBf16> wide;
  CFView w;
  const void *w16 = nullptr;
  Bf16Weight(CBView stored, const char *name) : w{nullptr, stored.shape} {
    if (precision() == Precision::Bf16) {
      w16 = stored.data;
      return;
    }
    wide.emplace(stored.data, stored.shape.numel(), name);
    w.data = wide->data();
  }
};

/// The fused head on a weight stored in bf16, dW overwritten or added to.
void withGradStoredWeight(CFView h, CBView w, bool transW, IView labels,
                          int64_t ignoreIndex, int64_t chunkRows,
                          float gradScale, float *lossSum, int *badLabel,
                          FView dH, FView dW, bool addToDW, const char *name) {
  Bf16Weight weight(w, name);
  linearCrossEntropyWithGradImpl(h, weight.w, weight.w16, transW, labels,
                                 ignoreIndex, chunkRows, gradScale, lossSum,
                                 badLabel, dH, dW, addToDW, name);
}

} // namespace

void linearCrossEntropy(CFView h, CFView w, bool transW, IView labels,
                        int64_t ignoreIndex, int64_t chunkRows, float *lossSum,
                        int *badLabel) {
  ProfileScope profileScope("linearCrossEntropy");
  linearCrossEntropyImpl(h, w, nullptr, transW, labels, ignoreIndex, chunkRows,
                         lossSum, badLabel, "linearCrossEntropy");
}

void linearCrossEntropyBf16W(CFView h, CBView w, bool transW, IView labels,
                             int64_t ignoreIndex, int64_t chunkRows,
                             float *lossSum, int *badLabel) {
  ProfileScope profileScope("linearCrossEntropy");
  const char *name = "linearCrossEntropyBf16W";
  Bf16Weight weight(w, name);
  linearCrossEntropyImpl(h, weight.w, weight.w16, transW, labels, ignoreIndex,
                         chunkRows, lossSum, badLabel, name);
}

void linearCrossEntropyBackward(CFView h, CFView w, bool transW, IView labels,
                                int64_t ignoreIndex, int64_t chunkRows,
                                float gradScale, FView dH, FView dW) {
  ProfileScope profileScope("linearCrossEntropyBackward");
  linearBackwardChunks(h, w, nullptr, transW, labels, ignoreIndex, chunkRows,
                       gradScale, nullptr, dH, dW, /*addToDW=*/false,
                       "linearCrossEntropyBackward");
}

void linearCrossEntropyBackwardBf16W(CFView h, CBView w, bool transW,
                                     IView labels, int64_t ignoreIndex,
                                     int64_t chunkRows, float gradScale,
                                     FView dH, FView dW) {
  ProfileScope profileScope("linearCrossEntropyBackward");
  const char *name = "linearCrossEntropyBackwardBf16W";
  Bf16Weight weight(w, name);
  linearBackwardChunks(h, weight.w, weight.w16, transW, labels, ignoreIndex,
                       chunkRows, gradScale, nullptr, dH, dW, /*addToDW=*/false,
                       name);
}

void linearCrossEntropyWithGrad(CFView h, CFView w, bool transW, IView labels,
                                int64_t ignoreIndex, int64_t chunkRows,
                                float gradScale, float *lossSum, int *badLabel,
                                FView dH, FView dW) {
  ProfileScope profileScope("linearCrossEntropyWithGrad");
  linearCrossEntropyWithGradImpl(
      h, w, nullptr, transW, labels, ignoreIndex, chunkRows, gradScale, lossSum,
      badLabel, dH, dW, /*addToDW=*/false, "linearCrossEntropyWithGrad");
}

void linearCrossEntropyWithGradAdd(CFView h, CFView w, bool transW,
                                   IView labels, int64_t ignoreIndex,
                                   int64_t chunkRows, float gradScale,
                                   float *lossSum, int *badLabel, FView dH,
                                   FView dW) {
  ProfileScope profileScope("linearCrossEntropyWithGrad");
  linearCrossEntropyWithGradImpl(
      h, w, nullptr, transW, labels, ignoreIndex, chunkRows, gradScale, lossSum,
      badLabel, dH, dW, /*addToDW=*/true, "linearCrossEntropyWithGradAdd");
}

void linearCrossEntropyWithGradBf16W(CFView h, CBView w, bool transW,
                                     IView labels, int64_t ignoreIndex,
                                     int64_t chunkRows, float gradScale,
                                     float *lossSum, int *badLabel, FView dH,
                                     FView dW) {
  ProfileScope profileScope("linearCrossEntropyWithGrad");
  withGradStoredWeight(h, w, transW, labels, ignoreIndex, chunkRows, gradScale,
                       lossSum, badLabel, dH, dW, /*addToDW=*/false,
                       "linearCrossEntropyWithGradBf16W");
}

void linearCrossEntropyWithGradBf16WAdd(CFView h, CBView w, bool transW,
                                        IView labels, int64_t ignoreIndex,
                                        int64_t chunkRows, float gradScale,
                                        float *lossSum, int *badLabel, FView dH,
                                        FView dW) {
  ProfileScope profileScope("linearCrossEntropyWithGrad");
  withGradStoredWeight(h, w, transW, labels, ignoreIndex, chunkRows, gradScale,
                       lossSum, badLabel, dH, dW, /*addToDW=*/true,
                       "linearCrossEntropyWithGradBf16WAdd");
}

} // namespace rondo::cuda
