//===- ThreadPools.cpp - The trainer's thread pools -----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "ThreadPools.h"

#include <algorithm>
#include <cblas.h>
#include <cstdlib>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rondo::rt {

int threadsPerWorker(int workers) {
#ifdef _OPENMP
  const int cores = omp_get_num_procs();
#else
  const int cores = int(std::thread::hardware_concurrency());
#endif
  return std::max(1, cores / std::max(1, workers));
}

int localProcesses() {
  for (const char *name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_NTASKS_PER_NODE"})
    if (const char *v = std::getenv(name); v && *v)
      if (int n = std::atoi(v); n > 0)
        return n;
  return 1;
}

int hostTaskThreadsBesideGpus() { return threadsPerWorker(localProcesses()); }

void runGemmsOnCallingThread() { openblas_set_num_threads(1); }

int blasThreads() { return openblas_get_num_threads(); }

} // namespace rondo::rt
