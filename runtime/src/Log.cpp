//===- Log.cpp - Progress lines and the JSON step log ---------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Log.h"

#include "rondo/runtime/Error.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace rondo::rt {

std::string jsonQuote(const std::string &text) {
  std::string s = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      s += '\\';
      s += char(c);
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      s += buffer;
    } else {
      s += char(c);
    }
  }
  return s + "\"";
}

std::string jsonNumber(double value) {
  if (!std::isfinite(value))
    return "null";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  int64_t s = int64_t(seconds + 0.5);
  char buffer[64];
  if (s >= 3600)
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld:%02lld",
                  (long long)(s / 3600), (long long)(s / 60 % 60),
                  (long long)(s % 60));
  else
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld", (long long)(s / 60),
                  (long long)(s % 60));
  return buffer;
}

std::string progressLine(const StepRecord &r, int64_t totalSteps,
                         double elapsedSeconds, int64_t firstStep) {
  int64_t done = r.step + 1;
  double eta = elapsedSeconds / double(std::max<int64_t>(1, done - firstStep)) *
               double(totalSteps - done);
  double tokensPerSecond = r.seconds > 0 ? double(r.tokens) / r.seconds : 0;
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer),
                "step %lld/%lld | loss %.6f | lr %.3e | grad norm %.4g | "
                "%.0f tok/s | elapsed %s | ETA %s",
                (long long)done, (long long)totalSteps, r.loss, r.lr,
                r.gradNorm, tokensPerSecond,
                formatDuration(elapsedSeconds).c_str(),
                formatDuration(eta).c_str());
  return buffer;
}

namespace {
/// The value of a record's first key `key` ("step", "eval_step"), as the
/// log writes it; false for any other line.
bool firstKeyValue(const std::string &line, const std::string &key,
                   int64_t &value) {
  const std::string prefix = "{\"" + key + "\": ";
  if (line.compare(0, prefix.size(), prefix) != 0)
    return false;
  const char *begin = line.data() + prefix.size();
  const char *end = line.data() + line.size();
  auto [stop, err] = std::from_chars(begin, end, value);
  return err == std::errc() && stop != begin && stop < end && *stop == ',';
}

/// The bytes of the log at `path` to keep for a run resumed at `firstStep`:
/// its leading whole lines that record earlier steps. The records after
/// them are of steps the resumed run does again (the interrupted run went
/// on past its last checkpoint), or a line cut short by a kill.
std::size_t resumedPrefix(const std::string &path, int64_t firstStep) {
  std::ifstream in(path, std::ios::binary);
  std::size_t kept = 0;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line) && !in.eof()) {
    if (!(firstKeyValue(line, "step", n) && n < firstStep) &&
        !(firstKeyValue(line, "eval_step", n) && n <= firstStep))
      break;
    kept += line.size() + 1;
  }
  return kept;
}
} // namespace

JsonStepLog::JsonStepLog(const std::string &path, int64_t firstStep)
    : path(path) {
  if (firstStep > 0 && ::access(path.c_str(), F_OK) == 0 &&
      ::truncate(path.c_str(), off_t(resumedPrefix(path, firstStep))) != 0)
    throw Error(path + ": cannot keep the JSON log of the resumed run: " +
                std::strerror(errno));
  file = std::fopen(path.c_str(), firstStep > 0 ? "a" : "w");
  if (!file)
    throw Error(path + ": cannot create the JSON log: " + std::strerror(errno));
}

JsonStepLog::~JsonStepLog() {
  if (file)
    std::fclose(file);
}

void JsonStepLog::write(const StepRecord &r) {
  std::string line = "{\"step\": " + std::to_string(r.step) +
                     ", \"loss\": " + jsonNumber(r.loss) +
                     ", \"tokens\": " + std::to_string(r.tokens) +
                     ", \"seconds\": " + jsonNumber(r.seconds) +
                     ", \"lr\": " + jsonNumber(r.lr) +
                     ", \"grad_norm\": " + jsonNumber(r.gradNorm) + "}\n";
  if (std::fputs(line.c_str(), file) < 0 || std::fflush(file) != 0)
    throw Error(path + ": cannot write the JSON log: " + std::strerror(errno));
}

void JsonStepLog::writeEval(int64_t stepsDone, double loss, int64_t tokens) {
  std::string line = "{\"eval_step\": " + std::to_string(stepsDone) +
                     ", \"eval_loss\": " + jsonNumber(loss) +
                     ", \"eval_ppl\": " + jsonNumber(std::exp(loss)) +
                     ", \"eval_tokens\": " + std::to_string(tokens) + "}\n";
  if (std::fputs(line.c_str(), file) < 0 || std::fflush(file) != 0)
    throw Error(path + ": cannot write the JSON log: " + std::strerror(errno));
}

} // namespace rondo::rt
