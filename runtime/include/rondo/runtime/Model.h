//===- Model.h - The generated model's tables -------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The ABI between `rondo-compile -o trainer` and the runtime, beside the
// programs of Exec.h: the emitted C++ file describes the model (parameters,
// shapes, which are trainable, LoRA adapters, the loss) in these tables and
// passes them to trainerMain (Trainer.h). The runtime's weight loading,
// initialisation, LoRA and export code reads only these tables, so it
// includes this header and not the trainer's.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_MODEL_H
#define RONDO_RUNTIME_MODEL_H

#include <cstdint>

namespace rondo::rt {

constexpr int kMaxParamRank = 8;

/// Which factor of a LoRA adapter a parameter is (rondo-compile --lora).
enum class LoraFactor { None, A, B };

/// One ONNX initializer that the compiled step reads, or a LoRA adapter,
/// which exists only in the trainer.
/// How the trainer holds a parameter in host memory (and in the parameter
/// images it uploads).
enum class ParamStorage {
  F32,
  /// bf16 alone (round to nearest even, the bits of the toBf16 kernel): a
  /// frozen weight of a bf16 plan that only matrix products read, which
  /// round it to bf16 anyway (rondo-compile --frozen-storage).
  Bf16,
};

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
  /// LoRA adapters of a base that PEFT targets as an nn.Parameter
  /// (`target_parameters`, its ParamWrapper) rather than as an nn.Linear:
  /// routers, and stacked experts W [E, d1, d2], whose adapters are
  /// A [E, d1, r] and B [E, r, d2] with W_e + (alpha/r)·A_e·B_e.
  bool loraParameter = false;
  /// Its host storage; the images carry it the same way.
  ParamStorage storage = ParamStorage::F32;
};

/// Bytes of one element of `p` as the trainer holds it.
inline int64_t storedElementBytes(const ParamSpec &p) {
  return p.storage == ParamStorage::Bf16 ? 2 : 4;
}

/// The number of elements of `p`.
inline int64_t numElements(const ParamSpec &p) {
  int64_t n = 1;
  for (int i = 0; i < p.rank; ++i)
    n *= p.dims[i];
  return n;
}

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
  /// The global rows per program step (every program's microbatches x
  /// rowsPerMicrobatch, times its replicas).
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
  /// The optimizer mode the plans were chosen for (rondo-compile
  /// --optimizer-mode): the trainer's default --optimizer-mode.
  const char *optimizerMode = "overlap";
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_MODEL_H
