//===- ReplicaSync.cpp - What data-parallel replicas agree on -------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/ReplicaSync.h"
#include "rondo/runtime/Error.h"

namespace rondo::rt {

std::string ReplicaSync::describe() const {
  if (!group)
    return "";
  return "; " + std::to_string(group->size()) +
         (sharded_ ? " replicas, gradients reduce-scattered over "
                   : " replicas, gradients summed over ") +
         group->engine() +
         (sharded_ ? ", optimizer sharded " + std::to_string(count()) + " ways"
                   : "");
}

void ReplicaSync::sumGradients(const std::vector<GradientSpan> &spans) {
  if (!group || spans.empty())
    return;
  if (sharded_)
    group->reduceScatterGradientsMany(spans.data(), spans.size());
  else
    group->sumGradientsMany(spans.data(), spans.size());
}

void ReplicaSync::allGatherShards(float *data, int64_t numel) {
  if (sharded_)
    group->allGatherShards(data, numel);
}

void ReplicaSync::allGatherShards(const std::vector<GradientSpan> &spans) {
  if (sharded_ && !spans.empty())
    group->allGatherShardsMany(spans.data(), spans.size());
}

int ReplicaSync::agreeOnShards(int myFirstBad, double *sumSquares) {
  double mine[2] = {double(myFirstBad), sumSquares ? *sumSquares : 0.0};
  std::vector<double> all = group->gatherOnOptimizer(mine, 2);
  // The same reduction, in rank order, on every replica: the same bits.
  int first = -1;
  double total = 0;
  for (size_t r = 0; r < all.size() / 2; ++r) {
    const int k = int(all[2 * r]);
    if (k >= 0 && (first < 0 || k < first))
      first = k;
    total += all[2 * r + 1];
  }
  if (sumSquares)
    *sumSquares = total;
  return first;
}

void ReplicaSync::sum(double *data, int n) {
  if (group)
    group->sum(data, n);
}

bool ReplicaSync::anyOf(bool mine) {
  double any = mine ? 1.0 : 0.0;
  sum(&any, 1);
  return any > 0;
}

void ReplicaSync::checkAgree(uint64_t checksum, int64_t stepsDone) {
  if (!group)
    return;
  std::vector<uint64_t> all = group->gather(checksum);
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw Error("after step " + std::to_string(stepsDone) +
                ": the weights of replica(s) " + differ +
                " differ from replica 0's (checksums compared every "
                "--replica-check-every steps)");
}

} // namespace rondo::rt
