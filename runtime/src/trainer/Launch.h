//===- Launch.h - Starting a layout's replicas on this machine --*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A trainer compiled with `rondo-compile --gpus G` may have chosen a layout
// of several data-parallel replicas. Run without a launcher (mpirun,
// torchrun, srun), it starts them itself: one child process per replica,
// as torchrun would on one machine.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_LAUNCH_H
#define RONDO_RUNTIME_SRC_TRAINER_LAUNCH_H

namespace rondo::rt {

/// Runs `argv` again as `replicas` child processes with `--replicas R` and
/// the variables the NCCL engine reads (RANK, WORLD_SIZE, LOCAL_RANK,
/// MASTER_ADDR, MASTER_PORT; NVLink multicast off unless set), waits for
/// all of them and returns the first failing one's exit status (0 when all
/// succeed). SIGINT and SIGTERM are passed on to the children, which
/// checkpoint and stop as one process would.
int launchLocalReplicas(int argc, char **argv, int replicas, const char *argv0);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_LAUNCH_H
