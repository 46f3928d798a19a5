//===- GroupedGemmSm90.cu - The experts' grouped GEMM with wgmma ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The Hopper kernels of the bf16 grouped GEMM (GroupedGemm.cu dispatches here
// on compute capability 9.0 and gives the design). Built for sm_90a alone
// (CMakeLists.txt), since wgmma exists only there.
//
// A block is two warpgroups computing 128 x 256 outputs (64 rows each, one
// m64n256k16 product a k-step), 128 accumulators a thread. The tensor cores
// read both operands from the 128-byte-swizzled K-major bf16 tiles (the
// layout FlashAttentionSm90.cu uses), in two halves of 32 columns: while they
// multiply one half the threads fill the other, so rounding and loading run
// under the products, with one barrier per 32 k. Three ways to fill them:
//  - cp.async staging (GroupedGemm.cuh; the weight gradient, unaligned sizes,
//    RONDO_GROUPED_STAGING=smem): three fp32 stages (162 KiB) in flight,
//    rounded (and transposed where needed) from shared memory.
//  - register staging (the input gradient, transW): both operands are
//    contiguous along K, so each thread loads its 16-byte chunks of the next
//    stage into registers and stores them rounded, and no fp32 copy goes
//    through shared memory.
//  - mixed (the forward): x's rows through registers, w[e] [K, M] through
//    cp.async and the transposing conversion.
// One block an SM either way. No wgmma sits on a conditional path and no
// other instruction touches the accumulators between issue and wait (ptxas
// would serialise them).
//
//===----------------------------------------------------------------------===//

#include "GroupedGemmSm90.cuh"

#include <cstdlib>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "GroupedGemmSm90.cu must be built for sm_90a only (CMakeLists.txt)"
#endif

namespace rondo::cuda::detail::grouped {

namespace {

using SmCfg = Cfg<kSm90RowTile, kSm90ColTile, 3>;

//===----------------------------------------------------------------------===//
// Register staging
//===----------------------------------------------------------------------===//
//
// Operands contiguous along K (x's rows, and w's rows with transW) can skip
// the fp32 round trip through shared memory: each thread loads its 16-byte
// chunks of the next stage into registers, and after the next products are
// issued rounds them and stores them into the bf16 tile (8-byte stores). One
// stage of loads is in flight (16 registers for 128 rows). Operands
// contiguous along M (w in the forward, both in the weight gradient) keep
// cp.async staging, whose conversion transposes them: loading them into
// registers a column at a time (4-byte loads, 8 k of one column per thread)
// made the forward 20% and the weight gradient 5x slower than cp.async
// staging on an H100 (bench/grouped_gemm.cu, 2026-11-27).

/// The row of a K-contiguous tile that thread `tid` stages in round 0 (then
/// + 32 a round), in 16-byte chunk tid % 8: a half-warp's two rows differ in
/// bit 2, so its 8-byte stores cover the 8 swizzled chunk positions once.
__device__ inline int stagedRow(int tid) {
  const int w = tid >> 5, q = (tid >> 3) & 3;
  return 8 * (w >> 1) + 2 * (w & 1) + (q >> 1) + 4 * (q & 1);
}

__device__ inline float4 ldcg4(const float *p) {
  return __ldcg(reinterpret_cast<const float4 *>(p));
}

/// Rows of a K-contiguous operand staged through registers: R rows of the
/// tile, rows stagedRow + 32 i of `base[i]` (K floats apart from stage to
/// stage at k = 4 (tid % 8)); `valid` of the tile's rows exist.
template <int R> struct RowRegs {
  const float *base[R / 32];
  int valid;
  float4 v[R / 32];

  __device__ void load(int t, int64_t K) {
    const int tid = int(threadIdx.x), r0 = stagedRow(tid);
    const int64_t k = int64_t(t) * SmCfg::BK + 4 * (tid & 7);
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < R / 32; ++i)
      v[i] = k < K && r0 + 32 * i < valid
                 ? ldcg4(base[i] + int64_t(t) * SmCfg::BK)
                 : zero4;
  }

  /// Rounds the loaded stage into half `half` of the tile at `tile`.
  __device__ void store(uint32_t tile, int half) const {
    const int tid = int(threadIdx.x), r0 = stagedRow(tid), c = tid & 7;
#pragma unroll
    for (int i = 0; i < R / 32; ++i) {
      const uint32_t addr =
          tile + swz(r0 + 32 * i, half * 4 + (c >> 1)) + uint32_t(c & 1) * 8u;
      asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr),
                   "r"(packBf16(v[i].x, v[i].y)), "r"(packBf16(v[i].z, v[i].w))
                   : "memory");
    }
  }
};

/// x's rows of the block: rows[r] of x, the first rowCount valid.
__device__ inline RowRegs<SmCfg::BM> xRows(const ProductParams &p,
                                           const int32_t *rows, int rowCount) {
  RowRegs<SmCfg::BM> a;
  const int tid = int(threadIdx.x), r0 = stagedRow(tid);
#pragma unroll
  for (int i = 0; i < SmCfg::BM / 32; ++i)
    a.base[i] = p.x + int64_t(rows[r0 + 32 * i]) * p.K + 4 * (tid & 7);
  a.valid = rowCount;
  return a;
}

/// The input-gradient product (transW): both operands through registers.
struct ProductRegTiles {
  const ProductParams *p;
  RowRegs<SmCfg::BM> a;
  RowRegs<SmCfg::BN> b;
  uint32_t tileA, tileB;

  __device__ void load(int t) {
    a.load(t, p->K);
    b.load(t, p->K);
  }
  __device__ void store(int half) const {
    a.store(tileA, half);
    b.store(tileB, half);
  }
};

/// The main loop of register staging: in iteration t the tensor cores
/// multiply half t % 2 while the threads store stage t + 1 (loaded in
/// iteration t - 1) into the other half and load stage t + 2.
template <class Tiles>
__device__ inline void regLoop(Tiles &tiles, int numK, WgmmaCore::Acc &acc,
                               const Smem &sm) {
  if (numK <= 0)
    return;
  tiles.load(0);
  tiles.store(0);
  if (numK > 1)
    tiles.load(1);
  proxyFence();
  __syncthreads();
#pragma unroll 1
  for (int t = 0; t < numK; ++t) {
    WgmmaCore::math(acc, sm, t & 1);
    if (t + 1 < numK)
      tiles.store((t + 1) & 1);
    if (t + 2 < numK)
      tiles.load(t + 2);
    WgmmaCore::wait(acc);
    proxyFence();
    __syncthreads();
  }
}

/// Shared memory of the register-staged kernel: the bf16 tiles and the
/// tile's rows.
constexpr size_t kRegSmem =
    1024 + SmCfg::kTileA + SmCfg::kTileB + SmCfg::BM * 4;

__global__ void __launch_bounds__(SmCfg::NT, 1)
    productRegsKernel(const __grid_constant__ ProductParams p) {
  extern __shared__ unsigned char smem[];
  const uint32_t raw = smemAddr(smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  Smem sm{};
  sm.tileA = base;
  sm.tileB = base + SmCfg::kTileA;
  sm.rows = reinterpret_cast<int32_t *>(smem + (base - raw) + SmCfg::kTileA +
                                        SmCfg::kTileB);
  ProductPos pos;
  if (!productPos<SmCfg>(p, sm.rows, pos, blockIdx.x))
    return;
  ProductRegTiles tiles{
      &p, xRows(p, sm.rows, pos.rowCount), {}, sm.tileA, sm.tileB};
  const int tid = int(threadIdx.x), r0 = stagedRow(tid);
  const float *wE = p.w + int64_t(pos.expert) * p.K * p.M;
#pragma unroll
  for (int i = 0; i < SmCfg::BN / 32; ++i)
    tiles.b.base[i] = wE + (pos.n0 + r0 + 32 * i) * p.K + 4 * (tid & 7);
  tiles.b.valid = int(p.M - pos.n0 < SmCfg::BN ? p.M - pos.n0 : SmCfg::BN);
  WgmmaCore::Acc acc;
  WgmmaCore::zero(acc);
  regLoop(tiles, int((p.K + SmCfg::BK - 1) / SmCfg::BK), acc, sm);
  productEpilogue<WgmmaCore>(p, acc, pos, sm.rows);
}

/// The forward (w [K, M] contiguous along M): x's rows through registers, w
/// through cp.async stages and the transposing conversion. Fits mainLoop:
/// convert() is called for stages 0, 1, 2, ... in order, and rounds the
/// registers' stage before loading the next one.
struct ProductMixedTiles {
  const ProductParams *p;
  const float *wCol; // w[e] at row tid / 64, this thread's 4 columns
  int wCount;        // of which exist: 0 or 4
  Smem sm;
  RowRegs<SmCfg::BM> a;
  int aStage, numK;

  __device__ void start(const float *wE, int64_t n0) {
    const int tid = int(threadIdx.x);
    const int64_t n = n0 + 4 * (tid % 64);
    wCol = wE + int64_t(tid / 64) * p->M + n;
    wCount = clamp4(p->M - n);
    aStage = 0;
    a.load(0, p->K);
  }

  /// Rows k0 + 4 i + tid / 64 of w[e], 16 bytes at the thread's columns.
  __device__ void issue(int t, int slot) {
    const int tid = int(threadIdx.x), r0 = tid / 64;
    const int64_t K = p->K, M = p->M, k0 = int64_t(t) * SmCfg::BK;
    const uint32_t sb = sm.stage0 + uint32_t(slot) * SmCfg::kStage +
                        uint32_t(r0 * SmCfg::BN * 4 + (tid % 64) * 16);
    const float *src = wCol + k0 * M;
#pragma unroll
    for (int i = 0; i < SmCfg::BK / 4; ++i)
      stageChunk(sb + uint32_t(4 * i * SmCfg::BN * 4), src + 4 * i * M, p->w,
                 k0 + 4 * i + r0 < K ? wCount : 0, true);
  }

  __device__ void convert(int slot, int half) {
    const float *b =
        reinterpret_cast<const float *>(sm.stage0Ptr + slot * SmCfg::kStage);
    convertCols<SmCfg::BN, SmCfg::NT>(b, sm.tileB, half);
    a.store(sm.tileA, half);
    if (++aStage < numK)
      a.load(aStage, p->K);
  }
};

__global__ void __launch_bounds__(SmCfg::NT, 1)
    productMixedKernel(const __grid_constant__ ProductParams p) {
  extern __shared__ unsigned char smem[];
  const Smem sm = carve<SmCfg>(smem);
  ProductPos pos;
  if (!productPos<SmCfg>(p, sm.rows, pos, blockIdx.x))
    return;
  const int numK = int((p.K + SmCfg::BK - 1) / SmCfg::BK);
  ProductMixedTiles tiles{&p, nullptr, 0, sm, xRows(p, sm.rows, pos.rowCount),
                          0,  numK};
  tiles.start(p.w + int64_t(pos.expert) * p.K * p.M, pos.n0);
  WgmmaCore::Acc acc;
  WgmmaCore::zero(acc);
  mainLoop<SmCfg, WgmmaCore>(tiles, numK, acc, sm);
  productEpilogue<WgmmaCore>(p, acc, pos, sm.rows);
}

//===----------------------------------------------------------------------===//
// cp.async staging
//===----------------------------------------------------------------------===//

__global__ void __launch_bounds__(SmCfg::NT, 1)
    productSm90Kernel(const __grid_constant__ ProductParams p) {
  extern __shared__ unsigned char smem[];
  productBlock<SmCfg, WgmmaCore>(p, smem);
}

__global__ void __launch_bounds__(SmCfg::NT, 1)
    weightGradSm90Kernel(const __grid_constant__ WeightGradParams p) {
  extern __shared__ unsigned char smem[];
  weightGradBlock<SmCfg, WgmmaCore>(p, smem);
}

template <typename Kernel, typename Params>
void launch(Kernel kernel, int64_t blocks, size_t smem, const Params &p,
            const char *name) {
  if (blocks > int64_t(0x7fffffff))
    contract(name, "too many tiles for one launch (%lld)", (long long)blocks);
  RONDO_CHECK(cudaFuncSetAttribute(kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   int(smem)),
              name);
  kernel<<<unsigned(blocks), SmCfg::NT, smem, currentStream()>>>(p);
  checkLaunch(name);
}

/// RONDO_GROUPED_STAGING=smem stages every operand by cp.async (the
/// benchmark and the tests compare the two); unset, operands contiguous
/// along K go through registers.
bool registerStaging() {
  const char *env = std::getenv("RONDO_GROUPED_STAGING");
  return !(env && env[0] == 's');
}

} // namespace

bool groupedSm90Usable() { return sm90KernelsUsable("RONDO_GROUPED_SM90"); }

void productSm90(const ProductParams &p, int64_t rowTiles, const char *name) {
  const int64_t blocks = rowTiles * p.colTiles;
  if (!registerStaging() || !p.vec)
    launch(productSm90Kernel, blocks, SmCfg::kSmem, p, name);
  else if (p.transW)
    launch(productRegsKernel, blocks, kRegSmem, p, name);
  else
    launch(productMixedKernel, blocks, SmCfg::kSmem, p, name);
}

void weightGradSm90(const WeightGradParams &p, const char *name) {
  launch(weightGradSm90Kernel, int64_t(p.E) * p.pTiles * p.qTiles, SmCfg::kSmem,
         p, name);
}

} // namespace rondo::cuda::detail::grouped
