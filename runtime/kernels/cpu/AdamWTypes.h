//===- AdamWTypes.h - One AdamW update's description ------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// What an AdamW update reads, shared by the host optimizer
// (rondo/runtime/AdamW.h) and the fused GPU update of device-resident state
// (CudaKernels.h's adamwUpdate), which both compute torch.optim.AdamW bit for
// bit. Plain data, here beside the kernel headers so that the CUDA kernel
// library and generated trainers need no runtime header for it.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_KERNELS_ADAMW_TYPES_H
#define RONDO_KERNELS_ADAMW_TYPES_H

#include <cstdint>

namespace rondo {

/// Hyper-parameters shared by all tensors (torch.optim.AdamW's defaults).
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

/// One tensor of the update with its parameter-group settings (host or
/// device pointers, as the caller's update needs).
struct AdamWTensor {
  float *param = nullptr;
  const float *grad = nullptr;
  float *expAvg = nullptr;
  float *expAvgSq = nullptr;
  int64_t numel = 0;
  /// The group's learning rate is `lr * lrScale`.
  double lrScale = 1.0;
  double weightDecay = 0.0;
};

} // namespace rondo

#endif // RONDO_KERNELS_ADAMW_TYPES_H
