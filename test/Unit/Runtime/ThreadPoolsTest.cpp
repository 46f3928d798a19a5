//===- ThreadPoolsTest.cpp - The trainer's thread pool sizes --------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host's tasks beside GPU workers (AdamW of streamed state) take this
// process's share of the machine's cores: all of them alone, the cores
// divided among the processes that the launcher says share the machine.
//
//===----------------------------------------------------------------------===//

#include "ThreadPools.h"

#include <gtest/gtest.h>

#include <cstdlib>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using namespace rondo::rt;

int cores() {
#ifdef _OPENMP
  return omp_get_num_procs();
#else
  return 1;
#endif
}

/// Sets the launchers' local-size variables for one test and restores
/// their absence afterwards.
struct LocalSize {
  explicit LocalSize(const char *name, const char *value) : name(name) {
    for (const char *n : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "SLURM_NTASKS_PER_NODE"})
      unsetenv(n);
    if (value)
      setenv(name, value, 1);
  }
  ~LocalSize() { unsetenv(name); }
  const char *name;
};

TEST(ThreadPools, HostTasksBesideGpusTakeEveryCoreAlone) {
  LocalSize none("LOCAL_WORLD_SIZE", nullptr);
  EXPECT_EQ(localProcesses(), 1);
  EXPECT_EQ(hostTaskThreadsBesideGpus(), std::max(1, cores()));
  // A worker's share is what host workers compute with.
  EXPECT_EQ(threadsPerWorker(4), std::max(1, cores() / 4));
}

TEST(ThreadPools, HostTasksShareTheCoresAmongLocalProcesses) {
  for (const char *name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_NTASKS_PER_NODE"}) {
    LocalSize two(name, "2");
    EXPECT_EQ(localProcesses(), 2) << name;
    EXPECT_EQ(hostTaskThreadsBesideGpus(), std::max(1, cores() / 2)) << name;
  }
  // A value that is not a count is ignored.
  LocalSize bad("LOCAL_WORLD_SIZE", "x");
  EXPECT_EQ(localProcesses(), 1);
}

} // namespace
