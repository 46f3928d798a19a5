//===- Main.cpp - trainerMain: flags, program, replicas -------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Everything between the command line and a Trainer: parsing, the flag
// cross-checks that need the model or the compiled programs, the program
// for --workers and --optimizer-mode, and joining the replica group. User
// errors exit with 2, errors of the run with 1.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Error.h"
#include "rondo/runtime/Replicas.h"
#include "rondo/runtime/Trainer.h"

#include "Cli.h"
#include "trainer/Trainer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace rondo::rt {

namespace {

/// The plans a pipelined trainer was compiled for, for errors and --help.
std::string describePlans(const rondo_program *programs, int numPrograms) {
  std::string s;
  for (int i = 0; i < numPrograms; ++i) {
    if (i)
      s += ", ";
    s += std::string(programs[i].name ? programs[i].name : "?") + " (" +
         std::to_string(programs[i].workers) +
         (programs[i].workers == 1 ? " worker, " : " workers, ") +
         (programs[i].optimizer ? programs[i].optimizer : "?") + ")";
  }
  return s;
}

/// The --optimizer-mode when none is given: sync when a flag needs the whole
/// step's gradients before the first update, else the mode the plans were
/// chosen for (rondo-compile --optimizer-mode; a stale one only without
/// replicas, which need fresh updates).
std::string defaultOptimizerMode(const TrainerOptions &opts,
                                 const ModelSpec &model) {
  if (opts.clipGradNorm || !opts.dumpGradients.empty() ||
      opts.onNan == OnNan::Skip)
    return "sync";
  const std::string compiled =
      model.optimizerMode ? model.optimizerMode : "overlap";
  return compiled == "stale" && opts.replicas > 1 ? "overlap" : compiled;
}

/// Picks the program for --workers and --optimizer-mode (resolved); returns
/// an error message or "".
std::string selectProgram(const rondo_program *programs, int numPrograms,
                          const TrainerOptions &opts,
                          const rondo_program *&chosen) {
  if (numPrograms < 1 || !programs)
    return "this trainer has no compiled program";
  const int workers = opts.workers > 0 ? opts.workers : programs[0].workers;
  // The stale step runs the sync program (one update per step), late.
  const std::string mode =
      opts.optimizerMode == "stale" ? "sync" : opts.optimizerMode;
  std::vector<int> counts;
  for (int i = 0; i < numPrograms; ++i) {
    if (std::find(counts.begin(), counts.end(), programs[i].workers) ==
        counts.end())
      counts.push_back(programs[i].workers);
    if (programs[i].workers == workers && programs[i].optimizer &&
        mode == programs[i].optimizer) {
      chosen = &programs[i];
      return "";
    }
  }
  std::string list;
  for (size_t i = 0; i < counts.size(); ++i)
    list += (i ? ", " : "") + std::to_string(counts[i]);
  if (std::find(counts.begin(), counts.end(), workers) == counts.end())
    return "--workers " + std::to_string(workers) +
           ": this trainer was compiled for " + list +
           " workers (rondo-compile --workers)";
  return "--optimizer-mode=" + mode + ": no such program for " +
         std::to_string(workers) +
         " workers (compiled: " + describePlans(programs, numPrograms) + ")";
}

/// The cross-checks of flags against each other and against the model;
/// returns an error message or "".
std::string checkFlags(const TrainerOptions &options, const ModelSpec &model,
                       DeviceOpsFactory device) {
  if (!options.weights.empty() && options.init == InitKind::Random)
    return "--weights has no effect with --init=random";
  if (!model.lora) {
    const char *loraFlag = !options.loadLora.empty()     ? "--load-lora"
                           : !options.exportLora.empty() ? "--export-lora"
                           : options.mergeLora           ? "--merge-lora"
                                                         : nullptr;
    if (loraFlag)
      return std::string(loraFlag) +
             ": this trainer has no LoRA adapters (compile with "
             "rondo-compile --lora)";
  }
  bool isNpy = options.data.size() >= 4 &&
               options.data.compare(options.data.size() - 4, 4, ".npy") == 0;
  if (options.dataDType && isNpy)
    return "--data-dtype applies to flat token streams; " + options.data +
           " is a .npy file with its own dtype";
  if (!options.gpus.empty() && !device)
    return "--gpus " + options.gpus +
           ": this trainer runs on host workers (compiled with "
           "--target=host); choose their number with --workers";
  return "";
}

/// --replicas: joins the group (MPI, or NCCL for GPU trainers) into
/// `replicas`; returns an error message or "". Every replica but rank 0
/// runs quietly and writes no files: rank 0 speaks and writes for all.
std::string joinReplicas(TrainerOptions &options, const rondo_program *program,
                         DeviceOpsFactory device, const char *argv0,
                         std::unique_ptr<ReplicaGroup> &replicas,
                         std::string &who) {
  if (!program)
    return "--replicas needs a pipelined trainer (compiled with --workers)";
  // MPI is the default everywhere: the NCCL engine is experimental (on 2
  // H200s its replicas' weights diverged, which the checksum check caught,
  // and a lost replica was not always detected); see docs/Runtime.md.
  std::string engine = options.replicaEngine;
  if (engine.empty())
    engine = "mpi";
  if (options.shardOptimizer && !options.dumpGradients.empty())
    return "--dump-gradients with --replicas: each replica holds only its "
           "shard of the summed gradients; add --shard-optimizer=off to dump "
           "them whole";
  if (engine == "nccl" && !(device && gpuReplicaFactory()))
    return "--replica-engine=nccl needs a GPU trainer (compiled with "
           "--target=cuda)";
  if (engine == "nccl" && options.gpus.empty())
    if (const char *local = std::getenv("LOCAL_RANK")) {
      // One machine, several replicas: replica k of this machine takes the
      // k-th group of --workers GPUs.
      int first = std::atoi(local) * program->workers;
      for (int w = 0; w < program->workers; ++w)
        options.gpus += (w ? "," : "") + std::to_string(first + w);
    }
  try {
    if (engine == "nccl") {
      std::fprintf(stderr,
                   "%s: warning: --replica-engine=nccl is experimental: the "
                   "replicas' weight checksums are compared every "
                   "--replica-check-every steps and the run stops if they "
                   "differ\n",
                   argv0);
      int gpu = options.gpus.empty() ? 0 : std::atoi(options.gpus.c_str());
      replicas = gpuReplicaFactory()(options.replicas, gpu);
    } else {
      replicas = joinReplicaGroup(options.replicas);
    }
  } catch (const Error &e) {
    return e.what();
  }
  if (replicas->rank() != 0) {
    who += " (replica " + std::to_string(replicas->rank()) + ")";
    options.quiet = true;
    options.logJson.clear();
    options.tensorboard.clear();
    options.trace.clear();
    options.exportOnnx.clear();
    options.exportLora.clear();
    options.dumpGradients.clear();
  }
  return "";
}

int trainerMainImpl(int argc, char **argv, const ModelSpec &model, StepFn step,
                    const rondo_program *programs, int numPrograms,
                    DeviceOpsFactory device = nullptr) {
  const char *argv0 = argc > 0 && argv[0] ? argv[0] : "trainer";
  TrainerOptions options;
  std::string message;
  switch (parseTrainerOptions(argc, argv, options, message)) {
  case CliStatus::Help:
    std::fputs(trainerHelp(argv0, model,
                           programs ? describePlans(programs, numPrograms)
                                    : std::string())
                   .c_str(),
               stdout);
    return 0;
  case CliStatus::Error:
    std::fprintf(stderr, "%s: error: %s\n", argv0, message.c_str());
    return 2;
  case CliStatus::Ok:
    break;
  }
  auto usageError = [&](const std::string &why) {
    std::fprintf(stderr, "%s: error: %s\n", argv0, why.c_str());
    return 2;
  };
  if (std::string why = checkFlags(options, model, device); !why.empty())
    return usageError(why);
  if (options.optimizerMode.empty())
    options.optimizerMode = defaultOptimizerMode(options, model);
  const rondo_program *program = nullptr;
  if (programs || numPrograms) {
    std::string why = selectProgram(programs, numPrograms, options, program);
    if (!why.empty())
      return usageError(why);
    // A program's step is its compiled global batch, split into the plan's
    // microbatches; more rows per step is a larger --batch.
    if (options.gradAccum > 1)
      return usageError(
          "--grad-accum is not supported by pipelined trainers; compile with "
          "--batch B*K to train on K times the rows per step (rondo-compile "
          "emits only pipelined trainers, whose plans already split a step "
          "into microbatches)");
  }
  std::unique_ptr<ReplicaGroup> replicas;
  std::string who = argv0;
  if (options.replicas > 1)
    if (std::string why =
            joinReplicas(options, program, device, argv0, replicas, who);
        !why.empty())
      return usageError(why);
  try {
    return Trainer(model, options, step, program, who.c_str(), device,
                   replicas.get())
        .run();
  } catch (const Error &e) {
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "%s: error: out of memory\n", who.c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: internal error: %s\n", who.c_str(), e.what());
  }
  // The other replicas would wait for this one's sums forever.
  if (replicas)
    replicas->abortAll(1);
  return 1;
}

} // namespace

int trainerMain(int argc, char **argv, const ModelSpec &model, StepFn step) {
  return trainerMainImpl(argc, argv, model, step, nullptr, 0);
}

int trainerMain(int argc, char **argv, const ModelSpec &model,
                const rondo_program *programs, int numPrograms,
                DeviceOpsFactory device) {
  if (!programs && numPrograms == 0)
    numPrograms = -1; // Still a pipelined trainer: report the missing table.
  return trainerMainImpl(argc, argv, model, nullptr, programs, numPrograms,
                         device);
}

} // namespace rondo::rt
