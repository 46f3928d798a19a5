//===- OptimizerKernelsTest.cpp - The device optimizer vs the host's ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Optimizer.cu against the host optimizer (runtime/src/AdamW.cpp, compiled
// into this binary): AdamW, scale and sumParts bit for bit, the gradient-norm
// partials to 1e-12 relative per block (the GPU adds a block's squares in
// another order), finiteness exactly. Odd sizes leave float4 tails, and
// buffers offset by one float take the scalar paths. The CUDA DeviceOps
// overrides are thin wrappers of these functions (selecting the device and
// a stream); they need the whole runtime and are covered by the trainers'
// GPU runs.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

#include "rondo/runtime/AdamW.h"

#include <chrono>
#include <cinttypes>
#include <climits>
#include <limits>
#include <memory>

namespace cuda_test {
namespace {

namespace rt = rondo::rt;

/// A device buffer of n floats starting `offset` floats into its allocation
/// (offset 1: not 16-byte aligned).
struct OptBuf {
  float *base = nullptr;
  float *p = nullptr;
  size_t n = 0;
  explicit OptBuf(size_t n, size_t offset = 0) : n(n) {
    ck(cudaMalloc(&base, (n + offset + 1) * sizeof(float)), "cudaMalloc");
    p = base + offset;
  }
  OptBuf(const std::vector<float> &h, size_t offset)
      : OptBuf(h.size(), offset) {
    upload(h);
  }
  ~OptBuf() { cudaFree(base); }
  OptBuf(const OptBuf &) = delete;
  OptBuf &operator=(const OptBuf &) = delete;
  // The kernels run on the fixture's non-blocking stream, which cudaMemcpy
  // (the legacy default stream) neither waits for nor holds up, and a
  // pageable upload may still be in flight when cudaMemcpy returns: both
  // directions synchronise the device. (Without this, sumParts of 7 floats
  // read back zeros under compute-sanitizer.)
  void upload(const std::vector<float> &h) {
    ck(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice),
       "upload");
    ck(cudaDeviceSynchronize(), "sync upload");
  }
  std::vector<float> download() const {
    ck(cudaDeviceSynchronize(), "sync before download");
    std::vector<float> h(n);
    ck(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost),
       "download");
    return h;
  }
};

std::vector<float> randomVector(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng());
  return v;
}

/// Distance in units in the last place (floats ordered as integers), for
/// failure messages.
int64_t ulps(float a, float b) {
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, sizeof(i));
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

void expectBitwise(const std::vector<float> &got, const std::vector<float> &ref,
                   const std::string &what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t differ = 0, first = 0;
  int64_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0) {
      if (differ++ == 0)
        first = i;
      worst = std::max(worst, ulps(got[i], ref[i]));
    }
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << ref.size()
                        << " elements differ from the host, max " << worst
                        << " ulp; first at " << first << ": "
                        << (differ ? got[first] : 0.0f) << " vs "
                        << (differ ? ref[first] : 0.0f);
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

struct AdamWCase {
  int64_t numel;
  double weightDecay;
  double lrScale;
  size_t offset; ///< floats: 1 puts every buffer of the tensor off 16 bytes
};

/// Runs `steps` AdamW steps on the host and on the GPU from the same state
/// with fresh gradients every step, and expects the same bits after each.
void checkAdamW(const std::vector<AdamWCase> &cases,
                const rt::AdamWConfig &config, int steps,
                const std::string &label) {
  const size_t count = cases.size();
  std::vector<std::vector<float>> p(count), g(count), m(count), v(count);
  std::vector<std::unique_ptr<OptBuf>> dp, dg, dm, dv;
  std::vector<rt::AdamWTensor> host(count);
  std::vector<cu::AdamWTensor> dev(count);
  for (size_t t = 0; t < count; ++t) {
    const AdamWCase &c = cases[t];
    size_t n = size_t(c.numel);
    p[t] = randomVector(n, -1.0f, 1.0f);
    g[t] = randomVector(n, -0.1f, 0.1f);
    // Moments as after some steps, so that the first step is not special.
    m[t] = randomVector(n, -0.01f, 0.01f);
    v[t] = randomVector(n, 0.0f, 1e-4f);
    dp.push_back(std::make_unique<OptBuf>(p[t], c.offset));
    dg.push_back(std::make_unique<OptBuf>(g[t], c.offset));
    dm.push_back(std::make_unique<OptBuf>(m[t], c.offset));
    dv.push_back(std::make_unique<OptBuf>(v[t], c.offset));
    host[t] = {p[t].data(), g[t].data(), m[t].data(),  v[t].data(),
               c.numel,     c.lrScale,   c.weightDecay};
    dev[t] = {dp[t]->p, dg[t]->p,  dm[t]->p,     dv[t]->p,
              c.numel,  c.lrScale, c.weightDecay};
  }
  const cu::AdamWConfig hyper{config.beta1, config.beta2, config.eps};
  const double lrs[] = {1e-3, 3e-4, 2e-3};
  for (int step = 1; step <= steps; ++step) {
    if (step > 1)
      for (size_t t = 0; t < count; ++t) {
        g[t] = randomVector(g[t].size(), -0.1f, 0.1f);
        host[t].grad = g[t].data();
        dg[t]->upload(g[t]);
      }
    const double lr = lrs[(step - 1) % 3];
    rt::adamwUpdate(host.data(), count, config, lr, step);
    cu::adamwUpdate(dev.data(), count, hyper, lr, step);
    ck(cudaStreamSynchronize(cu::currentStream()), "sync adamwUpdate");
    for (size_t t = 0; t < count; ++t) {
      std::string what = label + " step " + std::to_string(step) + " tensor " +
                         std::to_string(t) + " (" +
                         std::to_string(cases[t].numel) + " elements)";
      expectBitwise(dp[t]->download(), p[t], what + " param");
      expectBitwise(dm[t]->download(), m[t], what + " exp_avg");
      expectBitwise(dv[t]->download(), v[t], what + " exp_avg_sq");
      if (testing::Test::HasFailure())
        return;
    }
  }
}

const int64_t kOddSizes[] = {1, 7, 65537, (int64_t(1) << 20) + 3};

TEST_F(CudaKernels, OptimizerAdamWMatchesHost) {
  // Weight decay on some tensors and off on others, one group with a scaled
  // learning rate, one tensor unaligned.
  std::vector<AdamWCase> cases = {
      {kOddSizes[0], 0.1, 1.0, 0},  {kOddSizes[1], 0.0, 1.0, 0},
      {kOddSizes[2], 0.01, 0.5, 0}, {kOddSizes[3], 0.0, 1.0, 0},
      {kOddSizes[2], 0.1, 1.0, 1},  {kOddSizes[3], 0.05, 2.5, 0},
  };
  // PyTorch's defaults: lerp's small-weight branch (1 - b1 < 0.5).
  checkAdamW(cases, rt::AdamWConfig{}, 3, "AdamW defaults");
  // 1 - b1 >= 0.5: lerp's other branch.
  checkAdamW(cases, rt::AdamWConfig{0.3, 0.95, 1e-6}, 3, "AdamW beta1 0.3");
}

TEST_F(CudaKernels, OptimizerAdamWManyTensors) {
  // More tensors than one launch takes (512), empty ones among them.
  std::vector<AdamWCase> cases;
  for (int i = 0; i < 700; ++i)
    cases.push_back({i % 9 == 4 ? 0 : (i * 37) % 300 + 1 + (i == 600) * 40000,
                     i % 2 ? 0.1 : 0.0, i % 3 ? 1.0 : 0.25,
                     size_t(i % 7 == 0)});
  checkAdamW(cases, rt::AdamWConfig{}, 2, "AdamW 700 tensors");
}

//===----------------------------------------------------------------------===//
// Gradient norm partials, finiteness, scaling, part sums
//===----------------------------------------------------------------------===//

TEST_F(CudaKernels, OptimizerGradNormPartials) {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(65536), int64_t(65537),
                    (int64_t(1) << 20) + 3}) {
    std::vector<float> h = randomVector(size_t(n), -1.0f, 1.0f);
    h[size_t(n) / 2] = 3.0e4f; // a few large values
    h.back() = -1.5e-3f;
    const int64_t blocks = rt::gradNormBlocks(n);
    std::vector<double> ref(static_cast<size_t>(blocks));
    rt::gradNormPartials(h.data(), n, ref.data());
    std::vector<double> got[2];
    for (size_t offset : {size_t(0), size_t(1)}) {
      OptBuf d(h, offset);
      got[offset].assign(size_t(blocks), -1.0);
      cu::gradNormPartials(d.p, n, rt::kGradNormBlock, got[offset].data());
      for (int64_t b = 0; b < blocks; ++b)
        EXPECT_LE(std::fabs(got[offset][b] - ref[b]), 1e-12 * ref[b])
            << "n " << n << " offset " << offset << " block " << b << ": "
            << got[offset][b] << " vs " << ref[b];
      // The same bits again: fixed order, no atomics.
      std::vector<double> again(size_t(blocks), -1.0);
      cu::gradNormPartials(d.p, n, rt::kGradNormBlock, again.data());
      EXPECT_EQ(0, std::memcmp(again.data(), got[offset].data(),
                               size_t(blocks) * sizeof(double)))
          << "n " << n << " offset " << offset << ": differs run to run";
    }
    // The order does not depend on the alignment (float4 or scalar loads).
    EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(),
                             size_t(blocks) * sizeof(double)))
        << "n " << n << ": aligned and unaligned partials differ";
  }
}

TEST_F(CudaKernels, OptimizerManySpansAreEachSpansOwn) {
  // The trainer checks and measures all of a worker's gradients in one call:
  // the partials are each span's own, concatenated, bit for bit, and the
  // first non-finite span is found whatever follows it.
  std::vector<int64_t> sizes = {7, 65537, 3, (int64_t(1) << 17) + 5, 1};
  std::vector<std::vector<float>> host;
  std::vector<std::unique_ptr<OptBuf>> dev;
  std::vector<cu::FloatSpan> spans;
  size_t blocks = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    host.push_back(randomVector(size_t(sizes[k]), -1.0f, 1.0f));
    dev.push_back(std::make_unique<OptBuf>(host.back(), k % 2));
    spans.push_back({dev.back()->p, sizes[k]});
    blocks += size_t(rt::gradNormBlocks(sizes[k]));
  }
  std::vector<double> many(blocks, -1.0), one;
  cu::gradNormPartialsMany(spans.data(), spans.size(), rt::kGradNormBlock,
                           many.data());
  for (const cu::FloatSpan &span : spans) {
    std::vector<double> p(size_t(rt::gradNormBlocks(span.n)));
    cu::gradNormPartials(span.data, span.n, rt::kGradNormBlock, p.data());
    one.insert(one.end(), p.begin(), p.end());
  }
  ASSERT_EQ(many.size(), one.size());
  EXPECT_EQ(0, std::memcmp(many.data(), one.data(), blocks * sizeof(double)));

  EXPECT_EQ(cu::firstNonFiniteSpan(spans.data(), spans.size()), -1);
  EXPECT_EQ(cu::firstNonFiniteSpan(nullptr, 0), -1);
  for (int bad : {3, 1}) {
    float inf = std::numeric_limits<float>::infinity();
    host[size_t(bad)].back() = bad == 3 ? inf : std::nanf("");
    dev[size_t(bad)] = std::make_unique<OptBuf>(host[size_t(bad)], 0);
    spans[size_t(bad)].data = dev[size_t(bad)]->p;
  }
  EXPECT_EQ(cu::firstNonFiniteSpan(spans.data(), spans.size()), 1);
  EXPECT_EQ(cu::firstNonFiniteSpan(spans.data() + 2, 3), 1);
}

TEST_F(CudaKernels, OptimizerAllFinite) {
  EXPECT_TRUE(cu::allFinite(nullptr, 0));
  for (int64_t n : {int64_t(1), int64_t(65537), (int64_t(1) << 20) + 3})
    for (size_t offset : {size_t(0), size_t(1)}) {
      std::vector<float> h = randomVector(size_t(n), -1e30f, 1e30f);
      OptBuf d(h, offset);
      std::string what =
          "n " + std::to_string(n) + " offset " + std::to_string(offset);
      EXPECT_TRUE(cu::allFinite(d.p, n)) << what;
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> b = h;
        b.back() = bad;
        d.upload(b);
        EXPECT_FALSE(cu::allFinite(d.p, n)) << what << " last " << bad;
        b = h;
        b.front() = bad;
        d.upload(b);
        EXPECT_FALSE(cu::allFinite(d.p, n)) << what << " first " << bad;
      }
    }
}

TEST_F(CudaKernels, OptimizerScale) {
  for (int64_t n : {int64_t(7), (int64_t(1) << 20) + 3})
    for (size_t offset : {size_t(0), size_t(1)}) {
      std::vector<float> h = randomVector(size_t(n), -2.0f, 2.0f);
      OptBuf d(h, offset);
      const float factor = 0.3712f;
      cu::scaleInPlace(d.p, n, factor);
      // clipGradNorm's loop.
      for (float &x : h)
        x = x * factor;
      expectBitwise(d.download(), h,
                    "scale n " + std::to_string(n) + " offset " +
                        std::to_string(offset));
    }
}

TEST_F(CudaKernels, OptimizerSumParts) {
  for (int32_t count : {1, 3, 20}) // 20: a second launch continues the sum
    for (int64_t n : {int64_t(7), (int64_t(1) << 20) + 3})
      for (int variant = 0; variant < 3; ++variant) {
        // 0: aligned; 1: one part unaligned; 2: the sum is parts[0].
        std::vector<std::vector<float>> h;
        std::vector<std::unique_ptr<OptBuf>> d;
        std::vector<const float *> ptrs;
        for (int32_t k = 0; k < count; ++k) {
          // Magnitudes that differ, so the order of the additions matters.
          float range = k % 2 ? 1.0f : 1e3f;
          h.push_back(randomVector(size_t(n), -range, range));
          d.push_back(std::make_unique<OptBuf>(
              h.back(), variant == 1 && k == count / 2 ? 1 : 0));
          ptrs.push_back(d.back()->p);
        }
        OptBuf out(static_cast<size_t>(n));
        float *sum = variant == 2 ? d[0]->p : out.p;
        cu::sumParts(sum, ptrs.data(), count, n);
        // DeviceOps::sumParts on the host: sum = parts[0]; sum += parts[k].
        std::vector<float> ref = h[0];
        for (int32_t k = 1; k < count; ++k)
          for (size_t e = 0; e < ref.size(); ++e)
            ref[e] += h[k][e];
        expectBitwise(variant == 2 ? d[0]->download() : out.download(), ref,
                      "sumParts count " + std::to_string(count) + " n " +
                          std::to_string(n) + " variant " +
                          std::to_string(variant));
      }
}

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//


// Not a correctness test: the AdamW update at W1's size (300 tensors, 1.7e9
// parameters; fewer if the GPU lacks the 27 GB), as bytes moved per second
// (28 per parameter). Run with --gtest_also_run_disabled_tests.
TEST_F(CudaKernels, DISABLED_OptimizerTiming) {
  size_t freeBytes = 0, totalBytes = 0;
  ck(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo");
  const int tensors = 300;
  int64_t per = 5666667; // 1.7e9 / 300; odd, so every tensor has a tail
  while (per > 1024 && 16.0 * per * tensors > 0.8 * double(freeBytes))
    per /= 2;
  // Tensors start at multiples of 64 floats, as separate allocations would.
  const int64_t stride = (per + 63) / 64 * 64;
  const size_t bytes = size_t(stride) * tensors * sizeof(float);
  float *buf[4] = {};
  for (float *&b : buf) {
    ck(cudaMalloc(&b, bytes), "cudaMalloc");
    ck(cudaMemset(b, 0, bytes), "memset");
  }
  ck(cudaDeviceSynchronize(), "sync memset");
  std::vector<cu::AdamWTensor> params(tensors);
  for (int t = 0; t < tensors; ++t)
    params[t] = {buf[0] + t * stride,
                 buf[1] + t * stride,
                 buf[2] + t * stride,
                 buf[3] + t * stride,
                 per,
                 1.0,
                 t % 2 ? 0.1 : 0.0};
  const int64_t total = per * tensors;
  int64_t step = 0;
  double ms = timeMs(
      [&] {
        cu::adamwUpdate(params.data(), params.size(), cu::AdamWConfig{}, 1e-4,
                        ++step);
      },
      5);
  std::printf("[ timing ] adamwUpdate %d tensors, %.3g params: %.3f ms, "
              "%.0f GB/s (28 B/param)\n",
              tensors, double(total), ms, 28.0 * double(total) / ms / 1e6);

  // One gradient as large as the W1 embedding: host-timed, as it waits for
  // its partials.
  const int64_t n = std::min<int64_t>(total, int64_t(1) << 28);
  std::vector<double> partials(size_t(rt::gradNormBlocks(n)));
  cu::gradNormPartials(buf[1], n, rt::kGradNormBlock, partials.data());
  auto t0 = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int r = 0; r < reps; ++r)
    cu::gradNormPartials(buf[1], n, rt::kGradNormBlock, partials.data());
  double normMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - t0)
                      .count() /
                  reps;
  std::printf("[ timing ] gradNormPartials %.3g floats: %.3f ms, %.0f GB/s\n",
              double(n), normMs, 4.0 * double(n) / normMs / 1e6);
  t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    EXPECT_TRUE(cu::allFinite(buf[1], n));
  double finiteMs = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count() /
                    reps;
  std::printf("[ timing ] allFinite %.3g floats: %.3f ms, %.0f GB/s\n",
              double(n), finiteMs, 4.0 * double(n) / finiteMs / 1e6);
  const float *parts[3] = {buf[1], buf[2], buf[3]};
  double sumMs = timeMs([&] { cu::sumParts(buf[0], parts, 3, n); }, 5);
  std::printf("[ timing ] sumParts 3 x %.3g floats: %.3f ms, %.0f GB/s\n",
              double(n), sumMs, 16.0 * double(n) / sumMs / 1e6);
  for (float *b : buf)
    cudaFree(b);
}

} // namespace
} // namespace cuda_test
