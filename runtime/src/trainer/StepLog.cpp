//===- StepLog.cpp - What a run reports -----------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/StepLog.h"

#include <cmath>
#include <cstdio>

namespace rondo::rt {

void StepLog::say(const std::string &line) const {
  if (!opts.quiet) {
    std::fputs((line + "\n").c_str(), stderr);
    std::fflush(stderr);
  }
}

void StepLog::open(int64_t first) {
  firstStep = first;
  if (!opts.logJson.empty())
    json = std::make_unique<JsonStepLog>(opts.logJson, first);
}

void StepLog::step(const StepRecord &record, double elapsed) {
  if (json)
    json->write(record);
  say(progressLine(record, opts.steps, elapsed, firstStep));
}

void StepLog::logPending(double gradNorm) {
  if (!pending)
    return;
  pending->record.gradNorm = gradNorm;
  step(pending->record, pending->elapsed);
  pending.reset();
}

void StepLog::eval(int64_t stepsDone, double loss, int64_t tokens) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), "eval: step %lld loss %.6f ppl %.4f",
                (long long)stepsDone, loss, std::exp(loss));
  say(buffer);
  if (json)
    json->writeEval(stepsDone, loss, tokens);
}

} // namespace rondo::rt
