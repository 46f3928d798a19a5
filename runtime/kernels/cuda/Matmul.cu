//===- Matmul.cu - Batched matrix multiplication through cuBLAS -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so every
// call swaps the operands. Broadcast batch dimensions are merged as on the
// CPU; the innermost merged batch dimension becomes one strided-batched sgemm
// (stride 0 for a broadcast operand), and the outer ones are walked on the
// host. x·W with a shared, untransposed W folds the batch into M (one sgemm),
// as on the CPU. The handle runs in CUBLAS_DEFAULT_MATH (no TF32) with atomics
// disallowed and a fixed workspace, so results are reproducible. Under
// Precision::Bf16 the operands are rounded to bf16 copies and the same calls
// go through cublasGemmEx: bf16 tensor cores, fp32 accumulation and output.
// matmulBf16 takes operands already stored in bf16 (kern-bf16-storage) and
// makes the same cublasGemmEx calls without the copies: the same bits, and
// about 1.6x the rate on W1's shapes (bench/gemm_storage.cu).
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <cstdio>
#include <optional>

#include <cuda_bf16.h>

#include <climits>
#include <type_traits>

namespace rondo::cuda {

using namespace detail;

namespace {

__global__ void roundToBf16Kernel(const float *in, __nv_bfloat16 *out,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void widenBf16Kernel(const __nv_bfloat16 *in, float *out,
                                int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

/// cuBLAS takes 32-bit sizes and leading dimensions.
void checkGemmSizes(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                    int64_t ldc, int64_t batch, const char *kernel) {
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX ||
      ldb > INT_MAX || ldc > INT_MAX || batch > INT_MAX)
    contract(kernel, "matrix dimensions exceed 32-bit cuBLAS limits");
}

} // namespace

namespace detail {

void roundToBf16Copy(const float *in, void *out, int64_t n,
                     const char *kernel) {
  if (n <= 0)
    return;
  roundToBf16Kernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      in, static_cast<__nv_bfloat16 *>(out), n);
  checkLaunch(kernel);
}

void widenBf16Into(const void *in, float *out, int64_t n, const char *kernel) {
  if (n <= 0)
    return;
  widenBf16Kernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      static_cast<const __nv_bfloat16 *>(in), out, n);
  checkLaunch(kernel);
}

WidenedBf16::WidenedBf16(const void *in, int64_t n, const char *kernel)
    : temp(size_t(n) * sizeof(float), kernel) {
  widenBf16Into(in, temp.as<float>(), n, kernel);
}

void gemmRowMajorBf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                      float alpha, const void *a, int64_t lda, int64_t strideA,
                      const void *b, int64_t ldb, int64_t strideB, float beta,
                      float *c, int64_t ldc, int64_t strideC, int64_t batch,
                      const char *kernel) {
  gemmRowMajorBf16As(CUDA_R_32F, transA, transB, M, N, K, alpha, a, lda,
                     strideA, b, ldb, strideB, beta, c, ldc, strideC, batch,
                     kernel);
}

void gemmRowMajorBf16As(cudaDataType cType, bool transA, bool transB, int64_t M,
                        int64_t N, int64_t K, float alpha, const void *a,
                        int64_t lda, int64_t strideA, const void *b,
                        int64_t ldb, int64_t strideB, float beta, void *c,
                        int64_t ldc, int64_t strideC, int64_t batch,
                        const char *kernel) {
  checkGemmSizes(M, N, K, lda, ldb, ldc, batch, kernel);
  cublasHandle_t h = cublas(kernel);
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  // CUBLAS_GEMM_DEFAULT with the handle's fixed workspace keeps the
  // algorithm, and the result, fixed.
  if (batch == 1)
    RONDO_CHECK(cublasGemmEx(h, opB, opA, int(N), int(M), int(K), &alpha, b,
                             CUDA_R_16BF, int(ldb), a, CUDA_R_16BF, int(lda),
                             &beta, c, cType, int(ldc), CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
                kernel);
  else
    RONDO_CHECK(cublasGemmStridedBatchedEx(
                    h, opB, opA, int(N), int(M), int(K), &alpha, b, CUDA_R_16BF,
                    int(ldb), strideB, a, CUDA_R_16BF, int(lda), strideA, &beta,
                    c, cType, int(ldc), strideC, int(batch), CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT),
                kernel);
}

/// Row-major C[M,N] (ldc) = alpha op(A) op(B) + beta C for one matrix or a
/// strided batch of them (strides in elements).
void gemmRowMajor(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *a, int64_t lda, int64_t strideA,
                  const float *b, int64_t ldb, int64_t strideB, float beta,
                  float *c, int64_t ldc, int64_t strideC, int64_t batch,
                  const char *kernel) {
  checkGemmSizes(M, N, K, lda, ldb, ldc, batch, kernel);
  cublasHandle_t h = cublas(kernel);
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (precision() == Precision::Bf16) {
    // bf16 tensor-core products with fp32 accumulation. The operands are
    // rounded to bf16 (round to nearest even) into stream-ordered
    // temporaries first: a pass over A and B costs a few percent of the
    // product, and cuBLAS's native bf16 kernels run about twice as fast as
    // its fp32-storage CUBLAS_COMPUTE_32F_FAST_16BF path measured here.
    int64_t spanA = (transA ? (K - 1) * lda + M : (M - 1) * lda + K) +
                    strideA * (batch - 1);
    int64_t spanB = (transB ? (N - 1) * ldb + K : (K - 1) * ldb + N) +
                    strideB * (batch - 1);
    Temp a16(size_t(spanA) * 2, kernel), b16(size_t(spanB) * 2, kernel);
    roundToBf16Copy(a, a16.as<void>(), spanA, kernel);
    roundToBf16Copy(b, b16.as<void>(), spanB, kernel);
    gemmRowMajorBf16(transA, transB, M, N, K, alpha, a16.as<void>(), lda,
                     strideA, b16.as<void>(), ldb, strideB, beta, c, ldc,
                     strideC, batch, kernel);
    a16.release();
    b16.release();
    return;
  }
  if (batch == 1) {
    RONDO_CHECK(cublasSgemm(h, opB, opA, int(N), int(M), int(K), &alpha, b,
                            int(ldb), a, int(lda), &beta, c, int(ldc)),
                kernel);
  } else {
    RONDO_CHECK(cublasSgemmStridedBatched(h, opB, opA, int(N), int(M), int(K),
                                          &alpha, b, int(ldb), strideB, a,
                                          int(lda), strideA, &beta, c, int(ldc),
                                          strideC, int(batch)),
                kernel);
  }
}

} // namespace detail

namespace {

/// The fp32-operand GEMM (rounding under Precision::Bf16) or the bf16 one.
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          const float *a, int64_t lda, int64_t strideA, const float *b,
          int64_t ldb, int64_t strideB, float beta, float *c, int64_t ldc,
          int64_t strideC, int64_t batch, const char *name, float alpha) {
  gemmRowMajor(transA, transB, M, N, K, alpha, a, lda, strideA, b, ldb, strideB,
               beta, c, ldc, strideC, batch, name);
}
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          const uint16_t *a, int64_t lda, int64_t strideA, const uint16_t *b,
          int64_t ldb, int64_t strideB, float beta, float *c, int64_t ldc,
          int64_t strideC, int64_t batch, const char *name, float alpha) {
  gemmRowMajorBf16(transA, transB, M, N, K, alpha, a, lda, strideA, b, ldb,
                   strideB, beta, c, ldc, strideC, batch, name);
}

void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          const uint16_t *a, int64_t lda, int64_t strideA, const uint16_t *b,
          int64_t ldb, int64_t strideB, float beta, uint16_t *c, int64_t ldc,
          int64_t strideC, int64_t batch, const char *name, float alpha) {
  gemmRowMajorBf16As(CUDA_R_16BF, transA, transB, M, N, K, alpha, a, lda,
                     strideA, b, ldb, strideB, beta, c, ldc, strideC, batch,
                     name);
}
/// matmul's shapes and batch walk for either operand storage, into an fp32
/// or (bf16 operands only) a bf16 result, scaled by alpha in the epilogue.
template <typename T, typename OutT>
void matmulImpl(View<const T> a, View<const T> b, View<OutT> out, bool transA,
                bool transB, bool accumulate, const char *name,
                const char *storage, float alpha = 1.0f) {
  auto [M, K, N, outBatch, aBatch, bBatch] =
      kernels::matmulSizes(a.shape, b.shape, out.shape, transA, transB,
                           [name](auto... args) { contract(name, args...); });
  int64_t batch = outBatch.numel();
  if (batch == 0 || M == 0 || N == 0)
    return;
  if (K == 0) {
    if (accumulate)
      return;
    if constexpr (std::is_same_v<OutT, float>)
      fillDevice(out.data, batch * M * N, 0.0f, name);
    else
      RONDO_CHECK(cudaMemsetAsync(out.data, 0,
                                  size_t(batch * M * N) * sizeof(OutT),
                                  currentStream()),
                  name); // bf16 zero is all-zero bits
    return;
  }
  std::optional<ProfileScope> profileScope;
  if (profiling()) {
    char key[96];
    std::snprintf(key, sizeof(key), "matmul %lldx%lldx%lld%s%s x%lld %s",
                  (long long)M, (long long)N, (long long)K, transA ? " tA" : "",
                  transB ? " tB" : "", (long long)batch, storage);
    profileScope.emplace(key, 2.0 * double(M) * double(N) * double(K) *
                                  double(batch));
  }
  float beta = accumulate ? 1.0f : 0.0f;
  int64_t lda = transA ? M : K;
  int64_t ldb = transB ? K : N;
  int64_t ldc = N;

  if (bBatch.numel() == 1 && aBatch.numel() == batch && !transA) {
    gemm(transA, transB, batch * M, N, K, a.data, lda, 0, b.data, ldb, 0, beta,
         out.data, ldc, 0, 1, name, alpha);
    return;
  }
  Shape inputs[2] = {aBatch, bBatch};
  Bcast space = makeBcast(outBatch, inputs, 2, name);
  int64_t aMat = M * K, bMat = K * N, cMat = M * N;
  int64_t inner = space.rank ? space.dims[space.rank - 1] : 1;
  int64_t sa = space.rank ? space.strides[0][space.rank - 1] : 0;
  int64_t sb = space.rank ? space.strides[1][space.rank - 1] : 0;
  int64_t rows = batch / inner;
  for (int64_t r = 0; r < rows; ++r) {
    // Offsets of the row start over the outer merged dimensions.
    int64_t offA = 0, offB = 0, rem = r;
    for (int d = space.rank - 2; d >= 0; --d) {
      int64_t i = rem % space.dims[d];
      rem /= space.dims[d];
      offA += i * space.strides[0][d];
      offB += i * space.strides[1][d];
    }
    gemm(transA, transB, M, N, K, a.data + offA * aMat, lda, sa * aMat,
         b.data + offB * bMat, ldb, sb * bMat, beta,
         out.data + r * inner * cMat, ldc, cMat, inner, name, alpha);
  }
}

} // namespace

void matmul(CFView a, CFView b, FView out, bool transA, bool transB,
            bool accumulate) {
  // "bf16" here: fp32 operands rounded to bf16 copies in every call.
  matmulImpl(a, b, out, transA, transB, accumulate, "matmul",
             precision() == Precision::Bf16 ? "bf16" : "fp32");
}

void matmulBf16(CBView a, CBView b, FView out, bool transA, bool transB,
                bool accumulate) {
  // "bf16-stored": operands already in bf16 (kern-bf16-storage).
  matmulImpl(a, b, out, transA, transB, accumulate, "matmulBf16",
             "bf16-stored");
}
void matmulBf16Scaled(CBView a, CBView b, float alpha, FView out, bool transA,
                      bool transB) {
  // The scale in cuBLAS's epilogue (alpha), where a separate kernel would
  // read and write the whole product again: LoRA's alpha / rank.
  matmulImpl(a, b, out, transA, transB, false, "matmulBf16Scaled",
             "bf16-stored scaled", alpha);
}
void matmulBf16ToBf16(CBView a, CBView b, BView out, bool transA, bool transB,
                      bool accumulate) {
  // cuBLAS rounds the fp32 accumulators to bf16 (nearest even) as it stores;
  // with accumulate (beta = 1) it adds out's bf16 values to them first.
  matmulImpl(a, b, out, transA, transB, accumulate, "matmulBf16ToBf16",
             accumulate ? "bf16-stored bf16-out badd" : "bf16-stored bf16-out");
}

} // namespace rondo::cuda
