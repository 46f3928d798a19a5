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
#include "trainer/Launch.h"
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

bool isStale(const rondo_program &p) {
  return p.optimizer && std::string(p.optimizer) == "stale";
}

/// The plans a pipelined trainer was compiled for, for errors and --help:
/// the sync and overlap programs, then (a sentence of their own) the
/// stale ones.
std::string describePlans(const rondo_program *programs, int numPrograms) {
  std::string s, stale;
  for (int i = 0; i < numPrograms; ++i) {
    const rondo_program &p = programs[i];
    std::string &list = isStale(p) ? stale : s;
    if (!list.empty())
      list += ", ";
    list +=
        std::string(p.name ? p.name : "?") + " (" +
        (p.replicas > 1 ? std::to_string(p.replicas) + " replicas x "
                        : std::string()) +
        std::to_string(p.workers) + (p.workers == 1 ? " worker" : " workers") +
        (isStale(p) ? std::string()
                    : std::string(", ") + (p.optimizer ? p.optimizer : "?")) +
        ")";
  }
  if (!stale.empty())
    s += ". With one-step-stale updates (--optimizer-mode=stale): " + stale;
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

/// The entries of a comma-separated --gpus list (none for "").
std::vector<std::string> gpuEntries(const std::string &list) {
  std::vector<std::string> entries;
  for (size_t at = 0; !list.empty();) {
    const size_t comma = list.find(',', at);
    entries.push_back(list.substr(at, comma - at));
    if (comma == std::string::npos)
      break;
    at = comma + 1;
  }
  return entries;
}

/// A trainer compiled with --gpus holds one program per layout (replicas x
/// workers), the planner's choice first. Picks the layout: the one --workers
/// and --replicas (or the launcher's WORLD_SIZE) name, else the one whose
/// GPUs --gpus lists, else the chosen one. Sets opts.workers and, for a
/// layout of several replicas, opts.replicas. Returns an error or "".
std::string selectLayout(const rondo_program *programs, int numPrograms,
                         TrainerOptions &opts, const char *worldSize) {
  bool layouts = false;
  for (int i = 0; i < numPrograms; ++i)
    layouts = layouts || programs[i].replicas > 1;
  // (Programs built by hand, as the runtime's tests do, leave replicas 0.)
  if (!layouts)
    return "";
  const int replicas = opts.replicasGiven ? opts.replicas
                       : worldSize        ? std::atoi(worldSize)
                                          : 0;
  // Inside a launched job every process may see every GPU: --gpus then
  // lists the whole job's.
  const int gpus =
      opts.workers > 0 || replicas > 0 ? 0 : int(gpuEntries(opts.gpus).size());
  std::string list;
  std::vector<std::string> named;
  for (int i = 0; i < numPrograms; ++i) {
    const rondo_program &p = programs[i];
    // Each layout has a program per optimizer mode: name it once.
    const std::string name =
        std::to_string(p.replicas) + "x" + std::to_string(p.workers);
    if (std::find(named.begin(), named.end(), name) == named.end()) {
      named.push_back(name);
      list += std::string(list.empty() ? "" : ", ") + name;
    }
    if ((opts.workers > 0 && p.workers != opts.workers) ||
        (replicas > 0 && p.replicas != replicas) ||
        (gpus > 0 && p.replicas * p.workers != gpus))
      continue;
    opts.workers = p.workers;
    if (p.replicas > 1)
      opts.replicas = p.replicas;
    return "";
  }
  if (gpus > 0)
    return "--gpus " + opts.gpus + ": this trainer was compiled for " +
           std::to_string(programs[0].replicas * programs[0].workers) +
           " GPUs (layouts replicas x workers: " + list +
           "); list that many, or pick a layout with --replicas and --workers";
  return "no compiled layout has " +
         (replicas > 0 ? std::to_string(replicas) + " replicas" +
                             (opts.workers > 0 ? " of " : "")
                       : std::string()) +
         (opts.workers > 0 ? std::to_string(opts.workers) + " workers"
                           : std::string()) +
         " (layouts replicas x workers: " + list + ")";
}

/// Picks the program for --workers, --replicas and --optimizer-mode
/// (resolved); returns an error message or "".
std::string selectProgram(const rondo_program *programs, int numPrograms,
                          const TrainerOptions &opts,
                          const rondo_program *&chosen) {
  if (numPrograms < 1 || !programs)
    return "this trainer has no compiled program";
  const int workers = opts.workers > 0 ? opts.workers : programs[0].workers;
  // A program made for this many replicas, else (a trainer compiled for
  // one) any: its step is then the replicas' batches together.
  const std::string &mode = opts.optimizerMode;
  for (int i = 0; i < numPrograms; ++i)
    if (programs[i].workers == workers && programs[i].optimizer &&
        std::max(programs[i].replicas, 1) == opts.replicas &&
        mode == programs[i].optimizer) {
      chosen = &programs[i];
      return "";
    }
  std::vector<int> counts;
  const rondo_program *sync = nullptr;
  for (int i = 0; i < numPrograms; ++i) {
    if (std::find(counts.begin(), counts.end(), programs[i].workers) ==
        counts.end())
      counts.push_back(programs[i].workers);
    if (programs[i].workers == workers && programs[i].optimizer &&
        mode == programs[i].optimizer) {
      chosen = &programs[i];
      return "";
    }
    if (programs[i].workers == workers && programs[i].optimizer &&
        std::string(programs[i].optimizer) == "sync" && !sync)
      sync = &programs[i];
  }
  // The compiler builds no stale program for a plan that keeps its state
  // on the worker.
  if (mode == "stale" && sync && sync->numResidentParams > 0)
    return std::string("--optimizer-mode=stale: the program '") + sync->name +
           "' keeps its parameters on the worker, which updates them "
           "between steps with nothing to hide; run it in overlap or sync "
           "mode, or compile with --optimizer-mode=stale (whose plans "
           "stream) for stale updates";
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

/// This process's rank among the replicas on its machine, as mpirun,
/// torchrun or Slurm say it; null when none says.
const char *localRank() {
  for (const char *name :
       {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char *v = std::getenv(name); v && *v)
      return v;
  return nullptr;
}

/// --replicas: joins the group (MPI, or NCCL for GPU trainers) into
/// `replicas`; returns an error message or "". Every replica but rank 0
/// runs quietly and writes no files: rank 0 speaks and writes for all.
std::string joinReplicas(TrainerOptions &options, const rondo_program *program,
                         DeviceOpsFactory device,
                         std::unique_ptr<ReplicaGroup> &replicas,
                         std::string &who) {
  // GPU trainers sum on the GPUs (NCCL): device-resident state never
  // leaves them, and the GPU machines need no MPI. Host trainers use MPI.
  std::string engine = options.replicaEngine;
  if (engine.empty())
    engine = device && gpuReplicaFactory() ? "nccl" : "mpi";
  options.replicaEngine = engine;
  if (options.shardOptimizer && !options.dumpGradients.empty())
    return "--dump-gradients with --replicas: each replica holds only its "
           "shard of the summed gradients; add --shard-optimizer=off to dump "
           "them whole";
  if (engine == "nccl" && !(device && gpuReplicaFactory()))
    return "--replica-engine=nccl needs a GPU trainer (compiled with "
           "--target=cuda)";
  if (engine == "nccl")
    if (const char *local = localRank()) {
      // One machine, several replicas: replica k of this machine takes the
      // k-th group of --workers GPUs of --gpus (of all GPUs without it).
      const std::vector<std::string> all = gpuEntries(options.gpus);
      const int first = std::atoi(local) * program->workers;
      // A list of exactly one replica's GPUs is that replica's already.
      if (all.empty() || int(all.size()) > program->workers) {
        std::string mine;
        for (int w = 0; w < program->workers; ++w) {
          if (!all.empty() && size_t(first + w) >= all.size())
            return "--gpus " + options.gpus + ": local replica " + local +
                   " needs GPUs " + std::to_string(first) + ".." +
                   std::to_string(first + program->workers - 1) +
                   " of the list, which has " + std::to_string(all.size());
          mine += (w ? "," : "") +
                  (all.empty() ? std::to_string(first + w) : all[first + w]);
        }
        options.gpus = mine;
      }
    }
  try {
    if (engine == "nccl") {
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

} // namespace

int trainerMain(int argc, char **argv, const ModelSpec &model,
                const rondo_program *programs, int numPrograms,
                DeviceOpsFactory device) {
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
  // --grad-accum sums K program steps' gradients on the host before one
  // update.
  if (options.gradAccum > 1 && options.optimizerMode == "stale")
    return usageError("--grad-accum cannot be combined with "
                      "--optimizer-mode=stale (its update runs a program "
                      "step late); use --optimizer-mode=sync or overlap, or "
                      "compile with --batch B*K");
  const char *worldSize = std::getenv("WORLD_SIZE");
  if (!worldSize)
    worldSize = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!worldSize)
    worldSize = std::getenv("SLURM_NTASKS");
  if (std::string why = selectLayout(programs, numPrograms, options, worldSize);
      !why.empty())
    return usageError(why);
  // The chosen layout has several replicas and nothing launched them:
  // this process starts them on this machine's GPUs.
  if (options.replicas > 1 && !options.replicasGiven && !worldSize) {
    if (!device)
      return usageError(
          "this trainer's layout has " + std::to_string(options.replicas) +
          " replicas: start it as mpirun -np " +
          std::to_string(options.replicas) + " " + argv0 +
          " ... (or pick a one-process layout with --replicas 1 and "
          "--workers)");
    return launchLocalReplicas(argc, argv, options.replicas, argv0);
  }
  const rondo_program *program = nullptr;
  if (std::string why = selectProgram(programs, numPrograms, options, program);
      !why.empty())
    return usageError(why);
  if (options.gradAccum > 1 && options.replicas > 1)
    return usageError("--grad-accum cannot be combined with --replicas; "
                      "compile with --batch B*K for K times the rows per "
                      "step");
  std::unique_ptr<ReplicaGroup> replicas;
  std::string who = argv0;
  if (options.replicas > 1)
    if (std::string why = joinReplicas(options, program, device, replicas, who);
        !why.empty())
      return usageError(why);
  // A process trains its program's rows of each step: the global batch
  // over the replicas of its layout.
  // (A program whose rows do not make up the global batch is reported by
  // analyseProgram, against the model's.)
  ModelSpec processModel = model;
  const int64_t rows =
      int64_t(program->microbatches) * program->rowsPerMicrobatch;
  if (rows * std::max(program->replicas, 1) == model.batch)
    processModel.batch = rows;
  try {
    return Trainer(processModel, options, *program, who.c_str(), device,
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

} // namespace rondo::rt
