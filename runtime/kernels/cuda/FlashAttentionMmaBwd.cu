//===- FlashAttentionMmaBwd.cu - mma.sync backward of the bf16 attention --===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The backward kernels of the Precision::Bf16 attention on the warp-level
// tensor cores (mma.sync), run on every GPU without the Hopper backward
// (FlashAttentionSm90.cu) and for head dimension 256 everywhere: the dQ
// kernel and the dK/dV kernels (dkvPairBlock at D = 256). FlashAttention.cu's
// header comment gives the design; its dispatch calls flashBackwardMmaSync
// after the prologue (delta, lse2) and the bf16 conversions.
//
//===----------------------------------------------------------------------===//

#include "FlashAttentionMma.cuh"

namespace rondo::cuda::detail::flash {

namespace {

/// The dQ of one query tile of one head (pos), BR / 16 warps.
template <int D, int BR, int BC>
__device__ inline void dqBlock(const FlashParams &p, BlockPos pos) {
  constexpr int kNT = BR * 2;
  constexpr int kNB = BC / 8;
  constexpr int kDB = D / 8;
  constexpr uint32_t kQBytes = tileBytes<D, BR>();
  constexpr uint32_t kBytes = tileBytes<D, BC>();
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smemAddr(smem);
  const uint32_t sO = sQ + kQBytes;    // dO
  const uint32_t sK = sO + kQBytes;    // two buffers
  const uint32_t sV = sK + 2 * kBytes; // two buffers

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int qt = p.Tpad / BR - 1 - pos.slot; // heavy tiles first
  const int h = pos.head, b = pos.batch, hk = h / p.group;
  const int i0 = qt * BR;
  const int64_t bh = int64_t(b) * p.Hq + h, bhk = int64_t(b) * p.Hkv + hk;
  const bf16 *qg = p.q + (bh * p.Tpad + i0) * D;
  const bf16 *og = p.dout + (bh * p.Tpad + i0) * D;
  const bf16 *kg = p.k + bhk * p.Spad * D;
  const bf16 *vg = p.v + bhk * p.Spad * D;
  const int diag = p.S - p.T;
  const int lastRow = (i0 + BR < p.T ? i0 + BR : p.T) - 1;
  const int nEnd = keyEnd(p, lastRow);
  const int nTiles = nEnd > 0 ? (nEnd + BC - 1) / BC : 0;
  const int jtBegin = keyTileBegin(p, i0, BC);
  const LdsmOffsets off = ldsmOffsets<D>(lane);
  const int w0 = i0 + warp * 16;
  const int row0 = w0 + g;
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) { // rows < Tpad: always inside the arrays
    lse2[r] = p.lse2[bh * p.Tpad + row0 + 8 * r];
    dl[r] = p.delta[bh * p.Tpad + row0 + 8 * r];
  }

  float dq[kDB][4];
  zero(dq);
  if (jtBegin < nTiles) {
    loadTileAsync<D, BR, kNT>(sQ, qg);
    loadTileAsync<D, BR, kNT>(sO, og);
    loadTileAsync<D, BC, kNT>(sK, kg + int64_t(jtBegin) * BC * D);
    loadTileAsync<D, BC, kNT>(sV, vg + int64_t(jtBegin) * BC * D);
    cpAsyncCommit();
  }
  for (int jt = jtBegin; jt < nTiles; ++jt) {
    const int j0 = jt * BC;
    const uint32_t buf = ((jt - jtBegin) & 1) ? kBytes : 0u;
    nextKvTile<D, BC, kNT>(sK, sV, buf, kg, vg, j0, jt, nTiles);
    if (tileHidden(p, w0, 16, j0, BC)) {
      __syncthreads();
      continue;
    }

    float s[kNB][4], dp[kNB][4];
    zero(s);
    zero(dp);
    mmaRowsByRows<D>(s, sQ, warp * 16, sK + buf, 0, off);
    mmaRowsByRows<D>(dp, sO, warp * 16, sV + buf, 0, off);

    // s becomes dS = P (dP - delta).
    const bool masked = j0 + BC > p.S ||
                        (p.causal && j0 + BC - 1 > w0 + diag) ||
                        windowCuts(p, w0, 16, j0);
    scoresToDs(s, dp, p, masked, j0, row0, diag, t4, lse2, dl);

    // dQ += dS K (dS rounded to bf16).
#pragma unroll
    for (int kk = 0; kk < kNB / 2; ++kk) {
      uint32_t a[4];
      accToA(s, kk, a);
      mmaAccByRowsT<D>(dq, a, sK + buf, kk * 16, off);
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + 8 * r;
    if (i >= p.T)
      continue;
    float *row = p.dq + (bh * p.T + i) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kDB; ++n) {
      row[n * 8] = dq[n][2 * r] * p.scale;
      row[n * 8 + 1] = dq[n][2 * r + 1] * p.scale;
    }
  }
}

/// The dK and dV of one key tile of one kv head (pos), BR / 16 warps.
template <int D, int BR, int BC>
__device__ inline void dkvBlock(const FlashParams &p, BlockPos pos) {
  constexpr int kNT = BR * 2; // a warp per 16 keys
  // Query columns per pass over a tile (fewer live score registers at
  // D = 128; the shared-memory traffic is the same).
  constexpr int kQC = D <= 64 && BC >= 64 ? 64 : 32;
  constexpr int kNQ = kQC / 8;
  constexpr int kDB = D / 8;
  constexpr uint32_t kKBytes = tileBytes<D, BR>();
  constexpr uint32_t kBytes = tileBytes<D, BC>();
  constexpr uint32_t kVecBytes = BC * 4;
  static_assert(2 * BC / 4 <= kNT, "one 16-byte vector chunk a thread");
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sK = smemAddr(smem);
  const uint32_t sV = sK + kKBytes;
  const uint32_t sQ = sV + kKBytes;    // two buffers
  const uint32_t sO = sQ + 2 * kBytes; // dO, two buffers
  const uint32_t sVec = sO + 2 * kBytes;
  // Per buffer: lse2[BC] then delta[BC].
  const float *vecs =
      reinterpret_cast<const float *>(smem + 2 * kKBytes + 4 * kBytes);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int j0 = pos.slot * BR; // heavy (early) key tiles first
  const int hk = pos.head, b = pos.batch;
  const int64_t bhk = int64_t(b) * p.Hkv + hk;
  const int diag = p.S - p.T;
  // The query tiles that see this key tile.
  const QueryTiles tiles = queryTilesSeeing(p, j0, BR, BC);
  const int qtStart = tiles.start, qtEnd = tiles.end;
  const int nq = qtEnd - qtStart;
  const int nWork = nq > 0 ? p.group * nq : 0;
  const LdsmOffsets off = ldsmOffsets<D>(lane);
  const int wk0 = j0 + warp * 16; // this warp's keys
  const int key0 = wk0 + g;       // this thread's keys: key0, key0 + 8

  // Enqueues the Q, dO, lse2, delta tiles of work item w into buffer `buf`.
  auto loadWork = [&](int w, int buf) {
    const int hq = hk * p.group + w / nq;
    const int i0 = (qtStart + w % nq) * BC;
    const int64_t rowBase = (int64_t(b) * p.Hq + hq) * p.Tpad + i0;
    loadTileAsync<D, BC, kNT>(sQ + buf * kBytes, p.q + rowBase * D);
    loadTileAsync<D, BC, kNT>(sO + buf * kBytes, p.dout + rowBase * D);
    loadLseDelta<BC>(sVec + buf * 2 * kVecBytes, p, rowBase);
  };

  float dk[kDB][4], dv[kDB][4];
  zero(dk);
  zero(dv);
  if (nWork > 0) {
    loadTileAsync<D, BR, kNT>(sK, p.k + (bhk * p.Spad + j0) * D);
    loadTileAsync<D, BR, kNT>(sV, p.v + (bhk * p.Spad + j0) * D);
    loadWork(0, 0);
    cpAsyncCommit();
  }
  for (int w = 0; w < nWork; ++w) {
    const int buf = w & 1;
    if (w + 1 < nWork)
      loadWork(w + 1, buf ^ 1);
    cpAsyncCommit();
    cpAsyncWait<1>();
    __syncthreads();

    const int i0 = (qtStart + w % nq) * BC;
    if (tileHidden(p, i0, BC, wk0, 16)) {
      __syncthreads();
      continue;
    }
    const uint32_t qTile = sQ + buf * kBytes, oTile = sO + buf * kBytes;
    const float *lse2 = vecs + buf * 2 * BC;
    const float *dl = lse2 + BC;
    const bool masked =
        (p.causal && wk0 + 15 > i0 + diag) || windowCuts(p, i0, BC, wk0);
#pragma unroll
    for (int c = 0; c < BC / kQC; ++c) {
      // S^T and dP^T for this warp's 16 keys x kQC queries.
      float st[kNQ][4], dpt[kNQ][4];
      zero(st);
      zero(dpt);
      mmaRowsByRows<D>(st, sK, warp * 16, qTile, c * kQC, off);
      mmaRowsByRows<D>(dpt, sV, warp * 16, oTile, c * kQC, off);
      // st becomes P^T, dpt becomes dS^T.
#pragma unroll
      for (int n = 0; n < kNQ; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = c * kQC + n * 8 + 2 * t4 + (e & 1); // in the tile
          float pv = exp2f(fmaf(st[n][e], p.scaleLog2, -lse2[qi]));
          const int key = key0 + 8 * (e >> 1);
          if (masked && (key > i0 + qi + diag || beforeWindow(p, i0 + qi, key)))
            pv = 0.0f;
          st[n][e] = pv;
          dpt[n][e] = pv * (dpt[n][e] - dl[qi]);
        }
        // dV += P^T dO, dK += dS^T Q (bf16 operands).
#pragma unroll
      for (int kk = 0; kk < kNQ / 2; ++kk) {
        uint32_t a[4];
        accToA(st, kk, a);
        mmaAccByRowsT<D>(dv, a, oTile, c * kQC + kk * 16, off);
        accToA(dpt, kk, a);
        mmaAccByRowsT<D>(dk, a, qTile, c * kQC + kk * 16, off);
      }
    }
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
      if (p.dk) {
        p.dk[rowOff + n * 8] = dk[n][2 * r] * p.scale;
        p.dk[rowOff + n * 8 + 1] = dk[n][2 * r + 1] * p.scale;
      }
      if (p.dv) {
        p.dv[rowOff + n * 8] = dv[n][2 * r];
        p.dv[rowOff + n * 8 + 1] = dv[n][2 * r + 1];
      }
    }
  }
}

/// The dK and dV of one key tile of one kv head where one warp cannot hold
/// both accumulators of its keys (D = 256: 2 x 128 fp32 registers a thread).
/// Two warps share each 16 keys: warp k of the first half accumulates dV,
/// warp k of the second half dK, so every product of dkvBlock is still done
/// once. Per chunk of queries the dV warp computes S^T = K Q^T and P^T, the
/// dK warp dP^T = V dO^T; P^T (fp32, masked) goes from the dV warp to its
/// partner through shared memory, and then each accumulates its own product
/// (dV += P^T dO, dK += dS^T Q). The hand-over uses block barriers only, so
/// warps of a tile their keys cannot see skip the products but not the
/// barriers. Each output element is still owned by one thread with a fixed
/// order.
constexpr int kPairQC = 32; // dkvPairBlock's query columns per pass

template <int D, int BR, int BC>
__device__ inline void dkvPairBlock(const FlashParams &p, BlockPos pos) {
  constexpr int kPairs = BR / 16;
  constexpr int kNT = BR * 4; // two warps per 16 keys
  constexpr int kQC = kPairQC;
  constexpr int kNQ = kQC / 8;
  constexpr int kDB = D / 8;
  constexpr uint32_t kKBytes = tileBytes<D, BR>();
  constexpr uint32_t kBytes = tileBytes<D, BC>();
  constexpr uint32_t kVecBytes = BC * 4;
  // A pair's P^T of one chunk: kNQ float4s a lane, lane-minor (no bank
  // conflicts); two, so that a chunk's store never meets the last one's
  // reads.
  constexpr int kXVecs = kNQ * 32;
  static_assert(2 * BC / 4 <= kNT, "one 16-byte vector chunk a thread");
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sK = smemAddr(smem);
  const uint32_t sV = sK + kKBytes;
  const uint32_t sQ = sV + kKBytes;    // two buffers
  const uint32_t sO = sQ + 2 * kBytes; // dO, two buffers
  const uint32_t sVec = sO + 2 * kBytes;
  // Per buffer: lse2[BC] then delta[BC].
  const float *vecs =
      reinterpret_cast<const float *>(smem + 2 * kKBytes + 4 * kBytes);
  float4 *xch = reinterpret_cast<float4 *>(smem + 2 * kKBytes + 4 * kBytes +
                                           4 * kVecBytes);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const bool dkWarp = warp >= kPairs;
  const int pair = dkWarp ? warp - kPairs : warp;
  const int j0 = pos.slot * BR; // heavy (early) key tiles first
  const int hk = pos.head, b = pos.batch;
  const int64_t bhk = int64_t(b) * p.Hkv + hk;
  const int diag = p.S - p.T;
  // The query tiles that see this key tile.
  const QueryTiles tiles = queryTilesSeeing(p, j0, BR, BC);
  const int qtStart = tiles.start, qtEnd = tiles.end;
  const int nq = qtEnd - qtStart;
  const int nWork = nq > 0 ? p.group * nq : 0;
  const LdsmOffsets off = ldsmOffsets<D>(lane);
  const int wk0 = j0 + pair * 16; // this pair's keys
  const int key0 = wk0 + g;       // this thread's keys: key0, key0 + 8
  float4 *myXch = xch + pair * 2 * kXVecs + lane;

  auto loadWork = [&](int w, int buf) {
    const int hq = hk * p.group + w / nq;
    const int i0 = (qtStart + w % nq) * BC;
    const int64_t rowBase = (int64_t(b) * p.Hq + hq) * p.Tpad + i0;
    loadTileAsync<D, BC, kNT>(sQ + buf * kBytes, p.q + rowBase * D);
    loadTileAsync<D, BC, kNT>(sO + buf * kBytes, p.dout + rowBase * D);
    loadLseDelta<BC>(sVec + buf * 2 * kVecBytes, p, rowBase);
  };

  float acc[kDB][4]; // dV (first half of the warps) or dK
  zero(acc);
  if (nWork > 0) {
    loadTileAsync<D, BR, kNT>(sK, p.k + (bhk * p.Spad + j0) * D);
    loadTileAsync<D, BR, kNT>(sV, p.v + (bhk * p.Spad + j0) * D);
    loadWork(0, 0);
    cpAsyncCommit();
  }
  for (int w = 0; w < nWork; ++w) {
    const int buf = w & 1;
    // Item w has landed, and every warp is done with item w - 1, whose
    // buffers the next item's copies (overlapping this item) reuse.
    cpAsyncWait<0>();
    __syncthreads();
    if (w + 1 < nWork)
      loadWork(w + 1, buf ^ 1);
    cpAsyncCommit();

    const int i0 = (qtStart + w % nq) * BC;
    const bool hidden = tileHidden(p, i0, BC, wk0, 16);
    const uint32_t qTile = sQ + buf * kBytes, oTile = sO + buf * kBytes;
    const float *lse2 = vecs + buf * 2 * BC;
    const float *dl = lse2 + BC;
    const bool masked =
        (p.causal && wk0 + 15 > i0 + diag) || windowCuts(p, i0, BC, wk0);
#pragma unroll
    for (int c = 0; c < BC / kQC; ++c) {
      // S^T (dV warp) or dP^T (dK warp) for the pair's 16 keys x kQC
      // queries.
      float x[kNQ][4];
      zero(x);
      float4 *slot = myXch + (c & 1) * kXVecs;
      if (!hidden) {
        mmaRowsByRows<D>(x, dkWarp ? sV : sK, pair * 16, dkWarp ? oTile : qTile,
                         c * kQC, off);
        if (!dkWarp) {
          // x becomes P^T, handed to the dK warp.
#pragma unroll
          for (int n = 0; n < kNQ; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int qi = c * kQC + n * 8 + 2 * t4 + (e & 1);
              float pv = exp2f(fmaf(x[n][e], p.scaleLog2, -lse2[qi]));
              const int key = key0 + 8 * (e >> 1);
              if (masked &&
                  (key > i0 + qi + diag || beforeWindow(p, i0 + qi, key)))
                pv = 0.0f;
              x[n][e] = pv;
            }
            slot[n * 32] = make_float4(x[n][0], x[n][1], x[n][2], x[n][3]);
          }
        }
      }
      // This chunk's P^T is visible to the dK warps; the other slot's
      // readers (the last chunk) are done with it.
      __syncthreads();
      if (hidden)
        continue;
      if (dkWarp) {
        // x becomes dS^T = P^T (dP^T - delta).
#pragma unroll
        for (int n = 0; n < kNQ; ++n) {
          const float4 pv = slot[n * 32];
          const float pe[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int qi = c * kQC + n * 8 + 2 * t4 + (e & 1);
            x[n][e] = pe[e] * (x[n][e] - dl[qi]);
          }
        }
      }
      // dV += P^T dO or dK += dS^T Q (bf16 operands).
#pragma unroll
      for (int kk = 0; kk < kNQ / 2; ++kk) {
        uint32_t a[4];
        accToA(x, kk, a);
        mmaAccByRowsT<D>(acc, a, dkWarp ? qTile : oTile, c * kQC + kk * 16,
                         off);
      }
    }
  }

  float *dst = dkWarp ? p.dk : p.dv;
  const float mul = dkWarp ? p.scale : 1.0f;
  if (!dst)
    return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key0 + 8 * r;
    if (j >= p.S)
      continue;
    float *row = dst + (bhk * p.S + j) * D + 2 * t4;
#pragma unroll
    for (int n = 0; n < kDB; ++n) {
      row[n * 8] = acc[n][2 * r] * mul;
      row[n * 8 + 1] = acc[n][2 * r + 1] * mul;
    }
  }
}

template <int D, int BR, int BC, int MinBlocks>
__global__ void __launch_bounds__(BR * 2, MinBlocks)
    flashDqKernel(FlashParams p) {
  dqBlock<D, BR, BC>(p, blockPos(p, p.Hq));
}

template <int D, int BR, int BC, int MinBlocks>
__global__ void __launch_bounds__(BR * 2, MinBlocks)
    flashDkvKernel(FlashParams p) {
  dkvBlock<D, BR, BC>(p, blockPos(p, p.Hkv));
}

template <int D, int BR, int BC>
__global__ void __launch_bounds__(BR * 4, 1) flashDkvPairKernel(FlashParams p) {
  dkvPairBlock<D, BR, BC>(p, blockPos(p, p.Hkv));
}

template <int D, int BR, int BC> constexpr size_t dqSmem() {
  return 2 * tileBytes<D, BR>() + 4 * size_t(tileBytes<D, BC>());
}
template <int D, int BR, int BC> constexpr size_t dkvSmem() {
  return 2 * tileBytes<D, BR>() + 4 * size_t(tileBytes<D, BC>()) +
         2 * 2 * BC * sizeof(float);
}
/// dkvPairBlock's: dkvBlock's and two P^T exchange slots a warp pair.
template <int D, int BR, int BC> constexpr size_t dkvPairSmem() {
  return dkvSmem<D, BR, BC>() +
         size_t(BR / 16) * 2 * (kPairQC / 8) * 32 * sizeof(float4);
}

template <int D, int BR, int BC, int MB>
void dqCfg(const FlashParams &p, const char *name) {
  launchFlash(flashDqKernel<D, BR, BC, MB>, p.Tpad / BR, p.B * p.Hq, BR * 2,
              dqSmem<D, BR, BC>(), p, name);
}

template <int D, int BR, int BC, int MB>
void dkvCfg(const FlashParams &p, const char *name) {
  launchFlash(flashDkvKernel<D, BR, BC, MB>, p.Spad / BR, p.B * p.Hkv, BR * 2,
              dkvSmem<D, BR, BC>(), p, name);
}

template <int D, int BR, int BC>
void dkvPairCfg(const FlashParams &p, const char *name) {
  launchFlash(flashDkvPairKernel<D, BR, BC>, p.Spad / BR, p.B * p.Hkv, BR * 4,
              dkvPairSmem<D, BR, BC>(), p, name);
}

/// The current device's attribute `attr` (0 if it cannot be read).
int deviceAttr(cudaDeviceAttr attr) {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess)
    return 0;
  return v;
}

// Measured on an H100 at T = 4096, D = 128, causal (DISABLED_FlashTimingW1):
// the backward kernels are fastest with 64-row tiles (their 128 fp32
// accumulator registers a thread leave no room for a second block of 8 warps,
// and 128-row tiles gave fewer, longer blocks).
template <int D>
void backwardD(const FlashParams &p, bool wantDq, bool wantDkv,
               const char *name) {
  if (wantDq)
    dqCfg<D, 64, 64, 2>(p, name);
  if (wantDkv)
    dkvCfg<D, 64, 64, 2>(p, name);
}

// D = 256 (Gemma-3), measured on an H100 at Gemma-3-1B's heads (Hq 4, Hkv 1,
// T 4096, causal, window 512 or none; DISABLED_FlashTimingGemma3): a warp's
// 16 x 256 fp32 accumulator takes 128 registers a thread, so key tiles
// shrink to 32 columns and one block of 8 warps runs an SM.
void backward256(const FlashParams &p, bool wantDq, bool wantDkv,
                 const char *name) {
  if (wantDq) {
    // 128-row query tiles (198 KiB) were 15% faster than 64-row ones at two
    // rows of 4096, but with fewer blocks than SMs their causal imbalance
    // made them 30% slower (one row); GPUs with less shared memory per
    // block (the A100's 163 KiB) take the 64-row tiles (132 KiB).
    const int64_t blocks128 = int64_t(p.Tpad / 128) * p.B * p.Hq;
    if (size_t(deviceAttr(cudaDevAttrMaxSharedMemoryPerBlockOptin)) >=
            dqSmem<256, 128, 32>() &&
        blocks128 >= deviceAttr(cudaDevAttrMultiProcessorCount))
      dqCfg<256, 128, 32, 1>(p, name);
    else
      dqCfg<256, 64, 32, 1>(p, name);
  }
  // 32-key tiles, 4 warps (108 KiB, two blocks an SM on an H100): with
  // Gemma's single kv head there are only B * S / BR blocks, and 32-key
  // tiles were 10-20% faster than 64-key ones (with 32- or 64-query tiles).
  if (wantDkv)
    dkvPairCfg<256, 32, 32>(p, name);
}

} // namespace

void flashBackwardMmaSync(const FlashParams &p, int D, bool wantDq,
                          bool wantDkv, const char *name) {
  if (D == 64)
    backwardD<64>(p, wantDq, wantDkv, name);
  else if (D == 128)
    backwardD<128>(p, wantDq, wantDkv, name);
  else
    backward256(p, wantDq, wantDkv, name);
}

} // namespace rondo::cuda::detail::flash
