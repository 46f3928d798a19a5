//===- Log.h - Progress lines and the JSON step log -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_LOG_H
#define RONDO_RUNTIME_SRC_LOG_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace rondo::rt {

/// What one optimizer step reports.
struct StepRecord {
  int64_t step = 0; ///< 0-based.
  double loss = 0;
  int64_t tokens = 0;
  double seconds = 0;
  double lr = 0;
  double gradNorm = 0;
};

/// Shortest decimal that reads back as the same double; "null" for NaN and
/// infinities, which JSON cannot express.
std::string jsonNumber(double value);
/// `text` as a JSON string literal, quotes included.
std::string jsonQuote(const std::string &text);

/// "H:MM:SS" (or "M:SS" under an hour).
std::string formatDuration(double seconds);

/// The human progress line of a step; `firstStep` is where this run
/// started (a resumed run), for the ETA.
std::string progressLine(const StepRecord &record, int64_t totalSteps,
                         double elapsedSeconds, int64_t firstStep = 0);

/// One JSON object per line, flushed after every step so tools can follow
/// a running job.
class JsonStepLog {
public:
  /// Opens `path` for a run whose first step is `firstStep`: a run from
  /// step 0 truncates it; a resumed run keeps the records of the steps
  /// before `firstStep` (and of the evaluations after at most `firstStep`
  /// steps) and appends, so the log of an interrupted and resumed run holds
  /// every step once. Throws rt::Error when it cannot be opened.
  JsonStepLog(const std::string &path, int64_t firstStep);
  ~JsonStepLog();
  JsonStepLog(const JsonStepLog &) = delete;
  JsonStepLog &operator=(const JsonStepLog &) = delete;

  void write(const StepRecord &record);
  /// An evaluation after `stepsDone` steps: its own keys, so step lines
  /// keep their fixed shape.
  void writeEval(int64_t stepsDone, double loss, int64_t tokens);

private:
  std::string path;
  std::FILE *file = nullptr;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_LOG_H
