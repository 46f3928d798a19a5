//===- Trace.h - Chrome traces of a pipelined run ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The trace mirrors the predicted Gantt chart of `rondo-compile --explain`:
// one process per worker with the rows "upload" (parameters), "upload
// (activations)", "compute" and "download", and one "host" process with the
// rows "data" and "optimizer". Every op is a complete ("X") event whose args
// carry step, job, stage, microbatch, kind and bytes; the plan's predictions
// are in the top-level "otherData". One event per line, so line-oriented
// tools (and tests) can read it without a JSON parser.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_EXEC_TRACE_H
#define RONDO_RUNTIME_SRC_EXEC_TRACE_H

#include "exec/HostExec.h"

#include <string>
#include <vector>

namespace rondo::rt {

/// Writes `records` of a run of `program` to `path` (atomically); throws
/// rt::Error naming the file. otherData names the program, its optimizer
/// mode and its predicted step.
void writeChromeTrace(const std::string &path, const rondo_program &program,
                      const std::vector<TraceRecord> &records);

/// The JSON text of the trace.
std::string chromeTraceJson(const rondo_program &program,
                            const std::vector<TraceRecord> &records);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_EXEC_TRACE_H
