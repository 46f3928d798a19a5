//===- NoReplicas.cpp - Runtimes built without MPI ------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Replicas.h"

#include "rondo/runtime/Error.h"

namespace rondo::rt {

std::unique_ptr<ReplicaGroup> joinReplicaGroup(int replicas) {
  throw Error("--replicas " + std::to_string(replicas) +
              ": this trainer's runtime was built without MPI (install "
              "libopenmpi-dev and rebuild Rondo)");
}

bool replicasSupported() { return false; }

} // namespace rondo::rt
