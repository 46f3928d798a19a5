//===- Trace.cpp - Chrome traces of a pipelined run -----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "exec/Trace.h"

#include "FileUtil.h"
#include "Log.h"

#include <cstdio>

namespace rondo::rt {

namespace {

std::string quote(const char *text) { return jsonQuote(text ? text : ""); }

const char *stageKindName(int32_t kind) {
  switch (kind) {
  case RONDO_STAGE_FORWARD:
    return "forward";
  case RONDO_STAGE_TAIL:
    return "tail";
  case RONDO_STAGE_BACKWARD:
    return "backward";
  }
  return "?";
}

/// Rows of a worker process, in the order of the predicted Gantt chart.
int workerRow(int stream) {
  switch (stream) {
  case RONDO_STREAM_PARAM_UPLOAD:
    return 0;
  case RONDO_STREAM_ACT_UPLOAD:
    return 1;
  case RONDO_STREAM_COMPUTE:
    return 2;
  default:
    return 3;
  }
}

const char *const kWorkerRows[] = {"upload", "upload (activations)", "compute",
                                   "download"};
const char *const kHostRows[] = {"data", "optimizer"};

std::string kindOf(const TraceRecord &r) {
  switch (r.op) {
  case TraceRecord::Copy:
    return copyKindName(r.copyKind);
  case TraceRecord::Fill:
    return "fill_zero";
  case TraceRecord::Launch:
    return "launch";
  case TraceRecord::Task:
    // A stale program's update is the optimizer's, shown under the step
    // whose gradients it applies.
    return r.taskKind == RONDO_TASK_LOAD_BATCH    ? "load_batch"
           : r.taskKind == RONDO_TASK_STASH_GRADS ? "grad_stash"
                                                  : "optimizer";
  }
  return "?";
}

/// Microseconds with nanosecond resolution, the clock's useful precision.
std::string micros(double us) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.3f", us);
  return buffer;
}

} // namespace

std::string chromeTraceJson(const rondo_program &program,
                            const std::vector<TraceRecord> &records) {
  const int hostPid = program.workers;
  auto stageName = [&](int32_t s) -> const char * {
    return s >= 0 && s < program.numStages ? program.stages[s].name : "";
  };
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto emit = [&](const std::string &event) {
    out += first ? "" : ",\n";
    out += event;
    first = false;
  };
  auto meta = [&](const char *what, int pid, int tid, const std::string &args) {
    emit("{\"name\": \"" + std::string(what) +
         "\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
         (tid >= 0 ? ", \"tid\": " + std::to_string(tid) : std::string()) +
         ", \"args\": {" + args + "}}");
  };
  for (int w = 0; w <= program.workers; ++w) {
    const bool host = w == hostPid;
    meta("process_name", w, -1,
         "\"name\": " +
             quote(host ? "host" : ("worker " + std::to_string(w)).c_str()));
    meta("process_sort_index", w, -1, "\"sort_index\": " + std::to_string(w));
    const char *const *rows = host ? kHostRows : kWorkerRows;
    const int numRows = host ? 2 : 4;
    for (int t = 0; t < numRows; ++t) {
      meta("thread_name", w, t, "\"name\": " + quote(rows[t]));
      meta("thread_sort_index", w, t, "\"sort_index\": " + std::to_string(t));
    }
  }
  for (const TraceRecord &r : records) {
    const std::string kind = kindOf(r);
    int pid, tid;
    if (r.worker >= 0) {
      pid = r.worker;
      tid = workerRow(r.stream);
    } else {
      pid = hostPid;
      // Row 1: the optimizer thread (updates and stale gradient stashes).
      tid = r.op == TraceRecord::Task && r.taskKind != RONDO_TASK_LOAD_BATCH;
    }
    std::string name = kind;
    if (r.op == TraceRecord::Launch)
      name = std::string(stageName(r.stage)) + " mb" +
             std::to_string(r.microbatch);
    else if (r.stage >= 0)
      name += std::string(" ") + stageName(r.stage);
    else if (r.op == TraceRecord::Task && r.taskKind == RONDO_TASK_OPTIMIZER)
      name += " all";
    emit("{\"name\": " + quote(name.c_str()) + ", \"cat\": " +
         quote(kind.c_str()) + ", \"ph\": \"X\", \"ts\": " + micros(r.startUs) +
         ", \"dur\": " + micros(r.endUs - r.startUs) + ", \"pid\": " +
         std::to_string(pid) + ", \"tid\": " + std::to_string(tid) +
         ", \"args\": {\"step\": " + std::to_string(r.step) + ", \"job\": " +
         std::to_string(r.job) + ", \"stage\": " + quote(stageName(r.stage)) +
         ", \"microbatch\": " + std::to_string(r.microbatch) + ", \"kind\": " +
         quote(kind.c_str()) + ", \"bytes\": " + std::to_string(r.bytes) +
         ", \"eval\": " + (r.eval ? "true" : "false") + "}}");
  }
  out += "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {";
  out +=
      "\"program\": " + quote(program.name) +
      ", \"optimizer\": " + quote(program.optimizer) +
      ", \"workers\": " + std::to_string(program.workers) +
      ", \"microbatches\": " + std::to_string(program.microbatches) +
      ", \"rowsPerMicrobatch\": " + std::to_string(program.rowsPerMicrobatch) +
      ", \"firstWorker\": " + std::to_string(program.firstWorker) +
      ", \"numJobs\": " + std::to_string(program.numJobs) +
      ", \"predictedStepSeconds\": " +
      jsonNumber(program.predictedStepSeconds) + ", \"jobStages\": [";
  for (int32_t n = 0; n < program.numJobs; ++n)
    out += (n ? ", " : "") + std::to_string(program.jobStages[n]);
  out += "], \"stages\": [";
  for (int32_t s = 0; s < program.numStages; ++s) {
    const rondo_stage_desc &st = program.stages[s];
    out += std::string(s ? ", " : "") + "{\"name\": " + quote(st.name) +
           ", \"kind\": " + quote(stageKindName(st.kind)) +
           ", \"predictedJobSeconds\": " + jsonNumber(st.predictedJobSeconds) +
           ", \"paramBytes\": " + std::to_string(st.paramBytes) +
           ", \"gradBytes\": " + std::to_string(st.gradBytes) + "}";
  }
  out += "]}\n}\n";
  return out;
}

void writeChromeTrace(const std::string &path, const rondo_program &program,
                      const std::vector<TraceRecord> &records) {
  std::string json = chromeTraceJson(program, records);
  writeFileAtomically(path, json.data(), json.size());
}

} // namespace rondo::rt
