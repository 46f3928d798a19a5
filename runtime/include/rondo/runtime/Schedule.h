//===- Schedule.h - Learning-rate schedules ---------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The schedules of Hugging Face transformers (get_constant_schedule_with_
// warmup, get_cosine_schedule_with_warmup with num_cycles = 0.5,
// get_linear_schedule_with_warmup) driven through torch's LambdaLR: the
// update with 0-based index s uses lr = base * lambda(s). In particular a
// warm-up of W steps makes the first update use lr 0, as it does there.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SCHEDULE_H
#define RONDO_RUNTIME_SCHEDULE_H

#include <cstdint>
#include <optional>
#include <string>

namespace rondo::rt {

enum class LrSchedule { Constant, Cosine, Linear };

/// Parses "constant", "cosine" or "linear".
std::optional<LrSchedule> parseLrSchedule(const std::string &name);
const char *lrScheduleName(LrSchedule schedule);

/// The multiplier lambda(step) of the base learning rate for the update with
/// 0-based index `step` of `totalSteps`, after `warmupSteps` of linear
/// warm-up.
double lrMultiplier(LrSchedule schedule, int64_t step, int64_t warmupSteps,
                    int64_t totalSteps);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SCHEDULE_H
