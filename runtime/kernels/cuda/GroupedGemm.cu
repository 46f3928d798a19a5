//===- GroupedGemm.cu - Grouped GEMM of the mixture-of-experts kernels ----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// expertMatmul and expertMatmulWeightGrad (Experts.cu) on the tensor cores
// under Precision::Bf16, and the fp32 weight gradient over sorted rows.
//
// Sort. Rows are put in expert order on the device by a stable counting sort
// (no host synchronisation; scratch sized by N and E only): one block per
// chunk of 1024 rows counts its experts (shared-memory integer atomics, so
// the counts do not depend on the schedule), one block scans the [E, chunks]
// counts expert-major into each chunk's first position per expert, the
// per-expert offsets, the per-expert row-tile starts of the GEMM and the
// experts ranked by rows; a table gives each row tile its expert, first row
// and rows; then each chunk block writes perm in row order:
// within a warp the rank among equal ids comes from __match_any_sync, and
// the warps of a block take their turns, so rows of one expert keep their
// ascending order. Rows with an id outside [0, E) are left out and counted.
//
// Products. x [N, K] times w[e] for the rows of e: a block owns BM sorted rows
// of one expert by BN output columns. Its grid is sized by the most row tiles
// any routing can give (ceil(N / BM) + E); a block finds its expert in the
// row-tile table (one load) and returns if there is none. The
// operands stay fp32 in memory: a ring of cp.async stages copies raw fp32
// tiles (x's rows gathered through perm, zero-filled past the expert's rows
// and past K or M), the threads round each stage to bf16 into a 128-byte-
// swizzled K-major tile (transposing the operands that are contiguous along
// M, which cp.async cannot), and the tensor cores (wgmma on sm_90a, else
// mma.sync m16n8k16 through ldmatrix) multiply the previous stage
// meanwhile. On sm_90a operands contiguous along K skip the fp32 copy in
// shared memory and are loaded through registers (GroupedGemmSm90.cu).
// fp32 accumulators go straight from registers to the rows' own places in
// out: no un-permute pass. Rows whose id was out of range become NaN in a
// separate pass over the ids.
//
// Weight gradient. dW[e] = P_eᵀ Q_e over e's rows (P, Q = x, dY, swapped with
// transW): a block owns a BM x BN tile of dW[e] and reduces over all of e's
// rows in ascending order, 32 rows a stage; no split of the reduction, no
// atomics, so the bits depend only on the inputs. Experts with most rows
// start first. An expert without rows gets zeros; any out-of-range id makes
// all of dW NaN (what the one-thread-per-element kernel did). Under
// Precision::Fp32 a SIMT kernel does the same sums in fp32 (fmaf, ascending
// rows).
//
// Alignment: with K and M multiples of 4 and 16-byte aligned operands the
// stages are 16-byte copies; otherwise 4-byte ones (any K, M; slower).
//
//===----------------------------------------------------------------------===//

#include "GroupedGemm.cuh"

#include <climits>
#include <cstdlib>

namespace rondo::cuda::detail::grouped {

namespace {

//===----------------------------------------------------------------------===//
// Sort
//===----------------------------------------------------------------------===//

constexpr int kSortChunk = 1024;
constexpr int kSortThreads = 256;
constexpr int kScanThreads = 1024;
/// Experts the sort keeps in shared memory (one int each).
constexpr int64_t kMaxSortExperts = 32768;
/// Up to this many experts the scan ranks them by rows (O(E^2) there).
constexpr int kRankedExperts = 1024;

int64_t sortChunks(int64_t n) { return (n + kSortChunk - 1) / kSortChunk; }

/// base[x * chunks + c] = rows of chunk c with id x; *bad += rows whose id is
/// outside [0, e).
__global__ void expertCountKernel(const int64_t *ids, int64_t n, int e,
                                  int64_t chunks, int32_t *base, int32_t *bad) {
  extern __shared__ int32_t hist[];
  for (int i = int(threadIdx.x); i < e; i += blockDim.x)
    hist[i] = 0;
  __syncthreads();
  const int64_t r0 = int64_t(blockIdx.x) * kSortChunk;
  const int64_t r1 = r0 + kSortChunk < n ? r0 + kSortChunk : n;
  int outside = 0;
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
    const int64_t id = ids[r];
    if (id >= 0 && id < e)
      atomicAdd(&hist[id], 1);
    else
      ++outside;
  }
  __syncthreads();
  for (int i = int(threadIdx.x); i < e; i += blockDim.x)
    base[int64_t(i) * chunks + blockIdx.x] = hist[i];
  if (outside)
    atomicAdd(bad, outside);
}

/// Exclusive prefix of v over the block (blockDim.x a multiple of 32);
/// `total` gets the block's sum. `scratch` holds 32 ints.
__device__ int blockExclusiveScan(int v, int *scratch, int &total) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o)
      x += y;
  }
  if (lane == 31)
    scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < warps ? scratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o)
        w += y;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  const int before = warp ? scratch[warp - 1] : 0;
  total = scratch[warps - 1];
  __syncthreads(); // scratch is reused by the next call
  return before + x - v;
}

/// One block: base becomes the exclusive prefix of the counts in (expert,
/// chunk) order; offsets, tileStart (rowTile-row tiles) and bySize follow.
__global__ void expertScanKernel(int e, int64_t chunks, int rowTile,
                                 int32_t *base, int32_t *offsets,
                                 int32_t *tileStart, int32_t *bySize) {
  __shared__ int scratch[32];
  __shared__ int carry;
  const int tid = int(threadIdx.x);
  if (tid == 0)
    carry = 0;
  __syncthreads();
  const int64_t total = int64_t(e) * chunks;
  for (int64_t i0 = 0; i0 < total; i0 += blockDim.x) {
    const int64_t i = i0 + tid;
    int sum = 0;
    const int ex = blockExclusiveScan(i < total ? base[i] : 0, scratch, sum);
    const int c = carry;
    if (i < total)
      base[i] = c + ex;
    __syncthreads();
    if (tid == 0)
      carry = c + sum;
    __syncthreads();
  }
  for (int i = tid; i < e; i += blockDim.x)
    offsets[i] = base[int64_t(i) * chunks];
  if (tid == 0)
    offsets[e] = carry;
  __syncthreads();
  if (tid == 0)
    carry = 0;
  __syncthreads();
  for (int i0 = 0; i0 < e; i0 += blockDim.x) {
    const int i = i0 + tid;
    const int rows = i < e ? offsets[i + 1] - offsets[i] : 0;
    int sum = 0;
    const int ex =
        blockExclusiveScan((rows + rowTile - 1) / rowTile, scratch, sum);
    const int c = carry;
    if (i < e)
      tileStart[i] = c + ex;
    __syncthreads();
    if (tid == 0)
      carry = c + sum;
    __syncthreads();
  }
  if (tid == 0)
    tileStart[e] = carry;
  for (int i = tid; i < e; i += blockDim.x) {
    int rank = i;
    if (e <= kRankedExperts) {
      const int rows = offsets[i + 1] - offsets[i];
      rank = 0;
      for (int j = 0; j < e; ++j) {
        const int other = offsets[j + 1] - offsets[j];
        rank += other > rows || (other == rows && j < i);
      }
    }
    bySize[rank] = i;
  }
}

/// perm[base[id, chunk] + (rows of the chunk before r with the same id)] = r,
/// for the rows r of this block's chunk with an id in [0, e).
__global__ void expertScatterKernel(const int64_t *ids, int64_t n, int e,
                                    int64_t chunks, const int32_t *base,
                                    int32_t *perm) {
  extern __shared__ int32_t next[];
  for (int i = int(threadIdx.x); i < e; i += blockDim.x)
    next[i] = base[int64_t(i) * chunks + blockIdx.x];
  __syncthreads();
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  const int64_t r0 = int64_t(blockIdx.x) * kSortChunk;
  const int64_t r1 = r0 + kSortChunk < n ? r0 + kSortChunk : n;
  for (int64_t b = r0; b < r1; b += blockDim.x) {
    const int64_t r = b + threadIdx.x;
    const int64_t id = r < r1 ? ids[r] : -1;
    const bool valid = id >= 0 && id < e;
    const int key = valid ? int(id) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, key);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    const bool last = (peers >> lane) == 1u; // no equal id in a higher lane
    // The warps of the block in turn: each reads the next free position of
    // its ids, then the last lane of each group of equal ids advances it.
    for (int w = 0; w < warps; ++w) {
      int pos = 0;
      if (warp == w && valid)
        pos = next[key] + rank;
      __syncwarp();
      if (warp == w && valid) {
        perm[pos] = int32_t(r);
        if (last)
          next[key] += __popc(peers);
      }
      __syncthreads();
    }
  }
}

/// tiles[t] = {expert, first sorted row, rows, 0} of row tile t, or
/// {-1, 0, 0, 0} past the last tile.
__global__ void expertTilesKernel(int e, int rowTile, int tileCount,
                                  const int32_t *offsets,
                                  const int32_t *tileStart, int4 *tiles) {
  RONDO_GRID_STRIDE(t, tileCount) {
    const int ex = expertOfTile(tileStart, e, int(t));
    int4 v = make_int4(-1, 0, 0, 0);
    if (ex >= 0) {
      const int begin = offsets[ex] + (int(t) - tileStart[ex]) * rowTile;
      const int rows = offsets[ex + 1] - begin;
      v = make_int4(ex, begin, rows < rowTile ? rows : rowTile, 0);
    }
    tiles[t] = v;
  }
}

//===----------------------------------------------------------------------===//
// mma.sync kernels (any GPU with bf16 mma.sync: sm_80 and later)
//===----------------------------------------------------------------------===//

/// A block of 64 x 128 outputs, two stages: fits the 99 KiB of shared memory
/// a block gets on sm_86 / sm_89.
using MmaCfg = Cfg<64, 128, 2>;

__device__ inline void ldsm4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4],
                                uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Eight warps as 2 x 4, each (BM / 2) x (BN / 4) outputs of m16n8 tiles;
/// fragments through ldmatrix from the swizzled tiles.
template <class C> struct MmaCore {
  static constexpr int WM = C::BM / 2, WN = C::BN / 4;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(MI >= 1 && NI % 2 == 0, "whole fragments");
  struct Acc {
    float c[MI][NI][4];
  };

  __device__ static void zero(Acc &acc) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int k = 0; k < 4; ++k)
          acc.c[i][j][k] = 0.0f;
  }

  __device__ static void math(Acc &acc, const Smem &sm, int half) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int wm = warp >> 2, wn = warp & 3;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int c0 = half * 4 + kk * 2; // 16-byte chunk of this k-step
      uint32_t a[MI][4], b[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int r = wm * WM + i * 16 + (lane & 15);
        ldsm4(sm.tileA + swz(r, c0 + (lane >> 4)), a[i]);
      }
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        const int n = wn * WN + j * 16 + (lane & 7) + ((lane >> 4) << 3);
        uint32_t t[4];
        ldsm4(sm.tileB + swz(n, c0 + ((lane >> 3) & 1)), t);
        b[2 * j][0] = t[0];
        b[2 * j][1] = t[1];
        b[2 * j + 1][0] = t[2];
        b[2 * j + 1][1] = t[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
          mma16816(acc.c[i][j], a[i], b[j][0], b[j][1]);
    }
  }

  __device__ static void wait(Acc &) {}

  /// f(row, column, value, value of column + 1) for every pair a thread owns.
  template <class F> __device__ static void forEach(const Acc &acc, F &&f) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int wm = warp >> 2, wn = warp & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        const int r = wm * WM + i * 16 + (lane >> 2);
        const int c = wn * WN + j * 8 + 2 * (lane & 3);
        f(r, c, acc.c[i][j][0], acc.c[i][j][1]);
        f(r + 8, c, acc.c[i][j][2], acc.c[i][j][3]);
      }
  }
};

__global__ void __launch_bounds__(MmaCfg::NT)
    productMmaKernel(const __grid_constant__ ProductParams p) {
  extern __shared__ unsigned char smem[];
  productBlock<MmaCfg, MmaCore<MmaCfg>>(p, smem);
}

__global__ void __launch_bounds__(MmaCfg::NT)
    weightGradMmaKernel(const __grid_constant__ WeightGradParams p) {
  extern __shared__ unsigned char smem[];
  weightGradBlock<MmaCfg, MmaCore<MmaCfg>>(p, smem);
}

/// Checks the grid and raises the kernel's dynamic shared-memory limit.
template <typename Kernel>
void prepareLaunch(Kernel kernel, int64_t blocks, size_t smem,
                   const char *name) {
  if (blocks > int64_t(INT_MAX))
    contract(name, "too many tiles for one launch (%lld)", (long long)blocks);
  RONDO_CHECK(cudaFuncSetAttribute(kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(smem)),
              name);
}

//===----------------------------------------------------------------------===//
// fp32 weight gradient and the rows of out-of-range ids
//===----------------------------------------------------------------------===//

constexpr int kF32Tile = 64, kF32Rows = 16;

/// dw[e] tile (64 x 64, a 4 x 4 per thread, strided by 16) summed over e's
/// sorted rows in ascending order with fmaf.
__global__ void __launch_bounds__(256)
    weightGradF32Kernel(const __grid_constant__ WeightGradParams p) {
  __shared__ float sp[kF32Rows][kF32Tile], sq[kF32Rows][kF32Tile];
  const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const unsigned perExpert = unsigned(p.pTiles) * unsigned(p.qTiles);
  const int e = p.order.bySize[blockIdx.x / perExpert];
  const int within = int(blockIdx.x % perExpert);
  const int64_t p0 = int64_t(within / p.qTiles) * kF32Tile;
  const int64_t q0 = int64_t(within % p.qTiles) * kF32Tile;
  const int64_t P = p.pdim, Q = p.qdim;
  const int begin = p.order.offsets[e], end = p.order.offsets[e + 1];
  float acc[4][4] = {};
  for (int j0 = begin; j0 < end; j0 += kF32Rows) {
    for (int i = tid; i < kF32Rows * kF32Tile; i += 256) {
      const int jr = i / kF32Tile, c = i % kF32Tile, j = j0 + jr;
      float vp = 0.0f, vq = 0.0f;
      if (j < end) {
        const int64_t row = p.order.perm[j];
        if (p0 + c < P)
          vp = p.p[row * P + p0 + c];
        if (q0 + c < Q)
          vq = p.q[row * Q + q0 + c];
      }
      sp[jr][c] = vp;
      sq[jr][c] = vq;
    }
    __syncthreads();
    const int rows = end - j0 < kF32Rows ? end - j0 : kF32Rows;
    for (int jj = 0; jj < rows; ++jj) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = sp[jj][ty + 16 * i];
        b[i] = sq[jj][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k)
          acc[i][k] = fmaf(a[i], b[k], acc[i][k]);
    }
    __syncthreads();
  }
  const bool bad = *p.order.bad != 0;
  float *dw = p.dw + int64_t(e) * P * Q;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t pr = p0 + ty + 16 * i, q = q0 + tx + 16 * k;
      if (pr < P && q < Q)
        dw[pr * Q + q] = bad ? NAN : acc[i][k];
    }
}

/// Rows of out whose id is outside [0, e) become NaN.
__global__ void nanOutsideRowsKernel(const int64_t *ids, int64_t n, int64_t e,
                                     float *out, int64_t m) {
  RONDO_GRID_STRIDE(r, n) {
    const int64_t id = ids[r];
    if (id < 0 || id >= e)
      for (int64_t c = 0; c < m; ++c)
        out[r * m + c] = NAN;
  }
}

void checkSortSizes(int64_t n, int64_t e, const char *name) {
  if (n > int64_t(INT_MAX))
    contract(name, "%lld rows: the GPU sort takes at most %d", (long long)n,
             INT_MAX);
  if (e > kMaxSortExperts)
    contract(name, "%lld experts: the GPU sort takes at most %lld",
             (long long)e, (long long)kMaxSortExperts);
}

bool vec16(int64_t a, int64_t b, const void *p, const void *q) {
  return a % 4 == 0 && b % 4 == 0 && aligned16(p) && aligned16(q);
}

bool vec8(int64_t cols, const void *p) {
  return cols % 2 == 0 && reinterpret_cast<uintptr_t>(p) % 8 == 0;
}

} // namespace

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

/// The most row tiles of rowTile rows n rows of e experts can give.
int64_t sortTileCount(int64_t n, int64_t e, int rowTile) {
  return (n + rowTile - 1) / rowTile + e;
}

size_t sortScratchWords(int64_t n, int64_t e, int rowTile) {
  return size_t(4 * sortTileCount(n, e, rowTile) + 3 * e + 3 + n +
                e * sortChunks(n));
}

ExpertOrder sortByExpert(const int64_t *ids, int64_t n, int64_t e, int rowTile,
                         int32_t *scratch, const char *kernel) {
  checkSortSizes(n, e, kernel);
  const int64_t chunks = sortChunks(n),
                tileCount = sortTileCount(n, e, rowTile);
  if (tileCount > int64_t(INT_MAX))
    contract(kernel, "too many row tiles (%lld)", (long long)tileCount);
  // The tile table first: the scratch is 256-byte aligned, int4 needs 16.
  int4 *tiles = reinterpret_cast<int4 *>(scratch);
  int32_t *offsets = scratch + 4 * tileCount, *tileStart = offsets + e + 1;
  int32_t *bySize = tileStart + e + 1, *bad = bySize + e;
  int32_t *perm = bad + 1, *base = perm + n;
  cudaStream_t stream = currentStream();
  RONDO_CHECK(cudaMemsetAsync(bad, 0, sizeof(int32_t), stream), kernel);
  const size_t smem = size_t(e) * sizeof(int32_t);
  if (smem > 48 * 1024) {
    RONDO_CHECK(cudaFuncSetAttribute(
                    expertCountKernel,
                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                kernel);
    RONDO_CHECK(cudaFuncSetAttribute(
                    expertScatterKernel,
                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                kernel);
  }
  expertCountKernel<<<unsigned(chunks), kSortThreads, smem, stream>>>(
      ids, n, int(e), chunks, base, bad);
  checkLaunch(kernel);
  expertScanKernel<<<1, kScanThreads, 0, stream>>>(
      int(e), chunks, rowTile, base, offsets, tileStart, bySize);
  checkLaunch(kernel);
  expertScatterKernel<<<unsigned(chunks), kSortThreads, smem, stream>>>(
      ids, n, int(e), chunks, base, perm);
  checkLaunch(kernel);
  expertTilesKernel<<<gridFor(tileCount), kThreads, 0, stream>>>(
      int(e), rowTile, int(tileCount), offsets, tileStart, tiles);
  checkLaunch(kernel);
  return ExpertOrder{offsets, tileStart, perm,          bySize,
                     bad,     tiles,     int(tileCount)};
}

void expertProductBf16(const float *x, const float *w, const int64_t *ids,
                       float *out, int64_t N, int64_t K, int64_t M, int64_t E,
                       bool transW, const char *name) {
  cudaStream_t stream = currentStream();
  if (E > 0) {
    const bool sm90 = groupedSm90Usable();
    const int rowTile = sm90 ? kSm90RowTile : MmaCfg::BM;
    const int colTile = sm90 ? kSm90ColTile : MmaCfg::BN;
    Temp scratch(sortScratchWords(N, E, rowTile) * sizeof(int32_t), name);
    ProductParams p{};
    p.x = x;
    p.w = w;
    p.out = out;
    p.order = sortByExpert(ids, N, E, rowTile, scratch.as<int32_t>(), name);
    p.K = K;
    p.M = M;
    p.E = int(E);
    p.colTiles = int((M + colTile - 1) / colTile);
    p.transW = transW;
    p.vec = vec16(K, M, x, w);
    p.vecOut = vec8(M, out);
    const int64_t rowTiles = (N + rowTile - 1) / rowTile + E;
    if (sm90) {
      productSm90(p, rowTiles, name);
    } else {
      prepareLaunch(productMmaKernel, rowTiles * p.colTiles, MmaCfg::kSmem,
                    name);
      productMmaKernel<<<unsigned(rowTiles * p.colTiles), MmaCfg::NT,
                         MmaCfg::kSmem, stream>>>(p);
      checkLaunch(name);
    }
    scratch.release();
  }
  nanOutsideRowsKernel<<<gridFor(N), kThreads, 0, stream>>>(ids, N, E, out, M);
  checkLaunch(name);
}

void expertWeightGrad(const float *x, const float *dY, const int64_t *ids,
                      float *dW, int64_t N, int64_t K, int64_t M, int64_t E,
                      bool transW, bool bf16, const char *name) {
  if (N == 0) {
    fillDevice(dW, E * K * M, 0.0f, name);
    return;
  }
  const bool sm90 = bf16 && groupedSm90Usable();
  int tileP = kF32Tile, tileQ = kF32Tile;
  if (bf16) {
    tileP = sm90 ? kSm90RowTile : MmaCfg::BM;
    tileQ = sm90 ? kSm90ColTile : MmaCfg::BN;
  }
  Temp scratch(sortScratchWords(N, E, tileP) * sizeof(int32_t), name);
  WeightGradParams p{};
  // dW[e] [K, M] = x_eᵀ dY_e, or [M, K] = dY_eᵀ x_e with transW.
  p.p = transW ? dY : x;
  p.q = transW ? x : dY;
  p.pdim = transW ? M : K;
  p.qdim = transW ? K : M;
  p.dw = dW;
  p.order = sortByExpert(ids, N, E, tileP, scratch.as<int32_t>(), name);
  p.E = int(E);
  p.pTiles = int((p.pdim + tileP - 1) / tileP);
  p.qTiles = int((p.qdim + tileQ - 1) / tileQ);
  p.vec = vec16(p.pdim, p.qdim, p.p, p.q);
  p.vecOut = vec8(p.qdim, dW);
  const int64_t blocks = E * p.pTiles * p.qTiles;
  if (blocks > int64_t(INT_MAX))
    contract(name, "too many tiles for one launch (%lld)", (long long)blocks);
  if (!bf16) {
    weightGradF32Kernel<<<unsigned(blocks), 256, 0, currentStream()>>>(p);
    checkLaunch(name);
  } else if (sm90) {
    weightGradSm90(p, name);
  } else {
    prepareLaunch(weightGradMmaKernel, blocks, MmaCfg::kSmem, name);
    weightGradMmaKernel<<<unsigned(blocks), MmaCfg::NT, MmaCfg::kSmem,
                          currentStream()>>>(p);
    checkLaunch(name);
  }
  scratch.release();
}

bool bf16OperandsFit(int64_t a, int64_t b, const void *p, const void *q) {
  return a % 8 == 0 && b % 8 == 0 && aligned16(p) && aligned16(q);
}

void expertProductBf16Operands(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                               const int64_t *ids, float *out, int64_t N,
                               int64_t K, int64_t M, int64_t E, bool transW,
                               const char *name) {
  if (E == 0 || !groupedSm90Usable() || !bf16OperandsFit(K, M, x, w)) {
    // Off Hopper or with unaligned rows: the fp32-staged kernels on the
    // widened operands (they round them back to these very values).
    WidenedBf16 wx(x, N * K, name), ww(w, E * K * M, name);
    expertProductBf16(wx.data(), ww.data(), ids, out, N, K, M, E, transW, name);
    ww.temp.release();
    wx.temp.release();
    return;
  }
  cudaStream_t stream = currentStream();
  // The sort's words, then the persistent blocks' tile counter.
  const size_t words = sortScratchWords(N, E, kSm90RowTile);
  Temp scratch((words + 1) * sizeof(int32_t), name);
  RONDO_CHECK(cudaMemsetAsync(scratch.as<int32_t>() + words, 0, sizeof(int32_t),
                              stream),
              name);
  ProductBf16Params p{};
  p.tileCounter = reinterpret_cast<unsigned *>(scratch.as<int32_t>() + words);
  p.x = x;
  p.w = w;
  p.out = out;
  p.order = sortByExpert(ids, N, E, kSm90RowTile, scratch.as<int32_t>(), name);
  p.K = K;
  p.M = M;
  p.E = int(E);
  p.colTiles = int((M + kSm90ColTile - 1) / kSm90ColTile);
  p.transW = transW;
  p.vecOut = vec8(M, out);
  productBf16Sm90(p, (N + kSm90RowTile - 1) / kSm90RowTile + E, name);
  scratch.release();
  nanOutsideRowsKernel<<<gridFor(N), kThreads, 0, stream>>>(ids, N, E, out, M);
  checkLaunch(name);
}

void expertWeightGradBf16Operands(const __nv_bfloat16 *x,
                                  const __nv_bfloat16 *dY, const int64_t *ids,
                                  float *dW, int64_t N, int64_t K, int64_t M,
                                  int64_t E, bool transW, const char *name) {
  if (N == 0) {
    fillDevice(dW, E * K * M, 0.0f, name);
    return;
  }
  if (!groupedSm90Usable() || !bf16OperandsFit(K, M, x, dY)) {
    WidenedBf16 wx(x, N * K, name), wy(dY, N * M, name);
    expertWeightGrad(wx.data(), wy.data(), ids, dW, N, K, M, E, transW,
                     /*bf16=*/true, name);
    wy.temp.release();
    wx.temp.release();
    return;
  }
  const size_t words = sortScratchWords(N, E, kSm90RowTile);
  Temp scratch((words + 1) * sizeof(int32_t), name);
  RONDO_CHECK(cudaMemsetAsync(scratch.as<int32_t>() + words, 0, sizeof(int32_t),
                              currentStream()),
              name);
  WeightGradBf16Params p{};
  p.tileCounter = reinterpret_cast<unsigned *>(scratch.as<int32_t>() + words);
  // dW[e] [K, M] = x_eᵀ dY_e, or [M, K] = dY_eᵀ x_e with transW.
  p.p = transW ? dY : x;
  p.q = transW ? x : dY;
  p.pdim = transW ? M : K;
  p.qdim = transW ? K : M;
  p.dw = dW;
  p.order = sortByExpert(ids, N, E, kSm90RowTile, scratch.as<int32_t>(), name);
  p.E = int(E);
  p.pTiles = int((p.pdim + kSm90RowTile - 1) / kSm90RowTile);
  p.qTiles = int((p.qdim + kSm90ColTile - 1) / kSm90ColTile);
  p.vecOut = vec8(p.qdim, dW);
  weightGradBf16Sm90(p, name);
  scratch.release();
}

} // namespace rondo::cuda::detail::grouped

namespace rondo::cuda {

void expertSortForTesting(const int64_t *ids, int64_t n, int64_t experts,
                          int32_t *offsets, int32_t *perm, int32_t *bad) {
  using namespace detail;
  const char *name = "expertSortForTesting";
  if (n <= 0 || experts <= 0)
    contract(name, "needs rows and experts");
  Temp scratch(grouped::sortScratchWords(n, experts, 128) * sizeof(int32_t),
               name);
  grouped::ExpertOrder o =
      grouped::sortByExpert(ids, n, experts, 128, scratch.as<int32_t>(), name);
  cudaStream_t stream = currentStream();
  RONDO_CHECK(cudaMemcpyAsync(offsets, o.offsets,
                              size_t(experts + 1) * sizeof(int32_t),
                              cudaMemcpyDeviceToDevice, stream),
              name);
  RONDO_CHECK(cudaMemcpyAsync(perm, o.perm, size_t(n) * sizeof(int32_t),
                              cudaMemcpyDeviceToDevice, stream),
              name);
  RONDO_CHECK(cudaMemcpyAsync(bad, o.bad, sizeof(int32_t),
                              cudaMemcpyDeviceToDevice, stream),
              name);
  scratch.release();
}

} // namespace rondo::cuda
