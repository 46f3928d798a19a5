//===- GroupedGemmBf16Sm90.cu - Grouped GEMM of bf16 operands, wgmma ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// expertMatmulBf16 and expertMatmulWeightGradBf16 on Hopper: operands that
// kern-bf16-storage already stored in bf16 (the resident bf16 copy of the
// expert weights, bf16 activations) go from global memory to the tensor
// cores' shared-memory tiles by cp.async, 16 bytes at a time, untouched: no
// fp32 copy in L2 or shared memory and no rounding by the threads, which is
// what held GroupedGemmSm90.cu near 316 TFLOP/s (the L2 bytes of fp32
// operands; runtime/kernels/cuda/NOTES.md).
//
// Tiles and order are GroupedGemmSm90.cu's: a block of two warpgroups owns
// 128 x 256 outputs (one m64n256k16 product a k-step each), k ascending in
// steps of 16, fp32 accumulators, the same sort, block positions and
// epilogues. So the results are those of the fp32-staged kernels on the
// bf16 values, bit for bit (the tests compare the two).
//
// Layouts. A stage is 64 k of both operands, each in 128-byte-swizzled tiles
// the wgmma descriptors name directly:
//  - K-major (x's rows; w's rows with transW): a row's 64 k are one 128-byte
//    line, chunk c of row r at r * 128 + (c ^ r % 8) * 16 (the layout of
//    GroupedGemmSm90.cu's rounded tiles), descriptors 32 bytes apart a k-step.
//  - MN-major (w [K, M] in the forward; P and Q of the weight gradient,
//    whose rows are the reduction): 64 consecutive columns of one k are a
//    128-byte line, groups of 64 columns 8 KiB apart (the descriptor's
//    leading byte offset), 8 lines of k 1 KiB apart (its stride byte offset),
//    chunk c of line k at (c ^ k % 8) * 16; the wgmma reads them with its
//    transpose bit, so nothing is transposed by the threads.
// Both layouts put the 8 chunks of 8 consecutive lines on distinct bank
// groups, so the copies into them are conflict free.
//
// Pipeline: four stages of 48 KiB in a ring; three are in flight while the
// tensor cores work on the fourth. In iteration t every thread waits for its
// copies of stage t, fences them for the async proxy and meets the block at
// a barrier; the warpgroups issue stage t's four products and wait until
// those of t - 1 are done (one group stays in flight); after a second
// barrier (every warpgroup is past t - 1) the threads refill t - 1's slot
// with stage t + 3. Rows past an expert's end, k past K and columns past M
// are zero-filled by the copies (cp.async's source size 0), which adds
// exact zeros to the sums, as the fp32-staged kernels do.
//
// Blocks are persistent, one an SM (RONDO_GROUPED_PERSISTENT=0: one tile a
// block, for comparison): each takes its next tile from an atomic counter,
// finds that tile's place while the current tile's first copies land, and
// enqueues its first stages before storing the current tile's outputs.
//
// Alignment: K and M multiples of 8 and 16-byte aligned operands
// (bf16OperandsFit); GroupedGemm.cu widens other operands and runs the
// fp32-staged kernels instead.
//
//===----------------------------------------------------------------------===//

#include "GroupedGemmSm90.cuh"

#include <climits>
#include <cstdlib>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "GroupedGemmBf16Sm90.cu must be built for sm_90a only (CMakeLists.txt)"
#endif

namespace rondo::cuda::detail::grouped {

namespace {

constexpr int BM = kSm90RowTile, BN = kSm90ColTile, BK = 64, NT = 256;
constexpr int kStages = 4;
/// The block geometry productPos / weightGradPos read (BM, BN, NT).
using PosCfg = Cfg<BM, BN, kStages>;
constexpr uint32_t kTileA = BM * BK * 2, kTileB = BN * BK * 2;
constexpr uint32_t kStage = kTileA + kTileB;
/// The 1024-byte alignment slack, the ring and the rows of two tiles.
constexpr size_t kSmem = 1024 + kStages * kStage + 2 * BM * 4;
/// Bytes between 64-column groups of an MN-major tile (64 lines of k).
constexpr uint32_t kGroupBytes = BK * 128;
static_assert(kTileA % 1024 == 0 && kTileB % 1024 == 0, "swizzle atoms");
static_assert(kSmem <= 227 * 1024, "one block an SM");

/// The descriptor of an MN-major, 128-byte-swizzled operand at `addr`:
/// 64-column groups kGroupBytes apart (leading byte offset), 8-line groups
/// of k 1024 bytes apart (stride byte offset).
__device__ inline uint64_t descMN(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(kGroupBytes >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

/// Byte offset of chunk `nc` (8 columns) of line `k` in an MN-major tile.
__device__ inline uint32_t mnChunk(int k, int nc) {
  return uint32_t(nc >> 3) * kGroupBytes + uint32_t(k) * 128u +
         (uint32_t((nc ^ k) & 7) << 4);
}

/// Issues and commits stage `slot`'s four k-steps for this warpgroup: A
/// M-major (TA) or K-major, B N-major (TB) or K-major.
template <int TA, int TB>
__device__ inline void mathStage(WgmmaCore::Acc &acc, uint32_t ring, int slot) {
  const uint32_t a = ring + uint32_t(slot) * kStage;
  const uint32_t b = a + kTileA;
  const uint32_t wg = threadIdx.x >> 7;
  WgmmaCore::pin(acc);
  wgFence();
#pragma unroll
  for (int j = 0; j < BK / 16; ++j) {
    // A: this warpgroup's 64 rows; a k-step is 32 bytes along a K-major
    // line, or 2 x 8 lines of an MN-major tile.
    const uint64_t da = TA ? descMN(a + wg * kGroupBytes + uint32_t(j) * 2048u)
                           : descOf(a + wg * 64u * 128u + uint32_t(j) * 32u);
    const uint64_t db =
        TB ? descMN(b + uint32_t(j) * 2048u) : descOf(b + uint32_t(j) * 32u);
    wgmma256<TA, TB>(acc.d, da, db);
  }
  wgCommit();
}

__device__ inline void wgWait1() {
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}

/// Enqueues the first kStages - 1 stages of a tile's ring (one commit group
/// a stage, empty past numK, so that "stage t has landed" is always "at most
/// kStages - 2 newer groups pending"). The slots must be free: no products
/// still read them.
template <class Tiles>
__device__ inline void ringStart(Tiles &tiles, int numK) {
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < numK)
      tiles.issue(s, s);
    cpAsyncCommit();
  }
}

/// The rest of the ring after ringStart: numK stages multiplied as the
/// header comment describes, all products done when it returns (in every
/// warpgroup: the slots are free again). numK must be the same in every
/// thread of the block.
template <int TA, int TB, class Tiles>
__device__ inline void ringLoop(Tiles &tiles, int numK, WgmmaCore::Acc &acc,
                                uint32_t ring) {
#pragma unroll 1
  for (int t = 0; t < numK; ++t) {
    cpAsyncWait<kStages - 2>();
    proxyFence();
    __syncthreads();
    mathStage<TA, TB>(acc, ring, t % kStages);
    wgWait1();
    WgmmaCore::pin(acc);
    __syncthreads(); // every warpgroup's products of t - 1 are done
    const int next = t + kStages - 1;
    if (next < numK)
      tiles.issue(next, next % kStages);
    cpAsyncCommit();
  }
  wgWait0();
  WgmmaCore::pin(acc);
  __syncthreads();
}

/// The forward / input-gradient operands of a block. A: the tile's rows of
/// x (K-major), thread tid copying chunk tid % 8 of rows tid / 8 + 32 i. B:
/// w[e]'s columns n0 .. n0 + 255, K-major rows of [M, K] with transW (as A,
/// rows tid / 8 + 32 i), else MN-major lines of [K, M] (line tid / 32 + 8 i,
/// chunk tid % 32: a warp copies 512 contiguous bytes of one line).
template <bool TransW> struct ProductTilesBf16 {
  const ProductBf16Params *p;
  const __nv_bfloat16 *xRow[BM / 32]; // this thread's chunk of each row
  const __nv_bfloat16 *wBase;         // this thread's first chunk of w[e]
  uint32_t rowValid;                  // bit i: row tid / 8 + 32 i exists
  uint32_t colValid;                  // bit i: B's chunk i has columns
  uint32_t ring;

  __device__ void start(const int32_t *rows, int rowCount, int expert,
                        int64_t n0) {
    const int tid = int(threadIdx.x), c = tid & 7;
    const int64_t K = p->K, M = p->M;
    rowValid = 0;
#pragma unroll
    for (int i = 0; i < BM / 32; ++i) {
      const int r = tid / 8 + 32 * i;
      xRow[i] = p->x + int64_t(rows[r]) * K + 8 * c;
      rowValid |= uint32_t(r < rowCount) << i;
    }
    const __nv_bfloat16 *wE = p->w + int64_t(expert) * K * M;
    colValid = 0;
    if (TransW) {
      wBase = wE + (n0 + tid / 8) * K + 8 * c;
#pragma unroll
      for (int i = 0; i < BN / 32; ++i)
        colValid |= uint32_t(n0 + tid / 8 + 32 * i < M) << i;
    } else {
      wBase = wE + int64_t(tid / 32) * M + n0 + 8 * (tid & 31);
      colValid = n0 + 8 * (tid & 31) < M ? ~0u : 0u;
    }
  }

  __device__ void issue(int t, int slot) {
    const int tid = int(threadIdx.x), c = tid & 7;
    const int64_t K = p->K, M = p->M, k0 = int64_t(t) * BK;
    const uint32_t a = ring + uint32_t(slot) * kStage, b = a + kTileA;
    const bool kIn = k0 + 8 * c < K;
#pragma unroll
    for (int i = 0; i < BM / 32; ++i) {
      const bool ok = kIn && (rowValid >> i & 1u);
      cpAsync16(a + swz(tid / 8 + 32 * i, c), ok ? xRow[i] + k0 : p->x,
                ok ? 16 : 0);
    }
    if (TransW) {
#pragma unroll
      for (int i = 0; i < BN / 32; ++i) {
        const bool ok = kIn && (colValid >> i & 1u);
        cpAsync16(b + swz(tid / 8 + 32 * i, c),
                  ok ? wBase + int64_t(32 * i) * K + k0 : p->w, ok ? 16 : 0);
      }
    } else {
#pragma unroll
      for (int i = 0; i < BK / 8; ++i) {
        const int line = tid / 32 + 8 * i;
        const bool ok = colValid && k0 + line < K;
        cpAsync16(b + mnChunk(line, tid & 31),
                  ok ? wBase + (k0 + 8 * i) * M : p->w, ok ? 16 : 0);
      }
    }
  }
};

/// The tile a persistent block takes after this one: gridDim.x plus the
/// count of tiles handed out so far (blocks that finish early take more, so
/// skewed routing does not leave SMs idle). One atomic a tile; which block
/// computes a tile changes none of its bits.
__device__ inline unsigned nextTile(unsigned *counter) {
  __shared__ unsigned next;
  if (threadIdx.x == 0)
    next = gridDim.x + atomicAdd(counter, 1u);
  __syncthreads();
  return next;
}

/// This thread's accumulators are rows r and r + 8 of a 128 x 256 tile
/// (WgmmaCore::forEach's layout), columns 8 n + c0 and + 1 for n < 32.
struct AccRows {
  int r, c0;
  __device__ AccRows() {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    r = (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2);
    c0 = 2 * (lane & 3);
  }
};

/// Stores two rows of accumulators at o0 and o1 (null: not stored), the
/// columns below `cols` (even, as K and M are multiples of 8 here), as
/// pairs when `vec`. The row pointers are computed once, not per value:
/// with them reloaded from shared memory behind every store the epilogue
/// was a chain of dependent loads.
__device__ inline void storeRows(const WgmmaCore::Acc &acc, int c0, float *o0,
                                 float *o1, int64_t cols, bool vec, bool nan) {
#pragma unroll
  for (int n = 0; n < 32; ++n) {
    const int c = n * 8 + c0;
    if (c >= cols)
      break;
    const float a0 = nan ? NAN : acc.d[n][0], a1 = nan ? NAN : acc.d[n][1];
    const float b0 = nan ? NAN : acc.d[n][2], b1 = nan ? NAN : acc.d[n][3];
    if (vec) {
      if (o0)
        *reinterpret_cast<float2 *>(o0 + c) = make_float2(a0, a1);
      if (o1)
        *reinterpret_cast<float2 *>(o1 + c) = make_float2(b0, b1);
    } else {
      if (o0) {
        o0[c] = a0;
        o0[c + 1] = a1;
      }
      if (o1) {
        o1[c] = b0;
        o1[c + 1] = b1;
      }
    }
  }
}

/// productEpilogue's stores with the row pointers hoisted.
__device__ inline void storeProduct(const ProductBf16Params &p,
                                    const WgmmaCore::Acc &acc,
                                    const ProductPos &pos,
                                    const int32_t *rows) {
  const AccRows at;
  const int64_t M = p.M;
  float *o0 =
      at.r < pos.rowCount ? p.out + int64_t(rows[at.r]) * M + pos.n0 : nullptr;
  float *o1 = at.r + 8 < pos.rowCount
                  ? p.out + int64_t(rows[at.r + 8]) * M + pos.n0
                  : nullptr;
  storeRows(acc, at.c0, o0, o1, M - pos.n0, p.vecOut, false);
}

/// weightGradEpilogue's stores likewise (NaN when an id was out of range).
__device__ inline void storeWeightGrad(const WeightGradBf16Params &p,
                                       const WgmmaCore::Acc &acc,
                                       const WeightGradPos &pos) {
  const AccRows at;
  const int64_t P = p.pdim, Q = p.qdim;
  float *dw = p.dw + int64_t(pos.expert) * P * Q + pos.q0;
  const int64_t r0 = pos.p0 + at.r, r1 = r0 + 8;
  storeRows(acc, at.c0, r0 < P ? dw + r0 * Q : nullptr,
            r1 < P ? dw + r1 * Q : nullptr, Q - pos.q0, p.vecOut,
            *p.order.bad != 0);
}

/// Persistent: block i takes tile i, then the next one nextTile hands out,
/// and starts the copies of its next tile before it writes the outputs of
/// the current one, so the stores drain under the next tile's first loads.
/// Each tile's sums are the same whichever block takes it.
template <bool TransW>
__global__ void __launch_bounds__(NT, 1)
    productBf16Kernel(const __grid_constant__ ProductBf16Params p) {
  extern __shared__ unsigned char smem[];
  const uint32_t raw = smemAddr(smem);
  const uint32_t ring = (raw + 1023u) & ~1023u;
  // The rows of the current tile (buffer buf) and of the next one.
  int32_t *const rows =
      reinterpret_cast<int32_t *>(smem + (ring - raw) + kStages * kStage);
  const int numK = int((p.K + BK - 1) / BK);
  int buf = 0;
  ProductPos pos;
  if (!productPos<PosCfg>(p, rows, pos, blockIdx.x))
    return;
  ProductTilesBf16<TransW> tiles{&p, {}, nullptr, 0, 0, ring};
  tiles.start(rows, pos.rowCount, pos.expert, pos.n0);
  ringStart(tiles, numK);
  WgmmaCore::Acc acc;
  for (;;) {
    // The next tile's place and rows, while this tile's first copies land.
    ProductPos next;
    int32_t *const nextRows = rows + (buf ^ 1) * BM;
    const unsigned nb = nextTile(p.tileCounter);
    const bool more = productPos<PosCfg>(p, nextRows, next, nb);
    WgmmaCore::zero(acc);
    ringLoop<0, TransW ? 0 : 1>(tiles, numK, acc, ring);
    if (more) {
      tiles.start(nextRows, next.rowCount, next.expert, next.n0);
      ringStart(tiles, numK);
    }
    storeProduct(p, acc, pos, rows + buf * BM);
    if (!more)
      return;
    pos = next;
    buf ^= 1;
  }
}

/// The weight-gradient operands of a block: 64 of the expert's sorted rows a
/// stage, A = P's columns p0 .. p0 + 127 and B = Q's columns q0 .. q0 + 255,
/// both MN-major lines (a line is one row). Thread tid copies line tid / 4,
/// chunks tid % 4 + 4 i of both, so it needs one row index a stage, which it
/// loads a stage ahead.
struct WeightGradTilesBf16 {
  const WeightGradBf16Params *p;
  int rowBegin, rowEnd;
  int64_t p0, q0;
  uint32_t ring;
  int32_t nextRow;
  uint32_t pValid, qValid; // bit i: chunk tid % 4 + 4 i has columns

  __device__ int32_t rowOf(int t) const {
    const int j = rowBegin + t * BK + int(threadIdx.x) / 4;
    return j < rowEnd ? __ldg(p->order.perm + j) : -1;
  }

  __device__ void start() {
    const int q = int(threadIdx.x) & 3;
    pValid = qValid = 0;
#pragma unroll
    for (int i = 0; i < BM / 32; ++i)
      pValid |= uint32_t(p0 + 8 * (q + 4 * i) < p->pdim) << i;
#pragma unroll
    for (int i = 0; i < BN / 32; ++i)
      qValid |= uint32_t(q0 + 8 * (q + 4 * i) < p->qdim) << i;
    nextRow = rowOf(0);
  }

  __device__ void issue(int t, int slot) {
    const int tid = int(threadIdx.x), line = tid / 4, q = tid & 3;
    const int32_t row = nextRow;
    nextRow = rowOf(t + 1);
    const uint32_t a = ring + uint32_t(slot) * kStage, b = a + kTileA;
    const bool ok = row >= 0;
    const __nv_bfloat16 *pRow =
        p->p + (ok ? int64_t(row) * p->pdim : 0) + p0 + 8 * q;
    const __nv_bfloat16 *qRow =
        p->q + (ok ? int64_t(row) * p->qdim : 0) + q0 + 8 * q;
#pragma unroll
    for (int i = 0; i < BM / 32; ++i) {
      const bool in = ok && (pValid >> i & 1u);
      cpAsync16(a + mnChunk(line, q + 4 * i), in ? pRow + 32 * i : p->p,
                in ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < BN / 32; ++i) {
      const bool in = ok && (qValid >> i & 1u);
      cpAsync16(b + mnChunk(line, q + 4 * i), in ? qRow + 32 * i : p->q,
                in ? 16 : 0);
    }
  }
};

/// Persistent as the product kernel (tiles are experts' output tiles, the
/// heaviest experts first).
__global__ void __launch_bounds__(NT, 1)
    weightGradBf16Kernel(const __grid_constant__ WeightGradBf16Params p) {
  extern __shared__ unsigned char smem[];
  const uint32_t raw = smemAddr(smem);
  const uint32_t ring = (raw + 1023u) & ~1023u;
  const unsigned tilesTotal = unsigned(p.E) * p.pTiles * p.qTiles;
  if (blockIdx.x >= tilesTotal)
    return;
  WeightGradPos pos = weightGradPos<PosCfg>(p, blockIdx.x);
  auto tilesOf = [&](const WeightGradPos &at) {
    WeightGradTilesBf16 t{&p,   at.rowBegin, at.rowEnd, at.p0, at.q0,
                          ring, 0,           0,         0};
    t.start();
    return t;
  };
  auto stagesOf = [](const WeightGradPos &at) {
    return (at.rowEnd - at.rowBegin + BK - 1) / BK;
  };
  WeightGradTilesBf16 tiles = tilesOf(pos);
  ringStart(tiles, stagesOf(pos));
  WgmmaCore::Acc acc;
  for (;;) {
    // The next tile's place and first row, while this tile's copies land.
    const unsigned nb = nextTile(p.tileCounter);
    const bool more = nb < tilesTotal;
    WeightGradPos next{};
    WeightGradTilesBf16 nextTiles{};
    if (more) {
      next = weightGradPos<PosCfg>(p, nb);
      nextTiles = tilesOf(next);
    }
    WgmmaCore::zero(acc);
    ringLoop<1, 1>(tiles, stagesOf(pos), acc, ring);
    if (more) {
      tiles = nextTiles;
      ringStart(tiles, stagesOf(next));
    }
    storeWeightGrad(p, acc, pos);
    if (!more)
      return;
    pos = next;
  }
}

/// Blocks a launch of `tiles` tiles gets: one per SM (a block fills an SM),
/// each then taking several tiles; all of them (one tile a block) under
/// RONDO_GROUPED_PERSISTENT=0, which the benchmark compares.
int64_t gridOf(int64_t tiles, const char *name) {
  const char *env = std::getenv("RONDO_GROUPED_PERSISTENT");
  const bool persistent = !(env && env[0] == '0');
  int device = 0, sms = 0;
  RONDO_CHECK(cudaGetDevice(&device), name);
  RONDO_CHECK(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
      name);
  return persistent && sms > 0 && tiles > sms ? sms : tiles;
}

template <typename Kernel, typename Params>
void launchBf16(Kernel kernel, int64_t tiles, const Params &p,
                const char *name) {
  if (tiles > int64_t(INT_MAX))
    contract(name, "too many tiles for one launch (%lld)", (long long)tiles);
  if (tiles <= 0)
    return;
  RONDO_CHECK(cudaFuncSetAttribute(kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(kSmem)),
              name);
  kernel<<<unsigned(gridOf(tiles, name)), NT, kSmem, currentStream()>>>(p);
  checkLaunch(name);
}

} // namespace

void productBf16Sm90(const ProductBf16Params &p, int64_t rowTiles,
                     const char *name) {
  const int64_t blocks = rowTiles * p.colTiles;
  if (p.transW)
    launchBf16(productBf16Kernel<true>, blocks, p, name);
  else
    launchBf16(productBf16Kernel<false>, blocks, p, name);
}

void weightGradBf16Sm90(const WeightGradBf16Params &p, const char *name) {
  launchBf16(weightGradBf16Kernel, int64_t(p.E) * p.pTiles * p.qTiles, p, name);
}

} // namespace rondo::cuda::detail::grouped
