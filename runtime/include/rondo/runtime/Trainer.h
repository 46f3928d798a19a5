//===- Trainer.h - The contract with emitted code -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// `rondo-compile -o trainer` emits a C++ file that describes the model
// (Model.h) and its pipelined programs (Exec.h: stage functions, tables,
// one `issue` function per worker count and optimizer mode), and calls
// trainerMain. Everything else a training run needs -- the command line,
// data loading, weight loading, AdamW, schedules, clipping, logging,
// gradient dumps -- lives in the runtime library (runtime/src/trainer), so
// it is written and tested once.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_TRAINER_H
#define RONDO_RUNTIME_TRAINER_H

#include "rondo/runtime/DeviceOps.h"
#include "rondo/runtime/Exec.h"
#include "rondo/runtime/Model.h"

namespace rondo::rt {

/// The trainer's main: parses the CLI (see ARCHITECTURE.md "CLI contract"),
/// loads data and weights, runs the steps, writes logs, dumps and
/// checkpoints; each step runs one of `programs` (one per compiled worker
/// count and optimizer mode; Exec.h), --grad-accum K of them per update.
/// `--workers` and `--optimizer-mode` pick the program. Returns the process
/// exit code; every user error is reported on stderr naming the flag or
/// file.
/// `device` makes what a worker is: null for host threads, or
/// makeCudaDeviceOps for GPU trainers (--target=cuda), which then accept
/// --gpus.
int trainerMain(int argc, char **argv, const ModelSpec &model,
                const rondo_program *programs, int numPrograms,
                DeviceOpsFactory device = nullptr);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_TRAINER_H
