//===- GroupedGemmSm90.cuh - wgmma pieces of the grouped GEMMs --*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The m64n256k16 product and the accumulator core that both Hopper grouped-
// GEMM files share: GroupedGemmSm90.cu (fp32 operands rounded into bf16
// tiles) and GroupedGemmBf16Sm90.cu (bf16 operands copied as they are).
// Included only by files built for sm_90a, where wgmma exists.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_GROUPEDGEMMSM90_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_GROUPEDGEMMSM90_CUH

#include "GroupedGemm.cuh"

namespace rondo::cuda::detail::grouped {

/// d (64 x 256 per warpgroup) += A (64 x 16) Bᵀ (256 x 16) from shared
/// memory (descriptors): K-major operands, or M-major A (TA = 1) and N-major
/// B (TB = 1), the transposed layouts bf16 allows (GroupedGemmBf16Sm90.cu).
template <int TA = 0, int TB = 0>
__device__ inline void wgmma256(float (&d)[32][4], uint64_t descA,
                                uint64_t descB) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, "
      "%41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "
      "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, "
      "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, "
      "%93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, "
      "%105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, "
      "%116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
      : RONDO_WGMMA_ACC32(d)
      : "l"(descA), "l"(descB), "r"(1), "n"(TA), "n"(TB));
}

struct WgmmaCore {
  struct Acc {
    float d[32][4];
  };

  /// Pins the accumulators here: the compiler may not move their reads or
  /// writes between a wgmma's issue and its wait.
  __device__ static void pin(Acc &acc) { regFence(acc.d); }

  __device__ static void zero(Acc &acc) {
#pragma unroll
    for (int n = 0; n < 32; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc.d[n][e] = 0.0f;
  }

  __device__ static void math(Acc &acc, const Smem &sm, int half) {
    const uint32_t rows = uint32_t(threadIdx.x >> 7) * 64u * 128u;
    pin(acc);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t k = uint32_t(half * 2 + kk) * 32u;
      wgmma256(acc.d, descOf(sm.tileA + rows + k), descOf(sm.tileB + k));
    }
    wgCommit();
  }

  __device__ static void wait(Acc &acc) {
    wgWait0();
    pin(acc);
  }

  /// f(row, column, value, value of column + 1): a warp's 16 rows of an
  /// m64nN accumulator have mma.sync's m16n8 layout.
  template <class F> __device__ static void forEach(const Acc &acc, F &&f) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int r = (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2);
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      const int c = n * 8 + 2 * (lane & 3);
      f(r, c, acc.d[n][0], acc.d[n][1]);
      f(r + 8, c, acc.d[n][2], acc.d[n][3]);
    }
  }
};

} // namespace rondo::cuda::detail::grouped

#endif // RONDO_RUNTIME_KERNELS_CUDA_GROUPEDGEMMSM90_CUH
