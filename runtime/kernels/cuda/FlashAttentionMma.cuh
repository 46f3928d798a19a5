//===- FlashAttentionMma.cuh - mma.sync tiles of bf16 attention -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The warp-level tensor-core helpers (mma.sync m16n8k16, ldmatrix) and the
// padded shared-memory tile layout that the mma.sync forward
// (FlashAttention.cu) and backward (FlashAttentionMmaBwd.cu) kernels share.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTIONMMA_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTIONMMA_CUH

#include "FlashAttention.cuh"

namespace rondo::cuda::detail::flash {

//===----------------------------------------------------------------------===//
// PTX wrappers
//===----------------------------------------------------------------------===//

__device__ inline void ldsm4t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, "
               "%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// c += a b for one m16n8k16 tile (a: 16x16 row-major, b: 16x8 col-major).
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                           uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

//===----------------------------------------------------------------------===//
// Shared-memory tiles
//===----------------------------------------------------------------------===//

/// Row stride (elements) of a staged bf16 tile with D columns.
template <int D> __host__ __device__ constexpr int ldOf() { return D + 8; }
template <int D, int Rows> __host__ __device__ constexpr uint32_t tileBytes() {
  return uint32_t(Rows * ldOf<D>() * 2);
}

/// Enqueues the cp.async copies (by NT threads) of Rows rows of D bf16 at src
/// (contiguous rows) to the shared tile at dst.
template <int D, int Rows, int NT>
__device__ inline void loadTileAsync(uint32_t dst, const bf16 *src) {
  constexpr int kChunks = D / 8; // 16-byte chunks a row
  constexpr int kLd = ldOf<D>();
  static_assert(Rows * kChunks % NT == 0, "whole rounds of copies");
#pragma unroll
  for (int it = 0; it < Rows * kChunks / NT; ++it) {
    const int idx = it * NT + int(threadIdx.x);
    const int r = idx / kChunks, c = idx % kChunks;
    cpAsync16(dst + uint32_t((r * kLd + c * 8) * 2),
              src + int64_t(r) * D + c * 8);
  }
}

/// One step of the K/V double buffer of the forward and dQ kernels (key
/// tile jt of nTiles, its buffer at offset `buf` of the two kBytes halves):
/// enqueues the next tile's K and V into the other half, then waits for this
/// tile's (the group before) and syncs the block.
template <int D, int BC, int NT>
__device__ inline void nextKvTile(uint32_t sK, uint32_t sV, uint32_t buf,
                                  const bf16 *kg, const bf16 *vg, int j0,
                                  int jt, int nTiles) {
  constexpr uint32_t kBytes = tileBytes<D, BC>();
  if (jt + 1 < nTiles) {
    loadTileAsync<D, BC, NT>(sK + (kBytes - buf), kg + int64_t(j0 + BC) * D);
    loadTileAsync<D, BC, NT>(sV + (kBytes - buf), vg + int64_t(j0 + BC) * D);
  }
  cpAsyncCommit();
  cpAsyncWait<1>();
  __syncthreads();
}

/// Per-lane byte offsets of the ldmatrix row addresses inside a tile.
struct LdsmOffsets {
  uint32_t a;  // A operand (x4): rows (lane & 15), k half (lane >> 4)
  uint32_t b;  // B operand from [n][k] rows (x4 = two n-blocks of 8)
  uint32_t bt; // B operand from [k][n] rows, transposed (two n-blocks)
};

template <int D> __device__ inline LdsmOffsets ldsmOffsets(int lane) {
  constexpr int kLd = ldOf<D>();
  LdsmOffsets o;
  o.a = uint32_t(((lane & 15) * kLd + (lane >> 4) * 8) * 2);
  o.b = uint32_t(
      (((lane & 7) + ((lane >> 4) << 3)) * kLd + ((lane >> 3) & 1) * 8) * 2);
  o.bt = o.a;
  return o;
}

/// acc[n] (16 rows x 8 n) += A(16 x D, rows of tile `aTile` from row aRow0)
/// times B^T where B is rows nRow0 .. nRow0 + 8 N - 1 of tile `bTile` ([n][k]
/// layout, k = D). Both tiles have D columns.
template <int D, int N>
__device__ inline void mmaRowsByRows(float (&acc)[N][4], uint32_t aTile,
                                     int aRow0, uint32_t bTile, int nRow0,
                                     const LdsmOffsets &off) {
  constexpr int kLd = ldOf<D>();
  static_assert(N % 2 == 0, "n-blocks come in pairs");
  const uint32_t aBase = aTile + off.a + uint32_t(aRow0 * kLd * 2);
  const uint32_t bBase = bTile + off.b + uint32_t(nRow0 * kLd * 2);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    ldsm4(aBase + kk * 32, a);
#pragma unroll
    for (int np = 0; np < N / 2; ++np) {
      uint32_t b[4];
      ldsm4(bBase + uint32_t(np * 16 * kLd * 2) + kk * 32, b);
      mma(acc[2 * np], a, b[0], b[1]);
      mma(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

/// acc[D/8] (16 rows x D) += A (16 rows x 16 K, k-step kk of fragments `a`)
/// times rows k0 .. k0 + 15 of tile `bTile` ([k][n] layout, n = D).
template <int D>
__device__ inline void mmaAccByRowsT(float (&acc)[D / 8][4],
                                     const uint32_t (&a)[4], uint32_t bTile,
                                     int k0, const LdsmOffsets &off) {
  constexpr int kLd = ldOf<D>();
  const uint32_t bBase = bTile + off.bt + uint32_t(k0 * kLd * 2);
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    uint32_t b[4];
    ldsm4t(bBase + uint32_t(dp * 32), b);
    mma(acc[2 * dp], a, b[0], b[1]);
    mma(acc[2 * dp + 1], a, b[2], b[3]);
  }
}

} // namespace rondo::cuda::detail::flash

#endif // RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTIONMMA_CUH
