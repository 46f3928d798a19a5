//===- GroupedGemm.cuh - The experts' bf16 grouped GEMM --------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Included by GroupedGemm.cu (the device sort by expert, the mma.sync kernels,
// the fp32 weight gradient and the dispatch) and GroupedGemmSm90.cu (the
// wgmma kernels, built for sm_90a only): the parameters, the tile staging
// and the main loop that both kinds of kernel share. GroupedGemm.cu's header
// comment gives the design.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_GROUPEDGEMM_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_GROUPEDGEMM_CUH

#include "Internal.cuh"
#include "Wgmma.cuh"

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace rondo::cuda::detail::grouped {

//===----------------------------------------------------------------------===//
// The rows sorted by expert (GroupedGemm.cu)
//===----------------------------------------------------------------------===//

/// Device arrays written by sortByExpert, all int32.
struct ExpertOrder {
  const int32_t *offsets;   // [E + 1]: expert e's rows are perm[offsets[e] ..)
  const int32_t *tileStart; // [E + 1]: the first row tile of each expert
  const int32_t *perm;      // [N]: sorted position -> original row
  const int32_t *bySize;    // [E]: the experts, most rows first (ties: lower)
  const int32_t *bad;       // [1]: rows whose id is outside [0, E)
  /// [tileCount]: row tile t's expert, first sorted row and rows (expert -1
  /// past the last tile), so that a block finds its tile in one load
  /// instead of a binary search over tileStart.
  const int4 *tiles;
  int tileCount; // ceil(N / rowTile) + E: the most tiles any routing gives
};

/// int32 words of scratch sortByExpert needs for n rows, e experts and row
/// tiles of rowTile rows.
size_t sortScratchWords(int64_t n, int64_t e, int rowTile);
/// Enqueues the stable counting sort of rows [0, n) by ids (rows of one
/// expert in ascending order; out-of-range ids are left out and counted) into
/// `scratch`, with row tiles of `rowTile` rows per expert. n >= 1, e >= 1.
ExpertOrder sortByExpert(const int64_t *ids, int64_t n, int64_t e, int rowTile,
                         int32_t *scratch, const char *kernel);

//===----------------------------------------------------------------------===//
// Kernel parameters
//===----------------------------------------------------------------------===//

/// out[r] = x[r] · op(w[ids[r]]) for the sorted rows: x [N, K], w [E, K, M]
/// ([E, M, K] with transW), out [N, M].
struct ProductParams {
  const float *x, *w;
  float *out;
  ExpertOrder order;
  int64_t K, M;
  int E, colTiles;
  bool transW;
  bool vec;    // 16-byte loads: K, M multiples of 4, x and w 16-byte aligned
  bool vecOut; // 8-byte stores: M even, out 8-byte aligned
};

/// dw[e] = P_eᵀ Q_e ([pdim, qdim]) over expert e's rows of P [N, pdim] and
/// Q [N, qdim], in ascending row order; NaN everywhere when a row's id was
/// out of range.
struct WeightGradParams {
  const float *p, *q;
  float *dw;
  ExpertOrder order;
  int64_t pdim, qdim;
  int E, pTiles, qTiles;
  bool vec;    // pdim, qdim multiples of 4, p and q 16-byte aligned
  bool vecOut; // qdim even, dw 8-byte aligned
};

//===----------------------------------------------------------------------===//
// Tile configuration and shared-memory layout
//===----------------------------------------------------------------------===//

/// A block computes BM x BN outputs with 256 threads, BK = 32 reduction
/// elements a stage. fp32 operands are staged raw by cp.async in a ring of S
/// stages and rounded by the threads into two bf16 halves of one 128-byte-
/// swizzled K-major tile per operand (columns 0-31 and 32-63 of every row).
template <int BM_, int BN_, int S_> struct Cfg {
  static constexpr int BM = BM_, BN = BN_, S = S_, BK = 32, NT = 256;
  /// Floats a staged K-contiguous row takes: 32 and 4 of padding, which
  /// spreads the reads of 8 consecutive rows over all 32 banks.
  static constexpr int kPadRow = 36;
  static constexpr uint32_t kTileA = BM * 128, kTileB = BN * 128;
  // A stage holds either layout of each operand: [rows][36] or [BK][cols].
  static constexpr uint32_t kStageA = BM * kPadRow * 4;
  static constexpr uint32_t kStageB = BN * kPadRow * 4;
  static constexpr uint32_t kStage = kStageA + kStageB;
  static constexpr uint32_t kRowsOff = kTileA + kTileB + S * kStage;
  /// Dynamic shared memory: the 1024-byte alignment slack, the bf16 tiles,
  /// the stages and the tile's row indices.
  static constexpr size_t kSmem = 1024 + kRowsOff + BM * 4;
  static_assert(kTileA % 1024 == 0 && kTileB % 1024 == 0, "swizzle atoms");
  static_assert(BM % 32 == 0 && BN % 32 == 0, "whole warps of rows");
};

//===----------------------------------------------------------------------===//
// PTX wrappers
//===----------------------------------------------------------------------===//

__device__ inline uint32_t smemAddr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes, of which the first `bytes` (0 or 16) are read and the rest
/// zeroed.
__device__ inline void cpAsync16(uint32_t dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}
/// 4 bytes, read when `bytes` is 4 and zeroed when it is 0.
__device__ inline void cpAsync4(uint32_t dst, const void *src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}

__device__ inline void stShared16(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/// The byte offset of 16-byte chunk c (0-7) of row r in a 128-byte-swizzled
/// tile: rows 128 bytes apart, chunk c stored at c ^ (r % 8) (the layout a
/// wgmma descriptor with 128-byte swizzling names; 1024-byte aligned tiles).
__device__ inline uint32_t swz(int r, int c) {
  return uint32_t(r) * 128u + (uint32_t((c ^ r) & 7) << 4);
}

//===----------------------------------------------------------------------===//
// Staging: global fp32 -> shared fp32 (cp.async) -> shared bf16 (threads)
//===----------------------------------------------------------------------===//

/// Enqueues the copy of 4 consecutive floats at src (`valid` of them in
/// range, the rest zero-filled) to dst. With vec the chunk is one 16-byte
/// copy (src 16-byte aligned, valid 0 or 4); otherwise four 4-byte copies.
/// An invalid source is never read, but must be a mapped address: `safe`.
__device__ inline void stageChunk(uint32_t dst, const float *src,
                                  const float *safe, int valid, bool vec) {
  if (vec) {
    cpAsync16(dst, valid > 0 ? src : safe, valid > 0 ? 16 : 0);
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    cpAsync4(dst + 4u * i, i < valid ? src + i : safe, i < valid ? 4 : 0);
}

__device__ inline int clamp4(int64_t v) {
  return v <= 0 ? 0 : v >= 4 ? 4 : int(v);
}

/// Rounds a staged K-contiguous operand ([R][36] fp32: row r, k 0-31) into
/// half `half` of the bf16 tile of R rows. A warp takes 32 consecutive rows
/// and one 8-float octet: its reads cover all banks, its 16-byte stores land
/// in 8 distinct chunk positions of each 8-row swizzle group.
template <int R, int NT>
__device__ inline void convertRows(const float *src, uint32_t dst, int half) {
  static_assert(R * 4 % NT == 0, "whole rounds");
#pragma unroll
  for (int i = 0; i < R * 4 / NT; ++i) {
    const int u = i * NT + int(threadIdx.x);
    const int oct = u / R, r = u % R;
    const float4 *s = reinterpret_cast<const float4 *>(src + r * 36 + oct * 8);
    const float4 a = s[0], b = s[1];
    stShared16(dst + swz(r, half * 4 + oct),
               make_uint4(packBf16(a.x, a.y), packBf16(a.z, a.w),
                          packBf16(b.x, b.y), packBf16(b.z, b.w)));
  }
}

/// Rounds a staged MN-contiguous operand ([32][C] fp32: k-row, column n) into
/// half `half` of the bf16 K-major tile of C rows: the transpose happens
/// here. Lanes take consecutive columns, so the scalar reads are conflict
/// free.
template <int C, int NT>
__device__ inline void convertCols(const float *src, uint32_t dst, int half) {
  static_assert(C * 4 % NT == 0, "whole rounds");
#pragma unroll
  for (int i = 0; i < C * 4 / NT; ++i) {
    const int u = i * NT + int(threadIdx.x);
    const int oct = u / C, n = u % C;
    const float *s = src + oct * 8 * C + n;
    stShared16(dst + swz(n, half * 4 + oct),
               make_uint4(packBf16(s[0], s[C]), packBf16(s[2 * C], s[3 * C]),
                          packBf16(s[4 * C], s[5 * C]),
                          packBf16(s[6 * C], s[7 * C])));
  }
}

/// The shared-memory pieces of a block (addresses in the shared window, and
/// the generic pointer of the first stage).
struct Smem {
  uint32_t tileA, tileB, stage0;
  unsigned char *stage0Ptr;
  int32_t *rows;
};

template <class C> __device__ inline Smem carve(unsigned char *smem) {
  const uint32_t raw = smemAddr(smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char *g = smem + (base - raw);
  Smem s;
  s.tileA = base;
  s.tileB = base + C::kTileA;
  s.stage0 = s.tileB + C::kTileB;
  s.stage0Ptr = g + C::kTileA + C::kTileB;
  s.rows = reinterpret_cast<int32_t *>(g + C::kRowsOff);
  return s;
}

/// The forward / input-gradient operands of one block: A = BM gathered rows
/// of x (K-contiguous), B = BN columns of w[e] (K-contiguous rows of [M, K]
/// with transW, else the MN-contiguous [K, M] transposed when rounded).
template <class C> struct ProductTiles {
  const ProductParams *p;
  const float *wE;
  const int32_t *rows; // smem: the tile's original rows (0 past rowCount)
  int rowCount;
  int64_t n0;
  Smem sm;

  __device__ void issue(int t, int slot) {
    const int tid = int(threadIdx.x);
    const int64_t k0 = int64_t(t) * C::BK, K = p->K, M = p->M;
    const uint32_t sa = sm.stage0 + uint32_t(slot) * C::kStage;
    const uint32_t sb = sa + C::kStageA;
#pragma unroll
    for (int i = 0; i < C::BM * 8 / C::NT; ++i) {
      const int idx = i * C::NT + tid, r = idx >> 3, c = idx & 7;
      const int64_t k = k0 + c * 4;
      const int valid = r < rowCount ? clamp4(K - k) : 0;
      stageChunk(sa + uint32_t(r * 144 + c * 16),
                 p->x + int64_t(rows[r]) * K + k, p->x, valid, p->vec);
    }
    if (p->transW) {
#pragma unroll
      for (int i = 0; i < C::BN * 8 / C::NT; ++i) {
        const int idx = i * C::NT + tid, r = idx >> 3, c = idx & 7;
        const int64_t n = n0 + r, k = k0 + c * 4;
        const int valid = n < M ? clamp4(K - k) : 0;
        stageChunk(sb + uint32_t(r * 144 + c * 16), wE + n * K + k, p->w, valid,
                   p->vec);
      }
    } else {
      constexpr int kChunks = C::BN / 4;
#pragma unroll
      for (int i = 0; i < C::BK * kChunks / C::NT; ++i) {
        const int idx = i * C::NT + tid, r = idx / kChunks, c = idx % kChunks;
        const int64_t k = k0 + r, n = n0 + c * 4;
        const int valid = k < K ? clamp4(M - n) : 0;
        stageChunk(sb + uint32_t(r * C::BN * 4 + c * 16), wE + k * M + n, p->w,
                   valid, p->vec);
      }
    }
  }

  __device__ void convert(int slot, int half) const {
    const float *a =
        reinterpret_cast<const float *>(sm.stage0Ptr + slot * C::kStage);
    const float *b = a + C::kStageA / 4;
    convertRows<C::BM, C::NT>(a, sm.tileA, half);
    if (p->transW)
      convertRows<C::BN, C::NT>(b, sm.tileB, half);
    else
      convertCols<C::BN, C::NT>(b, sm.tileB, half);
  }
};

/// The weight-gradient operands of one block: BK sorted rows of the expert a
/// stage, A = BM columns of P and B = BN columns of Q (both MN-contiguous,
/// transposed when rounded). Each thread stages one row of each stage (whose
/// original index it loads one stage ahead) at fixed columns: chunks
/// tid % 8 + 8 i, their counts of columns in range computed once.
template <class C> struct WeightGradTiles {
  static_assert(C::NT == C::BK * 8, "eight threads a staged row");
  static_assert(C::BM <= 256 && C::BN <= 256, "a nibble a chunk");
  const WeightGradParams *p;
  int rowBegin, rowEnd;
  int64_t p0, q0;
  Smem sm;
  int32_t nextRow;
  uint32_t pCounts, qCounts; // 4 bits a chunk: columns in range (0-4)

  __device__ int32_t rowOf(int t) const {
    const int j = rowBegin + t * C::BK + int(threadIdx.x) / 8;
    return j < rowEnd ? __ldg(p->order.perm + j) : -1;
  }

  __device__ void start() {
    const int c = int(threadIdx.x) % 8;
    pCounts = qCounts = 0;
#pragma unroll
    for (int i = 0; i < C::BM / 32; ++i)
      pCounts |= uint32_t(clamp4(p->pdim - (p0 + 4 * (c + 8 * i)))) << (4 * i);
#pragma unroll
    for (int i = 0; i < C::BN / 32; ++i)
      qCounts |= uint32_t(clamp4(p->qdim - (q0 + 4 * (c + 8 * i)))) << (4 * i);
    nextRow = rowOf(0);
  }

  __device__ void issue(int t, int slot) {
    const int tid = int(threadIdx.x), j = tid / 8, c = tid % 8;
    const int32_t row = nextRow;
    nextRow = rowOf(t + 1);
    const uint32_t sa = sm.stage0 + uint32_t(slot) * C::kStage +
                        uint32_t(j * C::BM * 4 + c * 16);
    const uint32_t sb = sm.stage0 + uint32_t(slot) * C::kStage + C::kStageA +
                        uint32_t(j * C::BN * 4 + c * 16);
    const bool ok = row >= 0;
    const float *pRow = p->p + (ok ? int64_t(row) * p->pdim : 0) + p0 + 4 * c;
    const float *qRow = p->q + (ok ? int64_t(row) * p->qdim : 0) + q0 + 4 * c;
#pragma unroll
    for (int i = 0; i < C::BM / 32; ++i)
      stageChunk(sa + uint32_t(i * 128), pRow + 32 * i, p->p,
                 ok ? int(pCounts >> (4 * i)) & 15 : 0, p->vec);
#pragma unroll
    for (int i = 0; i < C::BN / 32; ++i)
      stageChunk(sb + uint32_t(i * 128), qRow + 32 * i, p->q,
                 ok ? int(qCounts >> (4 * i)) & 15 : 0, p->vec);
  }

  __device__ void convert(int slot, int half) const {
    const float *a =
        reinterpret_cast<const float *>(sm.stage0Ptr + slot * C::kStage);
    const float *b = a + C::kStageA / 4;
    convertCols<C::BM, C::NT>(a, sm.tileA, half);
    convertCols<C::BN, C::NT>(b, sm.tileB, half);
  }
};

//===----------------------------------------------------------------------===//
// The main loop
//===----------------------------------------------------------------------===//

/// acc += A Bᵀ over numK stages of tiles. Core::math runs the products of
/// one bf16 half (wgmma: issued and committed; mma.sync: done), Core::wait
/// waits for them. In iteration t the tensor cores multiply half t % 2 while
/// the threads round stage t + 1 into the other half and enqueue the copy of
/// stage t + S: one barrier an iteration, S - 1 stages of copies in flight.
/// numK must be the same in every thread of the block.
template <class C, class Core, class Tiles>
__device__ inline void mainLoop(Tiles &tiles, int numK, typename Core::Acc &acc,
                                const Smem &sm) {
  constexpr int S = C::S;
  static_assert(S >= 2, "at least two stages");
  if (numK <= 0)
    return;
#pragma unroll 1
  for (int s = 0; s < S - 1; ++s) {
    if (s < numK)
      tiles.issue(s, s);
    cpAsyncCommit();
  }
  cpAsyncWait<S - 2>(); // stage 0
  __syncthreads();
  tiles.convert(0, 0);
  if (S - 1 < numK)
    tiles.issue(S - 1, S - 1);
  cpAsyncCommit();
  proxyFence();
#pragma unroll 1
  for (int t = 0; t < numK; ++t) {
    // Stage t + 1 has landed; half t % 2 is rounded and fenced; the products
    // of t - 1 are done in every warp, so half (t + 1) % 2 is free.
    cpAsyncWait<S - 2>();
    __syncthreads();
    Core::math(acc, sm, t & 1);
    if (t + S < numK)
      tiles.issue(t + S, t % S); // stage t was rounded in iteration t - 1
    cpAsyncCommit();
    if (t + 1 < numK)
      tiles.convert((t + 1) % S, (t + 1) & 1);
    Core::wait(acc);
    proxyFence();
  }
}

//===----------------------------------------------------------------------===//
// Block positions and epilogues
//===----------------------------------------------------------------------===//

/// The expert of row tile `tile` (the largest e with tileStart[e] <= tile),
/// or -1 past the last tile.
__device__ inline int expertOfTile(const int32_t *tileStart, int experts,
                                   int tile) {
  if (tile >= tileStart[experts])
    return -1;
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tileStart[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Where a forward / input-gradient block works: tile b is column tile
/// b % colTiles of row tile b / colTiles (of a grid sized for the most row
/// tiles any routing can give; a persistent block takes several b).
struct ProductPos {
  int expert, rowBegin, rowCount;
  int64_t n0;
};

/// Finds tile b and fills `rows` (BM ints of shared memory) with its
/// original rows (0 past rowCount); false (for every thread) when there is
/// no such tile, nor any later one. Params: ProductParams or
/// ProductBf16Params.
template <class C, class Params>
__device__ inline bool productPos(const Params &p, int32_t *rows,
                                  ProductPos &pos, unsigned b) {
  __shared__ int info[3]; // expert, first sorted row, rows
  const int rowTile = int(b / unsigned(p.colTiles));
  const int colTile = int(b % unsigned(p.colTiles));
  if (threadIdx.x == 0) {
    const int4 t = rowTile < p.order.tileCount ? p.order.tiles[rowTile]
                                               : make_int4(-1, 0, 0, 0);
    info[0] = t.x;
    info[1] = t.y;
    info[2] = t.z;
  }
  __syncthreads();
  pos.expert = info[0];
  if (pos.expert < 0)
    return false;
  pos.rowBegin = info[1];
  pos.rowCount = info[2];
  pos.n0 = int64_t(colTile) * C::BN;
  for (int i = int(threadIdx.x); i < C::BM; i += C::NT)
    rows[i] = i < pos.rowCount ? p.order.perm[pos.rowBegin + i] : 0;
  __syncthreads();
  return true;
}

/// Writes the accumulators to the rows' own places in out.
template <class Core, class Params>
__device__ inline void
productEpilogue(const Params &p, const typename Core::Acc &acc,
                const ProductPos &pos, const int32_t *rows) {
  const int64_t M = p.M;
  Core::forEach(acc, [&](int r, int c, float v0, float v1) {
    const int64_t n = pos.n0 + c;
    if (r >= pos.rowCount || n >= M)
      return;
    float *o = p.out + int64_t(rows[r]) * M + n;
    if (p.vecOut) {
      *reinterpret_cast<float2 *>(o) = make_float2(v0, v1);
    } else {
      o[0] = v0;
      if (n + 1 < M)
        o[1] = v1;
    }
  });
}

/// The forward / input-gradient kernel body with cp.async staging.
template <class C, class Core>
__device__ inline void productBlock(const ProductParams &p,
                                    unsigned char *smem) {
  const Smem sm = carve<C>(smem);
  ProductPos pos;
  if (!productPos<C>(p, sm.rows, pos, blockIdx.x))
    return;
  ProductTiles<C> tiles{&p,      p.w + int64_t(pos.expert) * p.K * p.M,
                        sm.rows, pos.rowCount,
                        pos.n0,  sm};
  typename Core::Acc acc;
  Core::zero(acc);
  mainLoop<C, Core>(tiles, int((p.K + C::BK - 1) / C::BK), acc, sm);
  productEpilogue<Core>(p, acc, pos, sm.rows);
}

/// Where a weight-gradient block works: tile b is output tile b % (pTiles *
/// qTiles) of the expert ranked b / (pTiles * qTiles) by rows (the heaviest
/// experts start first; the order of the sums does not depend on it).
struct WeightGradPos {
  int expert, rowBegin, rowEnd;
  int64_t p0, q0;
};

template <class C, class Params>
__device__ inline WeightGradPos weightGradPos(const Params &p, unsigned b) {
  const unsigned perExpert = unsigned(p.pTiles) * unsigned(p.qTiles);
  const int within = int(b % perExpert);
  WeightGradPos pos;
  pos.expert = p.order.bySize[b / perExpert];
  pos.rowBegin = p.order.offsets[pos.expert];
  pos.rowEnd = p.order.offsets[pos.expert + 1];
  pos.p0 = int64_t(within / p.qTiles) * C::BM;
  pos.q0 = int64_t(within % p.qTiles) * C::BN;
  return pos;
}

/// Writes dW[e]'s tile, NaN when a row's id was out of range. Params:
/// WeightGradParams or WeightGradBf16Params.
template <class Core, class Params>
__device__ inline void weightGradEpilogue(const Params &p,
                                          const typename Core::Acc &acc,
                                          const WeightGradPos &pos) {
  const bool bad = *p.order.bad != 0;
  const int64_t P = p.pdim, Q = p.qdim;
  float *dw = p.dw + int64_t(pos.expert) * P * Q;
  Core::forEach(acc, [&](int r, int c, float v0, float v1) {
    const int64_t pr = pos.p0 + r, q = pos.q0 + c;
    if (pr >= P || q >= Q)
      return;
    if (bad)
      v0 = v1 = NAN;
    float *o = dw + pr * Q + q;
    if (p.vecOut) {
      *reinterpret_cast<float2 *>(o) = make_float2(v0, v1);
    } else {
      o[0] = v0;
      if (q + 1 < Q)
        o[1] = v1;
    }
  });
}

/// The weight-gradient kernel body with cp.async staging.
template <class C, class Core>
__device__ inline void weightGradBlock(const WeightGradParams &p,
                                       unsigned char *smem) {
  const Smem sm = carve<C>(smem);
  const WeightGradPos pos = weightGradPos<C>(p, blockIdx.x);
  WeightGradTiles<C> tiles{
      &p, pos.rowBegin, pos.rowEnd, pos.p0, pos.q0, sm, 0, 0, 0};
  tiles.start();
  typename Core::Acc acc;
  Core::zero(acc);
  mainLoop<C, Core>(tiles, (pos.rowEnd - pos.rowBegin + C::BK - 1) / C::BK, acc,
                    sm);
  weightGradEpilogue<Core>(p, acc, pos);
}

//===----------------------------------------------------------------------===//
// Entry points (GroupedGemm.cu), called by Experts.cu with checked sizes
//===----------------------------------------------------------------------===//

/// expertMatmul under Precision::Bf16 (N, M >= 1).
void expertProductBf16(const float *x, const float *w, const int64_t *ids,
                       float *out, int64_t N, int64_t K, int64_t M, int64_t E,
                       bool transW, const char *name);
/// expertMatmulWeightGrad (E, K, M >= 1): bf16 tensor cores, or exact fp32
/// over each expert's sorted rows.
void expertWeightGrad(const float *x, const float *dY, const int64_t *ids,
                      float *dW, int64_t N, int64_t K, int64_t M, int64_t E,
                      bool transW, bool bf16, const char *name);

/// expertMatmulBf16: expertProductBf16 of operands already stored in bf16
/// (N, M >= 1).
void expertProductBf16Operands(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                               const int64_t *ids, float *out, int64_t N,
                               int64_t K, int64_t M, int64_t E, bool transW,
                               const char *name);
/// expertMatmulWeightGradBf16: expertWeightGrad's bf16 products of x and dY
/// already stored in bf16 (E, K, M >= 1).
void expertWeightGradBf16Operands(const __nv_bfloat16 *x,
                                  const __nv_bfloat16 *dY, const int64_t *ids,
                                  float *dW, int64_t N, int64_t K, int64_t M,
                                  int64_t E, bool transW, const char *name);

//===----------------------------------------------------------------------===//
// The Hopper kernels (GroupedGemmSm90.cu)
//===----------------------------------------------------------------------===//

/// Row tile of the wgmma kernels (the sort's rowTile for them).
constexpr int kSm90RowTile = 128;
/// Column tile of the wgmma forward kernel.
constexpr int kSm90ColTile = 256;
/// Whether the wgmma kernels run: compute capability 9.0 (their sm_90a code
/// runs nowhere else), unless RONDO_GROUPED_SM90=0 asks for the mma.sync
/// kernels (tests compare the two).
bool groupedSm90Usable();
/// Launches the wgmma forward over `rowTiles` row tiles (an upper bound).
void productSm90(const ProductParams &p, int64_t rowTiles, const char *name);
/// Launches the wgmma weight gradient (pTiles / qTiles for 128 x 256 tiles).
void weightGradSm90(const WeightGradParams &p, const char *name);

//===----------------------------------------------------------------------===//
// The Hopper kernels of bf16 operands (GroupedGemmBf16Sm90.cu)
//===----------------------------------------------------------------------===//

/// expertProductBf16Operands' product: x [N, K], w [E, K, M] ([E, M, K] with
/// transW), both bf16, out [N, M].
struct ProductBf16Params {
  const __nv_bfloat16 *x, *w;
  float *out;
  ExpertOrder order;
  int64_t K, M;
  int E, colTiles;
  bool transW;
  bool vecOut; // 8-byte stores: M even, out 8-byte aligned
  /// Tiles handed out past the first gridDim.x (zero at launch): a
  /// persistent block takes its next tile from here.
  unsigned *tileCounter;
};

/// expertWeightGradBf16Operands' product: dw[e] = P_eᵀ Q_e, P and Q bf16.
struct WeightGradBf16Params {
  const __nv_bfloat16 *p, *q;
  float *dw;
  ExpertOrder order;
  int64_t pdim, qdim;
  int E, pTiles, qTiles;
  bool vecOut;           // qdim even, dw 8-byte aligned
  unsigned *tileCounter; // as ProductBf16Params'
};

/// Whether the bf16-operand wgmma kernels take a product whose two operands
/// have rows of `a` and `b` elements: 16-byte copies need both to be
/// multiples of 8 and the operands 16-byte aligned. Otherwise the operands
/// are widened and the fp32-staged kernels run (the same bits, slower).
bool bf16OperandsFit(int64_t a, int64_t b, const void *p, const void *q);
/// Launches the bf16-operand wgmma product over `rowTiles` row tiles (an
/// upper bound), 128 x 256 tiles as productSm90.
void productBf16Sm90(const ProductBf16Params &p, int64_t rowTiles,
                     const char *name);
/// Launches the bf16-operand wgmma weight gradient (128 x 256 tiles).
void weightGradBf16Sm90(const WeightGradBf16Params &p, const char *name);

} // namespace rondo::cuda::detail::grouped

#endif // RONDO_RUNTIME_KERNELS_CUDA_GROUPEDGEMM_CUH
