//===- AdamW.cpp - PyTorch-exact AdamW and gradient clipping --------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// This file must be compiled with -ffp-contract=off (see CMakeLists.txt):
// the order and rounding of every operation is part of the contract with
// PyTorch, and contraction would make the result depend on the ISA.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/AdamW.h"

#include <algorithm>
#include <cmath>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rondo::rt {

namespace {

/// Below this many elements in total the update runs on one thread: the
/// fork/join costs more than it saves.
constexpr int64_t kParallelThreshold = int64_t(1) << 15;
/// Chunk boundaries are multiples of a cache line of floats, so no two
/// threads write the same line of a 64-byte aligned buffer.
constexpr int64_t kChunkAlign = 16;

/// Per-tensor scalars, rounded to fp32 exactly where PyTorch rounds them.
struct Coeffs {
  float decayFactor; ///< f32(1 - lr * wd)
  float lerpWeight;  ///< f32(1 - b1), or f32(1 - b1) - 1 on the large branch
  float beta2;       ///< f32(b2)
  float oneMinusBeta2;
  float bc2Sqrt; ///< f32(sqrt(1 - b2^t))
  float eps;
  float negStepSize; ///< f32(-(lr / (1 - b1^t)))
};

// The loop body is instantiated per branch so the inner loop has none and
// the compiler vectorises it; sqrt and division are correctly rounded in
// every vector width and fma is exact, so all instantiations and ISA clones
// agree bitwise.
template <bool Decay, bool SmallLerpWeight>
inline __attribute__((always_inline)) void
adamwLoop(float *__restrict p, const float *__restrict g, float *__restrict m,
          float *__restrict v, int64_t n, const Coeffs &c) {
  const float decayFactor = c.decayFactor, w = c.lerpWeight, b2 = c.beta2,
              c2 = c.oneMinusBeta2, bc2Sqrt = c.bc2Sqrt, eps = c.eps,
              negStep = c.negStepSize;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    if (Decay)
      pi = pi * decayFactor;
    float gi = g[i];
    float mi = m[i];
    // at::lerp_vec: fmadd(weight, end - start, start) for |weight| < 0.5,
    // else fmadd(weight - 1, end - start, end).
    mi = SmallLerpWeight ? std::fma(w, gi - mi, mi) : std::fma(w, gi - mi, gi);
    // addcmul_: self + value * t1 * t2, evaluated left to right.
    float vi = v[i] * b2 + c2 * gi * gi;
    float denom = std::sqrt(vi) / bc2Sqrt + eps;
    // addcdiv_: self + value * t1 / t2, evaluated left to right.
    pi = pi + negStep * mi / denom;
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

inline __attribute__((always_inline)) void
adamwChunkBody(float *p, const float *g, float *m, float *v, int64_t n,
               const Coeffs &c, bool decay, bool small) {
  if (decay) {
    if (small)
      adamwLoop<true, true>(p, g, m, v, n, c);
    else
      adamwLoop<true, false>(p, g, m, v, n, c);
  } else {
    if (small)
      adamwLoop<false, true>(p, g, m, v, n, c);
    else
      adamwLoop<false, false>(p, g, m, v, n, c);
  }
}

void adamwChunkGeneric(float *p, const float *g, float *m, float *v, int64_t n,
                       const Coeffs &c, bool decay, bool small) {
  adamwChunkBody(p, g, m, v, n, c, decay, small);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// Baseline x86-64 has no FMA instruction, so std::fma would be a libm call
// per element; a clone for AVX2+FMA hosts (every server CPU in use) keeps the
// loop vectorised. Both clones compute the same bits.
__attribute__((target("avx2,fma"))) void
adamwChunkAvx2(float *p, const float *g, float *m, float *v, int64_t n,
               const Coeffs &c, bool decay, bool small) {
  adamwChunkBody(p, g, m, v, n, c, decay, small);
}

bool hostHasAvx2Fma() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

void adamwChunk(float *p, const float *g, float *m, float *v, int64_t n,
                const Coeffs &c, bool decay, bool small) {
  if (n <= 0)
    return;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (hostHasAvx2Fma())
    return adamwChunkAvx2(p, g, m, v, n, c, decay, small);
#endif
  adamwChunkGeneric(p, g, m, v, n, c, decay, small);
}

struct TensorPlan {
  Coeffs coeffs;
  bool decay;
  bool small;
};

/// Runs the update on the elements [begin, end) of the flattened tensor set.
void updateRange(const AdamWTensor *tensors, const TensorPlan *plans,
                 const int64_t *offsets, size_t count, int64_t begin,
                 int64_t end) {
  // First tensor whose range ends after `begin`.
  size_t t = std::upper_bound(offsets, offsets + count + 1, begin) - offsets;
  t = t == 0 ? 0 : t - 1;
  for (; t < count && offsets[t] < end; ++t) {
    int64_t lo = std::max(begin, offsets[t]) - offsets[t];
    int64_t hi = std::min(end, offsets[t + 1]) - offsets[t];
    if (hi <= lo)
      continue;
    const AdamWTensor &x = tensors[t];
    adamwChunk(x.param + lo, x.grad + lo, x.expAvg + lo, x.expAvgSq + lo,
               hi - lo, plans[t].coeffs, plans[t].decay, plans[t].small);
  }
}

} // namespace

void adamwUpdate(const AdamWTensor *tensors, size_t count,
                 const AdamWConfig &config, double lr, int64_t step) {
  std::vector<TensorPlan> plans(count);
  std::vector<int64_t> offsets(count + 1, 0);
  // Python evaluates these in double (step is a float from
  // state_steps.item()); the kernels receive them as fp32 scalars.
  double bias1 = 1.0 - std::pow(config.beta1, double(step));
  double bias2 = 1.0 - std::pow(config.beta2, double(step));
  double lerpWeight = 1.0 - config.beta1;
  bool small = std::fabs(float(lerpWeight)) < 0.5f;
  for (size_t i = 0; i < count; ++i) {
    const AdamWTensor &x = tensors[i];
    double groupLr = lr * x.lrScale;
    TensorPlan &plan = plans[i];
    plan.decay = x.weightDecay != 0.0;
    plan.small = small;
    plan.coeffs.decayFactor = float(1.0 - groupLr * x.weightDecay);
    plan.coeffs.lerpWeight =
        small ? float(lerpWeight) : float(lerpWeight) - 1.0f;
    plan.coeffs.beta2 = float(config.beta2);
    plan.coeffs.oneMinusBeta2 = float(1.0 - config.beta2);
    plan.coeffs.bc2Sqrt = float(std::sqrt(bias2));
    plan.coeffs.eps = float(config.eps);
    plan.coeffs.negStepSize = float(-(groupLr / bias1));
    offsets[i + 1] = offsets[i] + std::max<int64_t>(0, x.numel);
  }
  const int64_t total = offsets[count];
  if (total == 0)
    return;

#pragma omp parallel if (total >= kParallelThreshold)
  {
    int64_t numThreads = 1, thread = 0;
#ifdef _OPENMP
    numThreads = omp_get_num_threads();
    thread = omp_get_thread_num();
#endif
    // One static chunk per thread over the flattened set: equal work, and
    // tensor boundaries cost nothing.
    int64_t units = (total + kChunkAlign - 1) / kChunkAlign;
    int64_t begin = std::min(total, units * thread / numThreads * kChunkAlign);
    int64_t end =
        std::min(total, units * (thread + 1) / numThreads * kChunkAlign);
    updateRange(tensors, plans.data(), offsets.data(), count, begin, end);
  }
}

void AdamW::addParam(float *param, const float *grad, int64_t numel,
                     double weightDecay, double lrScale) {
  FloatBuffer expAvg(numel), expAvgSq(numel);
  AdamWTensor t;
  t.param = param;
  t.grad = grad;
  t.expAvg = expAvg.data();
  t.expAvgSq = expAvgSq.data();
  t.numel = numel;
  t.lrScale = lrScale;
  t.weightDecay = weightDecay;
  tensors.push_back(t);
  moments.push_back(std::move(expAvg));
  moments.push_back(std::move(expAvgSq));
  elements += numel;
}

void AdamW::step(double lr) {
  ++steps;
  adamwUpdate(tensors.data(), tensors.size(), config, lr, steps);
}

namespace {
constexpr int64_t kNormBlock = kGradNormBlock;
constexpr int kNormLanes = 8;

double sumSquares(const float *x, int64_t n) {
  // Fixed lanes rather than an OpenMP reduction: the summation order is the
  // same for every vector width, so the norm is reproducible across hosts.
  double lanes[kNormLanes] = {};
  int64_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes)
    for (int l = 0; l < kNormLanes; ++l)
      lanes[l] += double(x[i + l]) * double(x[i + l]);
  for (int l = 0; i < n; ++i, ++l)
    lanes[l] += double(x[i]) * double(x[i]);
  double sum = 0.0;
  for (double lane : lanes)
    sum += lane;
  return sum;
}
} // namespace

void gradNormPartials(const float *data, int64_t n, double *partials) {
  const int64_t blocks = gradNormBlocks(n);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b)
    partials[b] = sumSquares(data + b * kNormBlock,
                             std::min(kNormBlock, n - b * kNormBlock));
}

double gradNorm(const GradTensor *grads, size_t count) {
  struct Block {
    const float *data;
    int64_t numel;
  };
  std::vector<Block> blocks;
  for (size_t i = 0; i < count; ++i)
    for (int64_t off = 0; off < grads[i].numel; off += kNormBlock)
      blocks.push_back(
          {grads[i].data + off, std::min(kNormBlock, grads[i].numel - off)});
  std::vector<double> partial(blocks.size());
  const int64_t numBlocks = int64_t(blocks.size());
#pragma omp parallel for schedule(static) if (numBlocks > 1)
  for (int64_t b = 0; b < numBlocks; ++b)
    partial[b] = sumSquares(blocks[b].data, blocks[b].numel);
  double sum = 0.0;
  for (double s : partial)
    sum += s;
  return std::sqrt(sum);
}

float clipGradNorm(const GradTensor *grads, size_t count, double totalNorm,
                   double maxNorm) {
  // torch: clip_coef = max_norm / (total_norm + 1e-6) on a fp32 tensor,
  // clamped to 1.0; the grads are multiplied by it.
  float coef = float(maxNorm) / (float(totalNorm) + float(1e-6));
  if (!(coef < 1.0f))
    return 1.0f;
  for (size_t t = 0; t < count; ++t) {
    float *g = grads[t].data;
    const int64_t n = grads[t].numel;
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
    for (int64_t i = 0; i < n; ++i)
      g[i] = g[i] * coef;
  }
  return coef;
}

} // namespace rondo::rt
