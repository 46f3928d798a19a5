//===- DeviceOps.cpp - The host's optimizer math, DeviceOps' default ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Device-resident optimizer state is updated through DeviceOps. On the host
// backend a worker's memory is host memory, so the defaults call the very
// functions the host optimizer runs on streamed state: the two residencies
// give the same bits, which is what test/E2E/residency.test checks.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/DeviceOps.h"

#include "Kernels.h"

#include <cmath>
#include <cstring>

namespace rondo::rt {

void DeviceOps::adamw(int32_t, const AdamWTensor *tensors, size_t count,
                      const AdamWConfig &config, double lr, int64_t step) {
  adamwUpdate(tensors, count, config, lr, step);
}

void DeviceOps::gradNormPartials(int32_t, const FloatSpan *spans,
                                 size_t count, double *partials) {
  for (size_t k = 0; k < count; ++k) {
    rondo::rt::gradNormPartials(spans[k].data, spans[k].n, partials);
    partials += gradNormBlocks(spans[k].n);
  }
}

int DeviceOps::firstNonFinite(int32_t, const FloatSpan *spans, size_t count) {
  for (size_t k = 0; k < count; ++k)
    for (int64_t i = 0; i < spans[k].n; ++i)
      if (!std::isfinite(spans[k].data[i]))
        return int(k);
  return -1;
}

void DeviceOps::scale(int32_t, float *data, int64_t n, float factor) {
  // clipGradNorm's loop, so clipping resident gradients rounds alike.
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 15))
  for (int64_t i = 0; i < n; ++i)
    data[i] = data[i] * factor;
}

void DeviceOps::toBf16(int32_t, const Bf16Copy *copies, size_t count) {
  for (size_t k = 0; k < count; ++k)
    cpu::toBf16(cpu::CFView{copies[k].src, cpu::Shape{copies[k].n}},
                cpu::BView{copies[k].dst, cpu::Shape{copies[k].n}});
}

void DeviceOps::sumParts(int32_t, float *sum, const float *const *parts,
                         int32_t count, int64_t n) {
  if (count <= 0)
    return;
  const float *first = parts[0];
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t e = 0; e < n; ++e)
    sum[e] = first[e];
  for (int32_t i = 1; i < count; ++i) {
    const float *g = parts[i];
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
    for (int64_t e = 0; e < n; ++e)
      sum[e] += g[e];
  }
}

void DeviceOps::copyToWorker(int32_t, void *dst, const void *src,
                             size_t bytes) {
  std::memmove(dst, src, bytes);
}

void DeviceOps::copyFromWorker(int32_t, void *dst, const void *src,
                               size_t bytes) {
  std::memmove(dst, src, bytes);
}

} // namespace rondo::rt
