//===- ForcedStages.cpp - The --stages syntax
//------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// `--stages=fwd:A+B+...,tail:T,bwd:C+D+...` forces pipe-partition's
// partition: layer counts in job order, checked against the model.
//
//===----------------------------------------------------------------------===//

#include "PlanOpBuilder.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace rondo;

/// `fwd:8+8,tail:4,bwd:4+4+4+4` -> a plan over `numLayers` layers.
FailureOr<planner::Plan> rondo::pipe::parseStages(StringRef spec, int numLayers,
                                                  std::string &error) {
  SmallVector<int> fwd, bwd;
  int tail = -1;
  SmallVector<StringRef> parts;
  spec.split(parts, ',');
  for (StringRef part : parts) {
    auto [key, value] = part.split(':');
    SmallVector<int> *into = key == "fwd"   ? &fwd
                             : key == "bwd" ? &bwd
                                            : nullptr;
    if (!into && key != "tail") {
      error = ("--stages: '" + part +
               "' must be fwd:A+B+..., tail:T or bwd:C+D+... (layer counts)")
                  .str();
      return failure();
    }
    SmallVector<StringRef> counts;
    if (!value.empty())
      value.split(counts, '+');
    for (StringRef c : counts) {
      int n;
      if (c.getAsInteger(10, n) || n <= 0) {
        error = ("--stages: '" + c + "' in '" + part +
                 "' is not a positive layer count")
                    .str();
        return failure();
      }
      if (into)
        into->push_back(n);
      else
        tail = n;
    }
  }
  if (tail <= 0) {
    error = "--stages: the tail needs at least one layer (tail:T)";
    return failure();
  }
  int fwdSum = 0, bwdSum = 0;
  for (int n : fwd)
    fwdSum += n;
  for (int n : bwd)
    bwdSum += n;
  if (fwdSum + tail != numLayers || bwdSum != fwdSum) {
    error = llvm::formatv("--stages: the model has {0} layers; forward "
                          "stages cover {1} and the tail {2} (must add up to "
                          "{0}), backward stages cover {3} (must equal the "
                          "forward's {1})",
                          numLayers, fwdSum, tail, bwdSum);
    return failure();
  }
  planner::Plan plan;
  int at = 0;
  for (int n : fwd) {
    plan.forward.push_back({planner::StageKind::Forward, at, at + n});
    at += n;
  }
  plan.tail = {planner::StageKind::Tail, at, numLayers};
  for (int n : bwd) {
    plan.backward.push_back({planner::StageKind::Backward, at - n, at});
    at -= n;
  }
  return plan;
}
