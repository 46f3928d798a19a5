//===- StepLog.h - What a run reports ---------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Progress lines on stderr (unless --quiet), the JSON step log (--log-json)
// and, with --optimizer-mode=stale, the step whose log waits for its
// update: a step's gradient norm comes from its update, which runs during
// the next step, so the step is logged once the next one is issued, not
// before, and the GPU does not wait for the log.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_STEPLOG_H
#define RONDO_RUNTIME_SRC_TRAINER_STEPLOG_H

#include "Cli.h"
#include "Log.h"
#include "TensorBoard.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace rondo::rt {

class StepLog {
public:
  explicit StepLog(const TrainerOptions &opts) : opts(opts) {}

  /// A line on stderr, unless --quiet.
  void say(const std::string &line) const;
  /// Opens --log-json and --tensorboard (if given) for a run whose first
  /// step is `firstStep`: a resumed run appends to the JSON log
  /// (JsonStepLog) and adds an event file (TensorBoardLog). `firstStep`
  /// also serves the ETA.
  void open(int64_t firstStep);
  /// Writes a step's progress line and JSON record.
  void step(const StepRecord &record, double elapsed);
  /// Stale updates: holds the step back until its update has run.
  void hold(const StepRecord &record, double elapsed) {
    pending = Pending{record, elapsed};
  }
  bool hasPending() const { return pending.has_value(); }
  /// Logs the held-back step (if any) with the norm its update computed.
  void logPending(double gradNorm);
  /// The loss of an evaluation after `stepsDone` steps over `tokens`.
  void eval(int64_t stepsDone, double loss, int64_t tokens);

private:
  struct Pending {
    StepRecord record;
    double elapsed = 0;
  };
  const TrainerOptions &opts;
  std::unique_ptr<JsonStepLog> json;           ///< --log-json
  std::unique_ptr<TensorBoardLog> tensorboard; ///< --tensorboard
  int64_t firstStep = 0;
  std::optional<Pending> pending;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_STEPLOG_H
