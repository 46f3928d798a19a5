//===- FlashAttentionSm90.cu - bf16 attention with wgmma (sm_90a) ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The Hopper kernels of the Precision::Bf16 attention (FlashAttention.cu
// dispatches here on compute capability 9.0; its header comment gives the
// design they share with the mma.sync kernels). Built for sm_90a alone
// (CMakeLists.txt), since wgmma exists only there.
//
// What differs from the mma.sync kernels:
//  - Products are warpgroup-wide wgmma.mma_async m64nNk16 (bf16 -> fp32): a
//    block is two warpgroups (8 warps), each owning 64 rows of the resident
//    tile. The tensor cores read B (and A, when it is a staged tile) straight
//    from shared memory, once per 64 rows, instead of every warp pulling
//    fragments through ldmatrix (which bound the mma.sync loops).
//  - Every shared-memory operand is K-major in the 128-byte-swizzled layout
//    that a wgmma descriptor names (64-column blocks of 128-byte rows, the
//    16-byte chunk c of row r stored at chunk c ^ (r % 8); the hardware
//    applies the same XOR to the address bits, so tiles are 1024-byte
//    aligned). The products whose B is K-major in the natural layout of the
//    other operand (P V, dS K, P^T dO, dS^T Q) read transposed bf16 copies
//    (v^T, k^T, dO^T, q^T) that the conversion pass writes beside the plain
//    ones, so no descriptor needs the MN-major (transposed) form.
//  - P and dS go from the S / dP accumulators straight into register A
//    fragments: a warp's 16 rows of an m64nN accumulator have mma.sync's
//    m16n8 layout, and a register-A wgmma takes mma.sync's m16k16 fragment.
//  - The forward and dQ kernels are software-pipelined (after
//    FlashAttention-3): each iteration issues this tile's S (and dP) product
//    and then the previous tile's P V (dQ += dS K) product, waits only for
//    the first, and computes the softmax (dS) while the second runs. dQ keeps
//    Q and dO as register A fragments. The dK/dV kernel is not pipelined: at
//    252 registers a pipelined version spilled and ran slower.
//  - No wgmma sits on a conditional path, and no register a wgmma in flight
//    reads or accumulates into is written by other instructions: ptxas
//    otherwise serialises every wgmma of the kernel (C7513 / C7515 / C7518),
//    which cost up to 20% here. So the first pending product of a pipeline
//    is a zero operand times a zeroed buffer, and the forward and dQ kernels
//    compute and fully mask tiles hidden from a warpgroup (only at the edges
//    of a window or of S != T) instead of skipping them; the dK/dV kernel
//    skips them per warpgroup.
//  - Measured in the SASS (CUDA 13.0): ptxas places the forward's wait for
//    P V before the row maxima, so its softmax does not yet overlap that
//    product (the dQ kernel's dS does). The variants tried to fix that (P
//    double-buffered in registers or in shared memory, the O rescale moved)
//    were serialised by ptxas and slower; FlashAttention-3's producer warp and
//    two-warpgroup ping-pong are the next step.
//  - Head dimension 256 (Gemma-3): the forward only, with 64-key tiles (the
//    64 x 256 O accumulator is 128 registers a thread) and O += P V as two
//    n128 products. The D = 256 backward runs on the mma.sync kernels:
//    dK and dV of a warpgroup's keys would take 256 registers a thread, and
//    the tiles these kernels stage (with their transposed copies) exceed a
//    block's shared memory at D = 256 (runtime/kernels/cuda/NOTES.md).
//  - The backward here is two kernels (dQ; dK and dV) that both compute S
//    and dP. FlashAttentionSm90Bwd.cu has a fused one at D = 128 (S and dP
//    once, dQ added across key tiles in a fixed order); it is slower at W1's
//    shape and so opt-in (flashSm90Fused, runtime/kernels/cuda/NOTES.md).
// Each output element is still owned by one thread with a fixed
// accumulation order, so results are deterministic.
//
//===----------------------------------------------------------------------===//

#include "FlashAttentionSm90.cuh"

#include <cstdlib>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "FlashAttentionSm90.cu must be built for sm_90a only (CMakeLists.txt)"
#endif

namespace rondo::cuda::detail::flash {

namespace {

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

template <int D, int BC>
__global__ void __launch_bounds__(kNT, 1) flashFwdSm90Kernel(FlashParams p) {
  constexpr int BR = kRows;
  constexpr int kNB = BC / 8; // key n-blocks of a score tile
  constexpr int kDB = D / 8;  // n-blocks of an output row
  constexpr uint32_t kQBytes = BR * D * 2;
  constexpr uint32_t kBytes = BC * D * 2; // a K tile, or a V^T tile
  extern __shared__ unsigned char smem[];
  const uint32_t sQ = (smemAddr(smem) + 1023u) & ~1023u;
  const uint32_t sK = sQ + kQBytes;    // two buffers
  const uint32_t sV = sK + 2 * kBytes; // V^T, two buffers

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3;
  const BlockPos pos = blockPos(p, p.Hq);
  const int qt = p.Tpad / BR - 1 - pos.slot; // heavy tiles first
  const int h = pos.head, b = pos.batch, hk = h / p.group;
  const int i0 = qt * BR;
  const int64_t bh = int64_t(b) * p.Hq + h, bhk = int64_t(b) * p.Hkv + hk;
  const bf16 *qg = p.q + (bh * p.Tpad + i0) * D;
  const bf16 *kg = p.k + bhk * p.Spad * D;
  const bf16 *vtg = p.vT + bhk * D * p.Spad;
  const int diag = p.S - p.T; // row i sees keys j <= i + diag
  const int lastRow = (i0 + BR < p.T ? i0 + BR : p.T) - 1;
  const int nEnd = keyEnd(p, lastRow);
  const int nTiles = nEnd > 0 ? (nEnd + BC - 1) / BC : 0;
  const int jtBegin = keyTileBegin(p, i0, BC);
  const int w0 = i0 + warp * 16; // this warp's rows
  const int row0 = w0 + g;       // this thread's rows: row0, row0 + 8

  float o[kDB][4];
  zero(o);
  const float m0 = p.sinks ? p.sinks[h] * kLog2e : -INFINITY;
  const float l0 = m0 != -INFINITY && t4 == 0 ? 1.0f : 0.0f;
  float mRow[2] = {m0, m0}, lRow[2] = {l0, l0};

  // Software pipeline (after FlashAttention-3's intra-warpgroup overlap): in
  // iteration j the tensor cores run S_j = Q K_j^T and then O += P_{j-1}
  // V_{j-1}, and the warps wait only for S_j before its softmax. O is
  // rescaled to the new row maximum once that product has landed. So K runs
  // one tile ahead of V: iteration j prefetches K_{j+1} and V_j into the
  // buffers that S_{j-1} and P_{j-2} V_{j-2} (both waited for before this
  // iteration's barrier) have released.
  // ptxas still places the wait for P_{j-1} V_{j-1} before the row maxima
  // (see the file comment). The masking below is branch-free: with a branch
  // per element the wait moved above the masking as well.
  // No wgmma sits on a conditional path (ptxas would serialise them all): the
  // first iteration's pending product is P = 0 times a zeroed V buffer, and
  // tiles hidden from a warpgroup are computed and fully masked (P = 0, the
  // row state unchanged) rather than skipped; they occur only at the edges
  // of a sliding window or of S != T.
  uint32_t pa[BC / 16][4]; // P_{j-1}, the A operand of the pending P V
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk)
    pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
  zeroSmem(smem, sV + kBytes, kBytes);
  float alpha[2] = {1.0f, 1.0f}; // rescale owed to O by the last softmax
  auto rescaleO = [&] {
#pragma unroll
    for (int n = 0; n < kDB; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }
  };
  auto issuePV = [&](int jPrev) {
    const uint32_t vBuf = ((jPrev - jtBegin) & 1) ? kBytes : 0u;
    regFence(o);
    regFence(pa);
    wgFence();
    gemmRS(o, pa, sV + vBuf);
    wgCommit();
  };
  if (jtBegin < nTiles) {
    loadSw<BR, D, kNT>(sQ, qg, D);
    loadSw<BC, D, kNT>(sK, kg + int64_t(jtBegin) * BC * D, D);
    cpAsyncCommit();
  }
  for (int jt = jtBegin; jt < nTiles; ++jt) {
    const int j0 = jt * BC;
    const uint32_t buf = ((jt - jtBegin) & 1) ? kBytes : 0u;
    cpAsyncWait<0>(); // K_j and V_{j-1} (issued one iteration ago) landed
    proxyFence();
    __syncthreads();
    if (jt + 1 < nTiles)
      loadSw<BC, D, kNT>(sK + (kBytes - buf), kg + int64_t(j0 + BC) * D, D);
    loadSw<D, BC, kNT>(sV + buf, vtg + j0, p.Spad);
    cpAsyncCommit();

    rescaleO(); // by the last softmax's alpha, before P_{j-1} V_{j-1}
    float s[kNB][4];
    zero(s);
    regFence(s);
    wgFence();
    gemmSS<BR, D / 16>(s, sQ, wg * 64, sK + buf);
    wgCommit();
    issuePV(jt - 1);
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    regFence(s);

    // Scores in log2 units; masked ones -inf.
    const bool masked = j0 + BC > p.S ||
                        (p.causal && j0 + BC - 1 > w0 + diag) ||
                        windowCuts(p, w0, 16, j0);
#pragma unroll
    for (int n = 0; n < kNB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        // Branch-free (see the pipeline comment above).
        const int j = j0 + n * 8 + 2 * t4 + (e & 1);
        const int i = row0 + (e >> 1) * 8;
        const bool cut = (j >= p.S) | (p.causal & (j > i + diag)) |
                         ((p.window > 0) & (j <= i + diag - p.window));
        const float x = s[n][e] * p.scaleLog2;
        s[n][e] = masked & cut ? -INFINITY : x;
      }

    // Online softmax; s becomes P.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kNB; ++n)
        mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mNew = fmaxf(mRow[r], mx);
      // A row with nothing visible yet keeps P = 0 and a zero state.
      const float mUse = mNew == -INFINITY ? 0.0f : mNew;
      alpha[r] = exp2f(mRow[r] - mUse);
      mRow[r] = mNew;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kNB; ++n) {
        float p0 = exp2f(s[n][2 * r] - mUse);
        float p1 = exp2f(s[n][2 * r + 1] - mUse);
        s[n][2 * r] = p0;
        s[n][2 * r + 1] = p1;
        sum += p0;
        sum += p1;
      }
      lRow[r] = lRow[r] * alpha[r] + sum;
    }

    // P_{j-1} V_{j-1} has landed; P_j (rounded to bf16) becomes the pending
    // product's A. O is rescaled only at the next iteration's start: with
    // the rescale here, ptxas hoisted this wait above the whole softmax.
    regFence(s);
    wgWait0();
    regFence(o);
    regFence(pa);
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
      accToA(s, kk, pa[kk]);
  }
  // The last tile's P V (P = 0 on the zeroed buffer if no tile was seen).
  cpAsyncWait<0>();
  proxyFence();
  __syncthreads();
  rescaleO();
  issuePV(nTiles > jtBegin ? nTiles - 1 : jtBegin - 1);
  wgWait0();
  regFence(o);
  regFence(pa);

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = lRow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int i = row0 + 8 * r;
    if (i >= p.T)
      continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *orow = p.out + (bh * p.T + i) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kDB; ++n)
      *reinterpret_cast<float2 *>(orow + n * 8) =
          make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (p.lse && t4 == 0)
      p.lse[bh * p.T + i] = l > 0.0f ? mRow[r] * kLn2 + logf(l) : -INFINITY;
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// dQ of one 128-row query tile of one head: S = Q K^T and dP = dO V^T per
/// 64-key tile, dQ += dS K (k^T is the K-major B).
template <int D>
__global__ void __launch_bounds__(kNT, 1) flashDqSm90Kernel(FlashParams p) {
  constexpr int BR = kRows, BC = 64;
  constexpr int kNB = BC / 8;
  constexpr int kDB = D / 8;
  constexpr uint32_t kQBytes = BR * D * 2;
  constexpr uint32_t kBytes = BC * D * 2;
  extern __shared__ unsigned char smem[];
  const uint32_t sQ = (smemAddr(smem) + 1023u) & ~1023u;
  const uint32_t sO = sQ + kQBytes; // dO
  // K, V (two buffers each, interleaved), then K^T (two buffers).
  const uint32_t sKV = sO + kQBytes;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const BlockPos pos = blockPos(p, p.Hq);
  const int qt = p.Tpad / BR - 1 - pos.slot; // heavy tiles first
  const int h = pos.head, b = pos.batch, hk = h / p.group;
  const int i0 = qt * BR;
  const int64_t bh = int64_t(b) * p.Hq + h, bhk = int64_t(b) * p.Hkv + hk;
  const bf16 *qg = p.q + (bh * p.Tpad + i0) * D;
  const bf16 *og = p.dout + (bh * p.Tpad + i0) * D;
  const bf16 *kg = p.k + bhk * p.Spad * D;
  const bf16 *vg = p.v + bhk * p.Spad * D;
  const bf16 *ktg = p.kT + bhk * D * p.Spad;
  const int diag = p.S - p.T;
  const int lastRow = (i0 + BR < p.T ? i0 + BR : p.T) - 1;
  const int nEnd = keyEnd(p, lastRow);
  const int nTiles = nEnd > 0 ? (nEnd + BC - 1) / BC : 0;
  const int jtBegin = keyTileBegin(p, i0, BC);
  const int w0 = i0 + warp * 16;
  const int row0 = w0 + g;
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) { // rows < Tpad: always inside the arrays
    lse2[r] = p.lse2[bh * p.Tpad + row0 + 8 * r];
    dl[r] = p.delta[bh * p.Tpad + row0 + 8 * r];
  }

  // Pipeline as the forward's: iteration j runs S_j = Q K_j^T and dP_j =
  // dO V_j^T (Q and dO as register A fragments, loaded once), then dQ +=
  // dS_{j-1} K_{j-1}, and computes dS_j while that product runs. K and V run
  // one tile ahead of K^T. No wgmma on a conditional path: the first pending
  // product is dS = 0 times a zeroed K^T buffer, and tiles hidden from a
  // warpgroup are computed and fully masked.
  const uint32_t sK0 = sKV, sKt0 = sKV + 4 * kBytes; // K, V x2 | K^T x2
  auto loadKV = [&](int jt, uint32_t buf) {
    const int j0 = jt * BC;
    loadSw<BC, D, kNT>(sK0 + 2 * buf, kg + int64_t(j0) * D, D);
    loadSw<BC, D, kNT>(sK0 + 2 * buf + kBytes, vg + int64_t(j0) * D, D);
  };
  zeroSmem(smem, sKt0 + kBytes, kBytes);

  float dq[kDB][4];
  zero(dq);
  uint32_t da[BC / 16][4]; // dS_{j-1}, the A operand of the pending dQ
#pragma unroll
  for (int kk = 0; kk < BC / 16; ++kk)
    da[kk][0] = da[kk][1] = da[kk][2] = da[kk][3] = 0u;
  if (jtBegin < nTiles) {
    loadSw<BR, D, kNT>(sQ, qg, D);
    loadSw<BR, D, kNT>(sO, og, D);
    loadKV(jtBegin, 0);
    cpAsyncCommit();
  }
  cpAsyncWait<0>();
  __syncthreads();
  uint32_t qa[D / 16][4], oa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    ldsmA<BR>(sQ, warp * 16, kk, qa[kk]);
    ldsmA<BR>(sO, warp * 16, kk, oa[kk]);
  }
  auto issueDq = [&](int jPrev) {
    const uint32_t tBuf = ((jPrev - jtBegin) & 1) ? kBytes : 0u;
    regFence(dq);
    regFence(da);
    wgFence();
    gemmRS(dq, da, sKt0 + tBuf);
    wgCommit();
  };
  for (int jt = jtBegin; jt < nTiles; ++jt) {
    const int j0 = jt * BC;
    const uint32_t buf = ((jt - jtBegin) & 1) ? kBytes : 0u;
    cpAsyncWait<0>(); // K_j, V_j and K^T_{j-1} landed
    proxyFence();
    __syncthreads();
    if (jt + 1 < nTiles)
      loadKV(jt + 1, kBytes - buf);
    loadSw<D, BC, kNT>(sKt0 + buf, ktg + j0, p.Spad);
    cpAsyncCommit();
    const uint32_t sK = sK0 + 2 * buf, sV = sK + kBytes;

    float s[kNB][4], dp[kNB][4];
    zero(s);
    zero(dp);
    regFence(s);
    regFence(dp);
    regFence(qa);
    regFence(oa);
    wgFence();
    gemmRS(s, qa, sK);
    gemmRS(dp, oa, sV);
    wgCommit();
    issueDq(jt - 1);
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    regFence(s);
    regFence(dp);
    regFence(qa);
    regFence(oa);

    // s becomes dS = P (dP - delta).
    const bool masked = j0 + BC > p.S ||
                        (p.causal && j0 + BC - 1 > w0 + diag) ||
                        windowCuts(p, w0, 16, j0);
    scoresToDs(s, dp, p, masked, j0, row0, diag, t4, lse2, dl);

    // dQ_{j-1} has landed; dS_j (rounded to bf16) becomes the pending A
    // (dS_j pinned before the wait, as in the forward).
    regFence(s);
    wgWait0();
    regFence(dq);
    regFence(da);
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
      accToA(s, kk, da[kk]);
  }
  // The last tile's dQ += dS K.
  cpAsyncWait<0>();
  proxyFence();
  __syncthreads();
  issueDq(nTiles > jtBegin ? nTiles - 1 : jtBegin - 1);
  wgWait0();
  regFence(dq);
  regFence(da);

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + 8 * r;
    if (i >= p.T)
      continue;
    float *row = p.dq + (bh * p.T + i) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kDB; ++n)
      *reinterpret_cast<float2 *>(row + n * 8) =
          make_float2(dq[n][2 * r] * p.scale, dq[n][2 * r + 1] * p.scale);
  }
}

/// dK and dV of one 128-key tile of one kv head: for each query head of the
/// group and each 64-row query tile that sees the keys (ascending), S^T = K
/// Q^T and dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q (dO^T and q^T
/// are the K-major Bs).
template <int D>
__global__ void __launch_bounds__(kNT, 1) flashDkvSm90Kernel(FlashParams p) {
  constexpr int BR = kRows, BC = 64;
  constexpr int kNQ = BC / 8;
  constexpr int kDB = D / 8;
  constexpr uint32_t kKBytes = BR * D * 2;
  constexpr uint32_t kBytes = BC * D * 2;
  constexpr uint32_t kVecBytes = BC * 4;
  static_assert(2 * BC / 4 <= kNT, "one 16-byte vector chunk a thread");
  extern __shared__ unsigned char smem[];
  const uint32_t sK = (smemAddr(smem) + 1023u) & ~1023u;
  const uint32_t sV = sK + kKBytes;
  // Per buffer: Q, dO, Q^T, dO^T.
  const uint32_t sQO = sV + kKBytes;
  const uint32_t sVec = sQO + 8 * kBytes;
  // Per buffer: lse2[BC] then delta[BC].
  const float *vecs = reinterpret_cast<const float *>(
      smem + (sVec - smemAddr(smem)));

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3;
  const BlockPos pos = blockPos(p, p.Hkv);
  const int j0 = pos.slot * BR; // heavy (early) key tiles first
  const int hk = pos.head, b = pos.batch;
  const int64_t bhk = int64_t(b) * p.Hkv + hk;
  const int diag = p.S - p.T;
  // The query tiles that see this key tile.
  const QueryTiles tiles = queryTilesSeeing(p, j0, BR, BC);
  const int qtStart = tiles.start, qtEnd = tiles.end;
  const int nq = qtEnd - qtStart;
  const int nWork = nq > 0 ? p.group * nq : 0;
  const int wk0 = j0 + warp * 16; // this warp's keys
  const int key0 = wk0 + g;       // this thread's keys: key0, key0 + 8
  const int wgKey0 = j0 + wg * 64;

  // Enqueues the Q, dO, Q^T, dO^T, lse2, delta tiles of work item w into
  // buffer `buf`.
  auto loadWork = [&](int w, int buf) {
    const int hq = hk * p.group + w / nq;
    const int i0 = (qtStart + w % nq) * BC;
    const int64_t mat = int64_t(b) * p.Hq + hq;
    const int64_t rowBase = mat * p.Tpad + i0;
    const uint32_t dst = sQO + uint32_t(buf) * 4 * kBytes;
    loadSw<BC, D, kNT>(dst, p.q + rowBase * D, D);
    loadSw<BC, D, kNT>(dst + kBytes, p.dout + rowBase * D, D);
    loadSw<D, BC, kNT>(dst + 2 * kBytes, p.qT + mat * D * p.Tpad + i0, p.Tpad);
    loadSw<D, BC, kNT>(dst + 3 * kBytes, p.doutT + mat * D * p.Tpad + i0,
                       p.Tpad);
    loadLseDelta<BC>(sVec + buf * 2 * kVecBytes, p, rowBase);
  };

  float dk[kDB][4], dv[kDB][4];
  zero(dk);
  zero(dv);
  if (nWork > 0) {
    loadSw<BR, D, kNT>(sK, p.k + (bhk * p.Spad + j0) * D, D);
    loadSw<BR, D, kNT>(sV, p.v + (bhk * p.Spad + j0) * D, D);
    loadWork(0, 0);
    cpAsyncCommit();
  }
  for (int w = 0; w < nWork; ++w) {
    const int buf = w & 1;
    if (w + 1 < nWork)
      loadWork(w + 1, buf ^ 1);
    cpAsyncCommit();
    cpAsyncWait<1>();
    proxyFence();
    __syncthreads();

    const int i0 = (qtStart + w % nq) * BC;
    if (tileHidden(p, i0, BC, wgKey0, 64)) {
      __syncthreads();
      continue;
    }
    const uint32_t qTile = sQO + uint32_t(buf) * 4 * kBytes;
    const uint32_t oTile = qTile + kBytes, qtTile = qTile + 2 * kBytes,
                   otTile = qTile + 3 * kBytes;
    const float *lse2 = vecs + buf * 2 * BC;
    const float *dl = lse2 + BC;
    const bool masked =
        (p.causal && wk0 + 15 > i0 + diag) || windowCuts(p, i0, BC, wk0);

    // S^T and dP^T for this warpgroup's 64 keys x BC queries.
    float st[kNQ][4], dpt[kNQ][4];
    zero(st);
    zero(dpt);
    regFence(st);
    regFence(dpt);
    wgFence();
    gemmSS<BR, D / 16>(st, sK, wg * 64, qTile);
    gemmSS<BR, D / 16>(dpt, sV, wg * 64, oTile);
    wgCommit();
    wgWait0();
    regFence(st);
    regFence(dpt);
    // st becomes P^T, dpt becomes dS^T.
#pragma unroll
    for (int n = 0; n < kNQ; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = n * 8 + 2 * t4 + (e & 1); // in the tile
        float pv = exp2f(fmaf(st[n][e], p.scaleLog2, -lse2[qi]));
        const int key = key0 + 8 * (e >> 1);
        if (masked && (key > i0 + qi + diag || beforeWindow(p, i0 + qi, key)))
          pv = 0.0f;
        st[n][e] = pv;
        dpt[n][e] = pv * (dpt[n][e] - dl[qi]);
      }
    // dV += P^T dO, dK += dS^T Q (bf16 operands).
    uint32_t pa[BC / 16][4], da[BC / 16][4];
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      accToA(st, kk, pa[kk]);
      accToA(dpt, kk, da[kk]);
    }
    regFence(dv);
    regFence(dk);
    regFence(pa);
    regFence(da);
    wgFence();
    gemmRS(dv, pa, otTile);
    gemmRS(dk, da, qtTile);
    wgCommit();
    wgWait0();
    regFence(dv);
    regFence(dk);
    regFence(pa);
    regFence(da);
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key0 + 8 * r;
    if (j >= p.S)
      continue;
    const int64_t rowOff = (bhk * p.S + j) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kDB; ++n) {
      if (p.dk)
        *reinterpret_cast<float2 *>(p.dk + rowOff + n * 8) =
            make_float2(dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
      if (p.dv)
        *reinterpret_cast<float2 *>(p.dv + rowOff + n * 8) =
            make_float2(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

template <int D> void forwardSm90(const FlashParams &p, const char *name) {
  // At D = 256 the 64 x 256 O accumulator takes 128 registers a thread, so
  // the score tile shrinks to 64 keys (32 registers for S, 16 for P).
  constexpr int BC = D <= 128 ? 128 : 64;
  const size_t smem = 1024 + size_t(kRows) * D * 2 + 4 * size_t(BC) * D * 2;
  launchFlash(flashFwdSm90Kernel<D, BC>, p.Tpad / kRows, p.B * p.Hq, kNT, smem,
              p, name);
}

template <int D>
void backwardSm90(const FlashParams &p, bool wantDq, bool wantDkv,
                  const char *name) {
  constexpr int BC = 64;
  if (wantDq) {
    const size_t smem = 1024 + 2 * size_t(kRows) * D * 2 + 6 * size_t(BC) * D * 2;
    launchFlash(flashDqSm90Kernel<D>, p.Tpad / kRows, p.B * p.Hq, kNT, smem,
                p, name);
  }
  if (wantDkv) {
    const size_t smem = 1024 + 2 * size_t(kRows) * D * 2 +
                        8 * size_t(BC) * D * 2 + 2 * 2 * BC * sizeof(float);
    launchFlash(flashDkvSm90Kernel<D>, p.Spad / kRows, p.B * p.Hkv, kNT, smem,
                p, name);
  }
}

} // namespace

bool flashSm90Usable() { return sm90KernelsUsable("RONDO_FLASH_SM90"); }

void flashForwardSm90(const FlashParams &p, int D, const char *name) {
  if (D == 64)
    forwardSm90<64>(p, name);
  else if (D == 128)
    forwardSm90<128>(p, name);
  else
    forwardSm90<256>(p, name);
}

void flashBackwardSm90(const FlashParams &p, int D, bool wantDq, bool wantDkv,
                       const char *name) {
  if (D == 64)
    backwardSm90<64>(p, wantDq, wantDkv, name);
  else
    backwardSm90<128>(p, wantDq, wantDkv, name);
}

} // namespace rondo::cuda::detail::flash
