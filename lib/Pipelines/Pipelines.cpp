//===- Pipelines.cpp - Rondo's phase pipelines ------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/Pipelines/Pipelines.h"

#include "Exec/Transforms/Passes.h"
#include "Pipe/Transforms/Passes.h"
#include "TG/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void rondo::buildTGPipeline(OpPassManager &pm) {
  // Canonicalisation first: the importer's reshape/transpose chains must be
  // collapsed before the structural patterns can see the shapes they match.
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(tg::createTGFuseActivationsPass());
  fn.addPass(tg::createTGFuseNormsPass());
  fn.addPass(tg::createTGFuseRotaryPass());
  fn.addPass(tg::createTGFuseAttentionPass());
  // The fusions leave their matched primitives dead.
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void rondo::buildTrainPipeline(OpPassManager &pm,
                               const TrainPipelineOptions &options) {
  pm.addPass(
      tg::createTGAttachLossPass(tg::TGAttachLossPassOptions{options.loss}));
  // Fuse the head before differentiating, so the backward never needs the
  // [tokens x vocab] logits either.
  pm.nest<func::FuncOp>().addPass(tg::createTGFuseLinearCrossEntropyPass(
      tg::TGFuseLinearCrossEntropyPassOptions{options.chunkRows}));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(tg::createTGSelectTrainablePass(
      tg::TGSelectTrainablePassOptions{options.trainable, options.freeze}));
  // Layers are cut on the forward function; tg-autodiff puts every gradient
  // op into the layer of the forward op it differentiates.
  pm.addPass(pipe::createPipeLayerizePass());
  pm.addPass(tg::createTGAutodiffPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void rondo::buildPlanPipeline(OpPassManager &pm,
                              const PlanPipelineOptions &options) {
  pipe::PipePartitionPassOptions partition;
  partition.workers.assign(options.workers.begin(), options.workers.end());
  partition.microbatches = options.microbatches;
  partition.device = options.device;
  partition.precision = options.precision;
  partition.strategy = options.strategy;
  partition.stages = options.stages;
  partition.workerMemoryGB = options.workerMemoryGB;
  partition.hostMemoryGB = options.hostMemoryGB;
  partition.replicas = options.replicas;
  partition.replicaLinkGBps = options.replicaLinkGBps;
  pm.addPass(pipe::createPipePartitionPass(partition));
  pm.addPass(pipe::createPipeVerifyPlanPass());
}

void rondo::buildExecPipeline(OpPassManager &pm, bool peerHandoff) {
  pm.addPass(pipe::createPipeOutlineStagesPass());
  exec::ConvertPipeToExecPassOptions convert;
  convert.peerHandoff = peerHandoff;
  pm.addPass(exec::createConvertPipeToExecPass(convert));
  pm.addPass(exec::createExecVerifyPass());
}

void rondo::registerPipelines() {
  PassPipelineRegistration<>(
      "rondo-exec-pipeline",
      "Outline stages, lower plans to exec programs, verify them",
      [](OpPassManager &pm) { buildExecPipeline(pm); });
  PassPipelineRegistration<>("rondo-tg-pipeline",
                             "Import cleanup and structure recognition",
                             buildTGPipeline);
  PassPipelineRegistration<TrainPipelineOptions>(
      "rondo-train-pipeline", "Loss, trainable selection and reverse mode",
      buildTrainPipeline);
  PassPipelineRegistration<PlanPipelineOptions>(
      "rondo-plan-pipeline", "Partition, schedule and verify the plan",
      buildPlanPipeline);
}
