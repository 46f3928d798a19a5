//===- Wgmma.cuh - Hopper warpgroup MMA helpers ------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The wgmma fences, the async-proxy fence, the register pins and the
// shared-memory descriptor that the Hopper kernels share (the attention of
// FlashAttentionSm90.cu, the experts' grouped GEMM of GroupedGemmSm90.cu).
// The wgmma instructions themselves stay with their kernels: each names its
// own operand shapes.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_KERNELS_CUDA_WGMMA_CUH
#define RONDO_KERNELS_CUDA_WGMMA_CUH

#include <cstdint>

// The "+f" operand list of a wgmma accumulator of N / 8 rows of four fp32
// (m64nNk16: one thread's N / 2 values), d[0][0] first, as the inline-asm
// wrappers of the attention and grouped-GEMM kernels bind it to %0 ...
#define RONDO_WGMMA_ROW(d, i)                                                  \
  "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define RONDO_WGMMA_ROWS4(d, i)                                                \
  RONDO_WGMMA_ROW(d, i), RONDO_WGMMA_ROW(d, i + 1), RONDO_WGMMA_ROW(d, i + 2), \
      RONDO_WGMMA_ROW(d, i + 3)
#define RONDO_WGMMA_ACC8(d) RONDO_WGMMA_ROWS4(d, 0), RONDO_WGMMA_ROWS4(d, 4)
#define RONDO_WGMMA_ACC16(d)                                                   \
  RONDO_WGMMA_ROWS4(d, 0), RONDO_WGMMA_ROWS4(d, 4), RONDO_WGMMA_ROWS4(d, 8),   \
      RONDO_WGMMA_ROWS4(d, 12)
#define RONDO_WGMMA_ACC32(d)                                                   \
  RONDO_WGMMA_ACC16(d), RONDO_WGMMA_ROWS4(d, 16), RONDO_WGMMA_ROWS4(d, 20),    \
      RONDO_WGMMA_ROWS4(d, 24), RONDO_WGMMA_ROWS4(d, 28)

namespace rondo::cuda::detail {

__device__ inline void wgFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgWait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/// Orders the ordinary stores (cp.async included) of this thread to shared
/// memory before later reads by the tensor cores (the async proxy); nothing
/// before sm_90, where ldmatrix reads them in order anyway.
__device__ inline void proxyFence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/// Pins accumulator / fragment registers at this point of the program: the
/// compiler may not move their reads or writes across it, so none lands
/// between a wgmma's issue and its wait_group.
template <int N> __device__ inline void regFence(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      asm volatile("" : "+f"(c[n][e])::"memory");
}
template <int N> __device__ inline void regFence(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      asm volatile("" : "+r"(a[n][e])::"memory");
}

/// The descriptor of a K-major, 128-byte-swizzled operand at `addr`: 8-row
/// groups 1024 bytes apart (stride byte offset); the leading byte offset is
/// unused when a k-step (16 bf16, 32 bytes) stays inside one 128-byte row.
__device__ inline uint64_t descOf(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

} // namespace rondo::cuda::detail

#endif // RONDO_KERNELS_CUDA_WGMMA_CUH
