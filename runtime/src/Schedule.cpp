//===- Schedule.cpp - Learning-rate schedules -----------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace rondo::rt {

namespace {

constexpr std::pair<LrSchedule, const char *> kScheduleNames[] = {
    {LrSchedule::Constant, "constant"},
    {LrSchedule::Cosine, "cosine"},
    {LrSchedule::Linear, "linear"},
};

} // namespace

std::optional<LrSchedule> parseLrSchedule(const std::string &name) {
  for (auto [schedule, scheduleName] : kScheduleNames)
    if (name == scheduleName)
      return schedule;
  return std::nullopt;
}

const char *lrScheduleName(LrSchedule schedule) {
  for (auto [known, name] : kScheduleNames)
    if (known == schedule)
      return name;
  return "?";
}

double lrMultiplier(LrSchedule schedule, int64_t step, int64_t warmupSteps,
                    int64_t totalSteps) {
  // Written as transformers' lr_lambda functions are, including their
  // max(1, ...) guards, so edge cases (warmup >= total) agree too.
  if (step < warmupSteps)
    return double(step) / double(std::max<int64_t>(1, warmupSteps));
  switch (schedule) {
  case LrSchedule::Constant:
    return 1.0;
  case LrSchedule::Cosine: {
    constexpr double kNumCycles = 0.5;
    double progress = double(step - warmupSteps) /
                      double(std::max<int64_t>(1, totalSteps - warmupSteps));
    return std::max(0.0,
                    0.5 * (1.0 + std::cos(M_PI * kNumCycles * 2.0 * progress)));
  }
  case LrSchedule::Linear:
    return std::max(0.0,
                    double(totalSteps - step) /
                        double(std::max<int64_t>(1, totalSteps - warmupSteps)));
  }
  return 1.0;
}

} // namespace rondo::rt
