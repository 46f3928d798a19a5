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
// A block is two warpgroups computing 128 x 256 outputs (64 rows each, as two
// m64n128k16 products a k-step), 128 accumulators a thread. Both operands are
// read by the tensor cores from the 128-byte-swizzled K-major bf16 tiles that
// the shared staging (GroupedGemm.cuh) writes, the layout FlashAttentionSm90.cu
// uses. The products of a stage are issued and committed before the threads
// round the next stage, so rounding and the cp.async issue run under them;
// three fp32 stages (162 KiB) plus the bf16 tiles (48 KiB) leave one block an
// SM. No wgmma sits on a conditional path and no other instruction touches
// the accumulators between issue and wait (ptxas would serialise them).
//
//===----------------------------------------------------------------------===//

#include "GroupedGemm.cuh"

#include <cstdlib>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "GroupedGemmSm90.cu must be built for sm_90a only (CMakeLists.txt)"
#endif

namespace rondo::cuda::detail::grouped {

namespace {

using SmCfg = Cfg<kSm90RowTile, kSm90ColTile, 3>;

/// d (64 x 256 per warpgroup) += A (64 x 16) Bᵀ (256 x 16), both K-major in
/// shared memory (descriptors).
__device__ inline void wgmma256(float (&d)[32][4], uint64_t descA,
                                uint64_t descB) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
      "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, "
      "%41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "
      "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, "
      "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, "
      "%93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, "
      "%105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, "
      "%116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]),
        "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]),
        "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]),
        "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]),
        "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]),
        "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]),
        "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]),
        "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]),
        "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]),
        "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]),
        "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]),
        "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]),
        "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]),
        "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]),
        "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]),
        "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]),
        "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]),
        "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]),
        "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]),
        "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
      : "l"(descA), "l"(descB), "r"(1));
}

__device__ inline void wgFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgWait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/// The descriptor of a K-major, 128-byte-swizzled operand at `addr`: 8-row
/// groups 1024 bytes apart; the leading byte offset is unused while a k-step
/// (32 bytes) stays inside a 128-byte row.
__device__ inline uint64_t descOf(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

struct WgmmaCore {
  struct Acc {
    float d[32][4];
  };

  /// Pins the accumulators here: the compiler may not move their reads or
  /// writes between a wgmma's issue and its wait.
  __device__ static void pin(Acc &acc) {
#pragma unroll
    for (int n = 0; n < 32; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        asm volatile("" : "+f"(acc.d[n][e])::"memory");
  }

  __device__ static void zero(Acc &acc) {
#pragma unroll
    for (int n = 0; n < 32; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc.d[n][e] = 0.0f;
  }

  __device__ static void math(Acc &acc, const Smem &sm, int half) {
    const uint32_t rows = uint32_t(threadIdx.x >> 7) * 64u * 128u;
    pin(acc);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t k = uint32_t(half * 2 + kk) * 32u;
      wgmma256(acc.d, descOf(sm.tileA + rows + k), descOf(sm.tileB + k));
    }
    wgCommit();
  }

  __device__ static void wait(Acc &acc) {
    wgWait0();
    pin(acc);
  }

  /// f(row, column, value, value of column + 1): a warp's 16 rows of an
  /// m64nN accumulator have mma.sync's m16n8 layout.
  template <class F> __device__ static void forEach(const Acc &acc, F &&f) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int r = (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2);
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      const int c = n * 8 + 2 * (lane & 3);
      f(r, c, acc.d[n][0], acc.d[n][1]);
      f(r + 8, c, acc.d[n][2], acc.d[n][3]);
    }
  }
};

//===----------------------------------------------------------------------===//
// Register staging
//===----------------------------------------------------------------------===//
//
// The other way to feed the same products: each thread loads its share of
// the next stage from global memory into registers (16-byte loads along K,
// 4-byte loads down the columns of an operand contiguous along M, which the
// thread then holds as 8 consecutive k of one column), rounds it and stores
// it straight into the bf16 tile. No fp32 copy passes through shared memory,
// which cp.async staging writes and reads once more per stage; the price is
// a single stage of loads in flight (48 registers a thread).

/// Shared memory of the register-staged kernels: the bf16 tiles, the tile's
/// rows (product) and a ring of 8 stages of 32 sorted rows (weight grad).
struct RegSmem {
  static constexpr uint32_t kRowsOff = SmCfg::kTileA + SmCfg::kTileB;
  static constexpr uint32_t kRingOff = kRowsOff + SmCfg::BM * 4;
  static constexpr size_t kSmem = 1024 + kRingOff + 8 * 32 * 4;
};

__device__ inline Smem carveRegs(unsigned char *smem, int32_t *&ring) {
  const uint32_t raw = smemAddr(smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char *g = smem + (base - raw);
  Smem s{};
  s.tileA = base;
  s.tileB = base + SmCfg::kTileA;
  s.rows = reinterpret_cast<int32_t *>(g + RegSmem::kRowsOff);
  ring = reinterpret_cast<int32_t *>(g + RegSmem::kRingOff);
  return s;
}

__device__ inline float4 ldcg4(const float *p) {
  return __ldcg(reinterpret_cast<const float4 *>(p));
}

/// The row of a K-contiguous tile that thread `tid` stages in round 0 (then
/// + 32 a round), in 16-byte chunk tid % 8: a half-warp's two rows differ in
/// bit 2, so its 8-byte stores cover the 8 swizzled chunk positions once.
__device__ inline int stagedRow(int tid) {
  const int w = tid >> 5, q = (tid >> 3) & 3;
  return 8 * (w >> 1) + 2 * (w & 1) + (q >> 1) + 4 * (q & 1);
}

/// Stores 4 floats of row r, k 4c .. 4c + 3 of the stage, into half `half`.
__device__ inline void store4(uint32_t tile, int r, int c, int half, float4 v) {
  const uint32_t addr =
      tile + swz(r, half * 4 + (c >> 1)) + uint32_t(c & 1) * 8u;
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr),
               "r"(packBf16(v.x, v.y)), "r"(packBf16(v.z, v.w))
               : "memory");
}

/// Stores 8 consecutive k (one octet) of column n into half `half`.
__device__ inline void store8(uint32_t tile, int n, int oct, int half,
                              const float *v) {
  stShared16(tile + swz(n, half * 4 + oct),
             make_uint4(packBf16(v[0], v[1]), packBf16(v[2], v[3]),
                        packBf16(v[4], v[5]), packBf16(v[6], v[7])));
}

/// The product's operands staged through registers (p.vec: K a multiple of 4,
/// x and w 16-byte aligned). A: 4 chunks of rows stagedRow + 32 i. B: with
/// transW 8 chunks of rows likewise; else column tid, k 0-31 of the stage.
template <bool TransW> struct ProductRegTiles {
  static constexpr int BM = SmCfg::BM, BN = SmCfg::BN, BK = SmCfg::BK;
  const ProductParams *p;
  const float *aRow[BM / 32]; // x row of chunk i, at k = 4 (tid % 8)
  const float *bBase;         // transW: w row of chunk 0; else column tid
  int rowCount;
  int64_t n0;
  uint32_t tileA, tileB;
  float4 a[BM / 32];
  float b[32];

  __device__ void init(const ProductParams &params, const ProductPos &pos,
                       const int32_t *rows, const Smem &sm) {
    p = &params;
    const int tid = int(threadIdx.x), r0 = stagedRow(tid), c = tid & 7;
    const int64_t K = p->K, M = p->M;
    const float *wE = p->w + int64_t(pos.expert) * K * M;
#pragma unroll
    for (int i = 0; i < BM / 32; ++i)
      aRow[i] = p->x + int64_t(rows[r0 + 32 * i]) * K + 4 * c;
    bBase = TransW ? wE + (pos.n0 + r0) * K + 4 * c : wE + pos.n0 + tid;
    rowCount = pos.rowCount;
    n0 = pos.n0;
    tileA = sm.tileA;
    tileB = sm.tileB;
  }

  __device__ void begin() {}
  __device__ void advance(int) {}

  __device__ void load(int t) {
    const int tid = int(threadIdx.x), r0 = stagedRow(tid), c = tid & 7;
    const int64_t K = p->K, M = p->M, k0 = int64_t(t) * BK;
    const bool kOk = k0 + 4 * c < K;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < BM / 32; ++i)
      a[i] = kOk && r0 + 32 * i < rowCount ? ldcg4(aRow[i] + k0) : zero4;
    if (TransW) {
#pragma unroll
      for (int i = 0; i < BN / 32; ++i) {
        const bool ok = kOk && n0 + r0 + 32 * i < M;
        const float4 v = ok ? ldcg4(bBase + int64_t(32 * i) * K + k0) : zero4;
        b[4 * i] = v.x;
        b[4 * i + 1] = v.y;
        b[4 * i + 2] = v.z;
        b[4 * i + 3] = v.w;
      }
    } else {
      const bool nOk = n0 + tid < M;
      const float *col = bBase + k0 * M;
#pragma unroll
      for (int kk = 0; kk < BK; ++kk)
        b[kk] = nOk && k0 + kk < K ? __ldcg(col + int64_t(kk) * M) : 0.0f;
    }
  }

  __device__ void store(int half) const {
    const int tid = int(threadIdx.x), r0 = stagedRow(tid), c = tid & 7;
#pragma unroll
    for (int i = 0; i < BM / 32; ++i)
      store4(tileA, r0 + 32 * i, c, half, a[i]);
    if (TransW) {
#pragma unroll
      for (int i = 0; i < BN / 32; ++i)
        store4(tileB, r0 + 32 * i, c, half,
               make_float4(b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]));
    } else {
#pragma unroll
      for (int o = 0; o < 4; ++o)
        store8(tileB, tid, o, half, b + 8 * o);
    }
  }
};

/// The weight gradient's operands staged through registers: per stage 32
/// sorted rows, whose original indices come from a shared ring that warp 0
/// fills three stages ahead. A: columns tid % 128 of P for the octets
/// tid / 128 and 2 + tid / 128; B: column tid of Q for all four octets.
struct WeightGradRegTiles {
  static constexpr int BK = SmCfg::BK;
  const WeightGradParams *p;
  int32_t *ring; // [8][32]
  int rowBegin, rowEnd;
  int64_t p0, q0;
  uint32_t tileA, tileB;
  int32_t pending; // warp 0: the original row of stage t + 4, lane's row
  float a[16];
  float b[32];

  __device__ int32_t rowAt(int stage) const {
    const int j = rowBegin + stage * BK + int(threadIdx.x);
    return j < rowEnd ? __ldg(p->order.perm + j) : -1;
  }

  __device__ void begin() {
    if (threadIdx.x < 32) {
#pragma unroll
      for (int s = 0; s < 3; ++s)
        ring[s * 32 + threadIdx.x] = rowAt(s);
      pending = rowAt(3);
    }
    __syncthreads();
  }

  /// Iteration t: the ring gets stage t + 3 (read from iteration t + 1 on,
  /// after this iteration's barrier).
  __device__ void advance(int t) {
    if (threadIdx.x < 32) {
      ring[((t + 3) & 7) * 32 + threadIdx.x] = pending;
      pending = rowAt(t + 4);
    }
  }

  __device__ void load(int t) {
    const int tid = int(threadIdx.x);
    const int32_t *rows = ring + (t & 7) * 32;
    const int64_t P = p->pdim, Q = p->qdim;
    const int64_t pc = p0 + (tid & 127), qc = q0 + tid;
    const bool pOk = pc < P, qOk = qc < Q;
    const int pOct = tid >> 7; // P's octets: pOct and pOct + 2
#pragma unroll
    for (int o = 0; o < 4; ++o)
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const int32_t row = rows[8 * o + r];
        b[8 * o + r] =
            qOk && row >= 0 ? __ldcg(p->q + int64_t(row) * Q + qc) : 0.0f;
        if ((o & 1) == pOct) {
          a[8 * (o >> 1) + r] =
              pOk && row >= 0 ? __ldcg(p->p + int64_t(row) * P + pc) : 0.0f;
        }
      }
  }

  __device__ void store(int half) const {
    const int tid = int(threadIdx.x);
#pragma unroll
    for (int i = 0; i < 2; ++i)
      store8(tileA, tid & 127, (tid >> 7) + 2 * i, half, a + 8 * i);
#pragma unroll
    for (int o = 0; o < 4; ++o)
      store8(tileB, tid, o, half, b + 8 * o);
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
  tiles.begin();
  tiles.load(0);
  tiles.store(0);
  if (numK > 1)
    tiles.load(1);
  proxyFence();
  __syncthreads();
#pragma unroll 1
  for (int t = 0; t < numK; ++t) {
    WgmmaCore::math(acc, sm, t & 1);
    tiles.advance(t);
    if (t + 1 < numK)
      tiles.store((t + 1) & 1);
    if (t + 2 < numK)
      tiles.load(t + 2);
    WgmmaCore::wait(acc);
    proxyFence();
    __syncthreads();
  }
}

template <bool TransW>
__global__ void __launch_bounds__(SmCfg::NT, 1)
    productRegsKernel(const __grid_constant__ ProductParams p) {
  extern __shared__ unsigned char smem[];
  int32_t *ring;
  const Smem sm = carveRegs(smem, ring);
  ProductPos pos;
  if (!productPos<SmCfg>(p, sm.rows, pos))
    return;
  ProductRegTiles<TransW> tiles;
  tiles.init(p, pos, sm.rows, sm);
  WgmmaCore::Acc acc;
  WgmmaCore::zero(acc);
  regLoop(tiles, int((p.K + SmCfg::BK - 1) / SmCfg::BK), acc, sm);
  productEpilogue<WgmmaCore>(p, acc, pos, sm.rows);
}

__global__ void __launch_bounds__(SmCfg::NT, 1)
    weightGradRegsKernel(const __grid_constant__ WeightGradParams p) {
  extern __shared__ unsigned char smem[];
  int32_t *ring;
  const Smem sm = carveRegs(smem, ring);
  const WeightGradPos pos = weightGradPos<SmCfg>(p);
  WeightGradRegTiles tiles{&p,     ring,     pos.rowBegin, pos.rowEnd, pos.p0,
                           pos.q0, sm.tileA, sm.tileB,     0,          {},
                           {}};
  WgmmaCore::Acc acc;
  WgmmaCore::zero(acc);
  regLoop(tiles, (pos.rowEnd - pos.rowBegin + SmCfg::BK - 1) / SmCfg::BK, acc,
          sm);
  weightGradEpilogue<WgmmaCore>(p, acc, pos);
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

/// RONDO_GROUPED_STAGING=smem or regs picks the staging (benchmarks and
/// tests compare them); unset, register staging where it applies.
bool registerStaging() {
  const char *env = std::getenv("RONDO_GROUPED_STAGING");
  return !(env && env[0] == 's');
}

} // namespace

bool groupedSm90Usable() {
  const char *env = std::getenv("RONDO_GROUPED_SM90");
  if (env && env[0] == '0')
    return false;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) !=
          cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

void productSm90(const ProductParams &p, int64_t rowTiles, const char *name) {
  const int64_t blocks = rowTiles * p.colTiles;
  if (!registerStaging() || !p.vec)
    launch(productSm90Kernel, blocks, SmCfg::kSmem, p, name);
  else if (p.transW)
    launch(productRegsKernel<true>, blocks, RegSmem::kSmem, p, name);
  else
    launch(productRegsKernel<false>, blocks, RegSmem::kSmem, p, name);
}

void weightGradSm90(const WeightGradParams &p, const char *name) {
  const int64_t blocks = int64_t(p.E) * p.pTiles * p.qTiles;
  if (registerStaging())
    launch(weightGradRegsKernel, blocks, RegSmem::kSmem, p, name);
  else
    launch(weightGradSm90Kernel, blocks, SmCfg::kSmem, p, name);
}

} // namespace rondo::cuda::detail::grouped
