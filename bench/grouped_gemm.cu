//===- grouped_gemm.cu - The experts' grouped GEMMs against cuBLAS --------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Times expertMatmul (forward, and the input gradient with transW) and
// expertMatmulWeightGrad under Precision::Bf16 (fp32 operands, rounded by
// the kernels as they stage them), and their bf16-operand twins
// expertMatmulBf16 / expertMatmulWeightGradBf16 (operands already in bf16,
// as a trainer's resident bf16 weight copies and bf16 activations hand them
// over; checked bit for bit against the fp32-staged results), on the
// expert shapes of
// Qwen3-30B-A3B (E = 128, top-8; gate/up K = 2048, M = 768 and down K = 768,
// M = 2048) and GPT-OSS-20B (E = 32, top-4, K = M = 2880), 16,384 tokens,
// with balanced routing (every expert the same rows) and skewed routing (each
// token's top-k drawn without replacement from Zipf weights 1 / rank). Each
// grouped call is timed whole: the device sort, the products and the NaN
// pass over the ids. Beside each, cuBLAS's dense bf16 GEMM on the same work
// (a strided batch of E products of N / E rows, bf16 operands already in
// memory, fp32 accumulation and output: what the tensor cores reach when the
// routing is balanced and the operands are bf16), and the same GEMM with its
// operands rounded from fp32 first (what Precision::Bf16 matmul pays per
// call). Rates count 2 N K M flops. Also the wgmma kernels with every
// operand staged by cp.async (RONDO_GROUPED_STAGING=smem), the mma.sync
// kernels (RONDO_GROUPED_SM90=0, balanced only; the fallback off Hopper),
// the sort alone, and the device's copy and L2 read bandwidths. Inputs are
// random (never zeros); every output is checked for NaN, and a few rows of each
// product against fp64 sums of the bf16-rounded inputs on the host. Each time
// is the median of 10 calls after 3 warm-up calls, with events on one stream.
//
// Build: ninja -C build rondo-grouped-gemm-bench
// Run:   rondo-grouped-gemm-bench [out.json]
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"

#include "cuda_check.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace cu = rondo::cuda;
using rondo::cpu::CFView;
using rondo::cpu::FView;
using rondo::cpu::IView;
using rondo::cpu::Shape;

namespace {

__global__ void fillRandom(float *p, size_t n, uint32_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(i >> 32) ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    p[i] = float(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

__global__ void roundBf16(const float *in, __nv_bfloat16 *out, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void countNaN(const float *p, size_t n, unsigned long long *count) {
  unsigned long long local = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    local += p[i] != p[i];
  if (local)
    atomicAdd(count, local);
}

__global__ void l2Read(const float4 *p, size_t n4, int reps, float *sink) {
  float acc = 0.0f;
  for (int r = 0; r < reps; ++r)
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
         i += size_t(gridDim.x) * blockDim.x) {
      float4 v = __ldcg(p + i); // L2, not this SM's L1
      acc += v.x + v.y + v.z + v.w;
    }
  if (acc == 12345.0f)
    *sink = acc;
}

const unsigned kGrid = 132 * 16;

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Milliseconds per call of fn on stream st: median of 10 after 3 warm-ups.
double timeMs(cudaStream_t st, const std::function<void()> &fn) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i)
    fn();
  CK(cudaStreamSynchronize(st));
  std::vector<float> ms;
  for (int r = 0; r < 10; ++r) {
    CK(cudaEventRecord(e0, st));
    fn();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(ms);
}

/// Row t * k + j is token t's j-th expert. Balanced: experts (t k + j) mod E,
/// each N / E rows. Skewed: k distinct experts per token by Gumbel top-k on
/// log weights 1 / rank over a shuffled ranking of the experts.
std::vector<int64_t> routing(int64_t tokens, int64_t e, int64_t k, bool skewed,
                             std::mt19937 &gen) {
  std::vector<int64_t> ids(size_t(tokens * k));
  if (!skewed) {
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < k; ++j)
        ids[size_t(t * k + j)] = (t * k + j) % e;
    return ids;
  }
  std::vector<int64_t> rank(static_cast<size_t>(e));
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), gen);
  std::vector<double> logw(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i)
    logw[size_t(rank[size_t(i)])] = -std::log(double(i + 1));
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<std::pair<double, int64_t>> s(static_cast<size_t>(e));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < e; ++i)
      s[size_t(i)] = {logw[size_t(i)] - std::log(-std::log(u(gen))), i};
    std::partial_sort(s.begin(), s.begin() + k, s.end(),
                      [](auto &a, auto &b) { return a.first > b.first; });
    for (int64_t j = 0; j < k; ++j)
      ids[size_t(t * k + j)] = s[size_t(j)].second;
  }
  return ids;
}

std::vector<float> download(const float *p, size_t offset, size_t n) {
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), p + offset, n * sizeof(float),
                cudaMemcpyDeviceToHost));
  return h;
}

float bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/// Worst |got - ref| / max |ref| over a few rows of each product, refs in fp64
/// from bf16-rounded inputs.
double spotCheck(const float *x, const float *w, const float *dy,
                 const float *out, const float *dx, const float *dw,
                 const std::vector<int64_t> &ids, int64_t N, int64_t K,
                 int64_t M, std::mt19937 &gen) {
  double worst = 0.0;
  auto err = [&](const std::vector<double> &ref,
                 const std::vector<float> &got) {
    double scale = 0.0, e = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
      scale = std::max(scale, std::fabs(ref[i]));
      e = std::max(e, std::fabs(ref[i] - double(got[i])));
      if (!std::isfinite(got[i]))
        e = INFINITY;
    }
    worst = std::max(worst, scale > 0 ? e / scale : e);
  };
  std::uniform_int_distribution<int64_t> pick(0, N - 1);
  for (int s = 0; s < 3; ++s) {
    const int64_t r = pick(gen), e = ids[size_t(r)];
    std::vector<float> xr = download(x, size_t(r * K), size_t(K));
    std::vector<float> dyr = download(dy, size_t(r * M), size_t(M));
    std::vector<float> we = download(w, size_t(e * K * M), size_t(K * M));
    std::vector<double> refOut(size_t(M), 0.0), refDx(size_t(K), 0.0);
    for (int64_t p = 0; p < K; ++p)
      for (int64_t c = 0; c < M; ++c) {
        const double wv = bf16(we[size_t(p * M + c)]);
        refOut[size_t(c)] += double(bf16(xr[size_t(p)])) * wv;
        refDx[size_t(p)] += double(bf16(dyr[size_t(c)])) * wv;
      }
    err(refOut, download(out, size_t(r * M), size_t(M)));
    err(refDx, download(dx, size_t(r * K), size_t(K)));
  }
  // One row p of dW[e] for the expert of a random row.
  const int64_t e = ids[size_t(pick(gen))];
  const int64_t p = std::uniform_int_distribution<int64_t>(0, K - 1)(gen);
  std::vector<double> ref(size_t(M), 0.0);
  std::vector<float> xp(static_cast<size_t>(N)); // column p of x
  CK(cudaMemcpy2D(xp.data(), sizeof(float), x + p, size_t(K) * sizeof(float),
                  sizeof(float), size_t(N), cudaMemcpyDeviceToHost));
  std::vector<float> dys = download(dy, 0, size_t(N * M));
  for (int64_t r = 0; r < N; ++r)
    if (ids[size_t(r)] == e)
      for (int64_t c = 0; c < M; ++c)
        ref[size_t(c)] +=
            double(bf16(xp[size_t(r)])) * double(bf16(dys[size_t(r * M + c)]));
  err(ref, download(dw, size_t(e * K * M + p * M), size_t(M)));
  return worst;
}

struct Model {
  const char *name, *layer;
  int64_t e, k, K, M;
};

struct Row {
  std::string model, layer, routing, op;
  int64_t N, K, M, E, maxRows;
  double ms, bf16Ms, bf16OneTileMs, cublasMs, cublasRoundMs, smemStagingMs,
      mmaSyncMs;
};

__global__ void countDiffering(const float *a, const float *b, size_t n,
                               unsigned long long *count) {
  unsigned long long local = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    local += __float_as_uint(a[i]) != __float_as_uint(b[i]);
  if (local)
    atomicAdd(count, local);
}

} // namespace

int main(int argc, char **argv) {
  const char *jsonPath = argc > 1 ? argv[1] : "grouped_gemm.json";
  const int64_t tokens = 16384;
  const Model models[] = {{"Qwen3-30B-A3B", "gate/up", 128, 8, 2048, 768},
                          {"Qwen3-30B-A3B", "down", 128, 8, 768, 2048},
                          {"GPT-OSS-20B", "mlp1/mlp2", 32, 4, 2880, 2880}};
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cu::setCurrentStream(st);
  cu::setPrecision(cu::Precision::Bf16);
  {
    // A trainer's pool keeps its memory (CudaDeviceOps.cpp); so does this.
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t keep = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, st));
  void *ws;
  CK(cudaMalloc(&ws, 32 << 20));
  CK(cublasSetWorkspace(h, ws, 32 << 20));

  // The device's two ceilings: a large copy, and reads of a 24 MiB buffer
  // that stays in L2.
  double copyTBs = 0, l2TBs = 0;
  {
    const size_t bytes = size_t(1) << 30;
    char *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemsetAsync(a, 1, bytes, st));
    double ms = timeMs(st, [&] {
      CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
    });
    copyTBs = 2.0 * bytes / ms / 1e9;
    const size_t l2Bytes = size_t(24) << 20;
    const int reps = 50;
    float *sink;
    CK(cudaMalloc(&sink, sizeof(float)));
    ms = timeMs(st, [&] {
      l2Read<<<kGrid, 256, 0, st>>>(reinterpret_cast<const float4 *>(a),
                                    l2Bytes / 16, reps, sink);
    });
    l2TBs = double(l2Bytes) * reps / ms / 1e9;
    cudaFree(a);
    cudaFree(b);
    cudaFree(sink);
  }
  std::printf("%s: %d SMs, copy %.2f TB/s (read + write), L2 reads %.2f TB/s\n",
              prop.name, prop.multiProcessorCount, copyTBs, l2TBs);

  std::mt19937 gen(20261201);
  int status = 0;
  std::vector<Row> rows;
  double worstCheck = 0.0;
  unsigned long long *nanCount;
  CK(cudaMalloc(&nanCount, sizeof(unsigned long long)));
  for (const Model &m : models) {
    const int64_t N = tokens * m.k, E = m.e, K = m.K, M = m.M;
    const size_t nx = size_t(N * K), ny = size_t(N * M), nw = size_t(E * K * M);
    float *x, *w, *dy, *out, *dx, *dw, *out2, *dx2, *dw2;
    CK(cudaMalloc(&x, nx * 4));
    CK(cudaMalloc(&w, nw * 4));
    CK(cudaMalloc(&dy, ny * 4));
    CK(cudaMalloc(&out, ny * 4));
    CK(cudaMalloc(&dx, nx * 4));
    CK(cudaMalloc(&dw, nw * 4));
    CK(cudaMalloc(&out2, ny * 4));
    CK(cudaMalloc(&dx2, nx * 4));
    CK(cudaMalloc(&dw2, nw * 4));
    fillRandom<<<kGrid, 256, 0, st>>>(x, nx, 1);
    fillRandom<<<kGrid, 256, 0, st>>>(w, nw, 2);
    fillRandom<<<kGrid, 256, 0, st>>>(dy, ny, 3);
    __nv_bfloat16 *xb, *wb, *dyb;
    CK(cudaMalloc(&xb, nx * 2));
    CK(cudaMalloc(&wb, nw * 2));
    CK(cudaMalloc(&dyb, ny * 2));
    roundBf16<<<kGrid, 256, 0, st>>>(x, xb, nx);
    roundBf16<<<kGrid, 256, 0, st>>>(w, wb, nw);
    roundBf16<<<kGrid, 256, 0, st>>>(dy, dyb, ny);
    int64_t *ids;
    CK(cudaMalloc(&ids, size_t(N) * sizeof(int64_t)));

    // cuBLAS on the balanced split (column-major: every product swapped).
    const int rowsE = int(N / E);
    const float one = 1.0f, zero = 0.0f;
    auto gemmFwd = [&] {
      CK(cublasGemmStridedBatchedEx(
          h, CUBLAS_OP_N, CUBLAS_OP_N, int(M), rowsE, int(K), &one, wb,
          CUDA_R_16BF, int(M), K * M, xb, CUDA_R_16BF, int(K),
          int64_t(rowsE) * K, &zero, out, CUDA_R_32F, int(M),
          int64_t(rowsE) * M, int(E), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto gemmDgrad = [&] {
      CK(cublasGemmStridedBatchedEx(
          h, CUBLAS_OP_T, CUBLAS_OP_N, int(K), rowsE, int(M), &one, wb,
          CUDA_R_16BF, int(M), K * M, dyb, CUDA_R_16BF, int(M),
          int64_t(rowsE) * M, &zero, dx, CUDA_R_32F, int(K), int64_t(rowsE) * K,
          int(E), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto gemmWgrad = [&] {
      CK(cublasGemmStridedBatchedEx(
          h, CUBLAS_OP_N, CUBLAS_OP_T, int(M), int(K), rowsE, &one, dyb,
          CUDA_R_16BF, int(M), int64_t(rowsE) * M, xb, CUDA_R_16BF, int(K),
          int64_t(rowsE) * K, &zero, dw, CUDA_R_32F, int(M), K * M, int(E),
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto rounded = [&](const float *a, __nv_bfloat16 *ab, size_t na,
                       const float *b, __nv_bfloat16 *bb, size_t nb,
                       std::function<void()> gemm) {
      return [=] {
        roundBf16<<<kGrid, 256, 0, st>>>(a, ab, na);
        roundBf16<<<kGrid, 256, 0, st>>>(b, bb, nb);
        gemm();
      };
    };
    const double cuFwd = timeMs(st, gemmFwd);
    const double cuDgrad = timeMs(st, gemmDgrad);
    const double cuWgrad = timeMs(st, gemmWgrad);
    const double cuFwdR = timeMs(st, rounded(x, xb, nx, w, wb, nw, gemmFwd));
    const double cuDgradR =
        timeMs(st, rounded(dy, dyb, ny, w, wb, nw, gemmDgrad));
    const double cuWgradR =
        timeMs(st, rounded(x, xb, nx, dy, dyb, ny, gemmWgrad));

    for (bool skewed : {false, true}) {
      std::vector<int64_t> hostIds = routing(tokens, E, m.k, skewed, gen);
      std::vector<int64_t> perExpert(size_t(E), 0);
      for (int64_t id : hostIds)
        ++perExpert[size_t(id)];
      const int64_t maxRows =
          *std::max_element(perExpert.begin(), perExpert.end());
      CK(cudaMemcpy(ids, hostIds.data(), size_t(N) * sizeof(int64_t),
                    cudaMemcpyHostToDevice));
      const IView iv{ids, Shape{N}};
      auto fwd = [&] {
        cu::expertMatmul(CFView{x, Shape{N, K}}, CFView{w, Shape{E, K, M}}, iv,
                         FView{out, Shape{N, M}}, false);
      };
      auto dgrad = [&] {
        cu::expertMatmul(CFView{dy, Shape{N, M}}, CFView{w, Shape{E, K, M}}, iv,
                         FView{dx, Shape{N, K}}, true);
      };
      auto wgrad = [&] {
        cu::expertMatmulWeightGrad(CFView{x, Shape{N, K}},
                                   CFView{dy, Shape{N, M}}, iv,
                                   FView{dw, Shape{E, K, M}}, false);
      };
      using rondo::cpu::CBView;
      auto bits = [](const __nv_bfloat16 *p) {
        return reinterpret_cast<const uint16_t *>(p);
      };
      auto fwd16 = [&] {
        cu::expertMatmulBf16(CBView{bits(xb), Shape{N, K}},
                             CBView{bits(wb), Shape{E, K, M}}, iv,
                             FView{out2, Shape{N, M}}, false);
      };
      auto dgrad16 = [&] {
        cu::expertMatmulBf16(CBView{bits(dyb), Shape{N, M}},
                             CBView{bits(wb), Shape{E, K, M}}, iv,
                             FView{dx2, Shape{N, K}}, true);
      };
      auto wgrad16 = [&] {
        cu::expertMatmulWeightGradBf16(CBView{bits(xb), Shape{N, K}},
                                       CBView{bits(dyb), Shape{N, M}}, iv,
                                       FView{dw2, Shape{E, K, M}}, false);
      };
      // Poisoned outputs, one call each, checked before timing.
      CK(cudaMemsetAsync(out, 0xff, ny * 4, st));
      CK(cudaMemsetAsync(dx, 0xff, nx * 4, st));
      CK(cudaMemsetAsync(dw, 0xff, nw * 4, st));
      CK(cudaMemsetAsync(out2, 0x7f, ny * 4, st));
      CK(cudaMemsetAsync(dx2, 0x7f, nx * 4, st));
      CK(cudaMemsetAsync(dw2, 0x7f, nw * 4, st));
      fwd();
      dgrad();
      wgrad();
      fwd16();
      dgrad16();
      wgrad16();
      CK(cudaMemsetAsync(nanCount, 0, sizeof(unsigned long long), st));
      countNaN<<<kGrid, 256, 0, st>>>(out, ny, nanCount);
      countNaN<<<kGrid, 256, 0, st>>>(dx, nx, nanCount);
      countNaN<<<kGrid, 256, 0, st>>>(dw, nw, nanCount);
      unsigned long long nans = 0;
      CK(cudaMemcpyAsync(&nans, nanCount, sizeof(nans), cudaMemcpyDeviceToHost,
                         st));
      CK(cudaStreamSynchronize(st));
      if (nans) {
        std::fprintf(stderr, "%s %s: %llu NaN outputs\n", m.name, m.layer,
                     nans);
        return 1;
      }
      // The bf16-operand kernels: the same bits as the fp32-staged ones.
      CK(cudaMemsetAsync(nanCount, 0, sizeof(unsigned long long), st));
      countDiffering<<<kGrid, 256, 0, st>>>(out, out2, ny, nanCount);
      countDiffering<<<kGrid, 256, 0, st>>>(dx, dx2, nx, nanCount);
      countDiffering<<<kGrid, 256, 0, st>>>(dw, dw2, nw, nanCount);
      unsigned long long differing = 0;
      CK(cudaMemcpyAsync(&differing, nanCount, sizeof(differing),
                         cudaMemcpyDeviceToHost, st));
      CK(cudaStreamSynchronize(st));
      if (differing) {
        std::fprintf(stderr,
                     "%s %s: %llu outputs of the bf16-operand kernels differ "
                     "from the fp32-staged ones\n",
                     m.name, m.layer, differing);
        status = 1; // timed all the same, reported as failed
      }
      const double check =
          spotCheck(x, w, dy, out, dx, dw, hostIds, N, K, M, gen);
      worstCheck = std::max(worstCheck, check);
      if (!(check < 2e-2)) {
        std::fprintf(stderr, "%s %s: spot check error %.3g\n", m.name, m.layer,
                     check);
        return 1;
      }
      const char *routingName = skewed ? "zipf" : "balanced";
      const double tFwd = timeMs(st, fwd), tDgrad = timeMs(st, dgrad),
                   tWgrad = timeMs(st, wgrad);
      const double bFwd = timeMs(st, fwd16), bDgrad = timeMs(st, dgrad16),
                   bWgrad = timeMs(st, wgrad16);
      setenv("RONDO_GROUPED_PERSISTENT", "0", 1);
      const double oFwd = timeMs(st, fwd16), oDgrad = timeMs(st, dgrad16),
                   oWgrad = timeMs(st, wgrad16);
      unsetenv("RONDO_GROUPED_PERSISTENT");
      setenv("RONDO_GROUPED_STAGING", "smem", 1);
      const double sFwd = timeMs(st, fwd), sDgrad = timeMs(st, dgrad),
                   sWgrad = timeMs(st, wgrad);
      unsetenv("RONDO_GROUPED_STAGING");
      double mFwd = 0, mDgrad = 0, mWgrad = 0;
      if (!skewed) {
        setenv("RONDO_GROUPED_SM90", "0", 1);
        mFwd = timeMs(st, fwd);
        mDgrad = timeMs(st, dgrad);
        mWgrad = timeMs(st, wgrad);
        unsetenv("RONDO_GROUPED_SM90");
      }
      rows.push_back({m.name, m.layer, routingName, "forward", N, K, M, E,
                      maxRows, tFwd, bFwd, oFwd, cuFwd, cuFwdR, sFwd, mFwd});
      rows.push_back({m.name, m.layer, routingName, "input grad", N, K, M, E,
                      maxRows, tDgrad, bDgrad, oDgrad, cuDgrad, cuDgradR,
                      sDgrad, mDgrad});
      rows.push_back({m.name, m.layer, routingName, "weight grad", N, K, M, E,
                      maxRows, tWgrad, bWgrad, oWgrad, cuWgrad, cuWgradR,
                      sWgrad, mWgrad});
      if (!skewed) {
        int32_t *sortOut;
        CK(cudaMalloc(&sortOut, size_t(N + E + 2) * sizeof(int32_t)));
        const double tSort = timeMs(st, [&] {
          cu::expertSortForTesting(ids, N, E, sortOut, sortOut + E + 1,
                                   sortOut + E + 1 + N);
        });
        std::printf("%s %s: sort of %lld rows %.3f ms\n", m.name, m.layer,
                    (long long)N, tSort);
        cudaFree(sortOut);
      }
    }
    for (void *p : {(void *)x, (void *)w, (void *)dy, (void *)out, (void *)dx,
                    (void *)dw, (void *)xb, (void *)wb, (void *)dyb,
                    (void *)ids, (void *)out2, (void *)dx2, (void *)dw2})
      cudaFree(p);
  }

  std::printf("\n%-14s %-9s %-8s %-11s %6s %5s %5s %6s | %8s %7s %5s %8s | "
              "%8s %7s %5s | %8s %7s | %8s %6s | %8s %8s\n",
              "model", "layer", "routing", "op", "N", "K", "M", "maxE",
              "bf16 ops", "TFLOP/s", "%cuBL", "1 tile", "fp32 ops", "TFLOP/s",
              "%cuBL", "cuBLAS", "TFLOP/s", "+round", "ratio", "cp.async",
              "mma.sync");
  FILE *json = std::fopen(jsonPath, "w");
  if (!json) {
    std::fprintf(stderr, "cannot write %s\n", jsonPath);
    return 1;
  }
  std::fprintf(json,
               "{\n  \"device\": \"%s\",\n  \"sms\": %d,\n  \"copy_tb_s\": "
               "%.3f,\n  \"l2_read_tb_s\": %.3f,\n  \"tokens\": %lld,\n  "
               "\"spot_check_worst\": %.3g,\n  \"rows\": [\n",
               prop.name, prop.multiProcessorCount, copyTBs, l2TBs,
               (long long)tokens, worstCheck);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    const double gf = 2.0 * r.N * r.K * r.M / 1e9;
    std::printf(
        "%-14s %-9s %-8s %-11s %6lld %5lld %5lld %6lld | %8.3f %7.1f "
        "%4.0f%% %8.3f | %8.3f %7.1f %4.0f%% | %8.3f %7.1f | %8.3f "
        "%6.2f | %8.3f %8.3f\n",
        r.model.c_str(), r.layer.c_str(), r.routing.c_str(), r.op.c_str(),
        (long long)r.N, (long long)r.K, (long long)r.M, (long long)r.maxRows,
        r.bf16Ms, gf / r.bf16Ms, 100.0 * r.cublasMs / r.bf16Ms, r.bf16OneTileMs,
        r.ms, gf / r.ms, 100.0 * r.cublasMs / r.ms, r.cublasMs, gf / r.cublasMs,
        r.cublasRoundMs, r.cublasRoundMs / r.ms, r.smemStagingMs, r.mmaSyncMs);
    std::fprintf(
        json,
        "    {\"model\": \"%s\", \"layer\": \"%s\", \"routing\": \"%s\", "
        "\"op\": \"%s\", \"N\": %lld, \"K\": %lld, \"M\": %lld, \"E\": %lld, "
        "\"max_expert_rows\": %lld, \"bf16_operands_ms\": %.4f, "
        "\"bf16_operands_tflops\": %.1f, \"bf16_operands_ratio_to_cublas\": "
        "%.3f, \"bf16_operands_one_tile_a_block_ms\": %.4f, \"ms\": %.4f, "
        "\"tflops\": %.1f, "
        "\"cublas_bf16_ms\": %.4f, \"cublas_bf16_tflops\": %.1f, "
        "\"ratio_to_cublas\": %.3f, \"cublas_with_rounding_ms\": %.4f, "
        "\"ratio_to_cublas_with_rounding\": %.3f, \"cp_async_staging_ms\": "
        "%.4f, \"mma_sync_ms\": %.4f}%s\n",
        r.model.c_str(), r.layer.c_str(), r.routing.c_str(), r.op.c_str(),
        (long long)r.N, (long long)r.K, (long long)r.M, (long long)r.E,
        (long long)r.maxRows, r.bf16Ms, gf / r.bf16Ms, r.cublasMs / r.bf16Ms,
        r.bf16OneTileMs, r.ms, gf / r.ms, r.cublasMs, gf / r.cublasMs,
        r.cublasMs / r.ms, r.cublasRoundMs, r.cublasRoundMs / r.ms,
        r.smemStagingMs, r.mmaSyncMs, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(json, "  ]\n}\n");
  std::fclose(json);
  std::printf("(bf16 ops: expertMatmulBf16 / expertMatmulWeightGradBf16 on "
              "operands stored in bf16; fp32 ops: expertMatmul / "
              "expertMatmulWeightGrad rounding fp32 operands; 1 tile: ms of "
              "the bf16-operand kernels with one tile a block "
              "(RONDO_GROUPED_PERSISTENT=0); %%cuBL = cuBLAS "
              "time / grouped time (the share of cuBLAS's rate); +round: "
              "cuBLAS with its operands rounded from fp32 first, ratio to the "
              "fp32-operand kernels; cp.async: ms of the fp32-operand wgmma "
              "kernels with cp.async staging; mma.sync: ms, balanced only; "
              "spot checks worst %.2g)\n",
              worstCheck);
  cudaFree(nanCount);
  cublasDestroy(h);
  return status;
}
