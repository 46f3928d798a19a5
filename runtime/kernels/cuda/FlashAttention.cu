//===- FlashAttention.cu - bf16 tensor-core attention ---------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The Precision::Bf16 path of attention / attentionBackward (Attention.cu
// dispatches here for head dimensions 64, 128 and 256): FlashAttention-2 on
// the sm_80+ warp-level tensor cores (mma.sync m16n8k16 bf16 -> fp32,
// operands from shared memory through ldmatrix).
//
// Hopper: on compute capability 9.0 the same algorithm runs on warpgroup
// wgmma kernels instead (FlashAttentionSm90.cu, built for sm_90a only; its
// header comment says what differs): the mma.sync kernels left about half of
// the H100's tensor throughput unused, bound by ldmatrix traffic. Their
// conversion pass also writes transposed bf16 copies (v^T for the forward,
// q^T, dO^T and k^T for the backward) so that every wgmma B operand is
// K-major. RONDO_FLASH_SM90=0 keeps the mma.sync kernels (the tests run both
// paths). Everything below describes both paths unless it says otherwise.
//
// Staging (FlashAttentionStaging.cu): q, k, v (and dO) are first rounded to
// bf16 (nearest even) by a conversion pass into stream-ordered temporaries
// whose row counts are padded to the tile size with zero rows. Converting once
// costs one read of the inputs, while converting inside the attention kernels
// would re-read the fp32 k/v once per query tile; it also lets every tile load
// be a plain 16-byte cp.async with no bounds checks, double-buffered against
// the tensor cores. Shared-memory rows are padded by 16 bytes, so the eight row
// addresses of every ldmatrix phase fall into distinct bank groups.
//
// Tiles: a block keeps a resident tile of BR rows in shared memory (query
// rows in the forward and dQ kernels, key rows in the dK/dV kernel), one warp
// per 16 of them, and streams BC-row tiles of the other side (forward: 128 x
// 64, 8 warps; backward: 64 x 64, 4 warps). At D = 256 a warp's 16 x 256
// fp32 accumulator alone is 128 registers a thread: BC shrinks to 32, and
// the dK/dV kernel gives each 16 keys two warps, one accumulating dV and
// one dK (dkvPairBlock; forward256 / backward256 say which tiles and why).
// Scores stay in registers: the
// fp32 accumulator fragment of S = Q K^T has exactly the register layout of
// the bf16 A operand of the next product (P V, dS K, P^T dO, dS^T Q), so P /
// dS are rounded to bf16 and fed back without going through shared memory (as
// FlashAttention does).
// Causal: key tiles entirely above the diagonal are never visited (query
// tiles below it, in the dK/dV kernel), a warp skips the products of a tile
// its 16 rows cannot see at all, and only tiles that cross the diagonal or the
// end of the keys are masked element by element. The heaviest tiles (last
// query tiles, first key tiles) are scheduled first, those of every head
// before the lighter ones of any (heads vary fastest in the launch order).
//
// Forward: online softmax in fp32 on log2e-prescaled scores with exp2f; the
// row sum is kept per thread and reduced over the four threads of a row only
// at the end; lse = m ln2 + log(l). Rows that see no key end with l = 0 and
// get out = 0, lse = -inf. Attention sinks start every row at m = sink
// (log2 units) and l = 1 (on the first thread of the row's four), one more
// key with no value; lse then includes it and the backward is unchanged.
//
// Backward: a prologue kernel writes delta = rowsum(dO * O) and lse * log2e
// (+inf where lse = -inf, so that P = 0 there and in the padded rows). Then,
// without atomics:
//  - dK/dV: one block per (key tile, kv head, batch) walks the query heads of
//    its group in ascending order and, for each, the query tiles (those that
//    can see the key tile) in ascending order, recomputing S^T = K Q^T and
//    dP^T = V dO^T, and accumulating dV += P^T dO and dK += dS^T Q in
//    registers;
//  - dQ: one block per (query tile, query head, batch) walks its key tiles in
//    ascending order, recomputing S and dP, dQ += dS K.
// Determinism: every output element is owned by one thread of one block; its
// accumulation order (the mma k-order, the tile order, the fixed butterfly
// over the four threads of a row) depends only on the shapes. Nothing races,
// so two runs give the same bits.
//
//===----------------------------------------------------------------------===//

#include "FlashAttention.cuh"

namespace rondo::cuda::detail {

namespace flash {

namespace {

//===----------------------------------------------------------------------===//
// PTX wrappers
//===----------------------------------------------------------------------===//

__device__ inline void ldsm4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
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

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

template <int D, int BR, int BC, int MinBlocks>
__global__ void __launch_bounds__(BR * 2, MinBlocks)
    flashFwdKernel(FlashParams p) {
  constexpr int kNT = BR * 2; // threads: a warp per 16 query rows
  constexpr int kNB = BC / 8; // key n-blocks of a score tile
  constexpr int kDB = D / 8;  // n-blocks of an output row
  constexpr uint32_t kQBytes = tileBytes<D, BR>();
  constexpr uint32_t kBytes = tileBytes<D, BC>();
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smemAddr(smem);
  const uint32_t sK = sQ + kQBytes; // two buffers
  const uint32_t sV = sK + 2 * kBytes;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const BlockPos pos = blockPos(p, p.Hq);
  const int qt = p.Tpad / BR - 1 - pos.slot; // heavy tiles first
  const int h = pos.head, b = pos.batch, hk = h / p.group;
  const int i0 = qt * BR;
  const int64_t bh = int64_t(b) * p.Hq + h, bhk = int64_t(b) * p.Hkv + hk;
  const bf16 *qg = p.q + (bh * p.Tpad + i0) * D;
  const bf16 *kg = p.k + bhk * p.Spad * D;
  const bf16 *vg = p.v + bhk * p.Spad * D;
  const int diag = p.S - p.T; // row i sees keys j <= i + diag
  const int lastRow = (i0 + BR < p.T ? i0 + BR : p.T) - 1;
  const int nEnd = keyEnd(p, lastRow);
  const int nTiles = nEnd > 0 ? (nEnd + BC - 1) / BC : 0;
  const int jtBegin = keyTileBegin(p, i0, BC);
  const LdsmOffsets off = ldsmOffsets<D>(lane);
  const int w0 = i0 + warp * 16; // this warp's rows
  const int row0 = w0 + g;       // this thread's rows: row0, row0 + 8

  float o[kDB][4];
  zero(o);
  const float m0 = p.sinks ? p.sinks[h] * kLog2e : -INFINITY;
  const float l0 = m0 != -INFINITY && t4 == 0 ? 1.0f : 0.0f;
  float mRow[2] = {m0, m0}, lRow[2] = {l0, l0};

  if (jtBegin < nTiles) {
    loadTileAsync<D, BR, kNT>(sQ, qg);
    loadTileAsync<D, BC, kNT>(sK, kg + int64_t(jtBegin) * BC * D);
    loadTileAsync<D, BC, kNT>(sV, vg + int64_t(jtBegin) * BC * D);
    cpAsyncCommit();
  }
  for (int jt = jtBegin; jt < nTiles; ++jt) {
    const int j0 = jt * BC;
    const uint32_t buf = ((jt - jtBegin) & 1) ? kBytes : 0u;
    if (jt + 1 < nTiles) {
      loadTileAsync<D, BC, kNT>(sK + (kBytes - buf), kg + int64_t(j0 + BC) * D);
      loadTileAsync<D, BC, kNT>(sV + (kBytes - buf), vg + int64_t(j0 + BC) * D);
    }
    cpAsyncCommit();
    cpAsyncWait<1>(); // this tile's group (and Q) have landed
    __syncthreads();
    if (tileHidden(p, w0, 16, j0, BC)) {
      __syncthreads(); // the buffer is refilled two iterations on
      continue;
    }

    float s[kNB][4];
    zero(s);
    mmaRowsByRows<D>(s, sQ, warp * 16, sK + buf, 0, off);

    // Scores in log2 units; masked ones -inf.
    const bool masked = j0 + BC > p.S ||
                        (p.causal && j0 + BC - 1 > w0 + diag) ||
                        windowCuts(p, w0, 16, j0);
#pragma unroll
    for (int n = 0; n < kNB; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * p.scaleLog2;
        if (masked) {
          int j = j0 + n * 8 + 2 * t4 + (e & 1);
          int i = row0 + (e >> 1) * 8;
          if (j >= p.S || (p.causal && j > i + diag) || beforeWindow(p, i, j))
            x = -INFINITY;
        }
        s[n][e] = x;
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
      const float alpha = exp2f(mRow[r] - mUse);
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
      lRow[r] = lRow[r] * alpha + sum;
#pragma unroll
      for (int n = 0; n < kDB; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }

    // O += P V (P rounded to bf16).
#pragma unroll
    for (int kk = 0; kk < kNB / 2; ++kk) {
      uint32_t a[4];
      accToA(s, kk, a);
      mmaAccByRowsT<D>(o, a, sV + buf, kk * 16, off);
    }
    __syncthreads(); // the buffer is refilled two iterations on
  }

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
    for (int n = 0; n < kDB; ++n) {
      orow[n * 8] = o[n][2 * r] * inv;
      orow[n * 8 + 1] = o[n][2 * r + 1] * inv;
    }
    if (p.lse && t4 == 0)
      p.lse[bh * p.T + i] = l > 0.0f ? mRow[r] * kLn2 + logf(l) : -INFINITY;
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// delta = rowsum(dO * O) and lse2 = lse * log2e over [B * Hq, Tpad] rows;
/// padding rows and rows with lse = -inf get lse2 = +inf (P = 0), delta 0.
/// One warp a row, fixed lane order and tree.
__global__ void flashPrepKernel(const float *dout, const float *o,
                                const float *lse, float *delta, float *lse2,
                                int64_t mats, int T, int Tpad, int D) {
  const int lane = threadIdx.x & 31;
  const int64_t warpId = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t numWarps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = warpId; r < mats * Tpad; r += numWarps) {
    const int64_t m = r / Tpad;
    const int t = int(r % Tpad);
    float dl = 0.0f, l2 = INFINITY;
    if (t < T) {
      const int64_t src = (m * T + t) * D;
      float acc = 0.0f;
      for (int d = lane; d < D; d += 32)
        acc = fmaf(dout[src + d], o[src + d], acc);
      dl = warpSum(acc);
      float l = lse[m * T + t];
      l2 = l == -INFINITY ? INFINITY : l * kLog2e;
    }
    if (lane == 0) {
      delta[r] = dl;
      lse2[r] = l2;
    }
  }
}

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
    if (jt + 1 < nTiles) {
      loadTileAsync<D, BC, kNT>(sK + (kBytes - buf), kg + int64_t(j0 + BC) * D);
      loadTileAsync<D, BC, kNT>(sV + (kBytes - buf), vg + int64_t(j0 + BC) * D);
    }
    cpAsyncCommit();
    cpAsyncWait<1>();
    __syncthreads();
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
    const int c = threadIdx.x;
    if (c < 2 * BC / 4) { // 16-byte chunks of lse2, then of delta
      const float *src = c < BC / 4 ? p.lse2 + rowBase + c * 4
                                    : p.delta + rowBase + (c - BC / 4) * 4;
      cpAsync16(sVec + buf * 2 * kVecBytes + c * 16, src);
    }
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
    const int c = threadIdx.x;
    if (c < 2 * BC / 4) {
      const float *src = c < BC / 4 ? p.lse2 + rowBase + c * 4
                                    : p.delta + rowBase + (c - BC / 4) * 4;
      cpAsync16(sVec + buf * 2 * kVecBytes + c * 16, src);
    }
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

FlashParams baseParams(const FlashDims &d, bool causal, float scale,
                       const char *name) {
  if (d.T > (int64_t(1) << 30) || d.S > (int64_t(1) << 30))
    contract(name, "sequence too long for the bf16 attention kernels");
  if (d.Hq / d.Hkv * d.Hkv != d.Hq)
    contract(name, "query heads not a multiple of kv heads");
  FlashParams p{};
  p.B = int(d.B);
  p.Hq = int(d.Hq);
  p.Hkv = int(d.Hkv);
  p.group = int(d.Hq / d.Hkv);
  p.T = int(d.T);
  p.S = int(d.S);
  p.Tpad = int(padTo(d.T));
  p.Spad = int(padTo(d.S));
  p.causal = causal;
  p.window = int(d.window < d.S ? d.window : 0); // a wider band is all keys
  p.scale = scale;
  p.scaleLog2 = scale * kLog2e;
  return p;
}

template <int D, int BR, int BC> constexpr size_t fwdSmem() {
  return tileBytes<D, BR>() + 4 * size_t(tileBytes<D, BC>());
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
void forwardCfg(const FlashParams &p, const char *name) {
  launchFlash(flashFwdKernel<D, BR, BC, MB>, p.Tpad / BR, p.B * p.Hq, BR * 2,
              fwdSmem<D, BR, BC>(), p, name);
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
// the forward is fastest with 128 query rows a block (K/V tiles read from L2
// once per 128 rows, 2 blocks of 8 warps an SM); the backward kernels with
// 64-row tiles (their 128 fp32 accumulator registers a thread leave no room
// for a second block of 8 warps, and 128-row tiles gave fewer, longer blocks).
template <int D> void forwardD(const FlashParams &p, const char *name) {
  forwardCfg<D, 128, 64, 2>(p, name);
}

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
// shrink to 32 columns (no spills at 240-248 registers) and one block of 8
// warps runs a SM. The forward's 128 x 32 tiles (132 KiB) fit every sm_80+
// GPU; 128 x 64 (198 KiB) was 10% faster on the H100, whose forward at D =
// 256 runs on the wgmma kernel anyway.
void forward256(const FlashParams &p, const char *name) {
  forwardCfg<256, 128, 32, 1>(p, name);
}

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

} // namespace flash

using namespace flash;

bool flashAttentionSupports(int64_t headDim) {
  return headDim == 64 || headDim == 128 || headDim == 256;
}

void flashAttentionForward(const FlashDims &d, const float *q, const float *k,
                           const float *v, bool causal, float scale, float *out,
                           float *lse, const char *name) {
  if (!flashAttentionSupports(d.D))
    contract(name, "no bf16 attention kernel for head dimension %lld",
             (long long)d.D);
  if (d.B * d.Hq == 0 || d.T == 0)
    return;
  FlashParams p = baseParams(d, causal, scale, name);
  const bool sm90 = flashSm90Usable();
  Bf16Copy qb(q, d.B * d.Hq, d.T, d.D, name);
  Bf16Copy kb(k, d.B * d.Hkv, d.S, d.D, name);
  Bf16Copy vb(v, d.B * d.Hkv, d.S, d.D, name, /*transposed=*/sm90);
  p.q = qb.get();
  p.k = kb.get();
  p.v = vb.get();
  p.vT = vb.getT();
  p.out = out;
  p.lse = lse;
  p.sinks = d.sinks;
  if (sm90)
    flashForwardSm90(p, int(d.D), name);
  else if (d.D == 64)
    forwardD<64>(p, name);
  else if (d.D == 128)
    forwardD<128>(p, name);
  else
    forward256(p, name);
  vb.temp.release();
  kb.temp.release();
  qb.temp.release();
}

void flashAttentionBackward(const FlashDims &d, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            const float *dOut, bool causal, float scale,
                            float *dQ, float *dK, float *dV, const char *name) {
  if (!flashAttentionSupports(d.D))
    contract(name, "no bf16 attention kernel for head dimension %lld",
             (long long)d.D);
  if (!dQ && !dK && !dV)
    return;
  FlashParams p = baseParams(d, causal, scale, name);
  const int64_t mats = d.B * d.Hq;
  Temp vecs(size_t(2 * mats * p.Tpad) * sizeof(float), name);
  float *delta = vecs.as<float>();
  float *lse2 = delta + mats * p.Tpad;
  flashPrepKernel<<<gridFor(mats * p.Tpad * 32), kThreads, 0,
                    currentStream()>>>(dOut, out, lse, delta, lse2, mats, p.T,
                                       p.Tpad, int(d.D));
  checkLaunch(name);
  // The wgmma dQ kernel reads k^T; its dK/dV kernel reads q^T and dO^T.
  const bool sm90 = flashSm90Usable() && flashSm90Backward(d.D);
  const bool wantDkv = dK || dV;
  Bf16Copy qb(q, mats, d.T, d.D, name, sm90 && wantDkv);
  Bf16Copy ob(dOut, mats, d.T, d.D, name, sm90 && wantDkv);
  Bf16Copy kb(k, d.B * d.Hkv, d.S, d.D, name, sm90 && dQ);
  Bf16Copy vb(v, d.B * d.Hkv, d.S, d.D, name);
  p.q = qb.get();
  p.dout = ob.get();
  p.k = kb.get();
  p.v = vb.get();
  p.qT = qb.getT();
  p.doutT = ob.getT();
  p.kT = kb.getT();
  p.lse2 = lse2;
  p.delta = delta;
  p.dq = dQ;
  p.dk = dK;
  p.dv = dV;
  if (sm90)
    flashBackwardSm90(p, int(d.D), dQ != nullptr, wantDkv, name);
  else if (d.D == 64)
    backwardD<64>(p, dQ != nullptr, dK || dV, name);
  else if (d.D == 128)
    backwardD<128>(p, dQ != nullptr, dK || dV, name);
  else
    backward256(p, dQ != nullptr, dK || dV, name);
  vb.temp.release();
  kb.temp.release();
  ob.temp.release();
  qb.temp.release();
  vecs.release();
}

} // namespace rondo::cuda::detail
