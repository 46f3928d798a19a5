//===- Trainer.h - The trainer: components wired together -------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One training run. The state lives in components that own it (DataFeed,
// ParamStore, OptimizerState, ProgramGrads, ReplicaSync, NanGuard,
// StepLog); the Trainer owns the components and the executor and wires
// them into the phases of a run:
//
//   TrainLoop.cpp    set-up, the step loop, evaluation, checkpoints, the
//                    end of the run;
//   ProgramStep.cpp  one step of a program: issue, the optimizer tasks
//                    (ExecClient), the loss and the update decision;
//   Main.cpp         trainerMain: flags, program selection, replicas.
//
// Semantics of one optimizer step s (0-based) of --steps N:
//   1. Take the next rowsPerStep rows of the data (the program's global
//      batch, K of them with --grad-accum K, each trained by one step of
//      the program), wrapping around at the end: rows
//      (s*rowsPerStep + j) mod rows.
//   2. CausalLM: count the non-ignored targets of those rows, labels[:, 1:]
//      != -100, and pass lossScale = 1/count to every microbatch so that the
//      summed gradient is that of the global mean; the loss is the sum of
//      the microbatch loss sums (in microbatch order, in double) / count.
//      GraphOutput: lossScale = 1/microbatches and the loss is their mean.
//   3. Step 0 only: dump the gradients (--dump-gradients).
//   4. Global gradient norm; clip (--clip-grad-norm).
//   5. AdamW update with lr = base * schedule(s) and step count s + 1.
//   6. Log the loss of 2 (computed before this step's update).
// So N steps log N losses and apply N updates; losses[0] is the loss of the
// initial weights, as in the PyTorch references.
//
// Optimizer modes of a program. sync: one OPTIMIZER task (stage -1) after
// every gradient has landed. overlap: SPipe-style eager updates, one task
// per stage for the parameters whose last gradient part that stage holds,
// running while the remaining backward stages (and the next step's first
// stages) compute. Every parameter is updated once per step with this
// step's complete gradient, so there is no staleness and, AdamW being
// elementwise, overlap gives the same bits as sync. RoundPipe's one-step-
// stale update (the stale program: each step's STASH_GRADS task sets its
// gradients aside, the next step's STALE_OPTIMIZER task applies them once
// that step's uploads have read the weights) hides all of the optimizer
// on one worker but changes the numerics: the gradient of step s is
// computed on the weights before update s-1, and every drain
// (checkpoints, evaluation, the end) applies the pending update on the
// trainer thread once the executor is idle, so the step after it runs on
// fresh weights (and its STALE_OPTIMIZER task has nothing to apply).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_TRAINER_H
#define RONDO_RUNTIME_SRC_TRAINER_TRAINER_H

#include "rondo/runtime/Trainer.h"

#include "Checkpoint.h"
#include "Cli.h"
#include "Log.h"
#include "exec/HostExec.h"
#include "trainer/DataFeed.h"
#include "trainer/NanGuard.h"
#include "trainer/OptimizerState.h"
#include "trainer/ParamStore.h"
#include "trainer/ProgramGrads.h"
#include "trainer/ReplicaSync.h"
#include "trainer/ResidentState.h"
#include "trainer/StepLog.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rondo::rt {

class Trainer final : public ExecClient {
public:
  /// Runs `program`.
  Trainer(const ModelSpec &model, const TrainerOptions &options,
          const rondo_program &program, const char *argv0,
          DeviceOpsFactory device = nullptr, ReplicaGroup *replicas = nullptr);
  /// The executor's threads call back into the components: it goes first.
  ~Trainer() override {
    if (grads)
      grads->releaseWorkerMemory();
    exec.reset();
  }

  /// runLoop(), but a stage the watchdog found hung cannot be joined: the
  /// process reports it and exits without waiting for it.
  int run();

  // ExecClient, on the executor's host threads.
  void loadBatch(const StepTag &tag) override;
  void optimize(const StepTag &tag, int32_t stage) override;
  int64_t optimizeStashed(const StepTag &tag) override;

private:
  // TrainLoop.cpp: the phases of a run.
  int runLoop();
  /// Fails early, not after hours of training, on flags this trainer
  /// cannot honour and outputs that cannot be created.
  void checkOutputs() const;
  /// Data, weights, optimizer, checkpoint and executor; returns the first
  /// step.
  int64_t setUp();
  /// Stops naming the parameter when a weight the run starts from (loaded,
  /// initialised or resumed) is not finite: its first gradient would be
  /// blamed, and the NaN spreads to every weight in one update.
  void checkInitialWeights(int64_t firstStep) const;
  /// The OpenMP threads each computing thread uses: a plan's share of the
  /// cores per worker.
  int computeThreads() const;
  /// The start-up lines: parameters, data, plan, thread pools, LoRA.
  void describeRun() const;
  /// Whether this replica or any other was asked to stop (SIGINT/SIGTERM).
  bool stopRequested();
  /// The checkpoint, replica check and evaluation due after `done` steps.
  void afterStep(int64_t done, int64_t &lastSaved);
  using Clock = std::chrono::steady_clock;
  /// The end of a run that started at `start`: final checkpoint,
  /// evaluation, trace, exports and the summary line.
  int finish(int64_t firstStep, int64_t lastSaved, Clock::time_point start,
             double lastLoss);
  /// Stops after `stepsDone` steps for SIGINT/SIGTERM: a final checkpoint
  /// (with --checkpoint-dir) and 128 + the signal's number.
  int interrupted(int64_t stepsDone, int64_t lastSaved);
  /// Logs the held-back stale step once its update has run.
  void drainAndLog();
  /// Evaluates after `stepsDone` steps.
  void evaluate(int64_t stepsDone);
  /// Writes the checkpoint of `stepsDone`; returns false when it failed
  /// and --on-checkpoint-error=continue (stop throws).
  bool saveCheckpoint(int64_t stepsDone);
  /// Writes the checkpoint of `stepsDone` into `dir`, throwing on failure;
  /// false on replicas other than rank 0, which only take part.
  bool writeCheckpointTo(const std::string &dir, int64_t stepsDone);
  /// After an export failed at the end (a full disk): where the final
  /// weights are kept, as a checkpoint of `stepsDone` (--checkpoint-dir's
  /// if written, else one written now), and how to export them again.
  std::string keepFinalWeights(int64_t stepsDone, bool savedInCheckpointDir);
  int64_t resume();
  /// Stops with an error when the replicas' weights differ.
  void checkReplicasAgree(int64_t stepsDone);
  void dumpGradients(double loss, const std::vector<const float *> &grads);
  /// Waits for every issued op (and applies a pending stale update) and
  /// stops on a recorded error.
  void drain();
  /// Stale program, executor idle: applies the update of the last issued
  /// training step if no STALE_OPTIMIZER task applied it yet.
  void applyPendingStaleUpdate();
  /// drain(), then brings device-resident weights and moments back into
  /// the host copies that checkpoints and exports read.
  void drainToHost();
  void say(const std::string &line) const { log.say(line); }
  /// Takes --checkpoint-dir's lock (rank 0, which writes the checkpoints)
  /// before any expensive set-up, so a second trainer fails fast.
  void lockCheckpointDir();

  // ProgramStep.cpp: one step of a program.
  void setUpProgram(int64_t firstStep);
  double runStepPipelined(int64_t step, StepRecord &record);
  /// Issues one step of the program on the batch (its `pass`-th of
  /// `passes` program steps, --grad-accum) and returns the sum of its
  /// microbatch losses (in microbatch order), which it adds to
  /// microbatchLosses.
  double issuePipelined(int64_t step, bool eval, float lossScale,
                        int32_t pass = 0, int32_t passes = 1);
  /// The loss of the step over every replica's microbatches; `badLoss`
  /// receives the first non-finite one (this replica's or another's) or "".
  double stepLoss(int64_t step, int64_t count, double lossSum,
                  std::string &badLoss);
  /// Once the step's losses are in: stops on a non-finite gradient or loss
  /// (--on-nan=stop), or applies or skips the update the sync task left to
  /// this thread (--on-nan=skip).
  void finishUpdate(int64_t step, const std::string &badLoss);
  /// The overlap task of `stage`: its parameters' update.
  void optimizeStage(const StepTag &tag, int32_t stage);
  /// The sync task: every parameter's update (or, deferred, its inputs).
  void optimizeAll(const StepTag &tag);
  /// The logged norm of the overlap program's gradients.
  double pipelinedGradNorm();
  /// Copies every trainable gradient (host or worker) into dumpStash.
  void stashGradients();

  const ModelSpec &model;
  const TrainerOptions &opts;
  const rondo_program *program;
  const char *argv0;
  DeviceOpsFactory deviceFactory;

  ReplicaSync replicas;
  /// Held for the whole run (rank 0, with --checkpoint-dir).
  std::optional<CheckpointDirLock> checkpointDirLock;
  StepLog log;
  NanGuard nan;
  DataFeed feed;
  ParamStore store;
  OptimizerState optimizer;

  // A program's execution.
  ProgramInfo info;
  std::unique_ptr<ResidentState> resident;
  std::unique_ptr<ProgramGrads> grads;
  std::unique_ptr<HostExec> exec;
  bool syncMode = true;
  /// A stale program (--optimizer-mode=stale): steps are logged late
  /// (StepLog::hold).
  bool staleMode = false;
  /// Stale program: the last training step issued, and the last step
  /// whose update has been applied (by a STALE_OPTIMIZER task on the
  /// optimizer thread, or by a drain when the executor is idle).
  int64_t lastTrainIssued = -1;
  std::atomic<int64_t> staleApplied{-1};
  /// --on-nan=skip: the sync OPTIMIZER task leaves the update to the
  /// trainer thread, which first checks the losses too.
  bool deferUpdate = false;
  /// The sync task's gradient norm (before clipping).
  double syncNorm = 0;
  std::vector<double> microbatchLosses; ///< Of the last issued step.
  bool dumpNow = false;
  std::vector<FloatBuffer> dumpStash; ///< Gradients before clipping.
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_TRAINER_H
