//===- Pipelines.cpp - Rondo's phase pipelines ------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Pipelines/Pipelines.h"

#include "Conversion/PipeToExec/Passes.h"
#include "Conversion/TGToKern/Passes.h"
#include "Dialect/Exec/Transforms/Passes.h"
#include "Dialect/Kern/Transforms/Passes.h"
#include "Dialect/Pipe/Transforms/Passes.h"
#include "Dialect/TG/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Regex.h"

#include <cmath>

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
  // Adapters go in before the trainable set is chosen and before reverse
  // mode, so the frozen base weights get no gradient ops at all.
  if (options.loraRank > 0)
    pm.addPass(tg::createTGInsertLoraPass(
        tg::TGInsertLoraPassOptions{options.loraRank, options.loraAlpha,
                                    options.loraDropout, options.loraTargets}));
  pm.addPass(tg::createTGSelectTrainablePass(
      tg::TGSelectTrainablePassOptions{options.trainable, options.freeze}));
  // Layers are cut on the forward function; tg-autodiff puts every gradient
  // op into the layer of the forward op it differentiates.
  pm.addPass(pipe::createPipeLayerizePass());
  pm.addPass(tg::createTGAutodiffPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

llvm::Error rondo::parseLoraSpec(llvm::StringRef spec,
                                 TrainPipelineOptions &options) {
  auto fail = [&](const llvm::Twine &why) {
    return llvm::createStringError("--lora=" + spec + ": " + why);
  };
  if (spec.trim().empty())
    return llvm::createStringError(
        "--lora needs a value: rank=R,alpha=A,dropout=P,targets=ROLES|REGEX");
  // Split at commas that start a `NAME=` field.
  llvm::SmallVector<llvm::StringRef> fields;
  size_t start = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i < spec.size()) {
      if (spec[i] != ',')
        continue;
      llvm::StringRef rest = spec.substr(i + 1);
      size_t name = rest.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
      if (name == 0 || name == llvm::StringRef::npos || rest[name] != '=')
        continue;
    }
    fields.push_back(spec.slice(start, i));
    start = i + 1;
  }
  llvm::StringSet<> seen;
  int64_t rank = 8;
  double alpha = 8.0, dropout = 0.0;
  std::string targets = "all-linear";
  for (llvm::StringRef field : fields) {
    auto [key, value] = field.split('=');
    if (!field.contains('='))
      return fail("'" + field +
                  "' is not FIELD=VALUE (fields: rank, alpha, dropout, "
                  "targets)");
    if (!seen.insert(key).second)
      return fail("field '" + key + "' is given twice");
    if (key == "rank") {
      if (value.getAsInteger(10, rank) || rank < 1)
        return fail("rank: '" + value + "' is not a positive integer");
    } else if (key == "alpha" || key == "dropout") {
      double x = 0;
      if (value.getAsDouble(x) || !std::isfinite(x))
        return fail(key + ": '" + value + "' is not a finite number");
      if (key == "alpha") {
        if (x <= 0)
          return fail("alpha: '" + value + "' must be positive");
        alpha = x;
      } else {
        if (x < 0 || x >= 1)
          return fail("dropout: '" + value + "' must be in [0, 1)");
        if (x != 0)
          return fail("dropout: '" + value +
                      "': LoRA dropout is not supported (the compiled step "
                      "draws no random numbers); use dropout=0");
        dropout = x;
      }
    } else if (key == "targets") {
      if (value.empty())
        return fail("targets: empty (roles joined by '+', e.g. q+v or "
                    "all-linear, or a regular expression)");
      std::string error;
      if (!llvm::Regex(value).isValid(error))
        return fail("targets: invalid regular expression '" + value +
                    "': " + error);
      targets = value.str();
    } else {
      return fail("unknown field '" + key +
                  "' (fields: rank, alpha, dropout, targets)");
    }
  }
  options.loraRank = rank;
  options.loraAlpha = alpha;
  options.loraDropout = dropout;
  options.loraTargets = targets;
  return llvm::Error::success();
}

void rondo::buildPlanPipeline(OpPassManager &pm,
                              const pipe::PipePartitionPassOptions &options) {
  pm.addPass(pipe::createPipePartitionPass(options));
  pm.addPass(pipe::createPipeVerifyPlanPass());
}

void rondo::buildExecPipeline(OpPassManager &pm, bool peerHandoff,
                              bool bf16Storage, bool gpuKernels) {
  pm.addPass(pipe::createPipeOutlineStagesPass());
  exec::ConvertPipeToExecPassOptions convert;
  convert.peerHandoff = peerHandoff;
  pm.addPass(exec::createConvertPipeToExecPass(convert));
  pm.addPass(exec::createExecVerifyPass());
  pm.addPass(kern::createConvertTGToKernPass());
  pm.addNestedPass<func::FuncOp>(kern::createKernFuseLinearCrossEntropyPass());
  if (gpuKernels) {
    pm.addNestedPass<func::FuncOp>(kern::createKernAccumulateProductsPass());
    pm.addNestedPass<func::FuncOp>(kern::createKernFuseNormRotaryPass());
  }
  if (bf16Storage)
    pm.addNestedPass<func::FuncOp>(kern::createKernBf16StoragePass());
  if (bf16Storage && gpuKernels) {
    pm.addNestedPass<func::FuncOp>(kern::createKernFuseAttentionLayoutPass());
    // After the attention layout: LoRA's scaled dV then reads attention's
    // bf16 dV (kern-fuse-product-scale's backward rewrite).
    pm.addNestedPass<func::FuncOp>(kern::createKernFuseProductScalePass());
  }
  if (gpuKernels)
    pm.addNestedPass<func::FuncOp>(kern::createKernFuseResidualNormPass());
  // Last: values the scales' fusion left to their toBf16 copies alone are
  // stored in bf16 by their kernels, once the fusions have matched the fp32
  // kernels they look for (a residual gradient's Add read only by its copy
  // still becomes rmsNormBackwardAddWithBf16).
  if (bf16Storage && gpuKernels)
    pm.addNestedPass<func::FuncOp>(kern::createKernFoldBf16CopiesPass());
}

void rondo::registerPipelines() {
  PassPipelineRegistration<>(
      "rondo-exec-pipeline",
      "Outline stages, lower plans to exec programs, verify them, lower "
      "stage functions to kernel calls",
      [](OpPassManager &pm) { buildExecPipeline(pm); });
  PassPipelineRegistration<>("rondo-tg-pipeline",
                             "Import cleanup and structure recognition",
                             buildTGPipeline);
  PassPipelineRegistration<TrainPipelineOptions>(
      "rondo-train-pipeline", "Loss, trainable selection and reverse mode",
      buildTrainPipeline);
  // The pipeline's options are pipe-partition's own, parsed by the pass.
  registerPassPipeline(
      "rondo-plan-pipeline",
      "Partition, schedule and verify the plan (options: pipe-partition's)",
      [](OpPassManager &pm, StringRef options,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        std::unique_ptr<Pass> partition = pipe::createPipePartitionPass();
        if (failed(partition->initializeOptions(options, errorHandler)))
          return failure();
        pm.addPass(std::move(partition));
        pm.addPass(pipe::createPipeVerifyPlanPass());
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)>) {});
}
