//===- PlanOpBuilder.h - A searched plan as a pipe.plan op ------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// pipe-partition searches plans with the planner core (compiler/Planner) and
// writes the one it keeps as a `pipe.plan`: its layers with their costs,
// stages, schedule, the budgets and predictions, and the `#pipe.bound` that
// says what limited it (PlanOpBuilder.cpp); `--stages` forces the stages
// (ForcedStages.cpp). Internal to the pass.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_PIPE_TRANSFORMS_PLANOPBUILDER_H
#define RONDO_DIALECTS_PIPE_TRANSFORMS_PLANOPBUILDER_H

#include "CostModel/CostModel.h"
#include "Dialect/Pipe/IR/PipeOps.h"
#include "Planner/Planner.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <string>
#include <utility>
#include <vector>

namespace rondo::pipe {

/// One searched plan: its microbatch count, layer table, problem, stages
/// and the steps simulated in each optimizer mode.
struct Candidate {
  int64_t microbatches = 0;
  cost::LayerTable table;
  planner::PlanProblem problem;
  planner::Plan plan;
  planner::SimResult overlap, sync, stale;
  /// Whether the plan is the exact optimum of the objective itself (rather
  /// than of the objective with a floor of more jobs).
  bool objectiveOptimal = true;
  /// Each residency weighed for this M and the step predicted for it.
  std::vector<std::pair<std::string, double>> residencyAlternatives;
};
/// Which constraint limited the plan, with the numbers --explain words.
BoundAttr buildBound(mlir::MLIRContext *ctx, const Candidate &c);

/// Appends the plan of `c` for `n` workers as a `pipe.plan` (named
/// `planName`, or plan_wN) at `b`'s insertion point; `strategy` is what
/// chose its stages (exact, greedy or forced).
PlanOp buildPlanOp(mlir::OpBuilder &b, mlir::func::FuncOp func,
                   const cost::DeviceSpec &spec, bool bf16, int64_t n,
                   int64_t batch, int64_t tokens, const Candidate &c,
                   SearchAttr searched, llvm::StringRef strategy,
                   llvm::StringRef planName = "");

/// `fwd:8+8,tail:4,bwd:4+4+4+4` (--stages) -> a plan over `numLayers`
/// layers; on a malformed or mismatched spec, failure with `error` saying
/// why (ForcedStages.cpp).
mlir::FailureOr<planner::Plan> parseStages(llvm::StringRef spec, int numLayers,
                                           std::string &error);

} // namespace rondo::pipe

#endif // RONDO_DIALECTS_PIPE_TRANSFORMS_PLANOPBUILDER_H
