//===- FlashAttention.cuh - Shared parts of the bf16 attention -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Included by every part of the bf16 attention: FlashAttention.cu (the
// mma.sync forward, the backward's prologue and the dispatch),
// FlashAttentionMmaBwd.cu (the mma.sync backward), FlashAttentionStaging.cu
// (the bf16 copies) and, built for sm_90a only, FlashAttentionSm90.cu (the
// wgmma forward and two-kernel backward) and FlashAttentionSm90Bwd.cu (the
// fused wgmma backward): the kernel parameters, the mask geometry and the
// small PTX wrappers they share. See FlashAttention.cu's header comment for
// the design.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTION_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTION_CUH

#include "Internal.cuh"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace rondo::cuda::detail::flash {

using bf16 = __nv_bfloat16;

// Sequence lengths are padded to kPad, a multiple of every tile size.
constexpr int kPad = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct FlashParams {
  // bf16 copies, rows padded to Tpad / Spad with zeros.
  const bf16 *q, *k, *v, *dout;
  // Transposed bf16 copies [mats, D, Tpad / Spad] for the wgmma kernels, whose
  // B operands are all K-major (null on the mma.sync path): v^T (forward),
  // q^T, dO^T and k^T (backward).
  const bf16 *qT, *kT, *vT, *doutT;
  // [B * Hq, Tpad]: lse * log2e (+inf where lse = -inf or padding), delta.
  const float *lse2, *delta;
  const float *sinks; // [Hq] or null (forward only: lse carries them)
  float *out, *lse, *dq, *dk, *dv;
  // The fused Hopper backward's dQ counters: [B * Hq, Tpad / 64, 2], zeroed.
  int *dqSem;
  int B, Hq, Hkv, group, T, S, Tpad, Spad;
  bool causal;
  int window; // > 0: sliding window (causal only)
  float scale, scaleLog2;
};

//===----------------------------------------------------------------------===//
// PTX wrappers
//===----------------------------------------------------------------------===//

/// The query tiles (of bc rows) [start, end) that see a key of the key tile
/// [j0, j0 + br): from the first query that sees key j0 (causal: j0 less the
/// diagonal's offset S - T) to, with a window, the tile of the last query
/// that sees the tile's last key; the dK/dV kernels skip the others.
struct QueryTiles {
  int start, end;
};
__device__ inline QueryTiles queryTilesSeeing(const FlashParams &p, int j0,
                                              int br, int bc) {
  const int diag = p.S - p.T;
  int first = p.causal ? j0 - diag : 0;
  first = first < 0 ? 0 : first;
  int end = p.Tpad / bc;
  if (p.window > 0) {
    const int last = j0 + br - 1 - diag + p.window - 1;
    end = last < 0 ? 0 : (last / bc + 1 < end ? last / bc + 1 : end);
  }
  return {first / bc, end};
}

__device__ inline uint32_t smemAddr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void ldsm4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ inline void cpAsync16(uint32_t dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
               "l"(src));
}

/// The A operand (16 rows x 16 of the k dimension) for k-step kk from
/// accumulator fragments c[n] of 8 columns each: columns 16 kk .. 16 kk + 15.
/// mma.sync's m16n8 accumulators and a warp's 16 rows of a wgmma m64nN
/// accumulator share this layout, and so do the A fragments of mma.sync
/// m16n8k16 and of a register-A wgmma.
template <int N>
__device__ inline void accToA(const float (&c)[N][4], int kk,
                              uint32_t (&a)[4]) {
  a[0] = packBf16(c[2 * kk][0], c[2 * kk][1]);
  a[1] = packBf16(c[2 * kk][2], c[2 * kk][3]);
  a[2] = packBf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = packBf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

template <int N> __device__ inline void zero(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      c[n][e] = 0.0f;
}

//===----------------------------------------------------------------------===//
// Mask geometry
//===----------------------------------------------------------------------===//

/// Keys a causal/non-causal row range can see: keys [0, end) for the last
/// row `lastRow` (the largest range in the tile).
__device__ inline int keyEnd(const FlashParams &p, int lastRow) {
  if (!p.causal)
    return p.S;
  int end = lastRow + (p.S - p.T) + 1;
  return end < p.S ? end : p.S;
}

/// The first key tile (of `cols` keys) a row range starting at `firstRow` can
/// see: with a sliding window, tiles wholly before the band of its first row
/// are skipped.
__device__ inline int keyTileBegin(const FlashParams &p, int firstRow,
                                   int cols) {
  if (p.window <= 0)
    return 0;
  int begin = firstRow + (p.S - p.T) + 1 - p.window;
  return begin > 0 ? begin / cols : 0;
}

/// Whether a score tile (`rows` query rows from i0, keys from j0) has a key
/// before the band of one of its rows (every row counted, padding too).
__device__ inline bool windowCuts(const FlashParams &p, int i0, int rows,
                                  int j0) {
  return p.window > 0 && j0 <= i0 + rows - 1 + (p.S - p.T) - p.window;
}

/// Whether no score of a tile (query rows [i0, i0 + rows), keys [j0, j0 +
/// cols)) is visible: every key after the diagonal or before the band of
/// every row. Warps skip such tiles' products; P = 0 on them, so skipping
/// leaves every accumulator's bits unchanged.
__device__ inline bool tileHidden(const FlashParams &p, int i0, int rows,
                                  int j0, int cols) {
  const int diag = p.S - p.T;
  if (p.causal && j0 > i0 + rows - 1 + diag)
    return true;
  return p.window > 0 && j0 + cols - 1 <= i0 + diag - p.window;
}

/// The (tile slot, head, batch) of this block. Heads vary fastest in the
/// launch order, so that the heaviest tiles of every head start first.
struct BlockPos {
  int slot, head, batch;
};
__device__ inline BlockPos blockPos(const FlashParams &p, int heads) {
  const int bh = int(blockIdx.x % unsigned(p.B * heads));
  return {int(blockIdx.x / unsigned(p.B * heads)), bh % heads, bh / heads};
}

/// Whether key j is before the band of row i.
__device__ inline bool beforeWindow(const FlashParams &p, int i, int j) {
  return p.window > 0 && j <= i + (p.S - p.T) - p.window;
}

/// Enqueues (by the block's first BC / 2 threads) the cp.async copies of the
/// log-sum-exp (log2 units) and delta of the BC query rows from rowBase into
/// the shared vectors at dst: BC floats of lse2, then BC of delta.
template <int BC>
__device__ inline void loadLseDelta(uint32_t dst, const FlashParams &p,
                                    int64_t rowBase) {
  const int c = threadIdx.x;
  if (c < 2 * BC / 4) { // 16-byte chunks of lse2, then of delta
    const float *src = c < BC / 4 ? p.lse2 + rowBase + c * 4
                                  : p.delta + rowBase + (c - BC / 4) * 4;
    cpAsync16(dst + c * 16, src);
  }
}

/// The dQ kernels' step from a warp's S and dP accumulators (m16n8 layout,
/// kNB column blocks of 8 keys from j0; this thread's rows row0 and row0 +
/// 8, column pair 2 t4) to dS = P (dP - delta) in place of S, P recomputed
/// from the saved log-sum-exp (lse2, log2 units) and hidden scores zeroed
/// where `masked`.
template <int kNB>
__device__ inline void
scoresToDs(float (&s)[kNB][4], const float (&dp)[kNB][4], const FlashParams &p,
           bool masked, int j0, int row0, int diag, int t4,
           const float (&lse2)[2], const float (&dl)[2]) {
#pragma unroll
  for (int n = 0; n < kNB; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      float pv = exp2f(fmaf(s[n][e], p.scaleLog2, -lse2[r]));
      if (masked) {
        int j = j0 + n * 8 + 2 * t4 + (e & 1);
        int i = row0 + 8 * r;
        if (j >= p.S || (p.causal && j > i + diag) || beforeWindow(p, i, j))
          pv = 0.0f;
      }
      s[n][e] = pv * (dp[n][e] - dl[r]);
    }
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

template <typename Kernel>
void launchFlash(Kernel kernel, int64_t slots, int heads, int threads,
                 size_t smem, const FlashParams &p, const char *name) {
  const int64_t blocks = int64_t(slots) * heads;
  if (blocks > int64_t(0x7fffffff))
    contract(name, "too many attention tiles for one launch");
  RONDO_CHECK(cudaFuncSetAttribute(kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(smem)),
              name);
  RONDO_CHECK(cudaFuncSetAttribute(
                  kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                  int(cudaSharedmemCarveoutMaxShared)),
              name);
  // One dimension, heads fastest (blockPos): the block scheduler starts
  // blocks in index order, so every head's heaviest tiles go first.
  kernel<<<unsigned(blocks), threads, smem, currentStream()>>>(p);
  checkLaunch(name);
}

//===----------------------------------------------------------------------===//
// The Hopper kernels (FlashAttentionSm90.cu)
//===----------------------------------------------------------------------===//

/// Whether the wgmma kernels run on the current device: compute capability
/// 9.0 (their sm_90a code runs nowhere else), unless RONDO_FLASH_SM90=0 asks
/// for the mma.sync kernels (tests compare the two paths).
bool flashSm90Usable();
/// The forward on p (q, k, vT set; D = 64, 128 or 256).
void flashForwardSm90(const FlashParams &p, int D, const char *name);
/// Whether the wgmma backward has kernels for head dimension D (64 and 128;
/// D = 256 takes the mma.sync backward everywhere: FlashAttentionSm90.cu's
/// header comment says why).
inline bool flashSm90Backward(int64_t D) { return D == 64 || D == 128; }
/// The dQ and / or dK, dV kernels on p (q, k, v, dout, qT, kT, doutT, lse2,
/// delta set; flashSm90Backward(D)).
void flashBackwardSm90(const FlashParams &p, int D, bool wantDq, bool wantDkv,
                       const char *name);
/// Whether the backward at head dimension D takes the fused Hopper kernel
/// (FlashAttentionSm90Bwd.cu): D = 128 and its default, or
/// RONDO_FLASH_FUSED_BWD=1 / 0 (tests and timings compare the two).
bool flashSm90Fused(int64_t D);
/// dQ, dK and dV in one kernel on p (q, k, v, dout, lse2, delta set; no
/// transposed copies; D = 128). A null p.dq goes to a temporary: the kernel
/// always computes all three, so each gradient's bits are the same whichever
/// others are wanted.
void flashBackwardSm90Fused(const FlashParams &p, const char *name);

//===----------------------------------------------------------------------===//
// The mma.sync backward (FlashAttentionMmaBwd.cu)
//===----------------------------------------------------------------------===//

/// The dQ and / or dK, dV kernels on p (q, k, v, dout, lse2, delta set) for
/// D = 64, 128 or 256, on any sm_80+ GPU.
void flashBackwardMmaSync(const FlashParams &p, int D, bool wantDq,
                          bool wantDkv, const char *name);

//===----------------------------------------------------------------------===//
// Staging (FlashAttentionStaging.cu)
//===----------------------------------------------------------------------===//

inline int64_t padTo(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

/// A padded bf16 copy of [mats, rows, D] in a stream-ordered temporary, and
/// with `transposed` also a [mats, D, rowsPad] copy (for the wgmma kernels).
struct Bf16Copy {
  Temp temp;
  size_t elems;
  bool transposed;
  Bf16Copy(const float *src, int64_t mats, int64_t rows, int64_t D,
           const char *name, bool transposed = false);
  const bf16 *get() const { return temp.as<bf16>(); }
  const bf16 *getT() const {
    return transposed ? temp.as<bf16>() + elems : nullptr;
  }
};

} // namespace rondo::cuda::detail::flash

#endif // RONDO_RUNTIME_KERNELS_CUDA_FLASHATTENTION_CUH
