//===- Greedy.cpp - RoundPipe's greedy partitioner ------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// RoundPipe's `ModelExecutePlan.auto` reproduced literally
// (research/roundpipe.md section 2.2), the baseline the exact search is
// tested against.
//
//===----------------------------------------------------------------------===//

#include "PlannerInternal.h"

#include <algorithm>
#include <vector>

namespace rondo::planner {

using namespace detail;

Plan greedyRoundPipe(const PlanProblem &problem, double memoryLimit) {
  const std::vector<LayerCost> &layers = problem.layers;
  int numLayers = int(layers.size());
  std::vector<double> fwdT(numLayers), bwdT(numLayers), size(numLayers),
      bwdSize(numLayers);
  for (int l = 0; l < numLayers; ++l) {
    fwdT[l] = layers[l].forwardSeconds;
    bwdT[l] = layers[l].forwardSeconds + layers[l].backwardSeconds;
    size[l] = layers[l].paramBytes;
    bwdSize[l] = layers[l].paramBytes + layers[l].gradBytes;
  }

  // The heaviest single layer and the memory cap (raised when one layer
  // alone would not fit half of it). A limit of 0 means "no limit", like
  // the problem's budgets.
  double heaviest = 0, largest = 0;
  for (int l = 0; l < numLayers; ++l) {
    heaviest = std::max({heaviest, fwdT[l], bwdT[l]});
    largest = std::max(largest, bwdSize[l]);
  }
  double limit = memoryLimit > 0 ? memoryLimit : kInf;
  if (largest > limit / 2)
    limit = 2 * largest;
  double half = limit / 2;
  const double upperThreshold = 1.1;

  // Candidate caps: every contiguous sum of either time list within
  // [W, 1.1 W], accumulated in RoundPipe's order.
  std::vector<double> candidates;
  for (const std::vector<double> *times : {&fwdT, &bwdT}) {
    for (int start = 0; start < numLayers; ++start) {
      double sum = 0;
      for (int end = start; end < numLayers; ++end) {
        sum += (*times)[end];
        if (sum > heaviest * upperThreshold)
          break;
        if (sum >= heaviest)
          candidates.push_back(sum);
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());

  Plan best;
  best.tail = {StageKind::Tail, 0, numLayers};
  double bestCost = kInf;
  for (double cap : candidates) {
    Plan plan;
    // Carve the fused tail from the last layer downwards.
    int b = numLayers;
    double tailTime = 0, tailSize = 0;
    for (int l = numLayers - 1; l >= 0; --l) {
      if (tailTime + bwdT[l] > cap || tailSize + bwdSize[l] > half)
        break;
      tailTime += bwdT[l];
      tailSize += bwdSize[l];
      b = l;
    }
    plan.tail = {StageKind::Tail, b, numLayers};

    // Forward stages: pack b-1 .. 0 walking down, then reverse.
    {
      std::vector<Stage> reversed;
      double time = 0, bytes = 0;
      for (int l = b - 1; l >= 0; --l) {
        if (reversed.empty() || time + fwdT[l] > cap ||
            bytes + size[l] > half) {
          reversed.push_back({StageKind::Forward, l, l + 1});
          time = bytes = 0;
        }
        reversed.back().first = l;
        time += fwdT[l];
        bytes += size[l];
      }
      plan.forward.assign(reversed.rbegin(), reversed.rend());
    }
    // Backward stages: pack 0 .. b-1 walking up, emitted deepest first.
    {
      std::vector<Stage> ascending;
      double time = 0, bytes = 0;
      for (int l = 0; l < b; ++l) {
        if (ascending.empty() || time + bwdT[l] > cap ||
            bytes + bwdSize[l] > half) {
          ascending.push_back({StageKind::Backward, l, l});
          time = bytes = 0;
        }
        ascending.back().end = l + 1;
        time += bwdT[l];
        bytes += bwdSize[l];
      }
      plan.backward.assign(ascending.rbegin(), ascending.rend());
    }

    double cost = double(std::max(plan.numJobs(), jobFloor(problem))) * cap;
    if (cost < bestCost) {
      bestCost = cost;
      best = std::move(plan);
    }
  }
  return best;
}

} // namespace rondo::planner
