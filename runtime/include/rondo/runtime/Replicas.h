//===- Replicas.h - Data-parallel replicas of a pipeline --------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// `trainer --replicas R` runs R copies of the round-robin pipeline, one per
// process (launched by mpirun, or by anything that sets the MPI environment),
// each over its own workers. Replica r trains rows [r*B, (r+1)*B) of every
// global batch of R*B rows; gradients land in host memory anyway (the
// optimizer runs there), so they are summed across replicas in host memory,
// stage by stage as the optimizer tasks reach them, before any update reads
// them. Every replica then applies the same update to the same weights.
//
// With the optimizer sharded (ZeRO stage 1, the default for R > 1) a stage's
// gradients are reduce-scattered instead: replica r receives the sum of its
// shard of every parameter only, updates that shard (and keeps AdamW state
// for it alone), and the shards are then all-gathered into every replica's
// master weights. The bytes on the link are those of one all-reduce; the
// host optimizer's work and state shrink to 1/R per replica.
//
// Two communicators, because two threads talk: the optimizer thread sums
// gradients (in job order, the same on every replica), the trainer thread
// sums loss and target counts and compares weight checksums.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_REPLICAS_H
#define RONDO_RUNTIME_REPLICAS_H

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rondo::rt {

/// Replica `rank`'s shard of `n` elements: [begin, end). Shards are
/// contiguous, in rank order, and differ in size by at most one element.
struct Shard {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  /// The part of this shard inside [lo, hi) (empty when they do not meet).
  Shard within(int64_t lo, int64_t hi) const {
    return {std::clamp(begin, lo, hi), std::clamp(end, lo, hi)};
  }
};
inline Shard shardOf(int64_t n, int rank, int size) {
  return {n * rank / size, n * (rank + 1) / size};
}

/// A tensor (or a run of adjacent ones) for the batched collectives.
struct GradientSpan {
  float *data;
  int64_t n;
};

class ReplicaGroup {
public:
  virtual ~ReplicaGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// What carries the sums ("MPI (Open MPI 4.1.4)"), for the start-up line.
  virtual std::string engine() const = 0;
  /// Whether the gradient collectives (sumGradients, reduceScatterGradients,
  /// allGatherShards) also take device memory of the replica's GPU, as
  /// device-resident state on a GPU needs.
  virtual bool takesDeviceMemory() const { return false; }
  /// In place, across replicas; optimizer thread only.
  virtual void sumGradients(float *data, int64_t n) = 0;
  /// Sums `data` across replicas into this replica's shard of it
  /// (shardOf(n, rank(), size())); the rest of `data` is left as it was.
  /// Optimizer thread only.
  virtual void reduceScatterGradients(float *data, int64_t n) = 0;
  /// Every replica's shard of `data`, from its owner, into every replica's
  /// `data`. Optimizer thread, or the trainer thread while the optimizer
  /// thread is idle.
  virtual void allGatherShards(float *data, int64_t n) = 0;
  /// The same as sumGradients, reduceScatterGradients and allGatherShards
  /// on each of `count` spans in order (the shards are each span's own); an
  /// engine may issue them together and wait once. Optimizer thread only.
  virtual void sumGradientsMany(const GradientSpan *spans, size_t count) {
    for (size_t i = 0; i < count; ++i)
      sumGradients(spans[i].data, spans[i].n);
  }
  virtual void reduceScatterGradientsMany(const GradientSpan *spans,
                                          size_t count) {
    for (size_t i = 0; i < count; ++i)
      reduceScatterGradients(spans[i].data, spans[i].n);
  }
  virtual void allGatherShardsMany(const GradientSpan *spans, size_t count) {
    for (size_t i = 0; i < count; ++i)
      allGatherShards(spans[i].data, spans[i].n);
  }
  /// Every replica's `n` values, in rank order (R * n of them), so that every
  /// replica combines them in the same order; optimizer thread only.
  virtual std::vector<double> gatherOnOptimizer(const double *data, int n) = 0;
  /// In place, across replicas; trainer thread only.
  virtual void sum(double *data, int n) = 0;
  /// Every replica's value, in rank order; trainer thread only.
  virtual std::vector<uint64_t> gather(uint64_t value) = 0;
  /// Ends every replica's process now (after an error on this one), so that
  /// none waits forever in a sum.
  [[noreturn]] virtual void abortAll(int status) = 0;
};

/// Joins the MPI job this process was started in; throws rt::Error when the
/// job's size is not `replicas` or when this runtime was built without MPI.
std::unique_ptr<ReplicaGroup> joinReplicaGroup(int replicas);

/// Whether this runtime was built with an MPI engine.
bool replicasSupported();

/// GPU trainers' engine (NCCL, bootstrapped from RANK / WORLD_SIZE /
/// MASTER_ADDR / MASTER_PORT), on `device`: registered by the CUDA runtime
/// (CudaDeviceOps.cpp), null in host-only builds.
using ReplicaGroupFactory = std::unique_ptr<ReplicaGroup> (*)(int replicas,
                                                              int device);
void registerGpuReplicaFactory(ReplicaGroupFactory factory);
ReplicaGroupFactory gpuReplicaFactory();
std::unique_ptr<ReplicaGroup> joinNcclReplicaGroup(int replicas, int device);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_REPLICAS_H
