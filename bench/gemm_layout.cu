//===- gemm_layout.cu - What a W1 weight product's call shape costs -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Times W1's forward weight products on random bf16 data (zeros run faster:
// less power) three ways: as Rondo called cuBLAS (row-major,
// cublasGemmStridedBatchedEx over 2 rows of 4096 tokens against one weight,
// bf16 operands, fp32 accumulation, CUBLAS_GEMM_DEFAULT); as one GEMM of
// 8192 rows (the batch folded into M, as PyTorch calls it); and the folded
// GEMM with the weight 64 bytes past a 2 MiB-aligned address (resident
// weights and their bf16 copies sit in the arena at 64-byte alignment).
// Each figure is the median of 50 calls after 20 warm-up calls.
//
// Build: nvcc -O2 -arch=sm_90 bench/gemm_layout.cu -lcublas
//
//===----------------------------------------------------------------------===//

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "bench_data.h"
#include "cuda_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>


int main() {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  void *ws;
  CK(cudaMalloc(&ws, 32 << 20));
  CK(cublasSetWorkspace(h, ws, 32 << 20));
  struct Shape {
    int M, N, K;
  } shapes[] = {{4096, 6144, 2048}, {4096, 2048, 2048}, {4096, 2048, 6144},
                {4096, 1024, 2048}};
  const int batch = 2;
  char *a, *b, *c;
  size_t big = size_t(64) << 20;
  CK(cudaMalloc(&a, big * 2));
  CK(cudaMalloc(&b, big + 4096));
  CK(cudaMalloc(&c, big * 4));
  {
    std::vector<__nv_bfloat16> host = normalishBf16(big);
    CK(cudaMemcpy(a, host.data(), big * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, host.data(), big, cudaMemcpyHostToDevice));
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (Shape s : shapes)
    for (cudaDataType out : {CUDA_R_16BF, CUDA_R_32F})
      for (int way = 0; way < 3; ++way) {
        const void *B = b + (way == 2 ? 64 : 0);
        float alpha = 1, beta = 0;
        auto call = [&] {
          if (way == 0)
            CK(cublasGemmStridedBatchedEx(
                h, CUBLAS_OP_N, CUBLAS_OP_N, s.N, s.M, s.K, &alpha, B,
                CUDA_R_16BF, s.N, 0, a, CUDA_R_16BF, s.K, int64_t(s.M) * s.K,
                &beta, c, out, s.N, int64_t(s.M) * s.N, batch,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          else
            CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.N, s.M * batch, s.K,
                            &alpha, B, CUDA_R_16BF, s.N, a, CUDA_R_16BF, s.K,
                            &beta, c, out, s.N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
        };
        for (int i = 0; i < 20; ++i)
          call();
        std::vector<float> ms;
        for (int r = 0; r < 50; ++r) {
          CK(cudaEventRecord(e0));
          call();
          CK(cudaEventRecord(e1));
          CK(cudaEventSynchronize(e1));
          float t;
          CK(cudaEventElapsedTime(&t, e0, e1));
          ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        double flops = 2.0 * batch * s.M * s.N * s.K;
        const char *how[] = {"strided batch x2", "one GEMM, M x2", "one GEMM, +64 B"};
        std::printf("%dx%dx%d %s %-16s: %.3f ms %.1f TFLOP/s\n", s.M, s.N,
                    s.K, out == CUDA_R_16BF ? "bf16-out" : "f32-out ", how[way],
                    ms[25], flops / ms[25] / 1e9);
      }
  return 0;
}
