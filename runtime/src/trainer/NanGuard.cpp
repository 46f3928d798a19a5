//===- NanGuard.cpp - Non-finite gradients and losses ---------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/NanGuard.h"
#include "rondo/runtime/Error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace rondo::rt {

/// The largest exponent field is not all ones. Branch-free, so it
/// vectorises; most steps have no NaN. Threaded: the optimizer task checks
/// every gradient of a step before it updates anything, gigabytes for a
/// 1.7B model, on the step's critical path.
bool allFinite(const void *data, int64_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint32_t largest = 0;
// clang-format off
#pragma omp parallel for simd reduction(max : largest) schedule(static) if (n >= (int64_t(1) << 20))
  // clang-format on
  for (int64_t e = 0; e < n; ++e) {
    uint32_t bits;
    std::memcpy(&bits, p + 4 * e, sizeof(bits));
    largest = std::max(largest, bits & 0x7f800000u);
  }
  return largest != 0x7f800000u;
}

NonFiniteParam firstNonFiniteParam(const ModelSpec &model,
                                   const float *const *data) {
  for (int i = 0; i < model.numParams; ++i) {
    const int64_t n = numElements(model.params[i]);
    if (allFinite(data[i], n))
      continue;
    int64_t e = 0;
    while (e < n && std::isfinite(data[i][e]))
      ++e;
    return {i, e};
  }
  return {};
}

std::string stepName(int64_t step) {
  return "step " + std::to_string(step + 1);
}

std::string nonFiniteLoss(const std::vector<double> &losses, int64_t step) {
  for (size_t m = 0; m < losses.size(); ++m)
    if (!std::isfinite(losses[m]))
      return "non-finite loss in microbatch " + std::to_string(m) + " of " +
             stepName(step);
  return "";
}

void NanGuard::record(int64_t inStep, const std::string &message) {
  std::lock_guard<std::mutex> lock(mu);
  if (step < 0) {
    step = inStep;
    what = message;
  }
}

bool NanGuard::foundIn(int64_t inStep) {
  std::lock_guard<std::mutex> lock(mu);
  return inStep < 0 ? step >= 0 : step == inStep;
}

void NanGuard::throwIfStop() {
  std::lock_guard<std::mutex> lock(mu);
  if (step >= 0 && policy == OnNan::Stop)
    throw Error(stepName(step) + ": non-finite gradient in " + what +
                "; no update was applied with it");
}

std::string NanGuard::take(int64_t inStep) {
  std::lock_guard<std::mutex> lock(mu);
  std::string bad;
  if (step == inStep)
    bad = stepName(inStep) + ": non-finite gradient in " + what;
  step = -1;
  return bad;
}

void NanGuard::stopIfStop(const std::string &why) const {
  if (policy == OnNan::Stop)
    throw Error(why + "; no update was applied with it");
}

void NanGuard::stopIfMostlySkipped(int64_t skipped, int64_t step) const {
  if (policy != OnNan::Skip ||
      double(skipped) <= maxSkippedFraction * double(totalSteps))
    return;
  char fraction[32];
  std::snprintf(fraction, sizeof(fraction), "%g", maxSkippedFraction);
  throw Error(std::to_string(skipped) + (skipped == 1 ? " step" : " steps") +
              " skipped (--on-nan=skip), " + stepName(step) +
              " the last: more than --max-skipped-fraction " + fraction +
              " of --steps " + std::to_string(totalSteps) +
              " allows; the run is diverging, not meeting a bad batch "
              "(lower --lr, or raise --max-skipped-fraction)");
}

} // namespace rondo::rt
