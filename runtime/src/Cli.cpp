//===- Cli.cpp - The trainer's command line -------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <regex>
#include <sstream>
#include <vector>

namespace rondo::rt {

namespace {

/// One flag: its spelling, help, and how its value is stored. A handler
/// returns an error message (without the flag name) or "".
struct Flag {
  const char *name;
  const char *valueName; ///< nullptr: a boolean flag without value.
  const char *help;
  std::function<std::string(const std::string &)> apply;
};

std::string parseDouble(const std::string &text, double &out) {
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || errno == ERANGE || !std::isfinite(v))
    return "expected a finite number";
  out = v;
  return "";
}

std::string parseInt(const std::string &text, int64_t &out) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || errno == ERANGE)
    return "expected an integer";
  out = v;
  return "";
}

/// A flag whose value is one of a few names, each standing for a value of
/// `dst`; anything else is refused naming them ("expected a, b or c").
template <class T>
std::function<std::string(const std::string &)>
oneOf(T &dst, std::vector<std::pair<std::string, T>> choices) {
  return [&dst, choices = std::move(choices)](const std::string &v) {
    std::string expected = "expected ";
    for (size_t k = 0; k < choices.size(); ++k) {
      if (v == choices[k].first) {
        dst = choices[k].second;
        return std::string();
      }
      expected += (k == 0                    ? ""
                   : k + 1 == choices.size() ? " or "
                                             : ", ") +
                  choices[k].first;
    }
    return expected;
  };
}

std::string parseBool(const std::string &text, bool &out) {
  if (text == "true" || text == "1") {
    out = true;
    return "";
  }
  if (text == "false" || text == "0") {
    out = false;
    return "";
  }
  return "expected true or false";
}

size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::vector<Flag> makeFlags(TrainerOptions &o) {
  auto real = [](double &dst, double lo, bool loOpen, double hi, bool hiOpen) {
    return [&dst, lo, loOpen, hi, hiOpen](const std::string &v) {
      double x = 0;
      if (std::string err = parseDouble(v, x); !err.empty())
        return err;
      if (x < lo || (loOpen && x == lo) || x > hi || (hiOpen && x == hi)) {
        std::ostringstream os;
        os << "must be in " << (loOpen ? "(" : "[") << lo << ", " << hi
           << (hiOpen ? ")" : "]");
        return os.str();
      }
      dst = x;
      return std::string();
    };
  };
  // An integer in [lo, hi], handed to `store`.
  auto integerIn = [](int64_t lo, int64_t hi, auto store) {
    return [lo, hi, store](const std::string &v) {
      int64_t x = 0;
      if (std::string err = parseInt(v, x); !err.empty())
        return err;
      if (x < lo || x > hi)
        return hi == INT64_MAX ? "must be at least " + std::to_string(lo)
                               : "must be in [" + std::to_string(lo) + ", " +
                                     std::to_string(hi) + "]";
      store(x);
      return std::string();
    };
  };
  auto integer = [integerIn](int64_t &dst, int64_t lo) {
    return integerIn(lo, INT64_MAX, [&dst](int64_t x) { dst = x; });
  };
  auto text = [](std::string &dst) {
    return [&dst](const std::string &v) {
      if (v.empty())
        return std::string("expected a non-empty value");
      dst = v;
      return std::string();
    };
  };
  const double inf = HUGE_VAL;
  return {
      {"data", "FILE",
       "Token ids: .npy int32/int64/uint16/uint32 [rows, seq], or a flat "
       "token stream (.bin) cut into rows of seq tokens. Required.",
       text(o.data)},
      {"data-dtype", "uint16|uint32",
       "Token type of a flat stream (default uint16).",
       [&o](const std::string &v) {
         std::optional<TokenDType> t = parseTokenDType(v);
         if (!t || (*t != TokenDType::UInt16 && *t != TokenDType::UInt32))
           return std::string("expected uint16 or uint32");
         o.dataDType = t;
         return std::string();
       }},
      {"labels", "FILE",
       "Labels .npy, same shape as the data, -100 = ignore; not shifted "
       "(labels[b][t] is the target of position t-1). Default: the inputs.",
       text(o.labels)},
      {"steps", "N",
       "Optimizer steps (default 1). Step s logs the loss of its "
       "forward pass, then updates.",
       integer(o.steps, 0)},
      {"optimizer", "adamw", "The optimizer (only adamw).",
       [](const std::string &v) {
         return v == "adamw" ? std::string() : std::string("expected adamw");
       }},
      {"optimizer-mode", "sync|overlap|stale",
       "sync: one update after the whole backward pass (PyTorch order). "
       "overlap: each stage's parameters are updated as soon as their "
       "gradients are downloaded, while the backward pass goes on; the "
       "same bits as sync. stale: RoundPipe's asynchronous step: step s+1 "
       "runs on the weights before step s's update, which the host computes "
       "meanwhile (different numerics; every checkpoint, evaluation and the "
       "end of the run apply the pending update first). Default: the mode "
       "the plans were chosen for (rondo-compile --optimizer-mode, overlap "
       "unless given), sync with --clip-grad-norm, --dump-gradients or "
       "--on-nan=skip.",
       oneOf(o.optimizerMode,
             {{"sync", "sync"}, {"overlap", "overlap"}, {"stale", "stale"}})},
      {"lr", "X", "Peak learning rate (default 1e-3).",
       real(o.lr, 0, false, inf, false)},
      {"betas", "B1,B2", "AdamW betas (default 0.9,0.999).",
       [&o](const std::string &v) {
         size_t comma = v.find(',');
         double b1 = 0, b2 = 0;
         if (comma == std::string::npos ||
             !parseDouble(v.substr(0, comma), b1).empty() ||
             !parseDouble(v.substr(comma + 1), b2).empty())
           return std::string("expected two numbers B1,B2");
         if (b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1)
           return std::string("betas must be in [0, 1)");
         o.beta1 = b1;
         o.beta2 = b2;
         return std::string();
       }},
      // 0 divides by a zero second moment in the first update (NaN weights
      // before anything looks at them).
      {"eps", "X", "AdamW epsilon (default 1e-8; must be positive).",
       real(o.eps, 0, true, inf, false)},
      {"weight-decay", "X", "Decoupled weight decay (default 0.01).",
       real(o.weightDecay, 0, false, inf, false)},
      {"no-decay", "REGEX",
       "Parameters whose ONNX or PyTorch name contains a match get no "
       "weight decay (ECMAScript regex, searched).",
       [&o](const std::string &v) {
         try {
           std::regex re(v);
         } catch (const std::regex_error &e) {
           return std::string("invalid regular expression: ") + e.what();
         }
         o.noDecay = v;
         return std::string();
       }},
      {"clip-grad-norm", "X",
       "Clip the global L2 norm of the gradients to X "
       "(torch.nn.utils.clip_grad_norm_).",
       [&o, real](const std::string &v) {
         double x = 0;
         std::string err = real(x, 0, true, HUGE_VAL, false)(v);
         if (err.empty())
           o.clipGradNorm = x;
         return err;
       }},
      {"grad-accum", "K",
       "Gradient accumulation: each optimizer step runs K steps of the "
       "compiled program on K consecutive batches and sums their gradients "
       "before one update, so a step trains on K times the compiled batch "
       "(the loss is the mean over all of them; up to the order of the "
       "sums, a trainer compiled with --batch B*K). Default 1; not with "
       "--optimizer-mode=stale or --replicas.",
       integer(o.gradAccum, 1)},
      {"lr-schedule", "constant|cosine|linear",
       "Learning-rate schedule over --steps, as transformers' "
       "get_*_schedule_with_warmup (default constant).",
       [&o](const std::string &v) {
         std::optional<LrSchedule> s = parseLrSchedule(v);
         if (!s)
           return std::string("expected constant, cosine or linear");
         o.schedule = *s;
         return std::string();
       }},
      {"warmup", "N", "Linear warm-up steps (default 0).",
       integer(o.warmup, 0)},
      {"init", "onnx|random",
       "Initial weights: from the ONNX model (default) or random "
       "(normal(0, 0.02); ones for 1-D *norm*, zeros for 1-D *bias*).",
       oneOf(o.init, {{"onnx", InitKind::Onnx}, {"random", InitKind::Random}})},
      {"seed", "S", "Seed of --init=random (default 0).",
       [&o](const std::string &v) {
         int64_t x = 0;
         if (std::string err = parseInt(v, x); !err.empty())
           return err;
         o.seed = uint64_t(x);
         return std::string();
       }},
      {"weights", "FILE.onnx",
       "Read initial weights from this ONNX model instead of the compiled "
       "one's.",
       text(o.weights)},
      {"log-json", "FILE",
       "Write one JSON object per step: step (0-based), loss, tokens, "
       "seconds, lr, grad_norm; and one per evaluation: eval_step, "
       "eval_loss, eval_ppl, eval_tokens.",
       text(o.logJson)},
      {"tensorboard", "DIR",
       "Write TensorBoard event files into DIR (created if missing): per "
       "step train/loss, train/learning_rate, train/grad_norm, "
       "train/tokens_per_second, memory/host_rss_gb and "
       "memory/host_peak_gb, and eval/loss, eval/perplexity; a resumed "
       "run adds a new file from its first step.",
       text(o.tensorboard)},
      {"dump-gradients", "FILE.onnx",
       "Write the gradients of the first step (before clipping and any "
       "update) as ONNX initializers, as the *.ref.onnx references are.",
       text(o.dumpGradients)},
      {"export-onnx", "FILE",
       "Write the trained weights into a copy of the model (LoRA trainers: "
       "the base weights, unchanged unless --merge-lora).",
       text(o.exportOnnx)},
      {"export-safetensors", "DIR",
       "Write the trained weights as Hugging Face saves the model: "
       "DIR/model.safetensors with PyTorch's names and layouts (nn.Linear "
       "weights transposed back), for AutoModelForCausalLM.from_pretrained "
       "beside the model's config.json (LoRA trainers: the base weights, "
       "merged with --merge-lora).",
       text(o.exportSafetensors)},
      {"hf-config", "FILE",
       "With --export-safetensors: copy the model's original config.json "
       "into DIR.",
       text(o.hfConfig)},
      {"load-lora", "FILE.safetensors",
       "LoRA trainers: start the adapters from a PEFT adapter file "
       "(adapter_model.safetensors) instead of PEFT's initialisation "
       "(A kaiming-uniform with --seed, B zero).",
       text(o.loadLora)},
      {"export-lora", "FILE.safetensors",
       "LoRA trainers: write the trained adapters as PEFT saves them "
       "(base_model.model.<module>.lora_A.weight [r, in], lora_B.weight "
       "[out, r]; stacked experts in PEFT's target_parameters layout, "
       "[E*r, d1] and [d2, r*E]) and PEFT's adapter_config.json into the "
       "same directory.",
       text(o.exportLora)},
      {"merge-lora", nullptr,
       "LoRA trainers: --export-onnx and --export-safetensors write W + "
       "(alpha/r)*A*B for every "
       "adapted weight (merged in double, rounded once).",
       [&o](const std::string &v) { return parseBool(v, o.mergeLora); }},
      {"workers", "N",
       "The compiled plan to run (default: the first compiled worker "
       "count).",
       integerIn(1, 4096, [&o](int64_t x) { o.workers = int(x); })},
      {"replicas", "R",
       "Pipelined trainers: run R replicas of the pipeline, one process "
       "each, started by `mpirun -np R` (Open MPI; as root add "
       "--allow-run-as-root), torchrun or srun. A program compiled for R "
       "replicas (rondo-compile --gpus or --replicas) trains its share of "
       "the compiled global batch; one compiled for fewer makes every step "
       "R x its batch, replica r training rows [r*B, (r+1)*B). The "
       "gradients are summed across replicas before the optimizer reads "
       "them. Rank 0 prints, logs and writes checkpoints. A trainer "
       "compiled with --gpus takes its chosen layout's R (or the launcher's "
       "WORLD_SIZE) without this flag.",
       integerIn(1, 65536,
                 [&o](int64_t x) {
                   o.replicas = int(x);
                   o.replicasGiven = true;
                 })},
      {"replica-engine", "mpi|nccl",
       "With --replicas: how gradients are summed. nccl (the default for "
       "GPU trainers): on the GPUs, in place for state kept on the GPU; "
       "processes started by mpirun, torchrun, Slurm or by hand (RANK and "
       "WORLD_SIZE or their mpirun/Slurm names; MASTER_ADDR and MASTER_PORT "
       "when not 127.0.0.1:29500); each replica's GPUs are --gpus, or its "
       "local rank's share of them. mpi (the default for host trainers): "
       "under mpirun, through host memory.",
       oneOf(o.replicaEngine, {{"mpi", "mpi"}, {"nccl", "nccl"}})},
      {"map-weights", "auto|on|off",
       "Frozen weights (LoRA's base model) whose ONNX external data is fp32: "
       "on: used in place from read-only mappings of the data files, never "
       "copied, paged in as the uploads read them (they may exceed the "
       "host's memory; uploads are pageable, staged by the driver); off: "
       "copied into pinned host memory; auto (default): mapped when they "
       "would take more than half of the host's memory.",
       oneOf(o.mapWeights, {{"auto", MapWeights::Auto},
                            {"on", MapWeights::On},
                            {"off", MapWeights::Off}})},
      {"shard-optimizer", "on|off",
       "With --replicas: on (default): replica r sums and updates only its "
       "1/R shard of every parameter (gradients reduce-scattered, weights "
       "all-gathered after the update; AdamW state 1/R per replica). off: "
       "every replica sums all gradients (all-reduce) and runs the whole "
       "optimizer.",
       oneOf(o.shardOptimizer, {{"on", true}, {"off", false}})},
      {"replica-check-every", "K",
       "With --replicas: compare the replicas' weight checksums every K "
       "steps and at every checkpoint; a mismatch stops the run (default "
       "50; 0: only at checkpoints).",
       [&o](const std::string &v) {
         int64_t x = 0;
         if (std::string err = parseInt(v, x); !err.empty())
           return err;
         if (x < 0)
           return std::string("must be >= 0");
         o.replicaCheckEvery = x;
         return std::string();
       }},
      {"gpus", "LIST",
       "GPU trainers (--target=cuda): the GPUs to run on, e.g. 0,1,2,3; "
       "worker w runs on the (w mod count)-th (default: the first "
       "--workers GPUs). A trainer compiled with --gpus runs the layout "
       "for this many GPUs, starting its replicas itself; under a launcher "
       "each replica takes its local rank's share of the list.",
       [&o](const std::string &v) {
         if (v.empty())
           return std::string("expected a comma-separated list of GPU "
                              "indices");
         o.gpus = v;
         return std::string();
       }},
      {"trace", "FILE.json",
       "Write a Chrome trace (chrome://tracing, Perfetto) of every op of "
       "the pipelined run, with the plan's predictions in otherData; "
       "scripts/plan-vs-trace.py compares the two.",
       text(o.trace)},
      {"checkpoint-dir", "DIR",
       "Write checkpoints (weights, AdamW moments, step, data cursor) here, "
       "atomically; at least at the end of the run.",
       text(o.checkpointDir)},
      {"save-every", "K", "Also write a checkpoint every K steps.",
       integer(o.saveEvery, 1)},
      {"keep-checkpoints", "N",
       "Checkpoints kept in --checkpoint-dir: after each write the older "
       "ones but the newest N are deleted (default 2: the newest and the "
       "one before it, which --resume falls back to when the newest is "
       "damaged; 1 keeps no fallback). Checkpoints of later steps, from a "
       "run this one restarted over, are left alone.",
       integer(o.keepCheckpoints, 1)},
      {"resume", nullptr,
       "Continue from the latest checkpoint in --checkpoint-dir (bitwise as "
       "if uninterrupted); start from scratch when there is none.",
       [&o](const std::string &v) { return parseBool(v, o.resume); }},
      {"eval-data", "FILE",
       "Evaluation tokens (same formats as --data): the mean loss over its "
       "rows with the current weights, after the last step.",
       text(o.evalData)},
      {"eval-every", "K", "Also evaluate every K steps (needs --eval-data).",
       integer(o.evalEvery, 1)},
      {"on-checkpoint-error", "continue|stop",
       "When a checkpoint cannot be written: warn, keep the previous one "
       "and train on (default), or stop with status 1.",
       oneOf(o.onCheckpointError, {{"continue", OnCheckpointError::Continue},
                                   {"stop", OnCheckpointError::Stop}})},
      {"on-nan", "stop|skip",
       "A non-finite loss or gradient: stop with status 1 before any "
       "update with it (default), or skip the whole step (no update, the "
       "data moves on) with a warning; skip needs --optimizer-mode=sync.",
       oneOf(o.onNan, {{"stop", OnNan::Stop}, {"skip", OnNan::Skip}})},
      {"max-skipped-fraction", "F",
       "--on-nan=skip: stop with status 1 once more than F of --steps were "
       "skipped, counted over the whole run (default 0.1; 1: never).",
       real(o.maxSkippedFraction, 0, false, 1, false)},
      {"watchdog-seconds", "S",
       "Pipelined trainers: stop, naming the op that hangs, when no op "
       "completes for S seconds (default 300; 0: off).",
       real(o.watchdogSeconds, 0, false, inf, false)},
      {"quiet", nullptr, "No progress output.",
       [&o](const std::string &v) { return parseBool(v, o.quiet); }},
  };
}

} // namespace

CliStatus parseTrainerOptions(int argc, char **argv, TrainerOptions &options,
                              std::string &message) {
  std::vector<Flag> flags = makeFlags(options);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "-h")
      return CliStatus::Help;
    if (arg.size() < 2 || arg[0] != '-') {
      message = "unexpected argument '" + arg + "' (flags start with --)";
      return CliStatus::Error;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::optional<std::string> value;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      value = body.substr(eq + 1);
      body.resize(eq);
    }
    if (body == "help")
      return CliStatus::Help;
    auto flag = std::find_if(flags.begin(), flags.end(),
                             [&](const Flag &f) { return body == f.name; });
    if (flag == flags.end()) {
      message = "unknown flag '--" + body + "'";
      const Flag *best = nullptr;
      size_t bestDistance = 3;
      for (const Flag &f : flags)
        if (size_t d = editDistance(body, f.name); d < bestDistance) {
          best = &f;
          bestDistance = d;
        }
      if (best)
        message += "; did you mean '--" + std::string(best->name) + "'?";
      message += " (see --help)";
      return CliStatus::Error;
    }
    if (flag->valueName && !value) {
      if (i + 1 >= argc) {
        message = "--" + body + " needs a value (" + flag->valueName + ")";
        return CliStatus::Error;
      }
      value = argv[++i];
    }
    std::string err = flag->apply(value ? *value : "true");
    if (!err.empty()) {
      message = "invalid value '" + *value + "' for --" + body + ": " + err;
      return CliStatus::Error;
    }
  }
  if (options.data.empty()) {
    message = "--data FILE is required (see --help)";
    return CliStatus::Error;
  }
  if (options.optimizerMode == "overlap" &&
      (options.clipGradNorm || !options.dumpGradients.empty() ||
       options.onNan == OnNan::Skip)) {
    message = std::string("--optimizer-mode=overlap cannot be combined with ") +
              (options.clipGradNorm             ? "--clip-grad-norm"
               : !options.dumpGradients.empty() ? "--dump-gradients"
                                                : "--on-nan=skip") +
              ": it needs every gradient of the step before the first "
              "update; use --optimizer-mode=sync";
    return CliStatus::Error;
  }
  if (options.optimizerMode == "stale" &&
      (!options.dumpGradients.empty() || options.onNan == OnNan::Skip ||
       options.replicas > 1)) {
    message = std::string("--optimizer-mode=stale cannot be combined with ") +
              (!options.dumpGradients.empty() ? "--dump-gradients"
               : options.onNan == OnNan::Skip ? "--on-nan=skip"
                                              : "--replicas") +
              ": it applies each update one step late; use "
              "--optimizer-mode=sync or overlap";
    return CliStatus::Error;
  }
  if (options.saveEvery > 0 && options.checkpointDir.empty()) {
    message = "--save-every needs --checkpoint-dir DIR";
    return CliStatus::Error;
  }
  if (options.resume && options.checkpointDir.empty()) {
    message = "--resume needs --checkpoint-dir DIR";
    return CliStatus::Error;
  }
  if (options.mergeLora && options.exportOnnx.empty() &&
      options.exportSafetensors.empty()) {
    message = "--merge-lora applies to the model written by --export-onnx "
              "FILE or --export-safetensors DIR; give one of them";
    return CliStatus::Error;
  }
  if (!options.hfConfig.empty() && options.exportSafetensors.empty()) {
    message = "--hf-config is copied beside the weights that "
              "--export-safetensors DIR writes; give --export-safetensors";
    return CliStatus::Error;
  }
  if (options.evalEvery > 0 && options.evalData.empty()) {
    message = "--eval-every needs --eval-data FILE";
    return CliStatus::Error;
  }
  return CliStatus::Ok;
}

std::string trainerHelp(const char *argv0, const ModelSpec &model,
                        const std::string &plans) {
  TrainerOptions scratch;
  std::ostringstream os;
  os << "USAGE: " << (argv0 ? argv0 : "trainer") << " --data FILE [options]\n\n"
     << "A Rondo training program for " << model.modelPath << ": "
     << model.batch << " rows x " << model.seqLen << " tokens per "
     << "step"
     << ", loss "
     << (model.loss == LossKind::CausalLM ? "causal-lm" : "graph output")
     << ".\n";
  if (!plans.empty())
    os << "Compiled plans: " << plans << ".\n";
  os << "\nOPTIONS:\n";
  for (const Flag &f : makeFlags(scratch)) {
    std::string spelling = std::string("  --") + f.name;
    if (f.valueName)
      spelling += std::string("=") + f.valueName;
    os << spelling;
    if (spelling.size() < 30)
      os << std::string(30 - spelling.size(), ' ');
    else
      os << "\n" << std::string(30, ' ');
    // Wrap the help at 80 columns.
    std::istringstream words(f.help);
    std::string word;
    size_t column = 30;
    bool first = true;
    while (words >> word) {
      if (!first && column + 1 + word.size() > 80) {
        os << "\n" << std::string(30, ' ');
        column = 30;
        first = true;
      }
      os << (first ? "" : " ") << word;
      column += word.size() + (first ? 0 : 1);
      first = false;
    }
    os << "\n";
  }
  os << "  --help                      Show this text.\n\n"
     << "Values may be given as --flag=value or --flag value. Errors exit "
        "with status 2\n(command line) or 1 (files, model, data).\n";
  return os.str();
}

} // namespace rondo::rt
