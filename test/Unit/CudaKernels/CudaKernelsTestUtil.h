//===- CudaKernelsTestUtil.h - Helpers of the CUDA kernel tests -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Device tensors, the error bookkeeping, the run-twice determinism check and
// the fixture shared by CudaKernelsTest.cpp and CudaKernelsLossTest.cpp; the
// names, the device probe and the error check of every CUDA kernel test.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_CUDAKERNELS_CUDAKERNELSTESTUTIL_H
#define RONDO_TEST_UNIT_CUDAKERNELS_CUDAKERNELSTESTUTIL_H

#include "../Common/KernelTestTensor.h"
#include "CudaKernels.h"
#include "Kernels.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cpu = rondo::cpu;
namespace cu = rondo::cuda;
using cpu::BinaryKind;
using cpu::CFView;
using cpu::FView;
using cpu::IView;
using cpu::MIView;
using cpu::Shape;
using cpu::UnaryKind;

namespace cuda_test {

constexpr double kTol = 1e-5;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

inline bool gpuAvailable() {
  static int state = -1;
  if (state < 0) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    state = e == cudaSuccess && n > 0;
    if (e != cudaSuccess)
      cudaGetLastError();
  }
  return state == 1;
}

inline void ck(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

using rondo::cpu::test::Tensor;

inline std::mt19937 &rng() { return rondo::cpu::test::seededRng(20261122); }

inline std::string str(const Shape &s) {
  std::string r = "[";
  for (int i = 0; i < s.rank; ++i)
    r += (i ? "," : "") + std::to_string(s.dims[i]);
  return r + "]";
}

inline Tensor uniform(Shape s, float lo = -1.0f, float hi = 1.0f) {
  return rondo::cpu::test::uniformFrom(rng(), s, lo, hi);
}

/// Uniform with |x| >= gap.
inline Tensor awayFromZero(Shape s, float lo, float hi, float gap) {
  Tensor t = uniform(s, lo, hi);
  for (float &x : t.data)
    if (std::fabs(x) < gap)
      x = x < 0 ? -gap : gap;
  return t;
}

/// A device copy of a float tensor.
struct Dev {
  float *p = nullptr;
  Shape shape;
  size_t n = 0;
  Dev() = default;
  explicit Dev(const Tensor &t) : shape(t.shape), n(t.data.size()) {
    ck(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc");
    ck(cudaMemcpy(p, t.data.data(), n * sizeof(float), cudaMemcpyHostToDevice),
       "upload");
  }
  ~Dev() {
    if (p)
      cudaFree(p);
  }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;
  CFView cv() const { return CFView{p, shape}; }
};

struct DevIds {
  int64_t *p = nullptr;
  Shape shape;
  explicit DevIds(const std::vector<int64_t> &ids, Shape s) : shape(s) {
    ck(cudaMalloc(&p, std::max<size_t>(ids.size(), 1) * sizeof(int64_t)),
       "cudaMalloc");
    ck(cudaMemcpy(p, ids.data(), ids.size() * sizeof(int64_t),
                  cudaMemcpyHostToDevice),
       "upload ids");
  }
  ~DevIds() { cudaFree(p); }
  IView v() const { return IView{p, shape}; }
};

/// max|got - ref| / max|ref| (equal infinities count as exact, NaN fails).
inline double normErr(const std::vector<float> &got,
                      const std::vector<float> &ref) {
  if (got.size() != ref.size())
    return INFINITY;
  double scale = 0.0, err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::isfinite(ref[i]))
      scale = std::max(scale, std::fabs(double(ref[i])));
  for (size_t i = 0; i < ref.size(); ++i) {
    double g = got[i], r = ref[i];
    if (std::isnan(g) || std::isnan(r)) {
      if (!(std::isnan(g) && std::isnan(r)))
        return INFINITY;
      continue;
    }
    if (std::isinf(r) || std::isinf(g)) {
      if (g != r)
        return INFINITY;
      continue;
    }
    err = std::max(err, std::fabs(g - r));
  }
  return scale > 0.0 ? err / scale : err;
}

/// The largest error seen by the suite (printed at the end).
inline double &worstErr() {
  static double w = 0.0;
  return w;
}
inline std::string &worstWhat() {
  static std::string w;
  return w;
}

inline void expectClose(const std::vector<float> &got, const Tensor &ref,
                        const std::string &what, double tol = kTol) {
  double e = normErr(got, ref.data);
  if (e > worstErr()) {
    worstErr() = e;
    worstWhat() = what;
  }
  EXPECT_LE(e, tol) << what << " " << str(ref.shape);
}

/// An output of a GPU run: its shape and initial content (empty: poison).
struct OutSpec {
  Shape shape;
  std::vector<float> init;
};

/// Runs `fn` twice on fresh (re-initialised or NaN-poisoned) device outputs,
/// checks that both runs give identical bits, returns the first run's
/// outputs.
inline std::vector<std::vector<float>>
runTwice(const std::vector<OutSpec> &outs,
         const std::function<void(const std::vector<FView> &)> &fn,
         const std::string &what) {
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    std::vector<float *> ptrs;
    std::vector<FView> views;
    for (const OutSpec &o : outs) {
      size_t n = size_t(o.shape.numel());
      float *p = nullptr;
      ck(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)), "cudaMalloc");
      if (!o.init.empty())
        ck(cudaMemcpy(p, o.init.data(), n * sizeof(float),
                      cudaMemcpyHostToDevice),
           "init");
      else
        ck(cudaMemset(p, run == 0 ? 0xff : 0x7f, n * sizeof(float)), "poison");
      ptrs.push_back(p);
      views.push_back(FView{p, o.shape});
    }
    ck(cudaDeviceSynchronize(), "sync before");
    fn(views);
    ck(cudaStreamSynchronize(cu::currentStream()), (what + ": sync").c_str());
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<float> h(size_t(outs[i].shape.numel()));
      ck(cudaMemcpy(h.data(), ptrs[i], h.size() * sizeof(float),
                    cudaMemcpyDeviceToHost),
         "download");
      results[run].push_back(std::move(h));
      cudaFree(ptrs[i]);
    }
  }
  for (size_t i = 0; i < outs.size(); ++i)
    EXPECT_EQ(0, std::memcmp(results[0][i].data(), results[1][i].data(),
                             results[0][i].size() * sizeof(float)))
        << what << ": output " << i << " differs between two CUDA runs";
  return results[0];
}

class CudaKernels : public testing::Test {
protected:
  void SetUp() override {
    if (!gpuAvailable())
      GTEST_SKIP() << "no CUDA GPU present (cudaGetDeviceCount failed or "
                      "returned 0): CUDA kernel tests skipped";
    ck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
       "cudaStreamCreate");
    cu::setCurrentStream(stream_);
  }
  void TearDown() override {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cu::setCurrentStream(nullptr);
      cudaStreamDestroy(stream_);
    }
  }
  /// Shared by the fp32 and bf16 linear cross-entropy tests.
  void checkLinearCrossEntropy(const char *label, double tol);
  cudaStream_t stream_ = nullptr;
};

inline const char *binaryName(BinaryKind k) {
  static const char *names[] = {"Add", "Sub", "Mul", "Div",
                                "Pow", "Max", "Min"};
  return names[int(k)];
}
inline const char *unaryName(UnaryKind k) {
  static const char *names[] = {"Neg",   "Exp",        "Log",      "Sqrt",
                                "Rsqrt", "Reciprocal", "Sigmoid",  "Tanh",
                                "Relu",  "Silu",       "GeluTanh", "GeluErf",
                                "Abs",   "Sin",        "Cos"};
  return names[int(k)];
}

const BinaryKind kBinaryKinds[] = {
    BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul, BinaryKind::Div,
    BinaryKind::Pow, BinaryKind::Max, BinaryKind::Min};

struct BinaryCase {
  Shape a, b, out;
};
const BinaryCase kBinaryCases[] = {
    {{4, 5, 6}, {4, 5, 6}, {4, 5, 6}},
    {{4, 5, 6}, {6}, {4, 5, 6}},
    {{4, 1, 6}, {5, 1}, {4, 5, 6}},
    {{}, {3, 4}, {3, 4}},
    {{2, 1, 3, 1}, {1, 7, 1, 5}, {2, 7, 3, 5}},
    {{64, 300}, {64, 1}, {64, 300}},
};

inline void binaryInputs(BinaryKind k, const BinaryCase &c, Tensor &a,
                         Tensor &b) {
  if (k == BinaryKind::Pow) {
    a = uniform(c.a, 0.2f, 2.0f);
    b = uniform(c.b, -2.0f, 2.0f);
  } else if (k == BinaryKind::Div) {
    a = uniform(c.a);
    b = awayFromZero(c.b, -2.0f, 2.0f, 0.3f);
  } else {
    a = uniform(c.a);
    b = uniform(c.b);
  }
  if (k == BinaryKind::Max || k == BinaryKind::Min) // some ties
    for (size_t i = 0; i < std::min(a.data.size(), b.data.size()); i += 3)
      a.data[i] = b.data[i];
}

/// Sets the kernel library's precision for a scope and restores the previous
/// one on exit (also when an assertion fails or an exception escapes).
class PrecisionGuard {
public:
  explicit PrecisionGuard(cu::Precision p) : previous_(cu::precision()) {
    cu::setPrecision(p);
  }
  ~PrecisionGuard() { cu::setPrecision(previous_); }
  PrecisionGuard(const PrecisionGuard &) = delete;
  PrecisionGuard &operator=(const PrecisionGuard &) = delete;

private:
  cu::Precision previous_;
};

/// bf16 inputs, fp32 accumulation: agreement with the fp32 CPU kernels.
constexpr double kBf16Tol = 2e-2;

/// Sets RONDO_FLASH_SM90=0 (and RONDO_ATTENTION=flash) for its lifetime: the
/// bf16 attention takes its mma.sync kernels (FlashAttention.cu) even on a
/// Hopper GPU, where it would otherwise take the wgmma ones
/// (FlashAttentionSm90.cu); the tests run both.
struct MmaSyncOnly {
  MmaSyncOnly() {
    setenv("RONDO_FLASH_SM90", "0", 1);
    setenv("RONDO_ATTENTION", "flash", 1);
  }
  ~MmaSyncOnly() {
    unsetenv("RONDO_FLASH_SM90");
    unsetenv("RONDO_ATTENTION");
  }
};

/// Makes the Hopper bf16 attention backward at D = 128 take its fused
/// kernel (on) or its two-kernel version (a dQ kernel and a dK/dV kernel)
/// for its lifetime (with RONDO_ATTENTION=flash, so that Rondo's kernels run
/// rather than cuDNN); nothing changes elsewhere.
struct FusedBackward {
  explicit FusedBackward(bool on) {
    setenv("RONDO_FLASH_FUSED_BWD", on ? "1" : "0", 1);
    setenv("RONDO_ATTENTION", "flash", 1);
  }
  ~FusedBackward() {
    unsetenv("RONDO_FLASH_FUSED_BWD");
    unsetenv("RONDO_ATTENTION");
  }
};

//===----------------------------------------------------------------------===//
// Attention cases (CudaKernelsTest.cpp, CudnnAttentionTest.cpp)
//===----------------------------------------------------------------------===//

struct AttnCase {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
  int64_t window = 0; // sliding window (causal only), 0 for none
};

std::string attnName(const AttnCase &c);

/// The CPU's attention forward and backward on random inputs of `c` (the
/// references) and the CUDA kernels' on the same inputs, run twice
/// (runTwice): the forward, and the backward from the CPU's out/lse so that
/// the two backward passes see the same inputs.
struct AttnRun {
  Tensor out, lse, dq, dk, dv;
  std::vector<std::vector<float>> got; ///< out, lse, dQ, dK, dV
  /// The implementations the forward and the backward ran on.
  cu::AttentionImpl fwdImpl = cu::AttentionImpl::None,
                    bwdImpl = cu::AttentionImpl::None;
};
AttnRun runAttention(const AttnCase &c, const std::string &what);

/// The bf16 attention (the path the environment selects) on each case
/// against the CPU kernels, each run twice bit for bit; rows that see no key
/// must give exact zeros and -inf.
inline const char *implName(cu::AttentionImpl impl) {
  switch (impl) {
  case cu::AttentionImpl::Fp32:
    return "fp32";
  case cu::AttentionImpl::Flash:
    return "flash";
  case cu::AttentionImpl::Cudnn:
    return "cudnn";
  default:
    return "none";
  }
}

struct AttnImpls {
  cu::AttentionImpl fwd, bwd;
};
std::vector<AttnImpls>
checkAttentionBf16Cases(const char *path, const std::vector<AttnCase> &all);
/// Forward then backward on the forward's own out/lse, twice, bit for bit;
/// and each gradient alone gives the same bits as all three together.
void checkAttentionBf16Deterministic(const AttnCase &c);

/// Sets RONDO_ATTENTION for its lifetime ("flash": Rondo's kernels only,
/// "cudnn": cuDNN where it applies).
struct AttentionSwitch {
  explicit AttentionSwitch(const char *value) {
    setenv("RONDO_ATTENTION", value, 1);
  }
  ~AttentionSwitch() { unsetenv("RONDO_ATTENTION"); }
};

/// Milliseconds per call of fn (median of `reps` timed calls after a warm-up),
/// timed with events on the current stream.
inline double timeMs(const std::function<void()> &fn, int reps = 10) {
  cudaStream_t st = cu::currentStream();
  fn();
  ck(cudaStreamSynchronize(st), "warm-up");
  cudaEvent_t e0, e1;
  ck(cudaEventCreate(&e0), "event");
  ck(cudaEventCreate(&e1), "event");
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    ck(cudaEventRecord(e0, st), "record");
    fn();
    ck(cudaEventRecord(e1, st), "record");
    ck(cudaEventSynchronize(e1), "sync");
    float t = 0;
    ck(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

} // namespace cuda_test

#endif // RONDO_TEST_UNIT_CUDAKERNELS_CUDAKERNELSTESTUTIL_H
