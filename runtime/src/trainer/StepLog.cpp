//===- StepLog.cpp - What a run reports -----------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/StepLog.h"
#include "rondo/runtime/Error.h"

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
  if (!opts.tensorboard.empty()) {
    try {
      tensorboard = std::make_unique<TensorBoardLog>(opts.tensorboard, first);
    } catch (const Error &e) {
      throw Error(std::string("--tensorboard: ") + e.what());
    }
  }
}

void StepLog::step(const StepRecord &record, double elapsed) {
  if (json)
    json->write(record);
  if (tensorboard)
    // The x axis is the progress line's step (steps done); the values are
    // the JSON log's, as float32 (simple_value).
    tensorboard->scalars(
        record.step + 1,
        {{"train/loss", record.loss},
         {"train/learning_rate", record.lr},
         {"train/grad_norm", record.gradNorm},
         {"train/tokens_per_second",
          record.seconds > 0 ? double(record.tokens) / record.seconds : 0.0},
         {"memory/host_rss_gb", residentMemoryGB()},
         {"memory/host_peak_gb", peakResidentMemoryGB()}});
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
  if (tensorboard)
    tensorboard->scalars(
        stepsDone, {{"eval/loss", loss}, {"eval/perplexity", std::exp(loss)}});
}

} // namespace rondo::rt
