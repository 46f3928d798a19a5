//===- TrainLoop.cpp - The phases of a training run -----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Error.h"
#include "rondo/runtime/OnnxWeights.h"
#include "trainer/Interrupts.h"
#include "trainer/Trainer.h"

#include "Checkpoint.h"
#include "FileUtil.h"
#include "HfExport.h"
#include "Lora.h"
#include "HostMemory.h"
#include "ThreadPools.h"
#include "exec/Trace.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

namespace rondo::rt {

namespace {

void validateModel(const ModelSpec &model) {
  if (model.batch < 1 || model.seqLen < 1)
    throw Error("the compiled model has batch " + std::to_string(model.batch) +
                " and seq-len " + std::to_string(model.seqLen) +
                "; both must be positive");
  if (model.numParams < 0 || (model.numParams > 0 && !model.params))
    throw Error("the compiled model's parameter table is malformed");
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (!p.name || p.rank < 0 || p.rank > kMaxParamRank)
      throw Error("parameter " + std::to_string(i) +
                  " of the compiled model is malformed");
    for (int d = 0; d < p.rank; ++d)
      if (p.dims[d] < 0)
        throw Error(std::string("parameter '") + p.name +
                    "' has a negative dimension");
    // Nothing updates a weight held in bf16 alone: the optimizer and the
    // adapters' files work in fp32.
    if (p.storage == ParamStorage::Bf16 && (p.trainable || isLoraAdapter(p)))
      throw Error(std::string("parameter '") + p.name +
                  "' is held in bf16 but trains; only frozen weights are");
  }
  validateLora(model);
}

void checkWritableDirectory(const std::string &path, const char *flag) {
  std::string dir = parentDirectory(path);
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(std::string(flag) + " " + path + ": directory '" + dir +
                "' does not exist or is not writable");
}

std::string rngStateOf(const TrainerOptions &opts) {
  // Training draws no random numbers after initialisation; the seed is
  // kept so a resumed run can say what it started from.
  return "init-seed " + std::to_string(opts.seed);
}

double secondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

} // namespace

Trainer::Trainer(const ModelSpec &model, const TrainerOptions &options,
                 const rondo_program &program, const char *argv0,
                 DeviceOpsFactory device, ReplicaGroup *replicaGroup)
    : model(model), opts(options), program(&program), argv0(argv0),
      deviceFactory(device), replicas(replicaGroup, options.shardOptimizer),
      log(options), nan(options), feed(model, replicas), store(model),
      optimizer(model, options, replicas) {}

int Trainer::run() {
  InterruptHandlers handlers;
  try {
    return runLoop();
  } catch (const Error &e) {
    if (exec && exec->hung()) {
      // The hung thread cannot be joined, so do not try: report and go.
      std::fprintf(stderr, "%s: error: %s\n", argv0, e.what());
      std::fflush(stderr);
      std::_Exit(1);
    }
    throw;
  }
}

void Trainer::checkOutputs() const {
  // Every destination, as its writer will write it, before step 1: a
  // destination that fails at the end loses the run's exports.
  auto check = [](const char *flag, const std::function<void()> &probe) {
    try {
      probe();
    } catch (const Error &e) {
      throw Error(std::string(flag) + ": " + e.what());
    }
  };
  if (!opts.logJson.empty()) {
    checkWritableDirectory(opts.logJson, "--log-json");
    check("--log-json", [&] { checkCanWriteFile(opts.logJson); });
  }
  if (!opts.tensorboard.empty())
    // The event file's name is chosen when it is written; a name of its
    // length stands in for it.
    check("--tensorboard", [&] {
      checkCanWriteInDirectory(opts.tensorboard,
                               {"events.out.tfevents.0000000000.localhost"});
    });
  if (!opts.trace.empty()) {
    checkWritableDirectory(opts.trace, "--trace");
    check("--trace", [&] { checkCanWriteFile(opts.trace); });
  }
  if (!opts.dumpGradients.empty()) {
    checkWritableDirectory(opts.dumpGradients, "--dump-gradients");
    check("--dump-gradients", [&] { checkCanWriteFile(opts.dumpGradients); });
  }
  if (!opts.exportOnnx.empty()) {
    checkWritableDirectory(opts.exportOnnx, "--export-onnx");
    check("--export-onnx", [&] {
      checkCanWriteFile(opts.exportOnnx);
      checkCanWriteFile(opts.exportOnnx + ".data"); // large models' weights
    });
    if (::access(model.modelPath, R_OK) != 0)
      throw Error(std::string("--export-onnx needs the model ") +
                  model.modelPath + " as a template, and it cannot be read");
  }
  if (!opts.exportLora.empty()) {
    // Its directory is created if missing (one level), as
    // --export-safetensors's is.
    check("--export-lora", [&] {
      checkCanWriteInDirectory(
          parentDirectory(opts.exportLora),
          {baseName(opts.exportLora), "adapter_config.json"});
    });
  }
  if (!opts.exportSafetensors.empty()) {
    checkWritableDirectory(opts.exportSafetensors, "--export-safetensors");
    struct stat st;
    if (::stat(opts.exportSafetensors.c_str(), &st) == 0 &&
        !S_ISDIR(st.st_mode))
      throw Error("--export-safetensors " + opts.exportSafetensors +
                  ": exists and is not a directory (the flag names the "
                  "directory that gets model.safetensors)");
    check("--export-safetensors", [&] {
      checkCanWriteInDirectory(opts.exportSafetensors,
                               {"model.safetensors", "config.json"});
    });
    checkHuggingFaceNames(model);
    if (!opts.hfConfig.empty() && ::access(opts.hfConfig.c_str(), R_OK) != 0)
      throw Error("--hf-config " + opts.hfConfig + ": cannot be read");
  }
  if (!opts.dumpGradients.empty() && opts.steps < 1)
    throw Error("--dump-gradients needs at least one step (--steps)");
}

int64_t Trainer::setUp() {
  // BLAS's pool is process-wide: left at every core, each worker's GEMM
  // fans out to all of them (ThreadPools.h).
  runGemmsOnCallingThread();
  keepFreedHostMemory();
  // Each phase of the set-up says its time once it ends: a large model's
  // weights take tens of seconds, which must not look like a hang.
  auto phaseStart = Clock::now();
  auto phaseDone = [&](const std::string &phase) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), ": %.2f s",
                  secondsBetween(phaseStart, Clock::now()));
    say("rondo: " + phase + seconds);
    phaseStart = Clock::now();
  };
  feed.open(opts);
  phaseDone("read the data");
  int64_t elements = 0;
  for (int i = 0; i < model.numParams; ++i)
    elements += numElements(model.params[i]);
  say("rondo: " +
      std::string(opts.init == InitKind::Random ? "initialising" : "reading") +
      " the weights (" + std::to_string(elements) + " parameters" +
      (opts.init == InitKind::Random
           ? ", --init=random)"
           : ") from " + (opts.weights.empty() ? std::string(model.modelPath)
                                               : opts.weights)));
  store.initialise(opts, log);
  phaseDone(opts.init == InitKind::Random ? "initialise the weights"
                                          : "read the weights");
  optimizer.setUp(store.data());
  phaseDone("allocate the optimizer state");
  const int64_t firstStep = opts.resume ? resume() : 0;
  if (opts.resume)
    phaseDone("resume");
  checkInitialWeights(firstStep);
  setUpProgram(firstStep);
  phaseDone("set up the workers");
  if (firstStep > 0 && !opts.dumpGradients.empty())
    throw Error("--dump-gradients writes step 0's gradients; the run resumes "
                "at step " +
                std::to_string(firstStep));
  log.open(firstStep);
  return firstStep;
}

void Trainer::checkInitialWeights(int64_t firstStep) const {
  const NonFiniteParam bad = firstNonFiniteParam(model, store.stored());
  if (bad.param < 0)
    return;
  const ParamSpec &p = model.params[bad.param];
  std::string from;
  if (firstStep > 0)
    from = "the checkpoint of step " + std::to_string(firstStep) + " in " +
           opts.checkpointDir;
  else if (isLoraAdapter(p))
    from = opts.loadLora.empty() ? "LoRA's initialisation"
                                 : "--load-lora " + opts.loadLora;
  else if (opts.init == InitKind::Random)
    from = "--init=random";
  else
    from = opts.weights.empty() ? std::string("the model ") + model.modelPath
                                : "--weights " + opts.weights;
  throw Error(std::string("the initial weights are not finite: parameter ") +
              p.name + ", element " + std::to_string(bad.element) + " (from " +
              from + "); found before step 1, so no step ran");
}

int Trainer::computeThreads() const {
  return threadsPerWorker(program->workers);
}

void Trainer::describeRun() const {
  int64_t trainable = 0, frozen = 0;
  for (int i = 0; i < model.numParams; ++i)
    (model.params[i].trainable ? trainable : frozen) +=
        numElements(model.params[i]);
  char how[512];
  std::snprintf(
      how, sizeof(how),
      "plan %s%s: %d worker%s, %d microbatches of %d rows, %s on %s%s%s",
      program->name, staleMode ? " with one-step-stale updates" : "",
      program->workers, program->workers == 1 ? "" : "s", program->microbatches,
      program->rowsPerMicrobatch, model.precision ? model.precision : "fp32",
      exec ? exec->backendName() : "host", replicas.describe().c_str(),
      opts.gradAccum > 1 ? ("; " + std::to_string(opts.gradAccum) +
                            " program steps per update (--grad-accum)")
                               .c_str()
                         : "");
  char buffer[768];
  std::snprintf(buffer, sizeof(buffer),
                "rondo: %lld trainable + %lld frozen parameters; %s: %lld "
                "rows x %lld tokens; %lld rows per step (%s)",
                (long long)trainable, (long long)frozen, opts.data.c_str(),
                (long long)feed.train().rows(), (long long)feed.train().cols(),
                (long long)(feed.rowsPerStep() * replicas.count()), how);
  say(buffer);
  int64_t heldInBf16 = 0, bf16Weights = 0;
  for (int i = 0; i < model.numParams; ++i)
    if (model.params[i].storage == ParamStorage::Bf16) {
      heldInBf16 += numElements(model.params[i]);
      ++bf16Weights;
    }
  if (heldInBf16 > 0) {
    std::snprintf(buffer, sizeof(buffer),
                  "rondo: %lld frozen weights (%lld elements, %.2f GB) held "
                  "in bf16 on the host and in the parameter images: only "
                  "matrix products read them (rondo-compile "
                  "--frozen-storage=fp32 keeps them in fp32)",
                  (long long)bf16Weights, (long long)heldInBf16,
                  2e-9 * double(heldInBf16));
    say(buffer);
  }
  if (program->numResidentParams > 0) {
    int64_t elements = 0;
    for (int32_t i = 0; i < program->numResidentParams; ++i)
      elements += numElements(model.params[program->residentParams[i].param]);
    std::snprintf(buffer, sizeof(buffer),
                  "rondo: device-resident: %d parameters (%lld elements) keep "
                  "their weights, gradients and AdamW moments on the worker",
                  program->numResidentParams, (long long)elements);
    say(buffer);
  }
  // What the pools are, not what they were asked to be
  // (test/E2E/thread-pools.test).
  std::snprintf(buffer, sizeof(buffer),
                "rondo: threads per worker: %d OpenMP, %d BLAS (GEMMs run on "
                "the worker's thread: the same bits for any worker count)",
                computeThreads(), blasThreads());
  say(buffer);
  if (exec && std::strcmp(exec->backendName(), "host") != 0) {
    std::snprintf(buffer, sizeof(buffer),
                  "rondo: host tasks (AdamW of streamed state, gradient "
                  "stashes): %d OpenMP threads (this process's share of the "
                  "cores: %d on this machine)",
                  hostTaskThreadsBesideGpus(), localProcesses());
    say(buffer);
  }
  if (model.lora) {
    int adapters = 0;
    for (int i = 0; i < model.numParams; ++i)
      adapters += isLoraAdapter(model.params[i]);
    std::snprintf(
        buffer, sizeof(buffer),
        "rondo: LoRA rank %lld, alpha %g (scale %g), targets %s: %d "
        "adapters on %d linear weights, %lld trainable elements (%.3g%% of "
        "the model); adapters from %s",
        (long long)model.lora->rank, model.lora->alpha,
        model.lora->alpha / double(model.lora->rank),
        model.lora->targets ? model.lora->targets : "?", adapters, adapters / 2,
        (long long)trainable,
        100.0 * double(trainable) / double(trainable + frozen),
        opts.loadLora.empty() ? "PEFT's initialisation (B = 0)"
                              : opts.loadLora.c_str());
    say(buffer);
  }
  const TokenMatrix *evalData = feed.eval();
  if (evalData && evalData->rows() % feed.rowsPerStep() != 0)
    say("rondo: --eval-data " + opts.evalData + ": the last " +
        std::to_string(evalData->rows() % feed.rowsPerStep()) +
        " rows do not fill a batch of " + std::to_string(feed.rowsPerStep()) +
        " and are not evaluated");
}

int Trainer::runLoop() {
  validateModel(model);
  checkOutputs();
  lockCheckpointDir();
  const auto setUpStart = Clock::now();
  const int64_t firstStep = setUp();
  describeRun();
  if (firstStep < opts.steps) {
    char line[128];
    std::snprintf(line, sizeof(line),
                  "rondo: set up in %.2f s; running step %lld of %lld",
                  secondsBetween(setUpStart, Clock::now()),
                  (long long)firstStep + 1, (long long)opts.steps);
    say(line);
  }

  const auto start = Clock::now();
  double lastLoss = std::numeric_limits<double>::quiet_NaN();
  int64_t lastSaved = firstStep;
  for (int64_t s = firstStep; s < opts.steps; ++s) {
    if (stopRequested()) {
      drainAndLog();
      return interrupted(s, lastSaved);
    }
    const auto stepStart = Clock::now();
    StepRecord record;
    lastLoss = runStepPipelined(s, record);
    const auto stepEnd = Clock::now();
    record.seconds = secondsBetween(stepStart, stepEnd);
    if (staleMode)
      log.hold(record, secondsBetween(start, stepEnd));
    else
      log.step(record, secondsBetween(start, stepEnd));
    nan.throwIfStop();
    nan.stopIfMostlySkipped(optimizer.skippedSteps(), s);
    afterStep(s + 1, lastSaved);
  }
  drain();
  log.logPending(syncNorm);
  return finish(firstStep, lastSaved, start, lastLoss);
}

void Trainer::lockCheckpointDir() {
  if (opts.checkpointDir.empty() || replicas.rank() != 0)
    return;
  try {
    checkpointDirLock.emplace(opts.checkpointDir);
  } catch (const Error &e) {
    throw Error(std::string("--checkpoint-dir ") + e.what());
  }
}

bool Trainer::stopRequested() {
  bool stop = interruptSignal() != 0;
  if (replicas.active()) {
    // mpirun forwards a signal to every replica, but not at the same
    // instant: all stop at the first step boundary any of them saw it.
    stop = replicas.anyOf(stop);
    if (stop)
      requestInterrupt(SIGTERM);
  }
  return stop;
}

void Trainer::afterStep(int64_t done, int64_t &lastSaved) {
  const bool save = opts.saveEvery > 0 && done % opts.saveEvery == 0;
  const bool eval =
      feed.eval() && opts.evalEvery > 0 && done % opts.evalEvery == 0;
  // A checkpoint or evaluation applies the pending update: log its step
  // first.
  if (save || eval)
    drainAndLog();
  if (replicas.active() && opts.replicaCheckEvery > 0 &&
      done % opts.replicaCheckEvery == 0)
    checkReplicasAgree(done);
  if (save) {
    saveCheckpoint(done);
    lastSaved = done;
  }
  if (eval && done != opts.steps)
    evaluate(done);
}

int Trainer::finish(int64_t firstStep, int64_t lastSaved,
                    Clock::time_point start, double lastLoss) {
  const int64_t stepsDone = std::max(firstStep, opts.steps);
  if (interruptSignal())
    return interrupted(stepsDone, lastSaved);
  bool saved = lastSaved == stepsDone && !opts.checkpointDir.empty();
  if (!opts.checkpointDir.empty() && !saved)
    saved = saveCheckpoint(stepsDone);
  if (feed.eval())
    evaluate(stepsDone);
  const double seconds = secondsBetween(start, Clock::now());
  // The exports read the host copies of device-resident weights (nothing
  // to bring back without one).
  if (!opts.exportOnnx.empty() || !opts.exportLora.empty() ||
      !opts.exportSafetensors.empty())
    drainToHost();
  try {
    if (exec && !opts.trace.empty()) {
      std::vector<TraceRecord> records = exec->takeTrace();
      try {
        writeChromeTrace(opts.trace, *program, records);
      } catch (const Error &e) {
        throw Error(std::string("--trace: ") + e.what());
      }
      say("rondo: wrote the trace to " + opts.trace);
    }
    store.exportWeights(opts, log);
  } catch (const Error &e) {
    // The destinations were checked before step 1, so this is a disk that
    // filled up or a directory removed since: keep the training.
    throw Error(std::string(e.what()) + "; " +
                keepFinalWeights(stepsDone, saved));
  }
  const int64_t ran = opts.steps - firstStep;
  if (ran > 0) {
    char buffer[256];
    std::snprintf(buffer, sizeof(buffer),
                  "rondo: %lld steps in %s (%.0f tok/s), last loss %.6f",
                  (long long)ran, formatDuration(seconds).c_str(),
                  seconds > 0 ? double(ran * feed.rowsPerStep() *
                                       replicas.count() * model.seqLen) /
                                    seconds
                              : 0.0,
                  lastLoss);
    say(buffer);
    if (exec)
      if (std::string memory = exec->memoryReport(); !memory.empty())
        say(memory);
  }
  return 0;
}

int Trainer::interrupted(int64_t stepsDone, int64_t lastSaved) {
  const int sig = interruptSignal();
  drain();
  std::string what = "no checkpoint written (no --checkpoint-dir)";
  if (!opts.checkpointDir.empty()) {
    if (lastSaved == stepsDone || saveCheckpoint(stepsDone))
      what = "checkpoint written to " + opts.checkpointDir + "/" +
             checkpointFileName(stepsDone);
    else
      what = "the checkpoint could not be written";
  }
  std::fprintf(stderr, "rondo: interrupted at step %lld; %s\n",
               (long long)stepsDone, what.c_str());
  std::fflush(stderr);
  return 128 + sig;
}

void Trainer::drain() {
  if (exec) {
    exec->drainHost();
    exec->checkError();
    applyPendingStaleUpdate();
  }
  nan.throwIfStop();
}

void Trainer::drainToHost() {
  drain();
  if (resident && resident->active())
    resident->pull(optimizer);
}

void Trainer::drainAndLog() {
  if (!log.hasPending())
    return;
  drain();
  log.logPending(syncNorm);
}

void Trainer::evaluate(int64_t stepsDone) {
  drain();
  const int64_t batches = feed.eval()->rows() / feed.rowsPerStep();
  const bool causal = model.loss == LossKind::CausalLM;
  double lossSum = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < batches; ++b) {
    if (exec) {
      exec->drainData();
      exec->checkError();
    }
    feed.gatherEval(b);
    const int64_t c = causal ? feed.countTargets() : 0;
    count += c;
    // An evaluation batch is a training step's rows: --grad-accum program
    // steps.
    const int32_t passes = int32_t(opts.gradAccum);
    const int64_t microbatches = int64_t(program->microbatches) * passes;
    for (int32_t pass = 0; pass < passes; ++pass) {
      double sum = issuePipelined(
          stepsDone, true, feed.lossScaleFor(c, microbatches), pass, passes);
      lossSum += causal ? sum : sum / double(microbatches);
    }
  }
  drain();
  double loss = causal ? (count > 0 ? lossSum / double(count)
                                    : std::numeric_limits<double>::quiet_NaN())
                       : lossSum / double(batches);
  log.eval(stepsDone, loss, batches * feed.rowsPerStep() * model.seqLen);
}

void Trainer::checkReplicasAgree(int64_t stepsDone) {
  if (!replicas.active())
    return;
  exec->drainHost();
  exec->checkError();
  // The checksum reads the host copies of device-resident weights.
  if (resident && resident->active())
    resident->pull(optimizer);
  replicas.checkAgree(store.checksum(), stepsDone);
}

bool Trainer::writeCheckpointTo(const std::string &dir, int64_t stepsDone) {
  drainToHost();
  // A checkpoint stands for every replica: written by rank 0 once all agree.
  checkReplicasAgree(stepsDone);
  std::vector<FloatBuffer> fullMoments;
  std::vector<CheckpointTensor> tensors =
      optimizer.checkpointTensors(fullMoments);
  // Every replica's shards of the AdamW state, whole in the file: a run
  // resumes with any number of replicas, sharded or not.
  optimizer.gatherMoments(fullMoments);
  if (replicas.rank() != 0)
    return false;
  CheckpointMeta meta;
  meta.step = stepsDone;
  meta.dataCursor = feed.firstRow(stepsDone);
  meta.skippedSteps = optimizer.skippedSteps();
  meta.rngState = rngStateOf(opts);
  meta.program = program->name;
  meta.model = model.modelPath ? model.modelPath : "";
  writeCheckpoint(dir, meta, tensors, opts.keepCheckpoints);
  return true;
}

bool Trainer::saveCheckpoint(int64_t stepsDone) {
  try {
    if (!writeCheckpointTo(opts.checkpointDir, stepsDone))
      return true;
  } catch (const Error &e) {
    if (opts.onCheckpointError == OnCheckpointError::Stop)
      throw Error("cannot write the checkpoint of step " +
                  std::to_string(stepsDone) + ": " + e.what() +
                  "; the previous checkpoint is kept "
                  "(--on-checkpoint-error=stop)");
    // Losing the run over a full disk is worse than a missing checkpoint:
    // the previous one stays valid, so warn and train on.
    std::fprintf(stderr,
                 "rondo: warning: cannot write the checkpoint of step %lld: "
                 "%s; the previous checkpoint is kept, training goes on\n",
                 (long long)stepsDone, e.what());
    return false;
  }
  say("rondo: checkpoint of step " + std::to_string(stepsDone) + " in " +
      opts.checkpointDir + "/" + checkpointFileName(stepsDone));
  return true;
}

std::string Trainer::keepFinalWeights(int64_t stepsDone,
                                      bool savedInCheckpointDir) {
  auto kept = [&](const std::string &dir) {
    const std::string n = std::to_string(stepsDone);
    return "the trained weights of step " + n + " are kept in " + dir + "/" +
           checkpointFileName(stepsDone) +
           ": export them with --resume --checkpoint-dir " + dir + " --steps " +
           n + " and the export flags";
  };
  if (savedInCheckpointDir)
    return kept(opts.checkpointDir);
  // Only rank 0 exports; a checkpoint now would wait for the others.
  if (replicas.active())
    return "the trained weights are lost (with --replicas, --checkpoint-dir "
           "keeps them)";
  // Beside the run, else in the temporary directory, which is often on
  // another disk.
  const std::string name = "rondo-final-weights-" + std::to_string(::getpid());
  const char *tmp = std::getenv("TMPDIR");
  std::string why;
  for (const std::string &dir :
       {name, std::string(tmp && *tmp ? tmp : "/tmp") + "/" + name}) {
    try {
      writeCheckpointTo(dir, stepsDone);
      return kept(dir);
    } catch (const Error &e) {
      why += std::string(why.empty() ? "" : "; ") + e.what();
    }
  }
  return "the trained weights could not be kept in a checkpoint either: " + why;
}

int64_t Trainer::resume() {
  if (!hasCheckpoint(opts.checkpointDir)) {
    say("rondo: no checkpoint in " + opts.checkpointDir +
        "; starting from step 0");
    return 0;
  }
  std::vector<FloatBuffer> fullMoments;
  CheckpointMeta meta = readLatestCheckpoint(
      opts.checkpointDir, optimizer.checkpointTensors(fullMoments));
  optimizer.restore(fullMoments, meta.skippedSteps);
  feed.resumeAt(meta.step, meta.dataCursor);
  say("rondo: resuming from step " + std::to_string(meta.step) + " (" +
      opts.checkpointDir + ", " + meta.program + ")");
  return meta.step;
}

void Trainer::dumpGradients(double loss,
                            const std::vector<const float *> &gradients) {
  std::vector<TensorToWrite<float>> floats;
  bool nameClash = false;
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    nameClash |=
        std::string(p.name) == "loss" || std::string(p.name) == model.inputName;
    if (!p.trainable)
      continue;
    floats.push_back({p.name, std::vector<int64_t>(p.dims, p.dims + p.rank),
                      gradients[size_t(i)]});
  }
  // The references also carry the loss and the batch; add them unless a
  // parameter already uses one of the names.
  const float lossValue = float(loss);
  std::vector<TensorToWrite<int64_t>> ints;
  if (!nameClash) {
    floats.push_back({"loss", {}, &lossValue});
    ints.push_back({model.inputName ? model.inputName : "input_ids",
                    {feed.rowsPerStep(), model.seqLen},
                    feed.ids().data()});
  }
  writeInitializerModel(opts.dumpGradients, floats, ints);
}

} // namespace rondo::rt
