//===- Trainer.cpp - trainerMain: the loop around the compiled step -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One trainer core (data, weights, AdamW, logs, checkpoints, evaluation)
// with two executors: a single-process StepFn called once per microbatch,
// and a pipelined rondo_program run on the host backend (exec/HostExec.h).
//
// Semantics of one optimizer step s (0-based) of --steps N:
//   1. Take the next rowsPerStep rows of the data (K * batch for a StepFn
//      with --grad-accum K, the global batch for a program), wrapping
//      around at the end: rows (s*rowsPerStep + j) mod rows.
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
// stale update (stale: the sync program, each step's task held back until
// the next step's uploads have read the weights, see HostExec.h) hides
// all of the optimizer on one worker but changes the numerics: the
// gradient of step s is computed on the weights before update s-1, and
// every drain (checkpoints, evaluation, the end) applies the pending
// update, so the step after it runs on fresh weights.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Trainer.h"
#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/Buffer.h"
#include "rondo/runtime/Data.h"
#include "rondo/runtime/Error.h"
#include "rondo/runtime/OnnxWeights.h"
#include "rondo/runtime/Replicas.h"
#include "rondo/runtime/Schedule.h"

#include "Checkpoint.h"
#include "Cli.h"
#include "FileUtil.h"
#include "HfExport.h"
#include "Init.h"
#include "Log.h"
#include "Lora.h"
#include "exec/HostExec.h"
#include "exec/Trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <regex>
#include <unistd.h>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rondo::rt {

namespace {

constexpr int64_t kIgnoreIndex = -100;

/// The first SIGINT/SIGTERM (its number), 0 while none came. The handler
/// only sets it; the step loop finishes the step and stops (see run()).
volatile std::sig_atomic_t gInterrupt = 0;

extern "C" void onInterruptSignal(int sig) {
  // A second signal: the user does not want to wait for the step. _exit
  // is async-signal-safe.
  if (gInterrupt)
    ::_exit(128 + sig);
  gInterrupt = sig;
}

/// Installs onInterruptSignal for SIGINT and SIGTERM for the lifetime of
/// the object and restores the previous handlers after.
class InterruptHandlers {
public:
  InterruptHandlers() {
    gInterrupt = 0;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = onInterruptSignal;
    // Restart interrupted system calls: a checkpoint being written when
    // the signal comes must not fail with EINTR.
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &oldInt);
    ::sigaction(SIGTERM, &sa, &oldTerm);
  }
  ~InterruptHandlers() {
    ::sigaction(SIGINT, &oldInt, nullptr);
    ::sigaction(SIGTERM, &oldTerm, nullptr);
    gInterrupt = 0;
  }

private:
  struct sigaction oldInt, oldTerm;
};

int64_t numElements(const ParamSpec &p) {
  int64_t n = 1;
  for (int i = 0; i < p.rank; ++i)
    n *= p.dims[i];
  return n;
}

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
  }
  validateLora(model);
}

/// The parameters the ONNX model holds: all but LoRA adapters.
std::vector<ParamSpec> onnxParams(const ModelSpec &model) {
  std::vector<ParamSpec> result;
  for (int i = 0; i < model.numParams; ++i)
    if (!isLoraAdapter(model.params[i]))
      result.push_back(model.params[i]);
  return result;
}

/// Whether `n` floats at `data` are all finite: the largest exponent field
/// is not all ones. Branch-free, so it vectorises; most steps have no NaN.
/// Threaded: the optimizer task checks every gradient of a step before it
/// updates anything, gigabytes for a 1.7B model, on the step's critical path.
bool allFinite(const void *data, int64_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint32_t largest = 0;
// clang-format off
#pragma omp parallel for simd reduction(max : largest) schedule(static) if (n >= (int64_t(1) << 20))
  // clang-format on
  for (int64_t e = 0; e < n; ++e) {
    uint32_t bits;
    std::memcpy(&bits, p + 4 * e, sizeof(bits));
    largest = std::max(largest, bits & 0x7f800000u);
  }
  return largest != 0x7f800000u;
}

/// Fails early, not after hours of training, when an output cannot be
/// created.
void checkWritableDirectory(const std::string &path, const char *flag) {
  std::string dir = parentDirectory(path);
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(std::string(flag) + " " + path + ": directory '" + dir +
                "' does not exist or is not writable");
}

/// One trainable parameter's optimizer state. `grad` points at the
/// gradient the update reads: the trainer's buffer (StepFn), the host
/// gradients of a program (one part), or a per-parameter sum (several).
struct OptParam {
  int index = 0;
  float *param = nullptr;
  float *grad = nullptr;
  FloatBuffer expAvg, expAvgSq;
  int64_t numel = 0;
  double weightDecay = 0;
};

class Trainer final : public ExecClient {
public:
  Trainer(const ModelSpec &model, const TrainerOptions &options, StepFn step,
          const rondo_program *program, const char *argv0,
          DeviceOpsFactory device = nullptr, ReplicaGroup *replicas = nullptr)
      : model(model), opts(options), stepFn(step), program(program),
        argv0(argv0), replicas(replicas),
        sharded(replicas && replicas->size() > 1 && options.shardOptimizer),
        deviceFactory(device) {}
  ~Trainer() override { exec.reset(); }

  /// runLoop(), but a stage the watchdog found hung cannot be joined: the
  /// process reports it and exits without waiting for it.
  int run();

  void loadBatch(const StepTag &tag) override;
  void optimize(const StepTag &tag, int32_t stage) override;

private:
  int runLoop();
  /// Stops after `stepsDone` steps for SIGINT/SIGTERM: a final checkpoint
  /// (with --checkpoint-dir) and 128 + the signal's number.
  int interrupted(int64_t stepsDone, int64_t lastSaved);
  /// The first non-finite gradient among `parts` (indices into
  /// program->gradParts, in job order), as "stage X (first in job order),
  /// parameter P"; "" when every value is finite.
  std::string nonFiniteGradient(const std::vector<int32_t> &parts) const;
  /// The position in `parts` of the first one with a non-finite value in
  /// the range this replica owns, or -1.
  int firstNonFinitePart(const std::vector<int32_t> &parts) const;
  std::string describePart(int32_t part) const;
  /// Records a non-finite gradient found by an optimizer task of `step`.
  void recordNonFinite(int64_t step, const std::string &what);
  /// Throws the recorded non-finite gradient (--on-nan=stop).
  void throwIfNonFinite();
  /// Whether a task of `step` (-1: of any step) found a non-finite
  /// gradient.
  bool nonFiniteIn(int64_t step);
  void loadData();
  void allocateAndInitialise();
  /// --map-weights: fills `mapped` with the frozen weights used in place.
  void mapFrozenWeights(const std::string &path);
  void setUpOptimizer();
  void setUpProgram(int64_t firstStep);
  /// Rows [first, first + rowsPerStep) mod rows of `source` into the batch.
  void gatherRows(const TokenMatrix &source, const TokenMatrix *sourceLabels,
                  uint64_t first);
  /// The first data row of `step`.
  uint64_t firstRow(int64_t step) const;
  int64_t countTargets() const;
  float lossScaleFor(int64_t count, int64_t microbatches) const;
  double lrAt(int64_t step) const {
    return opts.lr * lrMultiplier(opts.schedule, step, opts.warmup, opts.steps);
  }
  /// AdamW on `which` (indices into opt), on this replica's shards when
  /// sharded, whose weights are then all-gathered.
  void update(const std::vector<int> &which, int64_t step);
  /// --replicas: sums the gradients of `parts` (indices into
  /// program->gradParts) across replicas, in place in host memory (into
  /// this replica's shards when sharded).
  void sumAcrossReplicas(const std::vector<int32_t> &parts);
  /// The elements of a parameter of `numel` whose update this replica owns:
  /// all of them, or its shard.
  Shard owned(int64_t numel) const {
    return sharded ? shardOf(numel, replicaRank(), replicaCount())
                   : Shard{0, numel};
  }
  /// The owned ranges of the gradients `which` (indices into opt) read.
  std::vector<GradTensor> ownedGrads(const std::vector<int> &which) const;
  /// Sharded optimizer task: the replicas agree on whether the gradients of
  /// `parts` are finite (each saw only its shards) and, with `sumSquares`,
  /// on the squared norm of the gradients of `which`. Returns the first
  /// non-finite gradient in job order over all replicas, or "".
  std::string agreeOnShards(const std::vector<int32_t> &parts,
                            const std::vector<int> &which, double *sumSquares);
  uint64_t weightChecksum() const;
  std::vector<bool> pageableParams() const {
    std::vector<bool> result(size_t(model.numParams), false);
    for (size_t i = 0; i < mapped.size(); ++i)
      result[i] = mapped[i] != nullptr;
    return result;
  }
  /// --on-nan=skip: step `step` applies no update.
  void skipStep(int64_t step, const std::string &why);
  double runStepLocal(int64_t step, StepRecord &record);
  double runStepPipelined(int64_t step, StepRecord &record);
  /// Issues one step of the program on the batch and returns the sum of its
  /// microbatch losses (in microbatch order).
  double issuePipelined(int64_t step, bool eval, float lossScale);
  /// Evaluates after `stepsDone` steps; returns false when it was skipped.
  void evaluate(int64_t stepsDone, JsonStepLog *jsonLog);
  /// With a sharded optimizer the AdamW moments are whole only in the
  /// checkpoint: `fullMoments` receives buffers for them (two per trainable
  /// parameter), which the tensors then name.
  std::vector<CheckpointTensor>
  checkpointTensors(std::vector<FloatBuffer> &fullMoments);
  /// Writes the checkpoint of `stepsDone`; returns false when it failed
  /// and --on-checkpoint-error=continue (stop throws).
  bool saveCheckpoint(int64_t stepsDone);
  int64_t resume();
  /// Sums the parts of parameter q's gradient over `range` into `sum`.
  void prepareGrad(int q, float *sum, Shard range);
  double pipelinedGradNorm();
  void dumpGradients(double loss, const std::vector<const float *> &grads);
  void drain() {
    if (exec) {
      exec->drainHost();
      exec->checkError();
    }
    throwIfNonFinite();
  }
  void say(const std::string &line) const {
    if (!opts.quiet) {
      std::fputs((line + "\n").c_str(), stderr);
      std::fflush(stderr);
    }
  }

  const ModelSpec &model;
  const TrainerOptions &opts;
  StepFn stepFn;
  const rondo_program *program;
  const char *argv0;
  bool syncMode = true;
  /// --optimizer-mode=stale: a step's gradient norm comes from its update
  /// (the sync task computes it), which runs during the next step, so the
  /// step is logged once the next one is issued, not before: the GPU does
  /// not wait for the log.
  bool staleMode = false;
  struct PendingLog {
    StepRecord record;
    double elapsed = 0;
  };
  std::optional<PendingLog> pendingLog;
  std::unique_ptr<JsonStepLog> jsonLog; ///< --log-json
  int64_t firstLoggedStep = 0;
  /// Writes a step's progress line and JSON record.
  void logStep(const StepRecord &record, double elapsed);
  /// Logs the pending step with the norm its update computed (the update
  /// has run).
  void logPending();
  /// --on-nan=skip: the sync OPTIMIZER task leaves the update to the
  /// trainer thread, which first checks the losses too.
  bool deferUpdate = false;
  /// Steps skipped by --on-nan=skip (checkpointed): AdamW's step count is
  /// step - skippedSteps + 1.
  int64_t skippedSteps = 0;
  std::vector<double> microbatchLosses; ///< Of the last issued step.

  // Non-finite gradients found by optimizer tasks (host thread).
  std::mutex nanMu;
  int64_t nanStep = -1;
  std::string nanWhat;
  /// Gradient parts in job order of their stage, then offset: all of them
  /// (sync), and per stage those its overlap task reads.
  std::vector<int32_t> partsInJobOrder;
  std::vector<std::vector<int32_t>> partsReadBy;

  std::unique_ptr<TokenMatrix> data;
  std::unique_ptr<TokenMatrix> labels;
  std::unique_ptr<TokenMatrix> evalData;
  int64_t rowsPerStep = 0;
  /// Data-parallel replicas (--replicas), or null for one.
  ReplicaGroup *replicas = nullptr;
  int replicaRank() const { return replicas ? replicas->rank() : 0; }
  int replicaCount() const { return replicas ? replicas->size() : 1; }
  /// --shard-optimizer with more than one replica.
  bool sharded = false;
  /// Stops with an error naming the replicas whose weights differ from
  /// rank 0's (after `stepsDone` steps).
  void checkReplicasAgree(int64_t stepsDone);
  int64_t cursorStep = 0; ///< Step of the checkpoint resumed from (or 0),
  uint64_t cursorRow = 0; ///< and its data cursor.
  std::vector<int64_t> batchIds; ///< [rowsPerStep, seqLen] of this step.
  std::vector<int64_t> batchLabels;

  std::vector<FloatBuffer> params;
  std::vector<FloatBuffer> grads; ///< StepFn: empty buffers for frozen.
  std::vector<float *> paramPtrs;
  /// Per parameter: its data in a read-only mapping of its file, or null.
  std::vector<const float *> mapped;
  std::vector<std::shared_ptr<const void>> mappings;
  std::vector<float *> gradPtrs; ///< StepFn: nullptr for frozen params.
  std::vector<GradTensor> trainableGrads;
  AdamWConfig adamw;
  std::vector<OptParam> opt; ///< Trainable params, in table order.
  std::vector<int> optOf;    ///< Model param -> index into opt, or -1.
  std::vector<int> allOpt;   ///< 0 .. opt.size()-1.

  // Pipelined execution.
  ProgramInfo info;
  std::unique_ptr<HostExec> exec;
  DeviceOpsFactory deviceFactory = nullptr;
  std::vector<FloatBuffer> partSums; ///< Per param with several parts.
  std::vector<FloatBuffer> normSums; ///< The same, for the logged norm.
  FloatBuffer zeroGrad;              ///< For params without gradient.
  std::vector<std::vector<int>> optByStage;
  double syncNorm = 0;
  bool dumpNow = false;
  std::vector<FloatBuffer> dumpStash; ///< Gradients before clipping.
  std::vector<TraceRecord> trace;
};

void Trainer::loadData() {
  TokenDType binType = opts.dataDType.value_or(TokenDType::UInt16);
  const int64_t vocabLimit = model.vocabSize > 0
                                 ? model.vocabSize
                                 : std::numeric_limits<int64_t>::max();
  auto open = [&](const std::string &path) {
    auto m = std::make_unique<TokenMatrix>(
        TokenMatrix::open(path, binType, model.seqLen));
    if (m->cols() != model.seqLen)
      throw Error(path + ": rows have " + std::to_string(m->cols()) +
                  " tokens, the trainer was compiled for seq-len " +
                  std::to_string(model.seqLen));
    m->checkRange(0, vocabLimit);
    return m;
  };
  data = open(opts.data);
  if (!opts.labels.empty()) {
    labels = std::make_unique<TokenMatrix>(TokenMatrix::openNpy(opts.labels));
    if (labels->rows() != data->rows() || labels->cols() != data->cols())
      throw Error(opts.labels + ": shape [" + std::to_string(labels->rows()) +
                  ", " + std::to_string(labels->cols()) +
                  "] differs from the data's [" + std::to_string(data->rows()) +
                  ", " + std::to_string(data->cols()) + "] (" + opts.data +
                  ")");
    labels->checkRange(0, vocabLimit, kIgnoreIndex);
  }
  rowsPerStep = opts.gradAccum * model.batch;
  if (!opts.evalData.empty()) {
    evalData = open(opts.evalData);
    if (evalData->rows() < rowsPerStep)
      throw Error("--eval-data " + opts.evalData + ": " +
                  std::to_string(evalData->rows()) +
                  " rows, fewer than one batch of " +
                  std::to_string(rowsPerStep));
  }
  batchIds.resize(size_t(rowsPerStep * model.seqLen));
  batchLabels.resize(batchIds.size());
}

void Trainer::mapFrozenWeights(const std::string &path) {
  std::vector<ParamSpec> fromOnnx = onnxParams(model);
  std::vector<bool> wanted(fromOnnx.size());
  int64_t frozenBytes = 0;
  for (size_t k = 0; k < fromOnnx.size(); ++k) {
    wanted[k] = !fromOnnx[k].trainable;
    if (wanted[k])
      frozenBytes += numElements(fromOnnx[k]) * int64_t(sizeof(float));
  }
  const double hostBytes =
      double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  if (frozenBytes == 0 || (opts.mapWeights == MapWeights::Auto &&
                           double(frozenBytes) <= hostBytes / 2))
    return;
  MappedWeights found;
  try {
    found = mapOnnxWeights(path, fromOnnx.data(), int(fromOnnx.size()), wanted);
  } catch (const Error &e) {
    throw Error(std::string(e.what()) +
                " (choose other weights with --weights FILE.onnx, or "
                "--init=random)");
  }
  mapped.assign(size_t(model.numParams), nullptr);
  int count = 0;
  for (int i = 0, k = 0; i < model.numParams; ++i) {
    if (isLoraAdapter(model.params[i]))
      continue;
    mapped[size_t(i)] = found.data[size_t(k++)];
    count += mapped[size_t(i)] != nullptr;
  }
  mappings = std::move(found.keepAlive);
  char line[256];
  const double bytes = double(found.bytes);
  std::snprintf(line, sizeof(line),
                "rondo: %d frozen weights (%.*f %s) used in place from their "
                "external data files, not copied (--map-weights)",
                count, bytes >= 1e9 ? 2 : 1,
                bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6,
                bytes >= 1e9 ? "GB" : "MB");
  say(line);
}

void Trainer::allocateAndInitialise() {
  const int n = model.numParams;
  const std::string path =
      opts.weights.empty() ? model.modelPath : opts.weights;
  if (opts.init == InitKind::Onnx && opts.mapWeights != MapWeights::Off)
    mapFrozenWeights(path);
  auto isMapped = [&](int i) { return !mapped.empty() && mapped[size_t(i)]; };
  params.reserve(size_t(n));
  grads.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    const ParamSpec &p = model.params[i];
    if (isMapped(i)) {
      // Read-only: nothing writes a frozen weight.
      params.emplace_back();
      paramPtrs.push_back(const_cast<float *>(mapped[size_t(i)]));
      grads.emplace_back();
      gradPtrs.push_back(nullptr);
      continue;
    }
    params.emplace_back(numElements(p));
    // A program downloads gradients into its own host buffer.
    grads.emplace_back(p.trainable && !program ? numElements(p) : 0);
    paramPtrs.push_back(params.back().data());
    gradPtrs.push_back(p.trainable ? grads.back().data() : nullptr);
    if (p.trainable && !program)
      trainableGrads.push_back({grads.back().data(), numElements(p)});
  }
  // LoRA adapters are not in the model: PEFT's initialisation (B = 0, so
  // step 0 is the base model), or a PEFT file.
  std::vector<float *> onnxPtrs;
  for (int i = 0; i < n; ++i) {
    if (isLoraAdapter(model.params[i]))
      loraInit(model.params[i], opts.seed, params[size_t(i)].data());
    else
      onnxPtrs.push_back(isMapped(i) ? nullptr : params[size_t(i)].data());
  }
  if (opts.init == InitKind::Random) {
    for (int i = 0; i < n; ++i)
      if (!isLoraAdapter(model.params[i]))
        randomInit(model.params[i], opts.seed, params[size_t(i)].data());
  } else {
    std::vector<ParamSpec> fromOnnx = onnxParams(model);
    try {
      loadOnnxWeights(path, fromOnnx.data(), int(fromOnnx.size()),
                      onnxPtrs.data());
    } catch (const Error &e) {
      throw Error(std::string(e.what()) +
                  " (choose other weights with --weights FILE.onnx, or "
                  "--init=random)");
    }
  }
  if (!opts.loadLora.empty())
    loadLoraAdapters(opts.loadLora, model, paramPtrs.data());
}

void Trainer::setUpOptimizer() {
  adamw.beta1 = opts.beta1;
  adamw.beta2 = opts.beta2;
  adamw.eps = opts.eps;
  std::optional<std::regex> noDecay;
  if (!opts.noDecay.empty())
    noDecay.emplace(opts.noDecay);
  optOf.assign(size_t(model.numParams), -1);
  opt.reserve(size_t(model.numParams));
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (!p.trainable)
      continue;
    bool exempt = noDecay && (std::regex_search(p.name, *noDecay) ||
                              (p.displayName && *p.displayName &&
                               std::regex_search(p.displayName, *noDecay)));
    OptParam o;
    o.index = i;
    o.param = params[size_t(i)].data();
    o.grad = gradPtrs[size_t(i)];
    o.numel = numElements(p);
    o.expAvg = FloatBuffer(owned(o.numel).size());
    o.expAvgSq = FloatBuffer(owned(o.numel).size());
    o.weightDecay = exempt ? 0.0 : opts.weightDecay;
    optOf[size_t(i)] = int(opt.size());
    allOpt.push_back(int(opt.size()));
    opt.push_back(std::move(o));
  }
}

void Trainer::setUpProgram(int64_t firstStep) {
  info = analyseProgram(*program, model);
  staleMode = opts.optimizerMode == "stale";
  syncMode = std::string(program->optimizer) == "sync" && !staleMode;
  exec = std::make_unique<HostExec>(
      *program, model, info, paramPtrs.data(), *this, !opts.trace.empty(),
      firstStep,
      deviceFactory ? deviceFactory(program->workers, opts.gpus) : nullptr,
      pageableParams());
  exec->setStaleOptimizer(staleMode);
  // Gradients: in the host buffer (its stale copy) for one part, summed
  // for several.
  char *hostGrads = exec->optimizerGradients();
  int64_t largest = 0;
  partSums.resize(size_t(model.numParams));
  normSums.resize(size_t(model.numParams));
  for (OptParam &o : opt) {
    const std::vector<int32_t> &parts = info.partsOf[size_t(o.index)];
    if (parts.size() == 1) {
      o.grad = reinterpret_cast<float *>(
          hostGrads + program->gradParts[parts[0]].hostOffset);
    } else if (parts.size() > 1) {
      partSums[size_t(o.index)] = FloatBuffer(o.numel);
      normSums[size_t(o.index)] = FloatBuffer(o.numel);
      o.grad = partSums[size_t(o.index)].data();
    }
    largest = std::max(largest, parts.empty() ? o.numel : int64_t(0));
  }
  zeroGrad = FloatBuffer(largest);
  for (OptParam &o : opt)
    if (info.partsOf[size_t(o.index)].empty())
      o.grad = zeroGrad.data();
  optByStage.assign(size_t(program->numStages), {});
  for (int32_t s = 0; s < program->numStages; ++s)
    for (int32_t q : info.finalises[size_t(s)])
      optByStage[size_t(s)].push_back(optOf[size_t(q)]);

  // The order non-finite gradients are looked for in: stages by their
  // first job, parts by their place in the stage's gradient image.
  std::vector<int32_t> firstJob(size_t(program->numStages), program->numJobs);
  for (int32_t n = program->numJobs - 1; n >= 0; --n)
    firstJob[size_t(program->jobStages[n])] = n;
  for (int32_t i = 0; i < program->numGradParts; ++i)
    partsInJobOrder.push_back(i);
  std::stable_sort(partsInJobOrder.begin(), partsInJobOrder.end(),
                   [&](int32_t a, int32_t b) {
                     const rondo_grad_part &x = program->gradParts[a],
                                           &y = program->gradParts[b];
                     if (firstJob[size_t(x.stage)] != firstJob[size_t(y.stage)])
                       return firstJob[size_t(x.stage)] <
                              firstJob[size_t(y.stage)];
                     return x.hostOffset < y.hostOffset;
                   });
  partsReadBy.assign(size_t(program->numStages), {});
  for (int32_t part : partsInJobOrder) {
    int32_t owner = info.finalStage[size_t(program->gradParts[part].param)];
    if (owner >= 0)
      partsReadBy[size_t(owner)].push_back(part);
  }
  deferUpdate = syncMode && opts.onNan == OnNan::Skip;
}

int Trainer::firstNonFinitePart(const std::vector<int32_t> &parts) const {
  const char *hostGrads = exec->optimizerGradients();
  for (size_t k = 0; k < parts.size(); ++k) {
    const rondo_grad_part &part = program->gradParts[parts[k]];
    const Shard range = owned(numElements(model.params[part.param]));
    if (!allFinite(hostGrads + part.hostOffset + range.begin * sizeof(float),
                   range.size()))
      return int(k);
  }
  return -1;
}

std::string Trainer::describePart(int32_t i) const {
  const rondo_grad_part &part = program->gradParts[i];
  return std::string("stage ") + program->stages[part.stage].name +
         " (first in job order), parameter " + model.params[part.param].name;
}

std::string
Trainer::nonFiniteGradient(const std::vector<int32_t> &parts) const {
  int k = firstNonFinitePart(parts);
  return k < 0 ? "" : describePart(parts[size_t(k)]);
}

std::vector<GradTensor>
Trainer::ownedGrads(const std::vector<int> &which) const {
  std::vector<GradTensor> g;
  for (int i : which) {
    const OptParam &o = opt[size_t(i)];
    const Shard range = owned(o.numel);
    g.push_back({o.grad + range.begin, range.size()});
  }
  return g;
}

std::string Trainer::agreeOnShards(const std::vector<int32_t> &parts,
                                   const std::vector<int> &which,
                                   double *sumSquares) {
  double mine[2] = {double(firstNonFinitePart(parts)), 0.0};
  if (sumSquares) {
    std::vector<GradTensor> g = ownedGrads(which);
    const double norm = gradNorm(g.data(), g.size());
    mine[1] = norm * norm;
  }
  std::vector<double> all = replicas->gatherOnOptimizer(mine, 2);
  // The same reduction, in rank order, on every replica: the same bits.
  int first = -1;
  double total = 0;
  for (size_t r = 0; r < all.size() / 2; ++r) {
    const int k = int(all[2 * r]);
    if (k >= 0 && (first < 0 || k < first))
      first = k;
    total += all[2 * r + 1];
  }
  if (sumSquares)
    *sumSquares = total;
  return first < 0 ? "" : describePart(parts[size_t(first)]);
}

void Trainer::recordNonFinite(int64_t step, const std::string &what) {
  std::lock_guard<std::mutex> lock(nanMu);
  if (nanStep < 0) {
    nanStep = step;
    nanWhat = what;
  }
}

bool Trainer::nonFiniteIn(int64_t step) {
  std::lock_guard<std::mutex> lock(nanMu);
  return step < 0 ? nanStep >= 0 : nanStep == step;
}

void Trainer::throwIfNonFinite() {
  std::lock_guard<std::mutex> lock(nanMu);
  if (nanStep >= 0 && opts.onNan == OnNan::Stop)
    throw Error("step " + std::to_string(nanStep) +
                ": non-finite gradient in " + nanWhat +
                "; no update was applied with it");
}

void Trainer::gatherRows(const TokenMatrix &source,
                         const TokenMatrix *sourceLabels, uint64_t first) {
  const int64_t seq = model.seqLen;
  const uint64_t rows = uint64_t(source.rows());
  first %= rows;
  for (int64_t j = 0; j < rowsPerStep; ++j) {
    int64_t row = int64_t((first + uint64_t(j)) % rows);
    source.readRow(row, &batchIds[size_t(j * seq)]);
    if (sourceLabels)
      sourceLabels->readRow(row, &batchLabels[size_t(j * seq)]);
  }
  if (!sourceLabels)
    batchLabels = batchIds;
}

/// (step * rowsPerStep) mod rows without overflowing for long runs.
uint64_t firstRowOf(int64_t step, int64_t rowsPerStep, int64_t numRows) {
  const uint64_t rows = uint64_t(numRows);
  return (uint64_t(step) % rows) * (uint64_t(rowsPerStep) % rows) % rows;
}

uint64_t Trainer::firstRow(int64_t step) const {
  // The data cursor of the checkpoint the run resumed from, advanced by the
  // steps since; the same rows as an uninterrupted run on the same data.
  const uint64_t rows = uint64_t(data->rows());
  // With replicas a step is replicaCount() batches; replica r trains the
  // r-th of them.
  return (cursorRow % rows +
          firstRowOf(step - cursorStep, rowsPerStep * replicaCount(),
                     data->rows()) +
          uint64_t(replicaRank()) * uint64_t(rowsPerStep) % rows) %
         rows;
}

int64_t Trainer::countTargets() const {
  const int64_t seq = model.seqLen;
  int64_t count = 0;
  for (int64_t r = 0; r < rowsPerStep; ++r)
    for (int64_t t = 1; t < seq; ++t)
      count += batchLabels[size_t(r * seq + t)] != kIgnoreIndex;
  return count;
}

float Trainer::lossScaleFor(int64_t count, int64_t microbatches) const {
  // With no target at all PyTorch's mean is 0/0 = nan and the gradient 0;
  // a zero scale gives the same gradient without NaNs in the buffers.
  if (model.loss == LossKind::CausalLM)
    return count > 0 ? float(1.0 / double(count)) : 0.0f;
  return float(1.0 / double(microbatches));
}

void Trainer::update(const std::vector<int> &which, int64_t step) {
  std::vector<AdamWTensor> tensors;
  tensors.reserve(which.size());
  for (int i : which) {
    OptParam &o = opt[size_t(i)];
    const Shard range = owned(o.numel);
    AdamWTensor t;
    t.param = o.param + range.begin;
    t.grad = o.grad + range.begin;
    t.expAvg = o.expAvg.data();
    t.expAvgSq = o.expAvgSq.data();
    t.numel = range.size();
    t.weightDecay = o.weightDecay;
    tensors.push_back(t);
  }
  adamwUpdate(tensors.data(), tensors.size(), adamw, lrAt(step),
              step - skippedSteps + 1);
  if (sharded)
    for (int i : which)
      replicas->allGatherShards(opt[size_t(i)].param, opt[size_t(i)].numel);
}

void Trainer::skipStep(int64_t step, const std::string &why) {
  ++skippedSteps;
  std::fprintf(stderr,
               "rondo: warning: %s; step %lld skipped (--on-nan=skip): no "
               "parameter or optimizer state changed\n",
               why.c_str(), (long long)step);
}

double Trainer::runStepLocal(int64_t step, StepRecord &record) {
  for (const GradTensor &g : trainableGrads)
    parallelZero(g.data, g.numel);
  gatherRows(*data, labels.get(), firstRow(step));

  const int64_t seq = model.seqLen, K = opts.gradAccum;
  const bool causal = model.loss == LossKind::CausalLM;
  const int64_t count = causal ? countTargets() : 0;
  const float lossScale = lossScaleFor(count, K);

  double lossSum = 0;
  int64_t lossCount = 0;
  microbatchLosses.assign(size_t(K), 0.0);
  for (int64_t k = 0; k < K; ++k) {
    StepArgs args;
    args.params = paramPtrs.data();
    args.grads = gradPtrs.data();
    args.inputIds = &batchIds[size_t(k * model.batch * seq)];
    args.labels = &batchLabels[size_t(k * model.batch * seq)];
    args.lossScale = lossScale;
    StepResult result = stepFn(args);
    microbatchLosses[size_t(k)] = result.lossSum;
    lossSum += result.lossSum;
    lossCount += result.lossCount;
  }
  double loss;
  if (causal) {
    if (lossCount != count)
      throw Error("the compiled step counted " + std::to_string(lossCount) +
                  " non-ignored targets in step " + std::to_string(step) +
                  ", the trainer " + std::to_string(count) +
                  "; the step and the runtime disagree on the loss");
    loss = count > 0 ? lossSum / double(count)
                     : std::numeric_limits<double>::quiet_NaN();
  } else {
    loss = lossSum / double(K);
  }

  if (step == 0 && !opts.dumpGradients.empty()) {
    std::vector<const float *> g(gradPtrs.begin(), gradPtrs.end());
    dumpGradients(loss, g);
  }

  double norm = gradNorm(trainableGrads.data(), trainableGrads.size());
  std::string bad;
  if (!std::isfinite(norm)) {
    for (const OptParam &o : opt) {
      if (!allFinite(o.grad, o.numel)) {
        bad = "step " + std::to_string(step) +
              ": non-finite gradient of parameter " +
              model.params[o.index].name + " (first in table order)";
        break;
      }
    }
  }
  if (bad.empty())
    for (size_t k = 0; k < microbatchLosses.size(); ++k)
      if (!std::isfinite(microbatchLosses[k])) {
        bad = "non-finite loss in microbatch " + std::to_string(k) +
              " of step " + std::to_string(step);
        break;
      }
  if (!bad.empty() && opts.onNan == OnNan::Stop)
    throw Error(bad + "; no update was applied with it");
  if (!bad.empty()) {
    skipStep(step, bad);
  } else {
    if (opts.clipGradNorm)
      clipGradNorm(trainableGrads.data(), trainableGrads.size(), norm,
                   *opts.clipGradNorm);
    update(allOpt, step);
  }

  record.step = step;
  record.loss = loss;
  record.tokens = rowsPerStep * seq;
  record.lr = lrAt(step);
  record.gradNorm = norm;
  return loss;
}

/// Byte distance between microbatch m and m + 1 in a host buffer: its
/// slots when it has one per microbatch, else packed.
int64_t microbatchStride(const rondo_program &p, int32_t buffer,
                         int64_t packed) {
  const rondo_buffer_desc &d = p.buffers[buffer];
  return d.count >= p.microbatches && d.bytes >= packed ? d.bytes : packed;
}

void Trainer::loadBatch(const StepTag &) {
  const int64_t rows = program->rowsPerMicrobatch * model.seqLen;
  const int64_t bytes = rows * int64_t(sizeof(int64_t));
  for (auto [buffer, source] :
       {std::pair(program->idsBuffer, &batchIds),
        std::pair(program->labelsBuffer, &batchLabels)}) {
    char *base = exec->hostBuffer(buffer);
    const int64_t stride = microbatchStride(*program, buffer, bytes);
    for (int32_t m = 0; m < program->microbatches; ++m)
      std::memcpy(base + m * stride, source->data() + m * rows, size_t(bytes));
  }
}

void Trainer::prepareGrad(int q, float *sum, Shard range) {
  const std::vector<int32_t> &parts = info.partsOf[size_t(q)];
  if (parts.size() < 2)
    return;
  // The sum in table order, whatever order the parts arrived in.
  const char *hostGrads = exec->optimizerGradients();
  const int64_t n = range.size();
  sum += range.begin;
  auto part = [&](size_t i) {
    return reinterpret_cast<const float *>(
               hostGrads + program->gradParts[parts[i]].hostOffset) +
           range.begin;
  };
  // Elementwise, so threading keeps the order of the additions (and the
  // bits) of the sequential loop.
  const float *first = part(0);
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t e = 0; e < n; ++e)
    sum[e] = first[e];
  for (size_t i = 1; i < parts.size(); ++i) {
    const float *g = part(i);
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
    for (int64_t e = 0; e < n; ++e)
      sum[e] += g[e];
  }
}

void Trainer::sumAcrossReplicas(const std::vector<int32_t> &parts) {
  if (!replicas)
    return;
  // Every replica's tasks reach the same parts in the same (job) order, so
  // the sums pair up.
  char *hostGrads = exec->hostBuffer(program->hostGradsBuffer);
  for (int32_t i : parts) {
    const rondo_grad_part &part = program->gradParts[i];
    float *grad = reinterpret_cast<float *>(hostGrads + part.hostOffset);
    const int64_t n = numElements(model.params[part.param]);
    if (sharded)
      replicas->reduceScatterGradients(grad, n);
    else
      replicas->sumGradients(grad, n);
  }
}

uint64_t Trainer::weightChecksum() const {
  // Order-independent and exact: a sum of the weights' bit patterns, each
  // multiplied by an odd number from its position.
  uint64_t total = 0;
  for (int i = 0; i < model.numParams; ++i) {
    const uint32_t *bits = reinterpret_cast<const uint32_t *>(paramPtrs[i]);
    const int64_t n = numElements(model.params[i]);
    uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n >= (int64_t(1) << 20))
    for (int64_t e = 0; e < n; ++e)
      sum += uint64_t(bits[e]) * (2 * uint64_t(e) + 1);
    total = total * 1000003 + sum;
  }
  return total;
}

void Trainer::checkReplicasAgree(int64_t stepsDone) {
  if (!replicas)
    return;
  exec->drainHost();
  exec->checkError();
  std::vector<uint64_t> all = replicas->gather(weightChecksum());
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw Error("after step " + std::to_string(stepsDone) +
                ": the weights of replica(s) " + differ +
                " differ from replica 0's (checksums compared every "
                "--replica-check-every steps)");
}

void Trainer::optimize(const StepTag &tag, int32_t stage) {
  if (tag.eval)
    return;
  if (stage >= 0) {
    // A non-finite gradient stops before any update that reads it, and
    // no later task updates anything either: the run stops.
    if (nonFiniteIn(-1) && !replicas)
      return;
    const std::vector<int32_t> &parts = partsReadBy[size_t(stage)];
    const std::vector<int> &which = optByStage[size_t(stage)];
    sumAcrossReplicas(parts);
    // Every replica takes part in the same collectives and then makes the
    // same decision.
    std::string bad =
        sharded ? agreeOnShards(parts, which, nullptr) : std::string();
    if (nonFiniteIn(-1))
      return;
    if (!sharded)
      bad = nonFiniteGradient(parts);
    if (!bad.empty()) {
      recordNonFinite(tag.step, bad);
      return;
    }
    for (int i : which)
      prepareGrad(opt[size_t(i)].index, opt[size_t(i)].grad,
                  owned(opt[size_t(i)].numel));
    update(which, tag.step);
    return;
  }
  sumAcrossReplicas(partsInJobOrder);
  for (OptParam &o : opt)
    prepareGrad(o.index, o.grad, owned(o.numel));
  std::string bad;
  if (sharded) {
    double sumSquares = 0;
    bad = agreeOnShards(partsInJobOrder, allOpt, &sumSquares);
    syncNorm = std::sqrt(sumSquares);
  } else {
    bad = nonFiniteGradient(partsInJobOrder);
    std::vector<GradTensor> g = ownedGrads(allOpt);
    syncNorm = gradNorm(g.data(), g.size());
  }
  if (!bad.empty())
    recordNonFinite(tag.step, bad);
  if (dumpNow && opts.clipGradNorm) {
    // The dump shows the gradients before clipping; the trainer writes it
    // once the loss is known.
    for (OptParam &o : opt) {
      dumpStash.emplace_back(o.numel);
      std::memcpy(dumpStash.back().data(), o.grad,
                  size_t(o.numel) * sizeof(float));
    }
  }
  if (!bad.empty() || deferUpdate)
    return; // The trainer thread decides (runStepPipelined).
  if (opts.clipGradNorm) {
    std::vector<GradTensor> g = ownedGrads(allOpt);
    clipGradNorm(g.data(), g.size(), syncNorm, *opts.clipGradNorm);
  }
  update(allOpt, tag.step);
}

double Trainer::issuePipelined(int64_t step, bool eval, float lossScale) {
  exec->beginStep(step, eval, lossScale);
  program->issue(exec.get());
  if (pendingLog) {
    // The previous step's update was released by this issue; log that
    // step once it has run, while the GPUs compute this one.
    exec->waitForPreviousUpdate();
    exec->checkError();
    logPending();
  }
  exec->barrier();
  exec->checkError();
  const char *losses = exec->hostBuffer(program->lossBuffer);
  const int64_t stride =
      microbatchStride(*program, program->lossBuffer, sizeof(float));
  double sum = 0;
  microbatchLosses.assign(size_t(program->microbatches), 0.0);
  for (int32_t m = 0; m < program->microbatches; ++m) {
    float loss;
    std::memcpy(&loss, losses + m * stride, sizeof(float));
    microbatchLosses[size_t(m)] = loss;
    sum += double(loss);
  }
  return sum;
}

double Trainer::pipelinedGradNorm() {
  // With replicas the last optimizer task may still be summing gradients in
  // place; the norm is of the sums.
  if (replicas)
    exec->drainHost();
  std::vector<GradTensor> g;
  for (OptParam &o : opt) {
    float *grad = o.grad;
    const Shard range = owned(o.numel);
    if (info.partsOf[size_t(o.index)].size() > 1) {
      grad = normSums[size_t(o.index)].data();
      prepareGrad(o.index, grad, range);
    }
    g.push_back({grad + range.begin, range.size()});
  }
  const double norm = gradNorm(g.data(), g.size());
  if (!sharded)
    return norm;
  // Logged only, so the order of the replicas' sum does not matter.
  double sumSquares = norm * norm;
  replicas->sum(&sumSquares, 1);
  return std::sqrt(sumSquares);
}

double Trainer::runStepPipelined(int64_t step, StepRecord &record) {
  // The data thread may still read the previous batch.
  exec->drainData();
  exec->checkError();
  gatherRows(*data, labels.get(), firstRow(step));
  const bool causal = model.loss == LossKind::CausalLM;
  int64_t count = causal ? countTargets() : 0;
  if (replicas) {
    // The loss is the mean over the global batch: every replica scales by
    // the global count of targets.
    double global = double(count);
    replicas->sum(&global, 1);
    count = int64_t(global);
  }
  dumpNow = step == 0 && !opts.dumpGradients.empty();
  double lossSum = issuePipelined(
      step, false, lossScaleFor(count, program->microbatches * replicaCount()));
  double loss = causal ? (count > 0 ? lossSum / double(count)
                                    : std::numeric_limits<double>::quiet_NaN())
                       : lossSum / double(program->microbatches);
  // Non-finite values: the gradient message wins (the tasks looked at the
  // gradients before any update), then the loss.
  std::string badLoss;
  for (size_t m = 0; m < microbatchLosses.size(); ++m)
    if (!std::isfinite(microbatchLosses[m])) {
      badLoss = "non-finite loss in microbatch " + std::to_string(m) +
                " of step " + std::to_string(step);
      break;
    }
  if (replicas) {
    // One loss for all, and one decision about a non-finite one.
    double both[2] = {lossSum, badLoss.empty() ? 0.0 : 1.0};
    replicas->sum(both, 2);
    lossSum = both[0];
    loss = causal ? (count > 0 ? lossSum / double(count)
                               : std::numeric_limits<double>::quiet_NaN())
                  : lossSum / double(program->microbatches * replicaCount());
    if (badLoss.empty() && both[1] > 0)
      badLoss =
          "non-finite loss on another replica in step " + std::to_string(step);
  }
  if (!badLoss.empty() || syncMode) {
    if (exec) {
      exec->drainHost();
      exec->checkError();
    }
    throwIfNonFinite();
    if (!badLoss.empty() && opts.onNan == OnNan::Stop)
      throw Error(badLoss + "; no update was applied with it");
  }
  if (deferUpdate) {
    std::string bad;
    {
      std::lock_guard<std::mutex> lock(nanMu);
      if (nanStep == step)
        bad = "step " + std::to_string(step) + ": non-finite gradient in " +
              nanWhat;
      nanStep = -1;
    }
    if (bad.empty())
      bad = badLoss;
    if (bad.empty()) {
      std::vector<GradTensor> g = ownedGrads(allOpt);
      if (opts.clipGradNorm)
        clipGradNorm(g.data(), g.size(), syncNorm, *opts.clipGradNorm);
      update(allOpt, step);
    } else {
      skipStep(step, bad);
    }
  }
  double norm;
  if (syncMode) {
    norm = syncNorm;
  } else if (staleMode) {
    norm = std::numeric_limits<double>::quiet_NaN(); // Its update logs it.
  } else {
    // Only logged: the tasks read the same gradients, nothing writes them
    // until the next step is issued.
    norm = pipelinedGradNorm();
  }
  if (dumpNow) {
    std::vector<const float *> g(size_t(model.numParams), nullptr);
    for (size_t i = 0; i < opt.size(); ++i)
      g[size_t(opt[i].index)] =
          dumpStash.empty() ? opt[i].grad : dumpStash[i].data();
    dumpGradients(loss, g);
    dumpStash.clear();
    dumpNow = false;
  }
  record.step = step;
  record.loss = loss;
  record.tokens = rowsPerStep * replicaCount() * model.seqLen;
  record.lr = lrAt(step);
  record.gradNorm = norm;
  return loss;
}

void Trainer::evaluate(int64_t stepsDone, JsonStepLog *jsonLog) {
  drain();
  const int64_t batches = evalData->rows() / rowsPerStep;
  const bool causal = model.loss == LossKind::CausalLM;
  double lossSum = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < batches; ++b) {
    if (exec) {
      exec->drainData();
      exec->checkError();
    }
    gatherRows(*evalData, nullptr, uint64_t(b * rowsPerStep));
    const int64_t c = causal ? countTargets() : 0;
    count += c;
    if (exec) {
      double sum = issuePipelined(stepsDone, true,
                                  lossScaleFor(c, program->microbatches));
      lossSum += causal ? sum : sum / double(program->microbatches);
      continue;
    }
    // The gradient buffers are scratch here: a step zeroes them first.
    for (int64_t k = 0; k < opts.gradAccum; ++k) {
      StepArgs args;
      args.params = paramPtrs.data();
      args.grads = gradPtrs.data();
      args.inputIds = &batchIds[size_t(k * model.batch * model.seqLen)];
      args.labels = &batchLabels[size_t(k * model.batch * model.seqLen)];
      args.lossScale = lossScaleFor(c, opts.gradAccum);
      StepResult r = stepFn(args);
      lossSum += causal ? r.lossSum : r.lossSum / double(opts.gradAccum);
    }
  }
  drain();
  double loss = causal ? (count > 0 ? lossSum / double(count)
                                    : std::numeric_limits<double>::quiet_NaN())
                       : lossSum / double(batches);
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), "eval: step %lld loss %.6f ppl %.4f",
                (long long)stepsDone, loss, std::exp(loss));
  say(buffer);
  if (jsonLog)
    jsonLog->writeEval(stepsDone, loss, batches * rowsPerStep * model.seqLen);
}

std::vector<CheckpointTensor>
Trainer::checkpointTensors(std::vector<FloatBuffer> &fullMoments) {
  std::vector<CheckpointTensor> t;
  if (sharded) {
    fullMoments.clear();
    for (const OptParam &o : opt) {
      fullMoments.emplace_back(o.numel);
      fullMoments.emplace_back(o.numel);
    }
  }
  for (size_t k = 0; k < opt.size(); ++k) {
    OptParam &o = opt[k];
    std::string name = model.params[o.index].name;
    t.push_back({name, o.param, o.numel});
    t.push_back({"exp_avg/" + name,
                 sharded ? fullMoments[2 * k].data() : o.expAvg.data(),
                 o.numel});
    t.push_back({"exp_avg_sq/" + name,
                 sharded ? fullMoments[2 * k + 1].data() : o.expAvgSq.data(),
                 o.numel});
  }
  return t;
}

std::string rngStateOf(const TrainerOptions &opts) {
  // Training draws no random numbers after initialisation; the seed is
  // kept so a resumed run can say what it started from.
  return "init-seed " + std::to_string(opts.seed);
}

bool Trainer::saveCheckpoint(int64_t stepsDone) {
  drain();
  // A checkpoint stands for every replica: written by rank 0 once all agree.
  checkReplicasAgree(stepsDone);
  std::vector<FloatBuffer> fullMoments;
  std::vector<CheckpointTensor> tensors = checkpointTensors(fullMoments);
  if (sharded) {
    // Every replica's shards of the AdamW state, whole in the file: a run
    // resumes with any number of replicas, sharded or not.
    for (size_t k = 0; k < opt.size(); ++k) {
      const OptParam &o = opt[k];
      const Shard range = owned(o.numel);
      for (int m = 0; m < 2; ++m) {
        float *full = fullMoments[2 * k + size_t(m)].data();
        const FloatBuffer &mine = m == 0 ? o.expAvg : o.expAvgSq;
        std::copy(mine.data(), mine.data() + range.size(), full + range.begin);
        replicas->allGatherShards(full, o.numel);
      }
    }
  }
  if (replicaRank() != 0)
    return true;
  CheckpointMeta meta;
  meta.step = stepsDone;
  meta.dataCursor = firstRow(stepsDone);
  meta.skippedSteps = skippedSteps;
  meta.rngState = rngStateOf(opts);
  meta.program = program ? program->name : "single-process";
  meta.model = model.modelPath ? model.modelPath : "";
  try {
    writeCheckpoint(opts.checkpointDir, meta, tensors);
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

int64_t Trainer::resume() {
  if (!hasCheckpoint(opts.checkpointDir)) {
    say("rondo: no checkpoint in " + opts.checkpointDir +
        "; starting from step 0");
    return 0;
  }
  std::vector<FloatBuffer> fullMoments;
  CheckpointMeta meta =
      readLatestCheckpoint(opts.checkpointDir, checkpointTensors(fullMoments));
  for (size_t k = 0; sharded && k < opt.size(); ++k) {
    OptParam &o = opt[k];
    const Shard range = owned(o.numel);
    for (int m = 0; m < 2; ++m) {
      const float *full = fullMoments[2 * k + size_t(m)].data();
      std::copy(full + range.begin, full + range.end,
                (m == 0 ? o.expAvg : o.expAvgSq).data());
    }
  }
  cursorStep = meta.step;
  cursorRow = meta.dataCursor;
  skippedSteps = meta.skippedSteps;
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
                    {rowsPerStep, model.seqLen},
                    batchIds.data()});
  }
  writeInitializerModel(opts.dumpGradients, floats, ints);
}

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

int Trainer::interrupted(int64_t stepsDone, int64_t lastSaved) {
  const int sig = int(gInterrupt);
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

void Trainer::logStep(const StepRecord &record, double elapsed) {
  if (jsonLog)
    jsonLog->write(record);
  say(progressLine(record, opts.steps, elapsed, firstLoggedStep));
}

void Trainer::logPending() {
  if (!pendingLog)
    return;
  pendingLog->record.gradNorm = syncNorm;
  logStep(pendingLog->record, pendingLog->elapsed);
  pendingLog.reset();
}

int Trainer::runLoop() {
  validateModel(model);
  if (program) {
    if (opts.gradAccum > 1)
      throw Error("--grad-accum is not supported by pipelined trainers; "
                  "compile with --batch B*K");
  } else {
    if (!stepFn)
      throw Error("the compiled model has no step function");
    if (!opts.trace.empty())
      throw Error("--trace records the ops of a pipelined trainer; this "
                  "trainer runs a single-process step");
    if (opts.optimizerMode == "stale")
      throw Error("--optimizer-mode=stale delays the updates of a pipelined "
                  "trainer; this trainer runs a single-process step");
#ifdef _OPENMP
    if (opts.workers > 0)
      omp_set_num_threads(opts.workers);
#endif
  }
  if (!opts.logJson.empty())
    checkWritableDirectory(opts.logJson, "--log-json");
  if (!opts.trace.empty())
    checkWritableDirectory(opts.trace, "--trace");
  if (!opts.dumpGradients.empty())
    checkWritableDirectory(opts.dumpGradients, "--dump-gradients");
  if (!opts.exportOnnx.empty()) {
    checkWritableDirectory(opts.exportOnnx, "--export-onnx");
    if (::access(model.modelPath, R_OK) != 0)
      throw Error(std::string("--export-onnx needs the model ") +
                  model.modelPath + " as a template, and it cannot be read");
  }
  if (!opts.exportLora.empty())
    checkWritableDirectory(opts.exportLora, "--export-lora");
  if (!opts.exportSafetensors.empty()) {
    checkWritableDirectory(opts.exportSafetensors, "--export-safetensors");
    checkHuggingFaceNames(model);
    if (!opts.hfConfig.empty() && ::access(opts.hfConfig.c_str(), R_OK) != 0)
      throw Error("--hf-config " + opts.hfConfig + ": cannot be read");
  }
  if (!opts.dumpGradients.empty() && opts.steps < 1)
    throw Error("--dump-gradients needs at least one step (--steps)");

  loadData();
  allocateAndInitialise();
  setUpOptimizer();
  int64_t firstStep = opts.resume ? resume() : 0;
  if (program) {
    setUpProgram(firstStep);
    exec->setWatchdog(opts.watchdogSeconds);
  }
  if (firstStep > 0 && !opts.dumpGradients.empty())
    throw Error("--dump-gradients writes step 0's gradients; the run resumes "
                "at step " +
                std::to_string(firstStep));
  if (!opts.logJson.empty())
    jsonLog = std::make_unique<JsonStepLog>(opts.logJson);

  int64_t trainable = 0, frozen = 0;
  for (int i = 0; i < model.numParams; ++i)
    (model.params[i].trainable ? trainable : frozen) +=
        numElements(model.params[i]);
  {
    char how[512];
    if (program) {
      std::snprintf(
          how, sizeof(how),
          "plan %s%s: %d worker%s, %d microbatches of %d rows, %s on %s%s",
          program->name, staleMode ? " with one-step-stale updates" : "",
          program->workers, program->workers == 1 ? "" : "s",
          program->microbatches, program->rowsPerMicrobatch,
          model.precision ? model.precision : "fp32",
          exec ? exec->backendName() : "host",
          replicas ? ("; " + std::to_string(replicas->size()) +
                      (sharded ? " replicas, gradients reduce-scattered over "
                               : " replicas, gradients summed over ") +
                      replicas->engine() +
                      (sharded ? ", optimizer sharded " +
                                     std::to_string(replicaCount()) + " ways"
                               : ""))
                         .c_str()
                   : "");
    } else {
      int threads = 1;
#ifdef _OPENMP
      threads = omp_get_max_threads();
#endif
      std::snprintf(how, sizeof(how), "%lld x %lld rows; %d threads",
                    (long long)opts.gradAccum, (long long)model.batch, threads);
    }
    char buffer[768];
    std::snprintf(buffer, sizeof(buffer),
                  "rondo: %lld trainable + %lld frozen parameters; %s: %lld "
                  "rows x %lld tokens; %lld rows per step (%s)",
                  (long long)trainable, (long long)frozen, opts.data.c_str(),
                  (long long)data->rows(), (long long)data->cols(),
                  (long long)(rowsPerStep * replicaCount()), how);
    say(buffer);
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
          model.lora->targets ? model.lora->targets : "?", adapters,
          adapters / 2, (long long)trainable,
          100.0 * double(trainable) / double(trainable + frozen),
          opts.loadLora.empty() ? "PEFT's initialisation (B = 0)"
                                : opts.loadLora.c_str());
      say(buffer);
    }
  }
  if (evalData && evalData->rows() % rowsPerStep != 0)
    say("rondo: --eval-data " + opts.evalData + ": the last " +
        std::to_string(evalData->rows() % rowsPerStep) +
        " rows do not fill a batch of " + std::to_string(rowsPerStep) +
        " and are not evaluated");

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double lastLoss = std::numeric_limits<double>::quiet_NaN();
  int64_t lastSaved = firstStep;
  firstLoggedStep = firstStep;
  auto drainAndLog = [&] {
    if (!pendingLog)
      return;
    drain();
    logPending();
  };
  for (int64_t s = firstStep; s < opts.steps; ++s) {
    bool stop = gInterrupt != 0;
    if (replicas) {
      // mpirun forwards a signal to every replica, but not at the same
      // instant: all stop at the first step boundary any of them saw it.
      double any = stop ? 1.0 : 0.0;
      replicas->sum(&any, 1);
      stop = any > 0;
      if (stop && !gInterrupt)
        gInterrupt = SIGTERM;
    }
    if (stop) {
      drainAndLog();
      return interrupted(s, lastSaved);
    }
    const auto stepStart = Clock::now();
    StepRecord record;
    lastLoss = program ? runStepPipelined(s, record) : runStepLocal(s, record);
    const auto stepEnd = Clock::now();
    record.seconds = std::chrono::duration<double>(stepEnd - stepStart).count();
    double elapsed = std::chrono::duration<double>(stepEnd - start).count();
    if (staleMode) {
      pendingLog = PendingLog{record, elapsed};
    } else {
      logStep(record, elapsed);
    }
    throwIfNonFinite();
    const int64_t done = s + 1;
    // A checkpoint or evaluation applies the pending update: log its step
    // first.
    if ((opts.saveEvery > 0 && done % opts.saveEvery == 0) ||
        (evalData && opts.evalEvery > 0 && done % opts.evalEvery == 0))
      drainAndLog();
    if (replicas && opts.replicaCheckEvery > 0 &&
        done % opts.replicaCheckEvery == 0)
      checkReplicasAgree(done);
    if (opts.saveEvery > 0 && done % opts.saveEvery == 0) {
      saveCheckpoint(done);
      lastSaved = done;
    }
    if (evalData && opts.evalEvery > 0 && done % opts.evalEvery == 0 &&
        done != opts.steps)
      evaluate(done, jsonLog.get());
  }
  drain();
  logPending();
  const int64_t stepsDone = std::max(firstStep, opts.steps);
  if (gInterrupt)
    return interrupted(stepsDone, lastSaved);
  if (!opts.checkpointDir.empty() && lastSaved != stepsDone)
    saveCheckpoint(stepsDone);
  if (evalData)
    evaluate(stepsDone, jsonLog.get());
  double total = std::chrono::duration<double>(Clock::now() - start).count();

  if (exec && !opts.trace.empty()) {
    std::vector<TraceRecord> records = exec->takeTrace();
    writeChromeTrace(opts.trace, *program, records, staleMode);
    say("rondo: wrote the trace to " + opts.trace);
  }
  std::vector<std::vector<float>> merged;
  if (opts.mergeLora)
    merged = mergeLoraWeights(model, paramPtrs.data());
  auto baseWeights = [&](int i) -> const float * {
    return opts.mergeLora && !merged[size_t(i)].empty()
               ? merged[size_t(i)].data()
               : paramPtrs[size_t(i)];
  };
  const std::string whatWeights =
      !model.lora      ? "trained weights"
      : opts.mergeLora ? "the base weights merged with the LoRA adapters"
                       : "the frozen base weights";
  const std::string withoutAdapters =
      model.lora && !opts.mergeLora
          ? " (without the adapters: --export-lora writes them, "
            "--merge-lora merges them in)"
          : "";
  if (!opts.exportOnnx.empty()) {
    // The model has no adapters to write into: its base weights, as they
    // are (frozen) or merged with their adapters.
    std::vector<ParamSpec> toWrite = onnxParams(model);
    std::vector<const float *> data;
    for (int i = 0; i < model.numParams; ++i)
      if (!isLoraAdapter(model.params[i]))
        data.push_back(baseWeights(i));
    exportOnnxWeights(model.modelPath, opts.exportOnnx, toWrite.data(),
                      int(toWrite.size()), data.data());
    say("rondo: wrote " + whatWeights + " to " + opts.exportOnnx +
        withoutAdapters);
  }
  if (!opts.exportSafetensors.empty()) {
    std::vector<const float *> data;
    for (int i = 0; i < model.numParams; ++i)
      data.push_back(baseWeights(i));
    exportHuggingFace(opts.exportSafetensors, opts.hfConfig, model,
                      data.data());
    say("rondo: wrote " + whatWeights + " in Hugging Face's layout to " +
        opts.exportSafetensors + "/model.safetensors" +
        (opts.hfConfig.empty() ? ""
                               : " with " + opts.hfConfig + " as config.json") +
        withoutAdapters);
  }
  if (!opts.exportLora.empty()) {
    exportLoraAdapters(opts.exportLora, model, paramPtrs.data());
    say("rondo: wrote the LoRA adapters to " + opts.exportLora + " and " +
        parentDirectory(opts.exportLora) + "/adapter_config.json");
  }
  const int64_t ran = opts.steps - firstStep;
  if (ran > 0) {
    char buffer[256];
    std::snprintf(
        buffer, sizeof(buffer),
        "rondo: %lld steps in %s (%.0f tok/s), last loss %.6f", (long long)ran,
        formatDuration(total).c_str(),
        total > 0
            ? double(ran * rowsPerStep * replicaCount() * model.seqLen) / total
            : 0.0,
        lastLoss);
    say(buffer);
    if (exec)
      if (std::string memory = exec->memoryReport(); !memory.empty())
        say(memory);
  }
  return 0;
}

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

/// Picks the program for --workers and --optimizer-mode; returns an error
/// message or "".
std::string selectProgram(const rondo_program *programs, int numPrograms,
                          const TrainerOptions &opts,
                          const rondo_program *&chosen) {
  if (numPrograms < 1 || !programs)
    return "this trainer has no compiled program";
  const int workers = opts.workers > 0 ? opts.workers : programs[0].workers;
  // The stale step runs the sync program (one update per step), late.
  const std::string mode =
      opts.optimizerMode == "stale" ? "sync"
      : !opts.optimizerMode.empty()
          ? opts.optimizerMode
          : (opts.clipGradNorm || !opts.dumpGradients.empty() ||
                     opts.onNan == OnNan::Skip
                 ? "sync"
                 : "overlap");
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
  if (!options.weights.empty() && options.init == InitKind::Random)
    return usageError("--weights has no effect with --init=random");
  if (!model.lora) {
    const char *loraFlag = !options.loadLora.empty()     ? "--load-lora"
                           : !options.exportLora.empty() ? "--export-lora"
                           : options.mergeLora           ? "--merge-lora"
                                                         : nullptr;
    if (loraFlag)
      return usageError(std::string(loraFlag) +
                        ": this trainer has no LoRA adapters (compile with "
                        "rondo-compile --lora)");
  }
  bool isNpy = options.data.size() >= 4 &&
               options.data.compare(options.data.size() - 4, 4, ".npy") == 0;
  if (options.dataDType && isNpy)
    return usageError("--data-dtype applies to flat token streams; " +
                      options.data + " is a .npy file with its own dtype");
  if (!options.gpus.empty() && !device)
    return usageError("--gpus " + options.gpus +
                      ": this trainer runs on host workers (compiled with "
                      "--target=host); choose their number with --workers");
  const rondo_program *program = nullptr;
  if (programs || numPrograms) {
    std::string why = selectProgram(programs, numPrograms, options, program);
    if (!why.empty())
      return usageError(why);
    if (options.gradAccum > 1)
      return usageError("--grad-accum is not supported by pipelined "
                        "trainers; compile with --batch B*K");
  }
  std::unique_ptr<ReplicaGroup> replicas;
  std::string who = argv0;
  if (options.replicas > 1) {
    if (!program)
      return usageError("--replicas needs a pipelined trainer (compiled "
                        "with --workers)");
    // MPI is the default everywhere: the NCCL engine is experimental (on 2
    // H200s its replicas' weights diverged, which the checksum check caught,
    // and a lost replica was not always detected); see docs/Runtime.md.
    std::string engine = options.replicaEngine;
    if (engine.empty())
      engine = "mpi";
    if (options.shardOptimizer && !options.dumpGradients.empty())
      return usageError("--dump-gradients with --replicas: each replica holds "
                        "only its shard of the summed gradients; add "
                        "--shard-optimizer=off to dump them whole");
    if (engine == "nccl" && !(device && gpuReplicaFactory()))
      return usageError("--replica-engine=nccl needs a GPU trainer "
                        "(compiled with --target=cuda)");
    if (engine == "nccl" && options.gpus.empty())
      if (const char *local = std::getenv("LOCAL_RANK")) {
        // One machine, several replicas: replica k of this machine takes
        // the k-th group of --workers GPUs.
        int first = std::atoi(local) * program->workers;
        for (int w = 0; w < program->workers; ++w)
          options.gpus += (w ? "," : "") + std::to_string(first + w);
      }
    try {
      if (engine == "nccl") {
        std::fprintf(stderr,
                     "%s: warning: --replica-engine=nccl is experimental: "
                     "the replicas' weight checksums are compared every "
                     "--replica-check-every steps and the run stops if they "
                     "differ\n",
                     argv0);
        int gpu = options.gpus.empty() ? 0 : std::atoi(options.gpus.c_str());
        replicas = gpuReplicaFactory()(options.replicas, gpu);
      } else {
        replicas = joinReplicaGroup(options.replicas);
      }
    } catch (const Error &e) {
      return usageError(e.what());
    }
    if (replicas->rank() != 0) {
      // Rank 0 speaks and writes for all; the others only report errors.
      who += " (replica " + std::to_string(replicas->rank()) + ")";
      options.quiet = true;
      options.logJson.clear();
      options.trace.clear();
      options.exportOnnx.clear();
      options.exportLora.clear();
      options.dumpGradients.clear();
    }
  }
  try {
    int status = Trainer(model, options, step, program, who.c_str(), device,
                         replicas.get())
                     .run();
    return status;
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
