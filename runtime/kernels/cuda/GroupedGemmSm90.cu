//===- GroupedGemmSm90.cu - The experts' grouped GEMM with wgmma ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The Hopper kernels of the bf16 grouped GEMM (GroupedGemm.cu dispatches here
// on compute capability 9.0 and gives the design). Built for sm_90a alone
// (CMakeLists.txt), since wgmma exists only there.
//
// A block is two warpgroups computing 128 x 256 outputs (64 rows each, as two
// m64n128k16 products a k-step), 128 accumulators a thread. Both operands are
// read by the tensor cores from the 128-byte-swizzled K-major bf16 tiles that
// the shared staging (GroupedGemm.cuh) writes, the layout FlashAttentionSm90.cu
// uses. The products of a stage are issued and committed before the threads
// round the next stage, so rounding and the cp.async issue run under them;
// three fp32 stages (162 KiB) plus the bf16 tiles (48 KiB) leave one block an
// SM. No wgmma sits on a conditional path and no other instruction touches
// the accumulators between issue and wait (ptxas would serialise them).
//
//===----------------------------------------------------------------------===//

#include "GroupedGemm.cuh"

#include <cstdlib>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "GroupedGemmSm90.cu must be built for sm_90a only (CMakeLists.txt)"
#endif

namespace rondo::cuda::detail::grouped {

namespace {

using SmCfg = Cfg<kSm90RowTile, kSm90ColTile, 3>;

/// d (64 x 128 per warpgroup) += A (64 x 16) Bᵀ (128 x 16), both K-major in
/// shared memory (descriptors).
__device__ inline void wgmma128(float (&d)[16][4], uint64_t descA,
                                uint64_t descB) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(descA), "l"(descB), "r"(1));
}

__device__ inline void wgFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgWait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/// The descriptor of a K-major, 128-byte-swizzled operand at `addr`: 8-row
/// groups 1024 bytes apart; the leading byte offset is unused while a k-step
/// (32 bytes) stays inside a 128-byte row.
__device__ inline uint64_t descOf(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

struct WgmmaCore {
  struct Acc {
    float d[2][16][4]; // columns 0-127 and 128-255
  };

  /// Pins the accumulators here: the compiler may not move their reads or
  /// writes between a wgmma's issue and its wait.
  __device__ static void pin(Acc &acc) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < 16; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          asm volatile("" : "+f"(acc.d[h][n][e])::"memory");
  }

  __device__ static void zero(Acc &acc) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < 16; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc.d[h][n][e] = 0.0f;
  }

  __device__ static void math(Acc &acc, const Smem &sm, int half) {
    const uint32_t rows = uint32_t(threadIdx.x >> 7) * 64u * 128u;
    pin(acc);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t k = uint32_t(half * 2 + kk) * 32u;
      const uint64_t a = descOf(sm.tileA + rows + k);
      wgmma128(acc.d[0], a, descOf(sm.tileB + k));
      wgmma128(acc.d[1], a, descOf(sm.tileB + 128u * 128u + k));
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
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        const int c = h * 128 + n * 8 + 2 * (lane & 3);
        f(r, c, acc.d[h][n][0], acc.d[h][n][1]);
        f(r + 8, c, acc.d[h][n][2], acc.d[h][n][3]);
      }
  }
};

__global__ void __launch_bounds__(SmCfg::NT, 1)
    productSm90Kernel(const __grid_constant__ ProductParams p) {
  extern __shared__ unsigned char smem[];
  productBlock<SmCfg, WgmmaCore>(p, smem);
}

__global__ void __launch_bounds__(SmCfg::NT, 1)
    weightGradSm90Kernel(const __grid_constant__ WeightGradParams p) {
  extern __shared__ unsigned char smem[];
  weightGradBlock<SmCfg, WgmmaCore>(p, smem);
}

template <typename Kernel, typename Params>
void launch(Kernel kernel, int64_t blocks, const Params &p, const char *name) {
  if (blocks > int64_t(0x7fffffff))
    contract(name, "too many tiles for one launch (%lld)", (long long)blocks);
  RONDO_CHECK(cudaFuncSetAttribute(kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(SmCfg::kSmem)),
              name);
  kernel<<<unsigned(blocks), SmCfg::NT, SmCfg::kSmem, currentStream()>>>(p);
  checkLaunch(name);
}

} // namespace

bool groupedSm90Usable() {
  const char *env = std::getenv("RONDO_GROUPED_SM90");
  if (env && env[0] == '0')
    return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) !=
          cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

void productSm90(const ProductParams &p, int64_t rowTiles, const char *name) {
  launch(productSm90Kernel, rowTiles * p.colTiles, p, name);
}

void weightGradSm90(const WeightGradParams &p, const char *name) {
  launch(weightGradSm90Kernel, int64_t(p.E) * p.pTiles * p.qTiles, p, name);
}

} // namespace rondo::cuda::detail::grouped
