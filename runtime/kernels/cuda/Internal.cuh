//===- Internal.cuh - Helpers shared by the CUDA kernels -------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Not part of the kernel contract; only the kernel .cu files include this.
// Error checking, the per-(thread, device) context, stream-ordered
// temporaries, launch geometry, merged broadcast / strided iteration spaces
// that are passed to kernels by value, and fixed-tree reductions.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_INTERNAL_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_INTERNAL_CUH

#include "CudaKernels.h"
#include "ScalarOps.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace rondo::cuda::detail {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

/// Throws std::runtime_error("rondo cuda kernels: <kernel> on device <d>:
/// <call> failed: <message>").
[[noreturn]] void fail(const char *kernel, const char *call,
                       const char *message);
/// A contract violation (printf-style message).
[[noreturn]] void contract(const char *kernel, const char *format, ...);
void check(cudaError_t status, const char *call, const char *kernel);
void check(cublasStatus_t status, const char *call, const char *kernel);
/// Checks the last launch (cudaGetLastError).
void checkLaunch(const char *kernel);

#define RONDO_CHECK(call, kernel)                                              \
  ::rondo::cuda::detail::check((call), #call, (kernel))

//===----------------------------------------------------------------------===//
// Context
//===----------------------------------------------------------------------===//

/// The calling thread's cuBLAS handle for the current device, bound to the
/// current stream, with its fixed workspace and TF32 disabled.
cublasHandle_t cublas(const char *kernel);

/// A stream-ordered device temporary: allocated on the current stream, freed
/// on it by release() (checked) or, on an exception path, by the destructor.
class Temp {
public:
  Temp(size_t bytes, const char *kernel);
  ~Temp();
  Temp(const Temp &) = delete;
  Temp &operator=(const Temp &) = delete;
  void release();
  template <typename T> T *as() const { return static_cast<T *>(ptr_); }

private:
  void *ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
  const char *kernel_;
};

//===----------------------------------------------------------------------===//
// Launch geometry
//===----------------------------------------------------------------------===//

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n items with kThreads threads.
inline unsigned gridFor(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1)
    blocks = 1;
  if (blocks > (int64_t(1) << 20))
    blocks = int64_t(1) << 20;
  return unsigned(blocks);
}

#define RONDO_GRID_STRIDE(i, n)                                                \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

//===----------------------------------------------------------------------===//
// Iteration spaces
//===----------------------------------------------------------------------===//

/// A broadcast space: a contiguous output walked row-major over merged
/// dimensions `dims`, and up to two inputs with per-dimension strides (0 where
/// broadcast).
struct Bcast {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[2][kMaxRank] = {};
};

/// Builds the merged broadcast space of `out` and inputs (at most 2).
Bcast makeBcast(const Shape &out, const Shape *inputs, int numInputs,
                const char *kernel);

/// Element offset of input `op` for output linear index i.
__device__ inline int64_t bcastOffset(const Bcast &s, int op, int64_t i) {
  int64_t off = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < s.rank) {
      int64_t c = i % s.dims[d];
      i /= s.dims[d];
      off += c * s.strides[op][d];
    }
  }
  return off;
}

/// A strided walk: contiguous side row-major over `dims`, strided side at
/// base + sum(idx[d] * strides[d]).
struct Strided {
  int rank = 0;
  int64_t base = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

Strided makeStrided(const Shape &shape, const int64_t *strides, int64_t base);

__device__ inline int64_t stridedOffset(const Strided &s, int64_t i) {
  int64_t off = s.base;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < s.rank) {
      int64_t c = i % s.dims[d];
      i /= s.dims[d];
      off += c * s.strides[d];
    }
  }
  return off;
}

using kernels::contiguousStrides;

//===----------------------------------------------------------------------===//
// Reductions (fixed trees)
//===----------------------------------------------------------------------===//

template <typename T> __device__ inline T warpSum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, o);
  return __shfl_sync(0xffffffffu, v, 0);
}

__device__ inline float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  return __shfl_sync(0xffffffffu, v, 0);
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned
/// to every thread. `scratch` holds 32 values. Fixed tree: lanes, then warps.
template <typename T> __device__ inline T blockSum(T v, T *scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int warps = blockDim.x >> 5;
  v = warpSum(v);
  __syncthreads(); // scratch may still be read by a previous call
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  T r = lane < warps ? scratch[lane] : T(0);
  return warpSum(r);
}

/// Max over the block (NaN-free inputs assumed as on the CPU's std::max).
__device__ inline float blockMax(float v, float *scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int warps = blockDim.x >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  return warpMax(r);
}

/// Threads per block for a row kernel over rows of `width` elements.
inline int rowThreads(int64_t width, int maxThreads = 256) {
  int t = 32;
  while (t < maxThreads && t < width)
    t <<= 1;
  return t;
}

/// Rows and width of a tensor split along its last axis.
inline void rowsOf(const Shape &shape, int64_t &rows, int64_t &width) {
  width = shape.rank ? shape.dims[shape.rank - 1] : 1;
  rows = width ? shape.numel() / width : 0;
}

/// out[c] = sum over rows r (ascending within fixed row parts, parts
/// ascending) of term(r, c), in double. Term is a device functor
/// `double operator()(int64_t r, int64_t c) const`.
template <typename Term>
__global__ void columnPartialKernel(int64_t rows, int64_t width,
                                    int64_t rowsPerPart, int64_t parts,
                                    double *partial, Term term) {
  RONDO_GRID_STRIDE(i, parts * width) {
    int64_t c = i % width, p = i / width;
    int64_t r0 = p * rowsPerPart;
    int64_t r1 = r0 + rowsPerPart < rows ? r0 + rowsPerPart : rows;
    double acc = 0.0;
    for (int64_t r = r0; r < r1; ++r)
      acc += term(r, c);
    partial[p * width + c] = acc;
  }
}

__global__ void columnFinalKernel(int64_t width, int64_t parts,
                                  const double *partial, float *out);

/// Number of row parts for a column sum: depends on the shape only.
inline int64_t columnParts(int64_t rows, int64_t width) {
  int64_t wantThreads = 16384;
  int64_t parts = (wantThreads + width - 1) / (width > 0 ? width : 1);
  int64_t maxParts = (rows + 63) / 64; // at least 64 rows a part
  if (parts > maxParts)
    parts = maxParts;
  return parts < 1 ? 1 : parts;
}

template <typename Term>
void columnSums(int64_t rows, int64_t width, float *out, Term term,
                const char *kernel) {
  if (width == 0)
    return;
  cudaStream_t stream = currentStream();
  int64_t parts = columnParts(rows, width);
  int64_t rowsPerPart = (rows + parts - 1) / parts;
  if (rowsPerPart < 1)
    rowsPerPart = 1;
  Temp partial(size_t(parts * width) * sizeof(double), kernel);
  columnPartialKernel<Term><<<gridFor(parts * width), kThreads, 0, stream>>>(
      rows, width, rowsPerPart, parts, partial.as<double>(), term);
  checkLaunch(kernel);
  columnFinalKernel<<<gridFor(width), kThreads, 0, stream>>>(
      width, parts, partial.as<double>(), out);
  checkLaunch(kernel);
  partial.release();
}

/// Row-major C[M,N] (ldc) = alpha op(A) op(B) + beta C through cuBLAS, one
/// matrix (batch == 1) or a strided batch (strides in elements).
void gemmRowMajor(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *a, int64_t lda, int64_t strideA,
                  const float *b, int64_t ldb, int64_t strideB, float beta,
                  float *c, int64_t ldc, int64_t strideC, int64_t batch,
                  const char *kernel);

/// The same with operands already rounded to bf16 (pointers to
/// __nv_bfloat16); fp32 accumulation and output. For callers that use one
/// operand in several products (the LM head's weight) and round it once.
void gemmRowMajorBf16(bool transA, bool transB, int64_t M, int64_t N,
                      int64_t K, float alpha, const void *a, int64_t lda,
                      int64_t strideA, const void *b, int64_t ldb,
                      int64_t strideB, float beta, float *c, int64_t ldc,
                      int64_t strideC, int64_t batch, const char *kernel);
/// The same with the result's type named: CUDA_R_32F, or CUDA_R_16BF (the
/// fp32 accumulators rounded to nearest even as they are stored).
void gemmRowMajorBf16As(cudaDataType cType, bool transA, bool transB, int64_t M,
                        int64_t N, int64_t K, float alpha, const void *a,
                        int64_t lda, int64_t strideA, const void *b,
                        int64_t ldb, int64_t strideB, float beta, void *c,
                        int64_t ldc, int64_t strideC, int64_t batch,
                        const char *kernel);
/// Enqueues out[i] = bf16(in[i]) (round to nearest even) for i < n; `out`
/// points to __nv_bfloat16.
void roundToBf16Copy(const float *in, void *out, int64_t n,
                     const char *kernel);

/// Enqueues out[i] = float(in[i]) for n bf16 values (exact).
void widenBf16Into(const void *in, float *out, int64_t n, const char *kernel);

/// An fp32 copy (exact) of n bf16 values in a stream-ordered temporary: the
/// operands of a bf16-operand kernel's fallback to fp32-operand kernels,
/// which round them back to the same bf16 values.
struct WidenedBf16 {
  Temp temp;
  WidenedBf16(const void *in, int64_t n, const char *kernel);
  const float *data() const { return temp.as<float>(); }
};

/// Enqueues out[i] = value for i < n.
void fillDevice(float *out, int64_t n, float value, const char *kernel);

//===----------------------------------------------------------------------===//
// bf16 tensor-core attention (FlashAttention.cu)
//===----------------------------------------------------------------------===//

/// Attention shapes: q [B, Hq, T, D], k and v [B, Hkv, S, D] (validated by
/// the caller: Hq a multiple of Hkv).
struct FlashDims {
  int64_t B, Hq, Hkv, T, S, D;
  int64_t window; // > 0: sliding window (causal only), as attention's
  const float *sinks = nullptr; // [Hq] attention sinks (attentionSinks)
};

/// Head dimensions with a bf16 kernel (64, 128 and 256).
bool flashAttentionSupports(int64_t headDim);
/// The Precision::Bf16 attention (same contract as attention): inputs rounded
/// to bf16, fp32 accumulation and softmax statistics.
void flashAttentionForward(const FlashDims &d, const float *q, const float *k,
                           const float *v, bool causal, float scale, float *out,
                           float *lse, const char *name);
/// The Precision::Bf16 attentionBackward for S > 0 (same contract; lse
/// required; any of dQ, dK, dV may be null). No atomics.
void flashAttentionBackward(const FlashDims &d, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            const float *dOut, bool causal, float scale,
                            float *dQ, float *dK, float *dV, const char *name);

/// The same on cuDNN's fused attention (CudnnAttention.cu): false, having
/// done nothing, where cuDNN does not serve the case (not wanted, not
/// loadable, not compute capability 9.0, a shape outside its graphs, or a
/// graph cuDNN refused; each reason is logged once), and the caller runs its
/// own kernels.
/// With `stored`, q, k and v come already in bf16 (attentionBf16's
/// operands, rounded where they were made): cuDNN reads them as they are
/// and their fp32 pointers are not read.
/// The backward's out and dOut likewise (attentionBackwardBf16ToBf16's);
/// and where results go in bf16 as cuDNN writes them (attentionBf16ToBf16's
/// out, attentionBackwardBf16ToBf16's dQ, dK and dV), in place of widening
/// them into the fp32 pointers.
struct StoredBf16Qkv {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  const void *out = nullptr, *dOut = nullptr;
  void *outStore = nullptr, *dQStore = nullptr, *dKStore = nullptr,
       *dVStore = nullptr;
  /// v and dV ([B, S, Hkv, D]), and out and dOut ([B, T, Hq, D]), stored
  /// token-major, as the projections around attention write and read them
  /// (attention*Tokens); q, k and dQ, dK stay heads-major.
  bool vTokens = false, outTokens = false;
};
bool cudnnAttentionForward(const FlashDims &d, const float *q, const float *k,
                           const float *v, bool causal, float scale, float *out,
                           float *lse, const char *name,
                           const StoredBf16Qkv &stored = {});
bool cudnnAttentionBackward(const FlashDims &d, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            const float *dOut, bool causal, float scale,
                            float *dQ, float *dK, float *dV, const char *name,
                            const StoredBf16Qkv &stored = {});
/// Records the implementation of this thread's attention call
/// (lastAttentionImpl).
void setLastAttentionImpl(AttentionImpl impl);

//===----------------------------------------------------------------------===//
// Memory-bound fast paths: 128-bit access and tiled column sums
//===----------------------------------------------------------------------===//

/// True when p may be accessed as float4 (16-byte aligned; null counts as
/// aligned so that optional operands do not block a fast path).
inline bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

__device__ inline float4 load4(const float *p) {
  return *reinterpret_cast<const float4 *>(p);
}

__device__ inline void store4(float *p, float4 v) {
  *reinterpret_cast<float4 *>(p) = v;
}

/// bf16 storage (KernelList.def's BView, uint16_t on the host side): four
/// values rounded to nearest even and stored as 8 bytes (p 8-byte aligned).
__device__ inline void store4(__nv_bfloat16 *p, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 bits;
  bits.x = *reinterpret_cast<uint32_t *>(&lo);
  bits.y = *reinterpret_cast<uint32_t *>(&hi);
  *reinterpret_cast<uint2 *>(p) = bits;
}

/// Four bf16 values widened to fp32 (p 8-byte aligned), and one: the loads
/// of kernels whose operands are stored in bf16.
__device__ inline float4 load4(const __nv_bfloat16 *p) {
  uint2 bits = *reinterpret_cast<const uint2 *>(p);
  __nv_bfloat162 lo = *reinterpret_cast<__nv_bfloat162 *>(&bits.x);
  __nv_bfloat162 hi = *reinterpret_cast<__nv_bfloat162 *>(&bits.y);
  float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ inline float loadIn(const float *p) { return *p; }
__device__ inline float loadIn(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}

/// One value stored as the output type: fp32 as is, bf16 rounded to nearest
/// even (the rounding of roundToBf16 and of the GEMMs' operand copies).
__device__ inline void storeOut(float *p, float v) { *p = v; }
__device__ inline void storeOut(__nv_bfloat16 *p, float v) {
  *p = __float2bfloat16_rn(v);
}

/// The device type of a bf16 view's storage.
inline __nv_bfloat16 *bf16Data(BView v) {
  return reinterpret_cast<__nv_bfloat16 *>(v.data);
}
inline const __nv_bfloat16 *bf16Data(CBView v) {
  return reinterpret_cast<const __nv_bfloat16 *>(v.data);
}

/// q = v / d, r = v % d for v >= 0, d > 0; 32-bit division when both fit
/// (a 64-bit division is a long software sequence on the GPU).
__device__ inline void divMod(int64_t v, int64_t d, int64_t &q, int64_t &r) {
  if (uint64_t(v) <= 0xffffffffu && uint64_t(d) <= 0xffffffffu) {
    uint32_t q32 = uint32_t(v) / uint32_t(d);
    q = int64_t(q32);
    r = v - q * d;
  } else {
    q = v / d;
    r = v - q * d;
  }
}

/// Columns per block of the tiled column sums.
constexpr int kColumnTileWidth = 32;

/// Stage 1 of a deterministic column sum of term(r, c) over a [rows, width]
/// space (stage 2 is the same kernel over the stage-1 partials, one tile).
/// Block (32, blockDim.y) covers 32 columns of one tile of rows
/// [blockIdx.y * tileRows, + tileRows): thread (tx, ty) sums rows r0 + ty,
/// r0 + ty + blockDim.y, ... in ascending order in double (loads batched by
/// four, additions still in order), then thread ty == 0 adds the lane sums in
/// ascending ty. out[blockIdx.y * width + c] = Out(sum). The order depends on
/// (rows, tileRows, blockDim.y) only. Reads are coalesced along the columns.
/// Term: `double operator()(int64_t r, int64_t c) const`.
template <typename Term, typename Out>
__global__ void tileColumnSumKernel(int64_t rows, int64_t width,
                                    int64_t tileRows, Term term, Out *out) {
  __shared__ double lanes[32][kColumnTileWidth + 1];
  int tx = threadIdx.x, ty = threadIdx.y, ly = blockDim.y;
  int64_t c = int64_t(blockIdx.x) * kColumnTileWidth + tx;
  int64_t tile = blockIdx.y;
  int64_t r0 = tile * tileRows;
  int64_t r1 = r0 + tileRows < rows ? r0 + tileRows : rows;
  double acc = 0.0;
  if (c < width) {
    int64_t r = r0 + ty;
    for (; r + 3 * ly < r1; r += 4 * ly) {
      double v0 = term(r, c), v1 = term(r + ly, c);
      double v2 = term(r + 2 * ly, c), v3 = term(r + 3 * ly, c);
      acc += v0;
      acc += v1;
      acc += v2;
      acc += v3;
    }
    for (; r < r1; r += ly)
      acc += term(r, c);
  }
  lanes[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && c < width) {
    double s = lanes[0][tx];
    for (int k = 1; k < ly; ++k)
      s += lanes[k][tx];
    out[tile * width + c] = Out(s);
  }
}

/// Reads stage-1 partials [tiles, width] as the term of stage 2.
struct PartialTerm {
  const double *partial;
  int64_t width;
  __device__ double operator()(int64_t r, int64_t c) const {
    return partial[r * width + c];
  }
};

/// Stage 2: out[c] = float(sum over tiles t ascending (by the fixed lane
/// split of tileColumnSumKernel) of partial[t * width + c]).
inline void finishColumnTiles(const double *partial, int64_t tiles,
                              int64_t width, float *out, const char *kernel) {
  dim3 block(kColumnTileWidth, 32);
  dim3 grid(unsigned((width + kColumnTileWidth - 1) / kColumnTileWidth), 1);
  tileColumnSumKernel<PartialTerm, float><<<grid, block, 0, currentStream()>>>(
      tiles, width, tiles, PartialTerm{partial, width}, out);
  checkLaunch(kernel);
}

/// Rows per tile of tiledColumnSums: at most 512 tiles (the partials stay
/// small next to the input), at least 64 rows a tile. Shape only.
inline int64_t columnTileRows(int64_t rows) {
  int64_t t = (rows + 511) / 512;
  return t < 64 ? 64 : t;
}

/// out[c] = sum over rows of term(r, c) (double, then float), by the two
/// stages above. Deterministic: the order depends on the shape only.
template <typename Term>
void tiledColumnSums(int64_t rows, int64_t width, float *out, Term term,
                     const char *kernel) {
  if (width <= 0)
    return;
  if (rows <= 0) {
    fillDevice(out, width, 0.0f, kernel);
    return;
  }
  cudaStream_t stream = currentStream();
  int64_t tileRows = columnTileRows(rows);
  int64_t tiles = (rows + tileRows - 1) / tileRows;
  dim3 block(kColumnTileWidth, 8);
  dim3 grid(unsigned((width + kColumnTileWidth - 1) / kColumnTileWidth),
            unsigned(tiles));
  if (tiles == 1) {
    tileColumnSumKernel<Term, float>
        <<<grid, block, 0, stream>>>(rows, width, tileRows, term, out);
    checkLaunch(kernel);
    return;
  }
  Temp partial(size_t(tiles * width) * sizeof(double), kernel);
  tileColumnSumKernel<Term, double><<<grid, block, 0, stream>>>(
      rows, width, tileRows, term, partial.as<double>());
  checkLaunch(kernel);
  finishColumnTiles(partial.as<double>(), tiles, width, out, kernel);
  partial.release();
}

/// The cp.async group of this thread's copies so far; waiting until at most
/// N groups are in flight.
__device__ inline void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ inline void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Two floats rounded to bf16 (nearest even), `lo` in the low half.
__device__ inline uint32_t packBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, sizeof(r));
  return r;
}

/// Whether the current device is compute capability 9.0 (Hopper).
inline bool currentDeviceIsSm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) !=
          cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

/// Whether the sm_90a kernels of a family may run: the current device is
/// compute capability 9.0 and `envVar` (RONDO_FLASH_SM90, RONDO_GROUPED_SM90)
/// is not "0".
inline bool sm90KernelsUsable(const char *envVar) {
  const char *env = std::getenv(envVar);
  return !(env && env[0] == '0') && currentDeviceIsSm90();
}

} // namespace rondo::cuda::detail

#endif // RONDO_RUNTIME_KERNELS_CUDA_INTERNAL_CUH
