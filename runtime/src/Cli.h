//===- Cli.h - The trainer's command line -----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Flags follow LLVM's conventions: `--flag value`, `--flag=value` and the
// single-dash spellings are all accepted, the last occurrence wins, and a
// boolean flag takes no value (or `=true`/`=false`). Parsing never prints or
// exits; trainerMain decides what to do with the result.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_CLI_H
#define RONDO_RUNTIME_SRC_CLI_H

#include "rondo/runtime/Data.h"
#include "rondo/runtime/Model.h"
#include "rondo/runtime/Schedule.h"

#include "Checkpoint.h"

#include <cstdint>
#include <optional>
#include <string>

namespace rondo::rt {

enum class InitKind { Onnx, Random };

/// What a failed checkpoint write does: warn and train on, or stop.
enum class OnCheckpointError { Continue, Stop };
/// What a non-finite loss or gradient does: stop, or skip the step.
enum class OnNan { Stop, Skip };

enum class MapWeights { Auto, On, Off };

struct TrainerOptions {
  std::string data;
  std::optional<TokenDType> dataDType; ///< For flat streams; default uint16.
  std::string labels;
  int64_t steps = 1;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
  std::string noDecay; ///< Regex; empty: every parameter decays.
  std::optional<double> clipGradNorm;
  /// Program steps per optimizer step (gradient accumulation).
  int64_t gradAccum = 1;
  LrSchedule schedule = LrSchedule::Constant;
  int64_t warmup = 0;
  InitKind init = InitKind::Onnx;
  uint64_t seed = 0;
  std::string weights; ///< Overrides ModelSpec::modelPath.
  std::string logJson;
  /// --tensorboard: the directory of TensorBoard event files.
  std::string tensorboard;
  std::string dumpGradients;
  std::string exportOnnx;
  /// LoRA trainers: start the adapters from this PEFT safetensors file,
  /// write them to this one (and adapter_config.json beside it), and write
  /// the base weights merged with them into --export-onnx.
  std::string loadLora;
  std::string exportLora;
  std::string exportSafetensors; ///< A directory (Hugging Face layout).
  std::string hfConfig;          ///< Copied there as config.json.
  bool mergeLora = false;
  /// The compiled plan to run. 0: the default.
  int workers = 0;
  bool quiet = false;
  /// "sync", "overlap" or "stale" (the stale program: each step's update
  /// applied one step late); empty: overlap unless clipping, gradient dumps
  /// or --on-nan=skip need every gradient before the first update.
  std::string optimizerMode;
  std::string trace;
  std::string gpus;      ///< GPU trainers: the GPUs workers run on.
  int64_t saveEvery = 0; ///< 0: only at the end (with --checkpoint-dir).
  /// Checkpoints kept in --checkpoint-dir (writeCheckpoint's `keep`).
  int64_t keepCheckpoints = kDefaultKeepCheckpoints;
  std::string checkpointDir;
  bool resume = false;
  std::string evalData;
  int64_t evalEvery = 0; ///< 0: only after the last step.
  OnCheckpointError onCheckpointError = OnCheckpointError::Continue;
  OnNan onNan = OnNan::Stop;
  /// --on-nan=skip: more skipped steps than this fraction of --steps fail
  /// the run.
  double maxSkippedFraction = 0.1;
  /// Pipelined trainers: stop when no op completes for this long (0: off).
  double watchdogSeconds = 300;
  /// Data-parallel replicas of the pipeline (one process each, under MPI).
  int replicas = 1;
  /// Whether --replicas was given (a trainer compiled for several layouts
  /// otherwise takes its chosen layout's, or the launcher's WORLD_SIZE).
  bool replicasGiven = false;
  /// Compare the replicas' weight checksums every this many steps (and at
  /// every checkpoint); 0: only at checkpoints.
  int64_t replicaCheckEvery = 50;
  /// "mpi" or "nccl"; empty: MPI.
  std::string replicaEngine;
  /// With replicas: each replica updates (and keeps AdamW state for) 1/R of
  /// every parameter, gradients reduce-scattered and weights all-gathered.
  bool shardOptimizer = true;
  /// Frozen weights in ONNX external data: used in place from read-only
  /// mappings (on), copied (off), or mapped when they would take more than
  /// half of the host's memory (auto).
  MapWeights mapWeights = MapWeights::Auto;
};

enum class CliStatus { Ok, Help, Error };

/// Parses argv[1..argc). On CliStatus::Error, `message` names the flag.
CliStatus parseTrainerOptions(int argc, char **argv, TrainerOptions &options,
                              std::string &message);

/// The --help text. `plans` describes the compiled programs.
std::string trainerHelp(const char *argv0, const ModelSpec &model,
                        const std::string &plans = "");

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_CLI_H
