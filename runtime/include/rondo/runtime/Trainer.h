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
// The compiler no longer emits the single-process StepFn below; only the
// runtime's unit tests (test/Unit/Runtime/ToyModel.h) still run it.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_TRAINER_H
#define RONDO_RUNTIME_TRAINER_H

#include "rondo/runtime/DeviceOps.h"
#include "rondo/runtime/Exec.h"
#include "rondo/runtime/Model.h"

namespace rondo::rt {

/// Arguments of one call of the compiled forward/backward for one microbatch.
struct StepArgs {
  const float *const *params; ///< numParams pointers, fp32, contiguous.
  /// numParams pointers; nullptr for frozen params. The step ADDS its
  /// gradient (already multiplied by lossScale) into these buffers.
  float *const *grads;
  const int64_t *inputIds; ///< [batch, seqLen]
  const int64_t *labels;   ///< [batch, seqLen], -100 = ignore (CausalLM).
  /// The factor the loss is multiplied by before differentiation: for
  /// CausalLM 1 / (non-ignored targets of the global batch), so that the sum
  /// over microbatches is the global mean.
  float lossScale;
};

struct StepResult {
  double lossSum;    ///< CausalLM: sum of per-token CE; GraphOutput: loss.
  int64_t lossCount; ///< CausalLM: number of non-ignored targets; else 1.
};

using StepFn = StepResult (*)(const StepArgs &);

/// The trainer's main: parses the CLI (see ARCHITECTURE.md "CLI contract"),
/// loads data and weights, runs the steps, writes logs and dumps. Returns
/// the process exit code; every user error is reported on stderr naming the
/// flag or file.
int trainerMain(int argc, char **argv, const ModelSpec &model, StepFn step);

/// The pipelined trainer: the same CLI, data, optimizer, logs and
/// checkpoints, but each step runs one of `programs` (one per compiled
/// worker count and optimizer mode; Exec.h) on the host backend. `--workers`
/// and `--optimizer-mode` pick the program.
/// `device` makes what a worker is: null for host threads, or
/// makeCudaDeviceOps for GPU trainers (--target=cuda), which then accept
/// --gpus.
int trainerMain(int argc, char **argv, const ModelSpec &model,
                const rondo_program *programs, int numPrograms,
                DeviceOpsFactory device = nullptr);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_TRAINER_H
