//===- FlashAttentionSm90Bwd.cu - fused bf16 attention backward (sm_90a) --===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The Hopper backward of the Precision::Bf16 attention at head dimension 128
// in one kernel (after FlashAttention-3's deterministic backward): five tile
// products per score tile instead of the two-kernel backward's seven
// (FlashAttentionSm90.cu), which recomputes S = Q K^T and dP = dO V^T in
// both its dK/dV and its dQ kernel.
//
// A block owns one 128-key tile of one kv head (two warpgroups of 64 keys,
// K and V resident in shared memory) and walks the (query tile, query head)
// items that see its keys: the 64-row query tiles in descending order, the
// group's query heads inside each. Per item, each warpgroup
//  1. computes S^T = K Q^T and dP^T = V dO^T for its 64 keys (both operands
//     from shared memory), then P^T and dS^T = P^T (dP^T - delta) in
//     registers;
//  2. accumulates dV += P^T dO and dK += dS^T Q with P^T / dS^T as register
//     A fragments and Q, dO read MN-major straight from their tiles (no
//     transposed copies);
//  3. stores dS^T transposed (stmatrix .trans) into a [64 queries][128 keys]
//     shared tile, and after a block barrier computes its 64-column half of
//     this key tile's dQ contribution, dS K (K read MN-major from its tile);
//  4. keeps that half (scaled) in shared memory and, during the next item's
//     first products, adds it into the fp32 dQ output with float4 atomics,
//     but only after the key tile before it has added its own: a counter a
//     (head, query tile, half) in global memory counts the key tiles that
//     have added, and key tile n waits until it reads n - first, where
//     first is the first key tile that sees the query tile; then a fence
//     and a release add publish the additions. So every dQ element is the
//     sum of the key tiles' contributions in ascending key order, whatever
//     the timing: the result is bitwise reproducible.
// Deadlock freedom: a block waits only on blocks of lower key tiles of its
// kv head, and the launch order (blockPos: key tiles slowest) gives those
// lower linear indices, so they are running or done. Descending query tiles
// keep the key tiles of a head in step: all start at the last query tile,
// which each needs right after its predecessor, so a key tile waits at most
// about one item a predecessor (ascending, key tile n's last query tile is
// also key tile 0's, and each would finish after key tile 0).
//
// dQ is zeroed first (cudaMemsetAsync) and receives scale * dS K per key
// tile; dK and dV are owned by one thread each, in a fixed order, as in the
// two-kernel backward. Callers that do not want dQ get it in a temporary:
// the kernel always computes all three, so that a gradient's bits never
// depend on which others were asked for.
//
// Measured on an H100 (runtime/kernels/cuda/NOTES.md): the kernel without
// its dQ additions runs W1's backward at ~300 TFLOP/s, but moving the dQ
// partials (fp32, 32 KiB per item: 0.55 GB at one row of 4096 tokens, 16
// heads) costs more than the two recomputed products it saves, so it is not
// the default (kFusedByDefault; RONDO_FLASH_FUSED_BWD=1 selects it).
//
//===----------------------------------------------------------------------===//

#include "FlashAttentionSm90.cuh"

#include <cstdlib>
#include <memory>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "FlashAttentionSm90Bwd.cu must be built for sm_90a only (CMakeLists.txt)"
#endif

namespace rondo::cuda::detail::flash {

namespace {

/// Whether the fused kernel is the default at D = 128 (RONDO_FLASH_FUSED_BWD
/// = 1 / 0 overrides). Off while it is slower than the two-kernel backward
/// at W1's shape (runtime/kernels/cuda/NOTES.md).
constexpr bool kFusedByDefault = false;

/// The descriptor of an MN-major, 128-byte-swizzled operand at `addr` (with
/// TransB): rows of 128 bytes hold 64 consecutive M/N elements of one k, 8
/// rows (one swizzle atom, 1024 bytes) 8 consecutive k (stride byte offset
/// 1024), and the next 64 M/N elements start `lbo` bytes on. A loadSw tile
/// of rows = k and columns = M/N is this layout with lbo = rows * 128.
__device__ inline uint64_t descMN(uint32_t addr, uint32_t lbo) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(lbo >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

/// Stores four 8 x 8 bf16 matrices (this thread's words of their mma
/// fragments) transposed: row r of matrix i goes to the address lane 8 i + r
/// gives.
__device__ inline void stsm4t(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, "
               "%3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ inline int loadAcquire(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n"
               : "=r"(v)
               : "l"(p)
               : "memory");
  return v;
}

/// Spins until *p == want, backing off so that waiting blocks do not crowd
/// the L2 with loads.
__device__ inline void waitFor(const int *p, int want) {
  while (loadAcquire(p) != want)
    __nanosleep(40);
}

__device__ inline void addRelease(int *p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v)
               : "memory");
}

/// A barrier of the 128 threads of warpgroup wg (ids 1 and 2; 0 is
/// __syncthreads).
__device__ inline void wgBarrier(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

template <int D>
__global__ void __launch_bounds__(kNT, 1) flashBwdSm90Kernel(FlashParams p) {
  static_assert(D == 128, "a warpgroup's half of a dQ row is one 64-column "
                          "swizzle block");
  constexpr int BR = kRows, BC = 64; // keys a block, queries an item
  constexpr int kNQ = BC / 8;        // query n-blocks of S^T
  constexpr int kDB = D / 8;         // n-blocks of a dK / dV row
  constexpr int kHB = D / 16;        // n-blocks of a warpgroup's dQ half
  constexpr uint32_t kKBytes = BR * D * 2;
  constexpr uint32_t kBytes = BC * D * 2;
  constexpr uint32_t kVecBytes = BC * 4;
  static_assert(2 * BC / 4 <= kNT, "one 16-byte vector chunk a thread");
  extern __shared__ unsigned char smem[];
  const uint32_t sK = (smemAddr(smem) + 1023u) & ~1023u;
  const uint32_t sV = sK + kKBytes;
  const uint32_t sQO = sV + kKBytes;     // per buffer: Q, dO
  const uint32_t sDs = sQO + 4 * kBytes; // dS: [BC queries][BR keys]
  const uint32_t sVec = sDs + BC * BR * 2;
  // Per buffer: lse2[BC] then delta[BC].
  const float *vecs =
      reinterpret_cast<const float *>(smem + (sVec - smemAddr(smem)));
  // The last item's scaled dQ, [BC][kDqLd] fp32 (rows padded by 8 floats:
  // the fragment stores of a warp's 8 rows meet at most two to a bank).
  constexpr int kDqLd = D + 8;
  float *sDq = reinterpret_cast<float *>(smem + (sVec - smemAddr(smem)) +
                                         2 * 2 * kVecBytes);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3;
  const BlockPos pos = blockPos(p, p.Hkv);
  const int kt = pos.slot; // heavy (early) key tiles first
  const int j0 = kt * BR;
  const int hk = pos.head, b = pos.batch;
  const int64_t bhk = int64_t(b) * p.Hkv + hk;
  const int diag = p.S - p.T;
  const QueryTiles tiles = queryTilesSeeing(p, j0, BR, BC);
  const int nq = tiles.end - tiles.start;
  const int nWork = nq > 0 ? p.group * nq : 0;
  const int wk0 = j0 + warp * 16; // this warp's keys
  const int key0 = wk0 + g;       // this thread's keys: key0, key0 + 8
  const int nQt = p.Tpad / BC;

  // Item w: query tile end - 1 - w / group (descending), query head
  // hk * group + w % group.
  auto itemQt = [&](int w) { return tiles.end - 1 - w / p.group; };
  auto itemHead = [&](int w) { return hk * p.group + w % p.group; };
  auto loadWork = [&](int w, int buf) {
    const int64_t rowBase =
        (int64_t(b) * p.Hq + itemHead(w)) * p.Tpad + itemQt(w) * BC;
    const uint32_t dst = sQO + uint32_t(buf) * 2 * kBytes;
    loadSw<BC, D, kNT>(dst, p.q + rowBase * D, D);
    loadSw<BC, D, kNT>(dst + kBytes, p.dout + rowBase * D, D);
    loadLseDelta<BC>(sVec + buf * 2 * kVecBytes, p, rowBase);
  };
  // The counter of this warpgroup's half of item w's dQ rows ([B * Hq, nQt,
  // warpgroup]), and the value it holds once every key tile before this one
  // that sees them has added.
  auto counterOf = [&](int w) {
    return p.dqSem + ((int64_t(b) * p.Hq + itemHead(w)) * nQt + itemQt(w)) * 2 +
           wg;
  };
  auto predecessors = [&](int qt) {
    int first = 0;
    if (p.window > 0) // key tiles whose band ends before the query tile
      while (first < kt && queryTilesSeeing(p, first * BR, BR, BC).end <= qt)
        ++first;
    return kt - first;
  };
  // Adds this warpgroup's half of item w's dQ (in sDq) after the key tiles
  // before this one (16 threads a row, float4 atomics), and publishes the
  // additions to the next key tile: every thread's fence, then one release.
  auto flush = [&](int w) {
    int *counter = counterOf(w);
    if ((threadIdx.x & 127) == 0)
      waitFor(counter, predecessors(itemQt(w)));
    wgBarrier(wg);
    const int tid = threadIdx.x & 127;
    const int64_t mat = int64_t(b) * p.Hq + itemHead(w);
    const int i0 = itemQt(w) * BC;
#pragma unroll
    for (int it = 0; it < BC * 64 / 4 / 128; ++it) {
      const int r = it * 8 + (tid >> 4), c = wg * 64 + (tid & 15) * 4;
      const float4 v = *reinterpret_cast<const float4 *>(sDq + r * kDqLd + c);
      if (i0 + r < p.T)
        atomicAdd(
            reinterpret_cast<float4 *>(p.dq + (mat * p.T + i0 + r) * D + c), v);
    }
    __threadfence();
    wgBarrier(wg);
    if (tid == 0)
      addRelease(counter, 1);
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
    // Item w has landed, and every thread is done with item w - 1 (its
    // buffers, dS, and its dQ rows but for its own warpgroup's half, which
    // it flushes below): the next item's copies go to its buffers, under
    // this item's work.
    cpAsyncWait<0>();
    proxyFence();
    __syncthreads();
    if (w + 1 < nWork)
      loadWork(w + 1, buf ^ 1);
    cpAsyncCommit();

    const int qt = itemQt(w);
    const int i0 = qt * BC;
    const uint32_t qTile = sQO + uint32_t(buf) * 2 * kBytes;
    const uint32_t oTile = qTile + kBytes;
    const float *lse2 = vecs + buf * 2 * BC;
    const float *dl = lse2 + BC;
    const bool masked = wk0 + 15 >= p.S || (p.causal && wk0 + 15 > i0 + diag) ||
                        windowCuts(p, i0, BC, wk0);

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
    if (w > 0)
      flush(w - 1); // under the products just issued
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
        if (masked && (key >= p.S || (p.causal && key > i0 + qi + diag) ||
                       beforeWindow(p, i0 + qi, key)))
          pv = 0.0f;
        st[n][e] = pv;
        dpt[n][e] = pv * (dpt[n][e] - dl[qi]);
      }
    uint32_t pa[BC / 16][4], da[BC / 16][4];
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      accToA(st, kk, pa[kk]);
      accToA(dpt, kk, da[kk]);
    }
    // dS (bf16) into the shared [query][key] tile: this warp's 16 keys are
    // 16-byte chunks 2 (warp % 4) and 2 (warp % 4) + 1 of the warpgroup's
    // 64-key swizzle block; k-step kk's four 8 x 8 blocks of dS^T (keys
    // 0-7 / 8-15 by queries 0-7 / 8-15 of the step) go to rows 16 kk ..
    {
      const int c = 2 * (warp & 3) + ((lane >> 3) & 1);
#pragma unroll
      for (int kk = 0; kk < BC / 16; ++kk) {
        const int q = kk * 16 + ((lane >> 4) << 3) + (lane & 7);
        stsm4t(sDs + uint32_t(wg * BC * 128 + q * 128 + ((c ^ (q & 7)) << 4)),
               da[kk]);
      }
    }
    // dV += P^T dO, dK += dS^T Q (dO and Q MN-major: k = the tile's rows).
    regFence(dv);
    regFence(dk);
    regFence(pa);
    regFence(da);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      wgmmaRS<1>(dv, pa[kk], descMN(oTile + uint32_t(kk * 16 * 128), BC * 128));
      wgmmaRS<1>(dk, da[kk], descMN(qTile + uint32_t(kk * 16 * 128), BC * 128));
    }
    wgCommit();
    proxyFence(); // dS, stored by this thread, is read by the tensor cores
    __syncthreads();
    // This warpgroup's half of dQ_item = dS K: A = dS (K-major), B = the
    // D-columns wg * 64 .. of the K tile, MN-major (k = keys = its rows).
    float dq[kHB][4];
    zero(dq);
    regFence(dq);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk)
      wgmmaSS<1>(
          dq, descAt<BC>(sDs, 0, kk),
          descMN(sK + uint32_t(wg * BR * 128 + kk * 16 * 128), BR * 128));
    wgCommit();
    wgWait0();
    regFence(dv);
    regFence(dk);
    regFence(pa);
    regFence(da);
    regFence(dq);

    // Kept for the next item, whose first products hide the wait and the
    // additions (this warpgroup's flush of the last item read its half
    // before its release).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float *row =
          sDq + ((warp & 3) * 16 + g + 8 * r) * kDqLd + wg * 64 + 2 * t4;
#pragma unroll
      for (int n = 0; n < kHB; ++n)
        *reinterpret_cast<float2 *>(row + n * 8) =
            make_float2(dq[n][2 * r] * p.scale, dq[n][2 * r + 1] * p.scale);
    }
  }
  if (nWork > 0)
    flush(nWork - 1);

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

} // namespace

bool flashSm90Fused(int64_t D) {
  const char *env = std::getenv("RONDO_FLASH_FUSED_BWD");
  const bool on = env && env[0] ? env[0] != '0' : kFusedByDefault;
  return D == 128 && on;
}

void flashBackwardSm90Fused(const FlashParams &params, const char *name) {
  constexpr int D = 128, BC = 64;
  FlashParams p = params;
  const size_t dqBytes = size_t(p.B) * p.Hq * p.T * D * sizeof(float);
  std::unique_ptr<Temp> dqTemp;
  if (!p.dq) {
    dqTemp = std::make_unique<Temp>(dqBytes, name);
    p.dq = dqTemp->as<float>();
  }
  const size_t counters = size_t(p.B) * p.Hq * (p.Tpad / BC) * 2;
  Temp sem(counters * sizeof(int), name);
  p.dqSem = sem.as<int>();
  RONDO_CHECK(cudaMemsetAsync(p.dq, 0, dqBytes, currentStream()), name);
  RONDO_CHECK(
      cudaMemsetAsync(p.dqSem, 0, counters * sizeof(int), currentStream()),
      name);
  // K, V; Q, dO (two buffers); dS; lse2, delta (two buffers); dQ rows.
  const size_t smem = 1024 + 2 * size_t(kRows) * D * 2 +
                      4 * size_t(BC) * D * 2 + size_t(BC) * kRows * 2 +
                      2 * 2 * BC * sizeof(float) +
                      size_t(BC) * (D + 8) * sizeof(float);
  launchFlash(flashBwdSm90Kernel<D>, p.Spad / kRows, p.B * p.Hkv, kNT, smem, p,
              name);
  sem.release();
  if (dqTemp)
    dqTemp->release();
}

} // namespace rondo::cuda::detail::flash
