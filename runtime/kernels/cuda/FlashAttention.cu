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
// q^T, dO^T and k^T for the two-kernel backward) so that every wgmma B
// operand of those kernels is K-major; the fused backward
// (FlashAttentionSm90Bwd.cu) reads its Bs MN-major and needs none.
// RONDO_FLASH_SM90=0 keeps the mma.sync kernels (the tests run both
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
// without atomics, on the mma.sync kernels (FlashAttentionMmaBwd.cu) and the
// Hopper two-kernel backward (FlashAttentionSm90.cu):
//  - dK/dV: one block per (key tile, kv head, batch) walks the query heads of
//    its group in ascending order and, for each, the query tiles (those that
//    can see the key tile) in ascending order, recomputing S^T = K Q^T and
//    dP^T = V dO^T, and accumulating dV += P^T dO and dK += dS^T Q in
//    registers;
//  - dQ: one block per (query tile, query head, batch) walks its key tiles in
//    ascending order, recomputing S and dP, dQ += dS K.
// Hopper at D = 128 runs one fused kernel instead (FlashAttentionSm90Bwd.cu,
// after FlashAttention-3): the dK/dV blocks also compute each item's dS K and
// add it into dQ with atomics, in ascending key-tile order behind a counter
// per query tile, so S and dP are computed once (5 tile products per score
// tile instead of 7) and dQ is still the same sum in the same order every
// run. RONDO_FLASH_FUSED_BWD=0 keeps the two-kernel backward.
// cuDNN: on compute capability 9.0 both entry points first offer the call to
// cuDNN's fused attention (CudnnAttention.cu), which takes the cases it has
// graphs for; RONDO_ATTENTION=flash keeps everything here.
// Determinism: every dK, dV (and, but for the fused kernel, dQ) element is
// owned by one thread of one block; its accumulation order (the mma k-order,
// the tile order, the fixed butterfly over the four threads of a row)
// depends only on the shapes; the fused kernel's dQ additions happen in a
// fixed order. So two runs give the same bits.
//
//===----------------------------------------------------------------------===//

#include "FlashAttentionMma.cuh"

namespace rondo::cuda::detail {

namespace flash {

namespace {

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
    nextKvTile<D, BC, kNT>(sK, sV, buf, kg, vg, j0, jt, nTiles);
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

template <int D, int BR, int BC, int MB>
void forwardCfg(const FlashParams &p, const char *name) {
  launchFlash(flashFwdKernel<D, BR, BC, MB>, p.Tpad / BR, p.B * p.Hq, BR * 2,
              fwdSmem<D, BR, BC>(), p, name);
}

// Measured on an H100 at T = 4096, D = 128, causal (DISABLED_FlashTimingW1):
// the forward is fastest with 128 query rows a block (K/V tiles read from L2
// once per 128 rows, 2 blocks of 8 warps an SM).
template <int D> void forwardD(const FlashParams &p, const char *name) {
  forwardCfg<D, 128, 64, 2>(p, name);
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
  if (cudnnAttentionForward(d, q, k, v, causal, scale, out, lse, name))
    return;
  setLastAttentionImpl(AttentionImpl::Flash);
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
  if (cudnnAttentionBackward(d, q, k, v, out, lse, dOut, causal, scale, dQ, dK,
                             dV, name))
    return;
  setLastAttentionImpl(AttentionImpl::Flash);
  FlashParams p = baseParams(d, causal, scale, name);
  const int64_t mats = d.B * d.Hq;
  Temp vecs(size_t(2 * mats * p.Tpad) * sizeof(float), name);
  float *delta = vecs.as<float>();
  float *lse2 = delta + mats * p.Tpad;
  flashPrepKernel<<<gridFor(mats * p.Tpad * 32), kThreads, 0,
                    currentStream()>>>(dOut, out, lse, delta, lse2, mats, p.T,
                                       p.Tpad, int(d.D));
  checkLaunch(name);
  // The two-kernel wgmma backward's dQ kernel reads k^T, its dK/dV kernel
  // q^T and dO^T; the fused one reads none.
  const bool sm90 = flashSm90Usable() && flashSm90Backward(d.D);
  const bool fused = sm90 && flashSm90Fused(d.D);
  const bool wantDkv = dK || dV;
  const bool tCopies = sm90 && !fused;
  Bf16Copy qb(q, mats, d.T, d.D, name, tCopies && wantDkv);
  Bf16Copy ob(dOut, mats, d.T, d.D, name, tCopies && wantDkv);
  Bf16Copy kb(k, d.B * d.Hkv, d.S, d.D, name, tCopies && dQ);
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
  if (fused)
    flashBackwardSm90Fused(p, name);
  else if (sm90)
    flashBackwardSm90(p, int(d.D), dQ != nullptr, wantDkv, name);
  else
    flashBackwardMmaSync(p, int(d.D), dQ != nullptr, wantDkv, name);
  vb.temp.release();
  kb.temp.release();
  ob.temp.release();
  qb.temp.release();
  vecs.release();
}

} // namespace rondo::cuda::detail
