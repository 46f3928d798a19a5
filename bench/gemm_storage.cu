//===- gemm_storage.cu - What storage costs W1's GEMMs --------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Times every GEMM shape of one W1 (Qwen3-1.7B) decoder layer five ways, to
// separate what the storage type costs from what cuBLAS's kernels cost:
//   fp32-round  today's path: fp32 operands rounded to bf16 temporaries, then
//               cublasGemmEx bf16 x bf16 -> fp32
//   bf16->f32   cublasGemmEx on bf16 operands, fp32 output
//   bf16->bf16  cublasGemmEx on bf16 operands, bf16 output
//   lt->f32     cublasLt (heuristic's first algorithm, 32 MiB workspace),
//               bf16 operands, fp32 output
//   lt->bf16    the same with a bf16 output
// Row-major shapes as Rondo's profile prints them (M x N x K, tA/tB), the
// weight-gradient products accumulating into fp32 (beta = 1) as they do.
// Prints a table and writes JSON to argv[1] (default gemm_storage.json).
//
// Build: nvcc -O2 -arch=sm_90 bench/gemm_storage.cu -lcublas -lcublasLt
//
//===----------------------------------------------------------------------===//

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "cuda_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>


namespace {

struct Shape {
  const char *use;
  long M, N, K;
  bool tA, tB, accumulate;
};

__global__ void roundKernel(const float *in, __nv_bfloat16 *out, long n) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void fillKernel(float *p, long n, unsigned seed) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    p[i] = (float(h & 0xffff) / 65536.0f - 0.5f) * 0.1f;
  }
}

template <typename F> float timeMs(F f, int reps = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i)
    f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Row-major C[M,N] = op(A) op(B) as column-major C^T = op(B)^T op(A)^T.
void gemmEx(cublasHandle_t h, const Shape &s, const void *a, const void *b,
            void *c, cudaDataType_t ct) {
  float alpha = 1, beta = s.accumulate ? 1 : 0;
  long lda = s.tA ? s.M : s.K, ldb = s.tB ? s.K : s.N;
  CK(cublasGemmEx(h, s.tB ? CUBLAS_OP_T : CUBLAS_OP_N,
                  s.tA ? CUBLAS_OP_T : CUBLAS_OP_N, int(s.N), int(s.M),
                  int(s.K), &alpha, b, CUDA_R_16BF, int(ldb), a, CUDA_R_16BF,
                  int(lda), &beta, c, ct, int(s.N), CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT));
}

struct LtPlan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
};

LtPlan ltPlan(cublasLtHandle_t lt, const Shape &s, cudaDataType_t ct,
              size_t ws) {
  LtPlan p;
  CK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opA = s.tB ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLAS's A = B
  cublasOperation_t opB = s.tA ? CUBLAS_OP_T : CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                    sizeof(opA)));
  CK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                    sizeof(opB)));
  long ldb = s.tB ? s.K : s.N, lda = s.tA ? s.M : s.K;
  // Column-major: cuBLAS A = our B (N x K as op), B = our A.
  CK(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, s.tB ? s.K : s.N,
                                s.tB ? s.N : s.K, ldb));
  CK(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, s.tA ? s.M : s.K,
                                s.tA ? s.K : s.M, lda));
  CK(cublasLtMatrixLayoutCreate(&p.lc, ct, s.N, s.M, s.N));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t r[1];
  int n = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1,
                                    r, &n));
  if (n == 0) {
    std::fprintf(stderr, "no cublasLt algorithm for %s\n", s.use);
    std::exit(1);
  }
  p.algo = r[0].algo;
  CK(cublasLtMatmulPreferenceDestroy(pref));
  return p;
}

} // namespace

int main(int argc, char **argv) {
  const char *jsonPath = argc > 1 ? argv[1] : "gemm_storage.json";
  cublasHandle_t h;
  cublasLtHandle_t lt;
  CK(cublasCreate(&h));
  CK(cublasLtCreate(&lt));
  CK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  size_t ws = size_t(32) << 20;
  void *wsp;
  CK(cudaMalloc(&wsp, ws));
  CK(cublasSetWorkspace(h, wsp, ws));

  std::vector<Shape> shapes;
  for (long rows : {4096L, 8192L}) {
    long M = rows;
    std::vector<Shape> layer = {
        {"q/o fwd", M, 2048, 2048, false, false, false},
        {"k/v fwd", M, 1024, 2048, false, false, false},
        {"gate/up fwd", M, 6144, 2048, false, false, false},
        {"down fwd", M, 2048, 6144, false, false, false},
        {"q/o dX", M, 2048, 2048, false, true, false},
        {"k/v dX", M, 2048, 1024, false, true, false},
        {"gate/up dX", M, 2048, 6144, false, true, false},
        {"down dX", M, 6144, 2048, false, true, false},
        {"q/o dW", 2048, 2048, M, true, false, true},
        {"k/v dW", 2048, 1024, M, true, false, true},
        {"gate/up dW", 2048, 6144, M, true, false, true},
        {"down dW", 6144, 2048, M, true, false, true},
    };
    shapes.insert(shapes.end(), layer.begin(), layer.end());
  }
  long maxA = 0, maxB = 0, maxC = 0;
  for (auto &s : shapes) {
    maxA = std::max(maxA, s.M * s.K);
    maxB = std::max(maxB, s.K * s.N);
    maxC = std::max(maxC, s.M * s.N);
  }
  float *a32, *b32, *c32;
  __nv_bfloat16 *a16, *b16, *c16, *ta, *tb;
  CK(cudaMalloc(&a32, maxA * 4));
  CK(cudaMalloc(&b32, maxB * 4));
  CK(cudaMalloc(&c32, maxC * 4));
  CK(cudaMalloc(&a16, maxA * 2));
  CK(cudaMalloc(&b16, maxB * 2));
  CK(cudaMalloc(&c16, maxC * 2));
  CK(cudaMalloc(&ta, maxA * 2));
  CK(cudaMalloc(&tb, maxB * 2));
  fillKernel<<<1024, 256>>>(a32, maxA, 1);
  fillKernel<<<1024, 256>>>(b32, maxB, 2);
  roundKernel<<<1024, 256>>>(a32, a16, maxA);
  roundKernel<<<1024, 256>>>(b32, b16, maxB);
  CK(cudaMemset(c32, 0, maxC * 4));
  CK(cudaDeviceSynchronize());

  FILE *js = std::fopen(jsonPath, "w");
  std::fprintf(js, "{\"rows\": [\n");
  std::printf("%-12s %6s %6s %6s %3s | %10s %10s %10s %10s %10s  (TFLOP/s)\n",
              "use", "M", "N", "K", "", "fp32-round", "bf16->f32", "bf16->bf16",
              "lt->f32", "lt->bf16");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape &s = shapes[i];
    double flop = 2.0 * s.M * s.N * s.K;
    auto rate = [&](float ms) { return flop / (ms * 1e-3) / 1e12; };
    float tRound = timeMs([&] {
      roundKernel<<<1024, 256>>>(a32, ta, s.M * s.K);
      roundKernel<<<1024, 256>>>(b32, tb, s.K * s.N);
      gemmEx(h, s, ta, tb, c32, CUDA_R_32F);
    });
    float tF32 = timeMs([&] { gemmEx(h, s, a16, b16, c32, CUDA_R_32F); });
    float tBf16 = -1;
    if (!s.accumulate)
      tBf16 = timeMs([&] { gemmEx(h, s, a16, b16, c16, CUDA_R_16BF); });
    LtPlan pf = ltPlan(lt, s, CUDA_R_32F, ws);
    float alpha = 1, beta = s.accumulate ? 1 : 0;
    float tLtF32 = timeMs([&] {
      CK(cublasLtMatmul(lt, pf.desc, &alpha, b16, pf.la, a16, pf.lb, &beta, c32,
                        pf.lc, c32, pf.lc, &pf.algo, wsp, ws, 0));
    });
    float tLtBf16 = -1;
    if (!s.accumulate) {
      LtPlan pb = ltPlan(lt, s, CUDA_R_16BF, ws);
      tLtBf16 = timeMs([&] {
        CK(cublasLtMatmul(lt, pb.desc, &alpha, b16, pb.la, a16, pb.lb, &beta,
                          c16, pb.lc, c16, pb.lc, &pb.algo, wsp, ws, 0));
      });
    }
    auto r = [&](float ms) { return ms < 0 ? 0.0 : rate(ms); };
    std::printf("%-12s %6ld %6ld %6ld %s%s | %10.0f %10.0f %10.0f %10.0f "
                "%10.0f\n",
                s.use, s.M, s.N, s.K, s.tA ? "tA" : "  ", s.tB ? "tB" : "  ",
                r(tRound), r(tF32), r(tBf16), r(tLtF32), r(tLtBf16));
    std::fprintf(js,
                 "  {\"use\": \"%s\", \"M\": %ld, \"N\": %ld, \"K\": %ld, "
                 "\"transA\": %s, \"transB\": %s, \"ms\": {\"fp32_round\": "
                 "%.4f, \"bf16_f32\": %.4f, \"bf16_bf16\": %.4f, \"lt_f32\": "
                 "%.4f, \"lt_bf16\": %.4f}}%s\n",
                 s.use, s.M, s.N, s.K, s.tA ? "true" : "false",
                 s.tB ? "true" : "false", tRound, tF32, tBf16, tLtF32, tLtBf16,
                 i + 1 < shapes.size() ? "," : "");
  }
  std::fprintf(js, "]}\n");
  std::fclose(js);
  return 0;
}
