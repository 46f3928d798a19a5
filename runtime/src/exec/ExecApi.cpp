//===- ExecApi.cpp - The exec C API's entry points ------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Generated issue functions call these (rondo/runtime/Exec.h); each is one
// virtual call into the backend behind `rondo_exec` (HostExec on the host
// and, through its DeviceOps, on GPUs).
//
//===----------------------------------------------------------------------===//

#include "exec/HostExec.h"

// The C entry points: one virtual call each.
extern "C" {

void rondo_exec_copy(rondo_exec *exec, int32_t event, int32_t kind,
                     int32_t stream, int32_t job, int32_t microbatch,
                     rondo_ref src, rondo_ref dst, int64_t bytes,
                     const rondo_await *awaits, int32_t numAwaits) {
  exec->copy(event, kind, stream, job, microbatch, src, dst, bytes, awaits,
             numAwaits);
}

void rondo_exec_fill_zero(rondo_exec *exec, int32_t event, int32_t job,
                          rondo_ref dst, int64_t bytes,
                          const rondo_await *awaits, int32_t numAwaits) {
  exec->fillZero(event, job, dst, bytes, awaits, numAwaits);
}

void rondo_exec_launch(rondo_exec *exec, int32_t event, int32_t job,
                       int32_t microbatch, rondo_stage_fn fn,
                       const rondo_ref *io, int32_t numIo,
                       const rondo_await *awaits, int32_t numAwaits) {
  exec->launch(event, job, microbatch, fn, io, numIo, awaits, numAwaits);
}

void rondo_exec_host_task(rondo_exec *exec, int32_t event, int32_t kind,
                          int32_t stage, const rondo_await *awaits,
                          int32_t numAwaits) {
  exec->hostTask(event, kind, stage, awaits, numAwaits);
}

void rondo_exec_barrier(rondo_exec *exec) { exec->barrier(); }

} // extern "C"
