//===- ReplicaSync.h - What data-parallel replicas agree on -----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The trainer's view of --replicas: which shard of a tensor this replica
// owns, and the collectives the trainer needs beyond the gradient sums
// (loss sums, stop requests, checksum agreement). Without replicas (null
// group) every operation is the identity, so callers need not ask.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_REPLICASYNC_H
#define RONDO_RUNTIME_SRC_TRAINER_REPLICASYNC_H

#include "rondo/runtime/Replicas.h"

#include <cstdint>
#include <string>
#include <vector>

namespace rondo::rt {

class ReplicaSync {
public:
  /// `group` is null for one replica; `shardOptimizer` is
  /// --shard-optimizer.
  ReplicaSync(ReplicaGroup *group, bool shardOptimizer)
      : group(group), sharded_(group && group->size() > 1 && shardOptimizer) {}

  /// Whether the run has replicas (--replicas).
  bool active() const { return group != nullptr; }
  /// --shard-optimizer with more than one replica.
  bool sharded() const { return sharded_; }
  /// Whether the gradient collectives take the GPU's own memory (the NCCL
  /// engine), which replicas of device-resident state on GPUs need.
  bool takesDeviceMemory() const { return group && group->takesDeviceMemory(); }
  int rank() const { return group ? group->rank() : 0; }
  int count() const { return group ? group->size() : 1; }
  /// "; R replicas, gradients ... over ENGINE ..." for the start-up line,
  /// or "" for one.
  std::string describe() const;

  /// The elements of a tensor of `numel` whose update this replica owns:
  /// all of them, or its shard.
  Shard owned(int64_t numel) const {
    return sharded_ ? shardOf(numel, rank(), count()) : Shard{0, numel};
  }

  /// Sums each span's gradient across replicas, in place (into this
  /// replica's shard of it when sharded), in order, issued together where
  /// the engine can (device memory over NCCL: one wait for all); optimizer
  /// thread only.
  void sumGradients(const std::vector<GradientSpan> &spans);
  /// Sharded: every shard of `data` from its owner, into every replica.
  void allGatherShards(float *data, int64_t numel);
  /// allGatherShards on each span (each span's own shards), in order.
  void allGatherShards(const std::vector<GradientSpan> &spans);
  /// Sharded optimizer task: the replicas each looked at their shards.
  /// Returns the smallest first non-finite part over all (`myFirstBad`: this
  /// replica's, -1 for none); `sumSquares` (when not null) holds this
  /// replica's squared norm and receives the sum of every replica's, in rank
  /// order so that all get the same bits. Optimizer thread only.
  int agreeOnShards(int myFirstBad, double *sumSquares);
  /// Trainer thread: `n` values summed across replicas, in place.
  void sum(double *data, int n);
  /// Trainer thread: whether any replica wants to stop.
  bool anyOf(bool mine);
  /// Trainer thread: stops with an error naming the replicas whose
  /// `checksum` differs from rank 0's (after `stepsDone` steps).
  void checkAgree(uint64_t checksum, int64_t stepsDone);

private:
  ReplicaGroup *group;
  bool sharded_;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_REPLICASYNC_H
