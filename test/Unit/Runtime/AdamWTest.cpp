//===- AdamWTest.cpp - AdamW, clipping and schedules vs references --------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/FloatConv.h"
#include "rondo/runtime/Schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <omp.h>
#include <random>
#include <vector>

using namespace rondo::rt;

namespace {

/// torch.optim.AdamW's _single_tensor_adam (decoupled weight decay) on CPU
/// fp32 tensors, one element at a time, written straight from the Python
/// source and the ATen kernels it calls.
struct ReferenceAdamW {
  ReferenceAdamW(double lr, double beta1, double beta2, double eps,
                 double weightDecay)
      : lr(lr), beta1(beta1), beta2(beta2), eps(eps), weightDecay(weightDecay) {
  }

  double lr, beta1, beta2, eps, weightDecay;
  int64_t step = 0;
  std::vector<float> m, v;

  void update(std::vector<float> &p, const std::vector<float> &g) {
    if (m.empty()) {
      m.assign(p.size(), 0.0f);
      v.assign(p.size(), 0.0f);
    }
    ++step;
    double bias1 = 1 - std::pow(beta1, double(step));
    double bias2 = 1 - std::pow(beta2, double(step));
    double stepSize = lr / bias1;
    double bias2Sqrt = std::sqrt(bias2);
    float lerpWeight = float(1 - beta1);
    for (size_t i = 0; i < p.size(); ++i) {
      if (weightDecay != 0)
        p[i] = p[i] * float(1 - lr * weightDecay); // param.mul_
      // exp_avg.lerp_(grad, 1 - beta1): at::lerp_vec.
      if (std::fabs(lerpWeight) < 0.5f)
        m[i] = std::fma(lerpWeight, g[i] - m[i], m[i]);
      else
        m[i] = std::fma(lerpWeight - 1.0f, g[i] - m[i], g[i]);
      // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
      float vi = v[i] * float(beta2);
      v[i] = vi + float(1 - beta2) * g[i] * g[i];
      // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
      float denom = std::sqrt(v[i]) / float(bias2Sqrt) + float(eps);
      // param.addcdiv_(exp_avg, denom, value=-step_size)
      p[i] = p[i] + float(-stepSize) * m[i] / denom;
    }
  }
};

std::vector<float> randomVector(size_t n, std::mt19937 &rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (float &e : x)
    e = dist(rng);
  return x;
}

double maxRelativeError(const std::vector<float> &a,
                        const std::vector<float> &b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double denom = std::max(std::fabs(double(b[i])), 1e-30);
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])) / denom);
  }
  return worst;
}

struct AdamWCase {
  double beta1;
  double weightDecay;
};

void PrintTo(const AdamWCase &c, std::ostream *os) {
  *os << "beta1=" << c.beta1 << " weight_decay=" << c.weightDecay;
}

class AdamWVsReference : public ::testing::TestWithParam<AdamWCase> {};

TEST_P(AdamWVsReference, MatchesPyTorchFormula) {
  const AdamWCase c = GetParam();
  const std::vector<size_t> sizes = {0, 1, 7, 33, 1000, 65537, 100003};
  std::mt19937 rng(42);
  const double lr = 1e-3, lrScale = 0.5, beta2 = 0.999, eps = 1e-8;

  std::vector<std::vector<float>> params, refParams, grads;
  std::vector<ReferenceAdamW> refs;
  AdamWConfig config;
  config.beta1 = c.beta1;
  config.beta2 = beta2;
  config.eps = eps;
  AdamW opt(config);
  for (size_t i = 0; i < sizes.size(); ++i) {
    params.push_back(randomVector(sizes[i], rng, 1.0f));
    grads.push_back(std::vector<float>(sizes[i]));
  }
  refParams = params;
  for (size_t i = 0; i < sizes.size(); ++i) {
    // Odd tensors get a group lr scale, to check per-group settings.
    double scale = i % 2 ? lrScale : 1.0;
    opt.addParam(params[i].data(), grads[i].data(), int64_t(sizes[i]),
                 c.weightDecay, scale);
    refs.emplace_back(lr * scale, c.beta1, beta2, eps, c.weightDecay);
  }
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      // Copy, not assign: the optimizer holds pointers to these buffers.
      std::vector<float> fresh =
          randomVector(sizes[i], rng, step == 3 ? 1e-6f : 0.1f);
      std::copy(fresh.begin(), fresh.end(), grads[i].begin());
      if (!grads[i].empty())
        grads[i][0] = 0.0f; // Zero gradient: pure decay/momentum.
    }
    opt.step(lr);
    for (size_t i = 0; i < sizes.size(); ++i)
      refs[i].update(refParams[i], grads[i]);
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_LE(maxRelativeError(params[i], refParams[i]), 1e-6)
          << "tensor " << i << " (" << sizes[i] << " elements), step " << step;
      const AdamWTensor &t = opt.tensor(i);
      for (size_t e = 0; e < sizes[i]; ++e) {
        ASSERT_EQ(t.expAvg[e], refs[i].m[e]);
        ASSERT_EQ(t.expAvgSq[e], refs[i].v[e]);
      }
    }
  }
  EXPECT_EQ(opt.stepCount(), 6);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AdamWVsReference,
    ::testing::Values(AdamWCase{0.9, 0.01}, AdamWCase{0.9, 0.0},
                      AdamWCase{0.3, 0.1}), // 1 - b1 >= 0.5: other lerp.
    [](const ::testing::TestParamInfo<AdamWCase> &info) {
      std::string name = "beta1_" + std::to_string(int(info.param.beta1 * 10)) +
                         "_wd_" +
                         std::to_string(int(info.param.weightDecay * 100));
      return name;
    });

TEST(AdamW, AgreesWithDoublePrecisionMath) {
  // Independent of the exact rounding: the textbook update in double.
  std::mt19937 rng(7);
  std::vector<float> p = randomVector(4097, rng, 1.0f);
  std::vector<double> pd(p.begin(), p.end()), m(p.size()), v(p.size());
  std::vector<float> g(p.size());
  AdamW opt;
  opt.addParam(p.data(), g.data(), int64_t(p.size()), 0.01);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> fresh = randomVector(p.size(), rng, 0.1f);
    std::copy(fresh.begin(), fresh.end(), g.begin());
    opt.step(lr);
    for (size_t i = 0; i < p.size(); ++i) {
      pd[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
      double mhat = m[i] / (1 - std::pow(b1, t));
      double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
      pd[i] -= lr * mhat / denom;
    }
  }
  for (size_t i = 0; i < p.size(); ++i)
    ASSERT_NEAR(p[i], pd[i], 1e-5 * std::max(1.0, std::fabs(pd[i]))) << i;
}

TEST(AdamW, BitwiseIndependentOfThreadCount) {
  std::mt19937 rng(3);
  std::vector<size_t> sizes = {5, 100000, 17, 300001};
  std::vector<std::vector<float>> runs[2];
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run == 0 ? 1 : 3);
    std::mt19937 local(11);
    std::vector<std::vector<float>> p, g;
    for (size_t n : sizes) {
      p.push_back(randomVector(n, local, 1.0f));
      g.push_back(randomVector(n, local, 0.1f));
    }
    AdamW opt;
    for (size_t i = 0; i < sizes.size(); ++i)
      opt.addParam(p[i].data(), g[i].data(), int64_t(sizes[i]), 0.01);
    for (int s = 0; s < 3; ++s)
      opt.step(1e-3);
    runs[run] = p;
  }
  omp_set_num_threads(omp_get_num_procs());
  for (size_t i = 0; i < sizes.size(); ++i)
    ASSERT_EQ(0, std::memcmp(runs[0][i].data(), runs[1][i].data(),
                             sizes[i] * sizeof(float)))
        << "tensor " << i;
}

TEST(GradNorm, ClipsLikeTorch) {
  std::vector<float> a = {3.0f, 0.0f}, b = {4.0f};
  GradTensor grads[2] = {{a.data(), 2}, {b.data(), 1}};
  double norm = gradNorm(grads, 2);
  EXPECT_DOUBLE_EQ(norm, 5.0);

  // max_norm above the norm: coefficient clamps to 1, nothing changes.
  EXPECT_EQ(clipGradNorm(grads, 2, norm, 10.0), 1.0f);
  EXPECT_EQ(a[0], 3.0f);
  EXPECT_EQ(b[0], 4.0f);

  float coef = clipGradNorm(grads, 2, norm, 1.0);
  EXPECT_EQ(coef, 1.0f / (5.0f + float(1e-6)));
  EXPECT_EQ(a[0], 3.0f * coef);
  EXPECT_EQ(b[0], 4.0f * coef);
  EXPECT_NEAR(gradNorm(grads, 2), 1.0, 1e-6);
}

TEST(GradNorm, LargeAndEmptyTensorsIndependentOfThreads) {
  std::mt19937 rng(5);
  std::vector<float> big = randomVector(1000003, rng, 1.0f), empty;
  GradTensor grads[2] = {{big.data(), int64_t(big.size())}, {nullptr, 0}};
  omp_set_num_threads(1);
  double one = gradNorm(grads, 2);
  omp_set_num_threads(2);
  double two = gradNorm(grads, 2);
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(one, two);
  long double exact = 0;
  for (float x : big)
    exact += (long double)x * x;
  EXPECT_NEAR(one, std::sqrt(double(exact)), 1e-9 * one);
  EXPECT_EQ(gradNorm(nullptr, 0), 0.0);
}

TEST(Schedule, CosineMatchesClosedForm) {
  const int64_t warmup = 10, total = 110;
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Cosine, 0, warmup, total), 0.0);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Cosine, 5, warmup, total), 0.5);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Cosine, 10, warmup, total), 1.0);
  EXPECT_NEAR(lrMultiplier(LrSchedule::Cosine, 60, warmup, total), 0.5, 1e-15);
  EXPECT_NEAR(lrMultiplier(LrSchedule::Cosine, 35, warmup, total),
              0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(lrMultiplier(LrSchedule::Cosine, 110, warmup, total), 0.0, 1e-15);
  // No warm-up: the first update already uses the peak rate.
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Cosine, 0, 0, 100), 1.0);
}

TEST(Schedule, LinearAndConstantMatchClosedForm) {
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Linear, 2, 4, 104), 0.5);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Linear, 4, 4, 104), 1.0);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Linear, 54, 4, 104), 0.5);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Linear, 104, 4, 104), 0.0);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Linear, 200, 4, 104), 0.0);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Constant, 1, 4, 10), 0.25);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Constant, 7, 4, 10), 1.0);
  EXPECT_DOUBLE_EQ(lrMultiplier(LrSchedule::Constant, 0, 0, 10), 1.0);
  EXPECT_EQ(parseLrSchedule("cosine"), LrSchedule::Cosine);
  EXPECT_FALSE(parseLrSchedule("exp").has_value());
}

TEST(FloatConv, HalfRoundTripsAndRounds) {
  // Every finite half converts to fp32 and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t bits = uint16_t(h);
    float f = halfToFloat(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    ASSERT_EQ(floatToHalf(f), bits) << std::hex << h;
  }
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);        // Ties to even: infinity.
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00); // Tie to even.
  EXPECT_EQ(floatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02); // Tie to even up.
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);            // Tie to zero.
  EXPECT_EQ(floatToHalf(0x1p-25f * 3), 0x0002);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
}

TEST(FloatConv, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(floatToBf16(bitsToFloat(0x3f808000)), 0x3f80); // Tie: even.
  EXPECT_EQ(floatToBf16(bitsToFloat(0x3f818000)), 0x3f82); // Tie: up.
  EXPECT_EQ(floatToBf16(bitsToFloat(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
  EXPECT_EQ(floatToBf16(INFINITY), 0x7f80);
}

} // namespace
