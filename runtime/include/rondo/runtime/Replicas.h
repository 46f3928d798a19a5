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
// Two communicators, because two threads talk: the optimizer thread sums
// gradients (in job order, the same on every replica), the trainer thread
// sums loss and target counts and compares weight checksums.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_REPLICAS_H
#define RONDO_RUNTIME_REPLICAS_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rondo::rt {

class ReplicaGroup {
public:
  virtual ~ReplicaGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// What carries the sums ("MPI (Open MPI 4.1.4)"), for the start-up line.
  virtual std::string engine() const = 0;
  /// In place, across replicas; optimizer thread only.
  virtual void sumGradients(float *data, int64_t n) = 0;
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
