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

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

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
};

/// Phase `tg`: clean up the imported graph and recognise the structures
/// later phases need whole.
void buildTGPipeline(mlir::OpPassManager &pm);

/// Phase `train`: loss, trainable set, reverse mode.
void buildTrainPipeline(mlir::OpPassManager &pm,
                        const TrainPipelineOptions &options);

/// Registers both as `rondo-tg-pipeline` and `rondo-train-pipeline`.
void registerPipelines();

} // namespace rondo

#endif // RONDO_PIPELINES_PIPELINES_H
