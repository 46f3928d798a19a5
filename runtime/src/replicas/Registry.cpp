//===- Registry.cpp - The GPU trainers' replica engine --------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Set by the CUDA runtime (CudaDeviceOps.cpp) when it is linked, whichever
// engine (MPI or none) the host runtime was built with.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Replicas.h"

namespace rondo::rt {

namespace {
ReplicaGroupFactory gGpuFactory = nullptr;
} // namespace

void registerGpuReplicaFactory(ReplicaGroupFactory factory) {
  gGpuFactory = factory;
}
ReplicaGroupFactory gpuReplicaFactory() { return gGpuFactory; }

} // namespace rondo::rt
