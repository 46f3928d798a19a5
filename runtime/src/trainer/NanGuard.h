//===- NanGuard.h - Non-finite gradients and losses -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// --on-nan: optimizer tasks (host threads) record the first non-finite
// gradient they find before they update anything; the trainer thread then
// stops (--on-nan=stop) or skips the step (--on-nan=skip, which only the
// sync program supports: its trainer thread decides about the update).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_NANGUARD_H
#define RONDO_RUNTIME_SRC_TRAINER_NANGUARD_H

#include "Cli.h"
#include "rondo/runtime/Model.h"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace rondo::rt {

/// Whether `n` floats at `data` are all finite.
bool allFinite(const void *data, int64_t n);

/// "step N" for the step of index `step`: messages number steps from 1, as
/// the progress lines do (`--log-json`'s "step" is the index).
std::string stepName(int64_t step);

/// "non-finite loss in microbatch M of step S" for the first non-finite
/// one of `losses` (of the step of index `step`), or "".
std::string nonFiniteLoss(const std::vector<double> &losses, int64_t step);

/// The index of the first parameter (table order) of `model` whose data
/// holds a non-finite value, and that value's element; {-1, -1} if none.
/// `data` holds each parameter as the trainer does (ParamSpec::storage).
struct NonFiniteParam {
  int param = -1;
  int64_t element = -1;
};
NonFiniteParam firstNonFiniteParam(const ModelSpec &model,
                                   const void *const *data);

class NanGuard {
public:
  explicit NanGuard(const TrainerOptions &opts)
      : policy(opts.onNan), maxSkippedFraction(opts.maxSkippedFraction),
        totalSteps(opts.steps) {}

  bool skips() const { return policy == OnNan::Skip; }
  /// Records a non-finite gradient (`what`) found by an optimizer task of
  /// `step`; the first one wins. Any thread.
  void record(int64_t step, const std::string &what);
  /// Whether a task of `step` (-1: of any step) found a non-finite
  /// gradient.
  bool foundIn(int64_t step);
  /// --on-nan=stop: throws the recorded non-finite gradient.
  void throwIfStop();
  /// The message of the gradient recorded for `step` ("" for none), and
  /// forgets any record: the step is skipped, the run goes on.
  std::string take(int64_t step);
  /// --on-nan=stop throws `why`; skip returns.
  void stopIfStop(const std::string &why) const;
  /// --on-nan=skip: throws once `skipped` steps (of the whole run, resumed
  /// ones included) are more than --max-skipped-fraction of --steps, when
  /// `step` was the last: such a run is diverging, not meeting a bad batch,
  /// and exiting 0 would pass it off as trained.
  void stopIfMostlySkipped(int64_t skipped, int64_t step) const;

private:
  OnNan policy;
  double maxSkippedFraction;
  int64_t totalSteps;
  std::mutex mu;
  int64_t step = -1;
  std::string what;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_NANGUARD_H
