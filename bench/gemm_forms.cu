//===- gemm_forms.cu - What the weight's layout costs W1's products -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A linear layer's three products can be called in two forms, depending on
// how the weight is stored:
//   weight [in, out] (the ONNX initializer, Rondo's layout):
//       forward y = x W, input gradient dX = dY W^T, weight gradient x^T dY
//   weight [out, in] (PyTorch's nn.Linear):
//       forward y = x W^T, input gradient dX = dY W, weight gradient dY^T x
// cuBLAS picks different kernels for each form. This times every product
// of a W1 (Qwen3-1.7B) layer in both forms, at 8192 and 16384 tokens (the
// microbatches of the H100 and H200 plans), with bf16 operands, fp32
// accumulation, bf16 outputs for the forward and input gradients and fp32
// outputs accumulated (beta = 1) for the weight gradients, as Rondo calls
// them (cublasGemmEx, CUBLAS_GEMM_DEFAULT, 32 MiB workspace; "wgrad-bf16"
// is the weight gradient in bf16 without accumulation, as PyTorch's
// autocast computes it before adding it to .grad); and, for
// each, the fastest of cuBLASLt's heuristic candidates (the algorithm
// cuBLAS would need to be told). Random normal-ish bf16 data (zeros draw
// less power and run faster); the median of 30 calls after 10 warm-ups.
//
// Build: nvcc -O2 -arch=sm_90 bench/gemm_forms.cu -lcublas -lcublasLt
//
//===----------------------------------------------------------------------===//

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "bench_data.h"
#include "cuda_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

cudaEvent_t e0, e1;

float medianMs(const std::function<void()> &call) {
  for (int i = 0; i < 10; ++i)
    call();
  std::vector<float> ms;
  for (int r = 0; r < 30; ++r) {
    CK(cudaEventRecord(e0));
    call();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Row-major C[M,N] = op(A) op(B) (+ beta C) as Rondo calls cuBLAS: the
/// column-major C^T = op(B)^T op(A)^T.
struct Product {
  int M, N, K;
  bool transA, transB;
  cudaDataType out;
  float beta;
};

} // namespace

int main() {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  int version = 0;
  CK(cublasGetVersion(h, &version));
  std::printf("cuBLAS %d\n", version);
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  const size_t wsBytes = size_t(32) << 20;
  void *ws;
  CK(cudaMalloc(&ws, wsBytes));
  CK(cublasSetWorkspace(h, ws, wsBytes));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  size_t big = size_t(16384) * 6144;
  __nv_bfloat16 *a, *b;
  float *c;
  CK(cudaMalloc(&a, big * 2));
  CK(cudaMalloc(&b, big * 2));
  CK(cudaMalloc(&c, big * 4));
  {
    std::vector<__nv_bfloat16> host = normalishBf16(big);
    CK(cudaMemcpy(a, host.data(), big * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, host.data(), big * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(c, 0, big * 4));
  }

  struct Linear {
    const char *name;
    int in, out;
  } linears[] = {{"q/o", 2048, 2048},
                 {"k/v", 2048, 1024},
                 {"gate/up", 2048, 6144},
                 {"down", 6144, 2048}};
  std::printf("%-8s %6s %-6s %-12s %9s %9s %9s  %s\n", "linear", "tokens",
              "form", "product", "default", "lt-first", "lt-best",
              "TFLOP/s default / best");
  for (int T : {8192, 16384})
    for (Linear l : linears)
      for (int pytorchForm = 0; pytorchForm < 2; ++pytorchForm) {
        // M, N, K, transA, transB of the three products in this form.
        Product products[4];
        const char *names[4] = {"forward", "input-grad", "weight-grad",
                                "wgrad-bf16"};
        if (!pytorchForm) {
          products[0] = {T, l.out, l.in, false, false, CUDA_R_16BF, 0};
          products[1] = {T, l.in, l.out, false, true, CUDA_R_16BF, 0};
          products[2] = {l.in, l.out, T, true, false, CUDA_R_32F, 1};
          products[3] = {l.in, l.out, T, true, false, CUDA_R_16BF, 0};
        } else {
          products[0] = {T, l.out, l.in, false, true, CUDA_R_16BF, 0};
          products[1] = {T, l.in, l.out, false, false, CUDA_R_16BF, 0};
          products[2] = {l.out, l.in, T, true, false, CUDA_R_32F, 1};
          products[3] = {l.out, l.in, T, true, false, CUDA_R_16BF, 0};
        }
        for (int p = 0; p < 4; ++p) {
          Product pr = products[p];
          float alpha = 1;
          int lda = pr.transA ? pr.M : pr.K;
          int ldb = pr.transB ? pr.K : pr.N;
          cublasOperation_t opA = pr.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
          cublasOperation_t opB = pr.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
          float def = medianMs([&] {
            CK(cublasGemmEx(h, opB, opA, pr.N, pr.M, pr.K, &alpha, b,
                            CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &pr.beta, c,
                            pr.out, pr.N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
          });
          // cuBLASLt: column-major m = N, n = M, k = K; A_lt = B, B_lt = A.
          cublasLtMatmulDesc_t desc;
          CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
          CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                            &opB, sizeof(opB)));
          CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                            &opA, sizeof(opA)));
          cublasLtMatrixLayout_t la, lb, lc;
          CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF,
                                        pr.transB ? pr.K : pr.N,
                                        pr.transB ? pr.N : pr.K, ldb));
          CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF,
                                        pr.transA ? pr.M : pr.K,
                                        pr.transA ? pr.K : pr.M, lda));
          CK(cublasLtMatrixLayoutCreate(&lc, pr.out, pr.N, pr.M, pr.N));
          cublasLtMatmulPreference_t pref;
          CK(cublasLtMatmulPreferenceCreate(&pref));
          CK(cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes,
              sizeof(wsBytes)));
          cublasLtMatmulHeuristicResult_t results[16];
          int found = 0;
          CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 16,
                                            results, &found));
          float first = 0, best = 1e30f;
          int bestIndex = -1;
          for (int i = 0; i < found; ++i) {
            float ms = medianMs([&] {
              CK(cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &pr.beta, c, lc,
                                c, lc, &results[i].algo, ws, wsBytes, 0));
            });
            if (i == 0)
              first = ms;
            if (ms < best) {
              best = ms;
              bestIndex = i;
            }
          }
          double flop = 2.0 * pr.M * pr.N * pr.K;
          std::printf("%-8s %6d %-6s %-12s %7.1fus %7.1fus %7.1fus  %4.0f / "
                      "%4.0f (candidate %d of %d)\n",
                      l.name, T, pytorchForm ? "[o,i]" : "[i,o]", names[p],
                      def * 1e3, first * 1e3, best * 1e3, flop / def / 1e9,
                      flop / best / 1e9, bestIndex, found);
          CK(cublasLtMatmulPreferenceDestroy(pref));
          CK(cublasLtMatrixLayoutDestroy(la));
          CK(cublasLtMatrixLayoutDestroy(lb));
          CK(cublasLtMatrixLayoutDestroy(lc));
          CK(cublasLtMatmulDescDestroy(desc));
        }
      }
  return 0;
}
