//===- AdamW.h - PyTorch-exact AdamW and gradient clipping ------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host optimizer of every Rondo trainer. It reproduces
// torch.optim.AdamW (amsgrad=False, maximize=False) as PyTorch runs it on
// CPU fp32 tensors (the single-tensor path), operation by operation:
//
//   step   += 1                          (t, 1-based)
//   p      *= f32(1 - lr * wd)           (skipped when wd == 0)
//   m       = fma(f32(1 - b1), g - m, m) (exp_avg.lerp_(g, 1 - b1), whose
//                                         vectorised CPU kernel is an fmadd;
//                                         for 1 - b1 >= 0.5 lerp uses
//                                         fma(w - 1, g - m, g) instead)
//   v       = v * f32(b2) + f32(1 - b2) * g * g
//   denom   = sqrt(v) / f32(sqrt(1 - b2^t)) + f32(eps)
//   p       = p + f32(-lr / (1 - b1^t)) * m / denom
//
// Scalars are computed in double, as Python does, and rounded to fp32 where
// PyTorch's kernels take them as fp32 scalars. Elements are independent, so
// the result is bitwise the same for any thread count and vector width: the
// library is built with -ffp-contract=off and the only fused operation is the
// explicit fma of lerp. (PyTorch's own AVX2 build may contract the v update
// into an FMA; that is at most one ulp per step and far inside the 1e-4 loss
// tolerance of the reference checks.)
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_ADAMW_H
#define RONDO_RUNTIME_ADAMW_H

#include "AdamWTypes.h"
#include "rondo/runtime/Buffer.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rondo::rt {

using rondo::AdamWConfig;
using rondo::AdamWTensor;

/// Applies one AdamW update with optimizer step number `step` (>= 1: the
/// value of PyTorch's state["step"] after its increment) and learning rate
/// `lr`. The flattened element range of all tensors is cut into one static
/// chunk per OpenMP thread.
void adamwUpdate(const AdamWTensor *tensors, size_t count,
                 const AdamWConfig &config, double lr, int64_t step);

/// AdamW with owned moment buffers, for the trainer and benchmarks.
class AdamW {
public:
  explicit AdamW(AdamWConfig config = {}) : config(config) {}

  /// Registers a parameter and its gradient buffer. The moments start at zero,
  /// as PyTorch's lazily created state does.
  void addParam(float *param, const float *grad, int64_t numel,
                double weightDecay, double lrScale = 1.0);

  /// Increments the step count and updates every registered parameter.
  void step(double lr);

  int64_t stepCount() const { return steps; }
  size_t numTensors() const { return tensors.size(); }
  int64_t numElements() const { return elements; }
  const AdamWTensor &tensor(size_t i) const { return tensors[i]; }

private:
  AdamWConfig config;
  std::vector<AdamWTensor> tensors;
  std::vector<FloatBuffer> moments;
  int64_t steps = 0;
  int64_t elements = 0;
};

/// A gradient buffer for norm computation and clipping.
struct GradTensor {
  float *data = nullptr;
  int64_t numel = 0;
};

/// The global L2 norm over all gradients. Squares are summed in double in
/// fixed-size blocks whose partial sums are added in a fixed order, so the
/// value does not depend on the thread count.
double gradNorm(const GradTensor *grads, size_t count);

/// gradNorm's pieces, for gradients that live on a worker: the squares of
/// `data` summed in double per block of kGradNormBlock elements (partials
/// [ceil(n / kGradNormBlock)]); gradNorm is the square root of every
/// tensor's partials added in order, tensor by tensor.
constexpr int64_t kGradNormBlock = int64_t(1) << 16;
void gradNormPartials(const float *data, int64_t n, double *partials);
inline int64_t gradNormBlocks(int64_t n) {
  return (n + kGradNormBlock - 1) / kGradNormBlock;
}

/// torch.nn.utils.clip_grad_norm_: with the fp32 total norm n, scales every
/// gradient by min(1, f32(maxNorm) / (n + 1e-6)) computed in fp32. Returns
/// the factor applied (1 when nothing was scaled).
float clipGradNorm(const GradTensor *grads, size_t count, double totalNorm,
                   double maxNorm);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_ADAMW_H
