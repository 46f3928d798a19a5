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

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace rondo::rt {

/// Whether `n` floats at `data` are all finite.
bool allFinite(const void *data, int64_t n);

/// "non-finite loss in microbatch M of step S" for the first non-finite
/// one of `losses`, or "".
std::string nonFiniteLoss(const std::vector<double> &losses, int64_t step);

class NanGuard {
public:
  explicit NanGuard(OnNan policy) : policy(policy) {}

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

private:
  OnNan policy;
  std::mutex mu;
  int64_t step = -1;
  std::string what;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_NANGUARD_H
