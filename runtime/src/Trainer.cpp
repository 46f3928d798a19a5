//===- Trainer.cpp - trainerMain: the loop around the compiled step -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Semantics of one optimizer step s (0-based) of --steps N:
//   1. Zero the gradients.
//   2. Take the next K * batch rows of the data (K = --grad-accum), wrapping
//      around at the end: rows (s*K*batch + j) mod rows, j = 0 .. K*batch-1.
//   3. CausalLM: count the non-ignored targets of those rows, labels[:, 1:]
//      != -100, and pass lossScale = 1/count to each of the K microbatch calls
//      so the accumulated gradient is that of the global mean; the loss is
//      sum(lossSum) / count. GraphOutput: lossScale = 1/K and the loss is the
//      mean of the K graph losses.
//   4. Step 0 only: dump the gradients (--dump-gradients).
//   5. Global gradient norm; clip (--clip-grad-norm).
//   6. AdamW update with lr = base * schedule(s) and step count s + 1.
//   7. Log the loss of 3 (computed before this step's update).
// So N steps log N losses and apply N updates; losses[0] is the loss of the
// initial weights, as in the PyTorch references.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Trainer.h"
#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/Buffer.h"
#include "rondo/runtime/Data.h"
#include "rondo/runtime/Error.h"
#include "rondo/runtime/OnnxWeights.h"
#include "rondo/runtime/Schedule.h"

#include "Cli.h"
#include "FileUtil.h"
#include "Init.h"
#include "Log.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <new>
#include <regex>
#include <unistd.h>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rondo::rt {

namespace {

constexpr int64_t kIgnoreIndex = -100;

int64_t numElements(const ParamSpec &p) {
  int64_t n = 1;
  for (int i = 0; i < p.rank; ++i)
    n *= p.dims[i];
  return n;
}

void validateModel(const ModelSpec &model, StepFn step) {
  if (!step)
    throw Error("the compiled model has no step function");
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
}

/// Fails early, not after hours of training, when an output cannot be
/// created.
void checkWritableDirectory(const std::string &path, const char *flag) {
  std::string dir = parentDirectory(path);
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(std::string(flag) + " " + path + ": directory '" + dir +
                "' does not exist or is not writable");
}

class Trainer {
public:
  Trainer(const ModelSpec &model, StepFn step, const TrainerOptions &options)
      : model(model), stepFn(step), opts(options) {}

  int run();

private:
  void loadData();
  void allocateAndInitialise();
  void setUpOptimizer();
  void gatherRows(int64_t step);
  double runStep(int64_t step, StepRecord &record);
  void dumpGradients(double loss);
  void say(const std::string &line) const {
    if (!opts.quiet) {
      std::fputs((line + "\n").c_str(), stdout);
      std::fflush(stdout);
    }
  }

  const ModelSpec &model;
  StepFn stepFn;
  const TrainerOptions &opts;

  std::unique_ptr<TokenMatrix> data;
  std::unique_ptr<TokenMatrix> labels;
  int64_t rowsPerStep = 0;
  std::vector<int64_t> stepInputs; ///< [K * batch, seqLen] of this step.
  std::vector<int64_t> stepLabels;

  std::vector<FloatBuffer> params;
  std::vector<FloatBuffer> grads; ///< Empty buffers for frozen params.
  std::vector<const float *> paramPtrs;
  std::vector<float *> gradPtrs; ///< nullptr for frozen params.
  std::vector<GradTensor> trainableGrads;
  AdamW optimizer;
};

void Trainer::loadData() {
  TokenDType binType = opts.dataDType.value_or(TokenDType::UInt16);
  data = std::make_unique<TokenMatrix>(
      TokenMatrix::open(opts.data, binType, model.seqLen));
  if (data->cols() != model.seqLen)
    throw Error(opts.data + ": rows have " + std::to_string(data->cols()) +
                " tokens, the trainer was compiled for seq-len " +
                std::to_string(model.seqLen));
  const int64_t vocabLimit = model.vocabSize > 0
                                 ? model.vocabSize
                                 : std::numeric_limits<int64_t>::max();
  data->checkRange(0, vocabLimit);
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
  stepInputs.resize(size_t(rowsPerStep * model.seqLen));
  stepLabels.resize(stepInputs.size());
}

void Trainer::allocateAndInitialise() {
  const int n = model.numParams;
  params.reserve(size_t(n));
  grads.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    const ParamSpec &p = model.params[i];
    params.emplace_back(numElements(p));
    grads.emplace_back(p.trainable ? numElements(p) : 0);
    paramPtrs.push_back(params.back().data());
    gradPtrs.push_back(p.trainable ? grads.back().data() : nullptr);
    if (p.trainable)
      trainableGrads.push_back({grads.back().data(), numElements(p)});
  }
  if (opts.init == InitKind::Random) {
    for (int i = 0; i < n; ++i)
      randomInit(model.params[i], opts.seed, params[size_t(i)].data());
    return;
  }
  std::string path = opts.weights.empty() ? model.modelPath : opts.weights;
  std::vector<float *> dst;
  for (FloatBuffer &b : params)
    dst.push_back(b.data());
  try {
    loadOnnxWeights(path, model.params, n, dst.data());
  } catch (const Error &e) {
    throw Error(std::string(e.what()) +
                " (choose other weights with --weights FILE.onnx, or "
                "--init=random)");
  }
}

void Trainer::setUpOptimizer() {
  AdamWConfig config;
  config.beta1 = opts.beta1;
  config.beta2 = opts.beta2;
  config.eps = opts.eps;
  optimizer = AdamW(config);
  std::optional<std::regex> noDecay;
  if (!opts.noDecay.empty())
    noDecay.emplace(opts.noDecay);
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (!p.trainable)
      continue;
    bool exempt = noDecay && (std::regex_search(p.name, *noDecay) ||
                              (p.displayName && *p.displayName &&
                               std::regex_search(p.displayName, *noDecay)));
    optimizer.addParam(params[size_t(i)].data(), grads[size_t(i)].data(),
                       numElements(p), exempt ? 0.0 : opts.weightDecay);
  }
}

void Trainer::gatherRows(int64_t step) {
  const int64_t seq = model.seqLen;
  // (step * rowsPerStep) mod rows without overflowing for long runs.
  const uint64_t rows = uint64_t(data->rows());
  const uint64_t first =
      (uint64_t(step) % rows) * (uint64_t(rowsPerStep) % rows) % rows;
  for (int64_t j = 0; j < rowsPerStep; ++j) {
    int64_t row = int64_t((first + uint64_t(j)) % rows);
    data->readRow(row, &stepInputs[size_t(j * seq)]);
    if (labels)
      labels->readRow(row, &stepLabels[size_t(j * seq)]);
  }
  if (!labels)
    stepLabels = stepInputs;
}

double Trainer::runStep(int64_t step, StepRecord &record) {
  for (const GradTensor &g : trainableGrads)
    parallelZero(g.data, g.numel);
  gatherRows(step);

  const int64_t seq = model.seqLen, K = opts.gradAccum;
  const bool causal = model.loss == LossKind::CausalLM;
  int64_t count = 0;
  if (causal)
    for (int64_t r = 0; r < rowsPerStep; ++r)
      for (int64_t t = 1; t < seq; ++t)
        count += stepLabels[size_t(r * seq + t)] != kIgnoreIndex;
  // With no target at all PyTorch's mean is 0/0 = nan and the gradient 0;
  // a zero scale gives the same gradient without NaNs in the buffers.
  const float lossScale = causal
                              ? (count > 0 ? float(1.0 / double(count)) : 0.0f)
                              : float(1.0 / double(K));

  double lossSum = 0;
  int64_t lossCount = 0;
  for (int64_t k = 0; k < K; ++k) {
    StepArgs args;
    args.params = paramPtrs.data();
    args.grads = gradPtrs.data();
    args.inputIds = &stepInputs[size_t(k * model.batch * seq)];
    args.labels = &stepLabels[size_t(k * model.batch * seq)];
    args.lossScale = lossScale;
    StepResult result = stepFn(args);
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

  if (step == 0 && !opts.dumpGradients.empty())
    dumpGradients(loss);

  double norm = gradNorm(trainableGrads.data(), trainableGrads.size());
  if (opts.clipGradNorm)
    clipGradNorm(trainableGrads.data(), trainableGrads.size(), norm,
                 *opts.clipGradNorm);
  double lr =
      opts.lr * lrMultiplier(opts.schedule, step, opts.warmup, opts.steps);
  optimizer.step(lr);

  record.step = step;
  record.loss = loss;
  record.tokens = rowsPerStep * seq;
  record.lr = lr;
  record.gradNorm = norm;
  return loss;
}

void Trainer::dumpGradients(double loss) {
  std::vector<TensorToWrite<float>> floats;
  bool nameClash = false;
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    nameClash |=
        std::string(p.name) == "loss" || std::string(p.name) == model.inputName;
    if (!p.trainable)
      continue;
    floats.push_back({p.name, std::vector<int64_t>(p.dims, p.dims + p.rank),
                      grads[size_t(i)].data()});
  }
  // The references also carry the loss and the batch; add them unless a
  // parameter already uses one of the names.
  const float lossValue = float(loss);
  std::vector<TensorToWrite<int64_t>> ints;
  if (!nameClash) {
    floats.push_back({"loss", {}, &lossValue});
    ints.push_back({model.inputName ? model.inputName : "input_ids",
                    {rowsPerStep, model.seqLen},
                    stepInputs.data()});
  }
  writeInitializerModel(opts.dumpGradients, floats, ints);
}

int Trainer::run() {
  validateModel(model, stepFn);
#ifdef _OPENMP
  if (opts.workers > 0)
    omp_set_num_threads(opts.workers);
#endif
  if (!opts.logJson.empty())
    checkWritableDirectory(opts.logJson, "--log-json");
  if (!opts.dumpGradients.empty())
    checkWritableDirectory(opts.dumpGradients, "--dump-gradients");
  if (!opts.exportOnnx.empty()) {
    checkWritableDirectory(opts.exportOnnx, "--export-onnx");
    if (::access(model.modelPath, R_OK) != 0)
      throw Error(std::string("--export-onnx needs the model ") +
                  model.modelPath + " as a template, and it cannot be read");
  }
  if (!opts.dumpGradients.empty() && opts.steps < 1)
    throw Error("--dump-gradients needs at least one step (--steps)");

  loadData();
  allocateAndInitialise();
  setUpOptimizer();
  std::unique_ptr<JsonStepLog> jsonLog;
  if (!opts.logJson.empty())
    jsonLog = std::make_unique<JsonStepLog>(opts.logJson);

  int64_t trainable = 0, frozen = 0;
  for (int i = 0; i < model.numParams; ++i)
    (model.params[i].trainable ? trainable : frozen) +=
        numElements(model.params[i]);
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  {
    char buffer[512];
    std::snprintf(
        buffer, sizeof(buffer),
        "rondo: %lld trainable + %lld frozen parameters; %s: %lld rows x "
        "%lld tokens; %lld rows per step (%lld x %lld); %d threads",
        (long long)trainable, (long long)frozen, opts.data.c_str(),
        (long long)data->rows(), (long long)data->cols(),
        (long long)rowsPerStep, (long long)opts.gradAccum,
        (long long)model.batch, threads);
    say(buffer);
  }

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  bool warnedNonFinite = false;
  double lastLoss = std::numeric_limits<double>::quiet_NaN();
  for (int64_t s = 0; s < opts.steps; ++s) {
    const auto stepStart = Clock::now();
    StepRecord record;
    lastLoss = runStep(s, record);
    const auto stepEnd = Clock::now();
    record.seconds = std::chrono::duration<double>(stepEnd - stepStart).count();
    double elapsed = std::chrono::duration<double>(stepEnd - start).count();
    if (jsonLog)
      jsonLog->write(record);
    say(progressLine(record, opts.steps, elapsed));
    if (!std::isfinite(lastLoss) && !warnedNonFinite) {
      std::fprintf(stderr, "rondo: warning: step %lld has a non-finite loss\n",
                   (long long)s);
      warnedNonFinite = true;
    }
  }
  double total = std::chrono::duration<double>(Clock::now() - start).count();

  if (!opts.exportOnnx.empty()) {
    exportOnnxWeights(model.modelPath, opts.exportOnnx, model.params,
                      model.numParams, paramPtrs.data());
    say("rondo: wrote trained weights to " + opts.exportOnnx);
  }
  if (opts.steps > 0) {
    char buffer[256];
    std::snprintf(buffer, sizeof(buffer),
                  "rondo: %lld steps in %s (%.0f tok/s), last loss %.6f",
                  (long long)opts.steps, formatDuration(total).c_str(),
                  total > 0
                      ? double(opts.steps * rowsPerStep * model.seqLen) / total
                      : 0.0,
                  lastLoss);
    say(buffer);
  }
  return 0;
}

} // namespace

int trainerMain(int argc, char **argv, const ModelSpec &model, StepFn step) {
  const char *program = argc > 0 && argv[0] ? argv[0] : "trainer";
  TrainerOptions options;
  std::string message;
  switch (parseTrainerOptions(argc, argv, options, message)) {
  case CliStatus::Help:
    std::fputs(trainerHelp(program, model).c_str(), stdout);
    return 0;
  case CliStatus::Error:
    std::fprintf(stderr, "%s: error: %s\n", program, message.c_str());
    return 2;
  case CliStatus::Ok:
    break;
  }
  auto usageError = [&](const std::string &why) {
    std::fprintf(stderr, "%s: error: %s\n", program, why.c_str());
    return 2;
  };
  if (!options.weights.empty() && options.init == InitKind::Random)
    return usageError("--weights has no effect with --init=random");
  bool isNpy = options.data.size() >= 4 &&
               options.data.compare(options.data.size() - 4, 4, ".npy") == 0;
  if (options.dataDType && isNpy)
    return usageError("--data-dtype applies to flat token streams; " +
                      options.data + " is a .npy file with its own dtype");
  try {
    return Trainer(model, step, options).run();
  } catch (const Error &e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "%s: error: out of memory\n", program);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program, e.what());
  }
  return 1;
}

} // namespace rondo::rt
