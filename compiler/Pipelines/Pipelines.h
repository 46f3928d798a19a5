//===- Pipelines.h - Rondo's phase pipelines --------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One source of truth for the pass order of every phase: rondo-compile and
// rondo-opt (as registered pipelines) both build their pass managers here.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_PIPELINES_PIPELINES_H
#define RONDO_PIPELINES_PIPELINES_H

#include "Dialect/Pipe/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "llvm/Support/Error.h"

#include <string>

namespace rondo {

struct TrainPipelineOptions : mlir::PassPipelineOptions<TrainPipelineOptions> {
  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("causal-lm or output:NAME"),
                           llvm::cl::init("causal-lm")};
  Option<std::string> trainable{*this, "trainable",
                                llvm::cl::desc("regex of trainable names"),
                                llvm::cl::init("")};
  Option<std::string> freeze{*this, "freeze",
                             llvm::cl::desc("regex of frozen names"),
                             llvm::cl::init("")};
  Option<int64_t> chunkRows{
      *this, "chunk-rows",
      llvm::cl::desc("rows of logits per cross-entropy chunk"),
      llvm::cl::init(1024)};
  /// LoRA (tg-insert-lora); 0: full fine-tuning.
  Option<int64_t> loraRank{*this, "lora-rank",
                           llvm::cl::desc("LoRA rank (0: no adapters)"),
                           llvm::cl::init(0)};
  Option<double> loraAlpha{*this, "lora-alpha",
                           llvm::cl::desc("LoRA alpha (scale alpha / rank)"),
                           llvm::cl::init(8.0)};
  Option<double> loraDropout{*this, "lora-dropout",
                             llvm::cl::desc("LoRA dropout (only 0)"),
                             llvm::cl::init(0.0)};
  Option<std::string> loraTargets{
      *this, "lora-targets",
      llvm::cl::desc("roles joined by '+' or a regex of weight names"),
      llvm::cl::init("all-linear")};
};

/// Parses `rondo-compile --lora=SPEC`, comma-separated FIELD=VALUE with
/// fields rank (a positive integer, default 8), alpha (positive, default
/// 8), dropout (default 0; only 0 is supported) and targets (default
/// all-linear). A comma starts a new field only when `NAME=` follows it, so
/// a regular expression may contain commas (`a{1,3}`). Sets the lora*
/// options of `options`; the error names the flag and the bad field.
llvm::Error parseLoraSpec(llvm::StringRef spec, TrainPipelineOptions &options);

/// Phase `tg`: clean up the imported graph and recognise the structures
/// later phases need whole.
void buildTGPipeline(mlir::OpPassManager &pm);

/// Phase `train`: loss, trainable set, reverse mode.
void buildTrainPipeline(mlir::OpPassManager &pm,
                        const TrainPipelineOptions &options);

/// Phase `pipe`: stages, microbatches, job order; verified. The planning
/// knobs are pipe-partition's options, declared once in
/// compiler/Dialect/Pipe/Transforms/Passes.td; rondo-compile binds its flags to
/// the same struct (compiler/Driver/Options.h).
void buildPlanPipeline(mlir::OpPassManager &pm,
                       const pipe::PipePartitionPassOptions &options);

/// Phase `exec`: outline the stages of every plan (from @main built at the
/// plan's microbatch shape), lower each plan to exec.programs and prove
/// them race-free.
/// `peerHandoff`: activations move device-to-device between workers, else
/// through host memory. The LM head's loss and gradient become one call
/// (kern-fuse-linear-cross-entropy) on every target. `gpuKernels` (GPU
/// trainers): products add into the value they are summed with
/// (kern-accumulate-products), and the query / key norm, transpose and
/// rotary run as one kernel (kern-fuse-norm-rotary). `bf16Storage` (bf16
/// precision): products read bf16 operands (kern-bf16-storage); with
/// `gpuKernels` too, attention reads and writes the projections'
/// token-major tensors (kern-fuse-attention-layout), and, last, a value
/// only toBf16 copies read is stored in bf16 by its kernel
/// (kern-fold-bf16-copies).
void buildExecPipeline(mlir::OpPassManager &pm, bool peerHandoff = true,
                       bool bf16Storage = false, bool gpuKernels = false);

/// Registers them as `rondo-tg-pipeline`, `rondo-train-pipeline`,
/// `rondo-plan-pipeline` (which takes pipe-partition's options) and
/// `rondo-exec-pipeline`.
void registerPipelines();

} // namespace rondo

#endif // RONDO_PIPELINES_PIPELINES_H
