//===- Trainer.h - The contract with emitted code -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// `rondo-compile -o trainer` emits a C++ file that describes the model
// (parameters, shapes, which are trainable) and either one function that
// runs forward + loss + backward for one microbatch by calling the kernels
// in runtime/kernels (StepFn), or the pipelined programs of Exec.h (stage
// functions, tables, one `issue` function per worker count and optimizer
// mode). Everything else a training run needs -- the command line,
// data loading, weight loading, AdamW, schedules, clipping, logging,
// gradient dumps -- lives here, in the runtime library, so it is written and
// tested once.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_TRAINER_H
#define RONDO_RUNTIME_TRAINER_H

#include "rondo/runtime/DeviceOps.h"
#include "rondo/runtime/Exec.h"

#include <cstdint>

namespace rondo::rt {

constexpr int kMaxParamRank = 8;

/// Which factor of a LoRA adapter a parameter is (rondo-compile --lora).
enum class LoraFactor { None, A, B };

/// One ONNX initializer that the compiled step reads, or a LoRA adapter,
/// which exists only in the trainer.
struct ParamSpec {
  const char *name;        ///< ONNX initializer name (the parameter name).
  const char *displayName; ///< PyTorch name from exporter metadata, or "".
  int rank;
  int64_t dims[kMaxParamRank];
  bool trainable; ///< false: frozen (no gradient buffer is passed).
  /// LoRA adapters: A is [in, r] and B is [r, out], and the step computes
  /// x·W + (alpha/r)·(x·A)·B for the base weight W named `loraBase`.
  LoraFactor lora = LoraFactor::None;
  const char *loraBase = nullptr;
  /// The base weight is stored [out, in] (the graph transposes it), so its
  /// merged form is W + (alpha/r)·(A·B)^T.
  bool loraBaseTransposed = false;
  /// Hugging Face names (--export-safetensors): every PyTorch name this
  /// tensor stands for, comma-separated, when the exporter merged several
  /// (tied embeddings); otherwise `displayName` alone.
  const char *torchAliases = "";
  /// Stored as the transpose of PyTorch's tensor (nn.Linear weights that the
  /// exporter pre-transposed for MatMul).
  bool torchTransposed = false;
};

/// The adapter configuration of a LoRA trainer.
struct LoraSpec {
  int64_t rank;
  double alpha;
  double dropout;
  const char *targets; ///< As given to rondo-compile --lora.
};

/// Loss kinds the compiled step computes.
enum class LossKind {
  /// Hugging Face causal-LM: mean CE of logits[:, :-1] vs labels[:, 1:] over
  /// all non-ignored (!= -100) targets of the whole global batch.
  CausalLM,
  /// The graph outputs a scalar loss; the step's loss is its mean over
  /// microbatches.
  GraphOutput,
};

struct ModelSpec {
  const char *modelPath; ///< The ONNX file the weights come from by default.
  const char *inputName; ///< Token input, int64 [batch, seqLen].
  /// Rows per call of a StepFn; for pipelined trainers the global rows per
  /// step (every program's microbatches x rowsPerMicrobatch).
  int64_t batch;
  int64_t seqLen;
  int64_t vocabSize; ///< For range checks of token ids (0 = unknown).
  LossKind loss;
  const ParamSpec *params;
  int numParams;
  /// How the stage functions compute ("fp32" or "bf16"), for messages.
  const char *precision = "fp32";
  /// LoRA fine-tuning (the adapters are the parameters with `lora` set), or
  /// null.
  const LoraSpec *lora = nullptr;
};

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
