//===- FlashAttentionSm90.cuh - wgmma parts of Hopper attention -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The wgmma instructions, the swizzled shared-memory tiles and the warpgroup
// GEMM loops that the Hopper attention kernels share: the forward and the
// two-kernel backward (FlashAttentionSm90.cu) and the fused backward
// (FlashAttentionSm90Bwd.cu). Included only by sources built for sm_90a.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTIONSM90_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTIONSM90_CUH

#include "FlashAttention.cuh"
#include "Wgmma.cuh"

namespace rondo::cuda::detail::flash {

//===----------------------------------------------------------------------===//
// wgmma
//===----------------------------------------------------------------------===//

/// d (64 x 64 per warpgroup) += A (64 x 16, smem descriptor, K-major) B^T
/// (64 x 16, smem descriptor): K-major, or MN-major (descMN) with TransB.
template <int TransB = 0>
__device__ inline void wgmmaSS(float (&d)[8][4], uint64_t descA,
                               uint64_t descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
               "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, "
               "%26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35;\n}\n"
               : RONDO_WGMMA_ACC8(d)
               : "l"(descA), "l"(descB), "r"(1), "n"(TransB));
}

/// d (64 x 64 per warpgroup) += A (64 x 16, registers: this thread's four
/// words of the m16k16 fragment of its warp's rows) B^T (64 x 16, smem
/// descriptor, K-major).
__device__ inline void wgmmaRS(float (&d)[8][4], const uint32_t (&a)[4],
                               uint64_t descB) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : RONDO_WGMMA_ACC8(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(1));
}

/// d (64 x 128 per warpgroup) += A (64 x 16, smem descriptor) B^T (128 x 16,
/// smem descriptor); both K-major.
__device__ inline void wgmmaSS(float (&d)[16][4], uint64_t descA,
                               uint64_t descB) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : RONDO_WGMMA_ACC16(d)
      : "l"(descA), "l"(descB), "r"(1));
}

/// d (64 x 128 per warpgroup) += A (64 x 16, registers: this thread's four
/// words of the m16k16 fragment of its warp's rows) B^T (128 x 16, smem
/// descriptor): K-major, or MN-major (descMN) with TransB.
template <int TransB = 0>
__device__ inline void wgmmaRS(float (&d)[16][4], const uint32_t (&a)[4],
                               uint64_t descB) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
               "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, "
               "%26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
               "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
               "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
               "%62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
               : RONDO_WGMMA_ACC16(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(1),
                 "n"(TransB));
}

/// The descriptor for k-step kk (columns 16 kk ..) of rows r0 .. (r0 % 8 ==
/// 0) of a swizzled tile of Rows rows (swizzled tile layout: loadSw).
template <int Rows>
__device__ inline uint64_t descAt(uint32_t tile, int r0, int kk) {
  return descOf(tile +
                uint32_t((kk >> 2) * Rows * 128 + r0 * 128 + (kk & 3) * 32));
}

/// Enqueues the cp.async copies (by NT threads) of a Rows x Cols bf16 tile
/// (global rows `ld` elements apart) into shared memory at `dst` (1024-byte
/// aligned) in the swizzled K-major layout: Cols / 64 blocks of Rows rows of
/// 128 bytes, the 16-byte chunk c of row r at chunk c ^ (r % 8).
template <int Rows, int Cols, int NT>
__device__ inline void loadSw(uint32_t dst, const bf16 *src, int64_t ld) {
  constexpr int kChunks = Cols / 8; // 16-byte chunks a row
  static_assert(Cols % 64 == 0 && Rows % 8 == 0, "whole swizzle atoms");
  static_assert(Rows * kChunks % NT == 0, "whole rounds of copies");
#pragma unroll
  for (int it = 0; it < Rows * kChunks / NT; ++it) {
    const int idx = it * NT + int(threadIdx.x);
    const int r = idx / kChunks, c = idx % kChunks;
    cpAsync16(dst + uint32_t((c >> 3) * Rows * 128 + r * 128 +
                             (((c & 7) ^ (r & 7)) << 4)),
              src + int64_t(r) * ld + c * 8);
  }
}

/// acc (this warpgroup's 64 rows x N) += A B^T over K = 16 KSteps: A is rows
/// aR0 .. aR0 + 63 of the swizzled tile aTile (ARows rows), B the N rows of
/// bTile.
template <int ARows, int KSteps, int NB>
__device__ inline void gemmSS(float (&acc)[NB][4], uint32_t aTile, int aR0,
                              uint32_t bTile) {
#pragma unroll
  for (int kk = 0; kk < KSteps; ++kk)
    wgmmaSS(acc, descAt<ARows>(aTile, aR0, kk), descAt<NB * 8>(bTile, 0, kk));
}

/// acc (64 rows x N) += A B^T with A in registers (k-steps a[kk]) and B the
/// N rows of the swizzled tile bTile.
template <int KSteps, int NB>
__device__ inline void gemmRS(float (&acc)[NB][4],
                              const uint32_t (&a)[KSteps][4], uint32_t bTile) {
  if constexpr (NB == 32) {
    // N = 256 (O at D = 256) as two n128 halves on rows 0 and 128 of B,
    // with the n128 wrappers the other head dimensions use.
    float(&lo)[16][4] = *reinterpret_cast<float(*)[16][4]>(&acc[0]);
    float(&hi)[16][4] = *reinterpret_cast<float(*)[16][4]>(&acc[16]);
#pragma unroll
    for (int kk = 0; kk < KSteps; ++kk) {
      wgmmaRS(lo, a[kk], descAt<256>(bTile, 0, kk));
      wgmmaRS(hi, a[kk], descAt<256>(bTile, 128, kk));
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < KSteps; ++kk)
      wgmmaRS(acc, a[kk], descAt<NB * 8>(bTile, 0, kk));
  }
}

/// This warp's A fragment (rows r0 .. r0 + 15, k-step kk) of a swizzled tile
/// of Rows rows, for a register-A wgmma.
template <int Rows>
__device__ inline void ldsmA(uint32_t tile, int r0, int kk, uint32_t (&a)[4]) {
  const int lane = int(threadIdx.x) & 31;
  const int r = r0 + (lane & 15), c = kk * 2 + (lane >> 4);
  ldsm4(tile + uint32_t((c >> 3) * Rows * 128 + r * 128 +
                        (((c & 7) ^ (r & 7)) << 4)),
        a);
}

constexpr int kNT = 256;   // two warpgroups
constexpr int kRows = 128; // resident rows a block: 64 a warpgroup

/// Zeroes `bytes` of shared memory at `addr` (all kNT threads).
__device__ inline void zeroSmem(unsigned char *smem, uint32_t addr,
                                uint32_t bytes) {
  uint4 *z = reinterpret_cast<uint4 *>(smem + (addr - smemAddr(smem)));
  for (int i = int(threadIdx.x); i < int(bytes / 16); i += kNT)
    z[i] = make_uint4(0u, 0u, 0u, 0u);
}

} // namespace rondo::cuda::detail::flash

#endif // RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTIONSM90_CUH
