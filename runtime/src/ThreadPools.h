//===- ThreadPools.h - The trainer's thread pools ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A trainer's kernels thread with two pools: OpenMP's and OpenBLAS's.
// OpenMP's team size is per calling thread, so each worker's stream sets
// its own share of the cores. OpenBLAS's (the pthread build Rondo links) is
// one process-wide count that every GEMM fans out to; left alone it is
// every core, and W workers' GEMMs oversubscribed the cores W times over
// (issue 24, item 10: 3 steps on 4 workers, 16.9 s instead of 1.5 s).
//
// Sizing it to the workers' share is not enough: OpenBLAS's result bits
// depend on its thread count (1, 2, 3 and 4 threads give different sums
// for half of a grid of small shapes), so a share that changes with the
// worker count would break the promise that every worker count trains to
// the same bits. The pool is therefore one thread: each GEMM runs on the
// thread that calls it (a worker's compute stream), the workers are the
// parallelism, and the bits depend neither on the worker count nor on the
// machine's cores. The trainer sets it before the first GEMM.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_THREADPOOLS_H
#define RONDO_RUNTIME_SRC_THREADPOOLS_H

namespace rondo::rt {

/// The OpenMP threads one of `workers` workers computes with: the cores
/// divided among the workers, at least one.
int threadsPerWorker(int workers);

/// The OpenMP threads of the host's own tasks (AdamW of streamed state,
/// gradient stashes) when the workers are GPUs: their compute needs no
/// host core, so the tasks take the cores of this process's share of the
/// machine (the cores divided among the replicas that mpirun, torchrun or
/// Slurm start on it), not a worker's share. W1 streamed over four H100s
/// updated on 16 of 64 cores: 550 ms a step against 452 with two workers
/// (32 cores), where the plan prices every core.
int hostTaskThreadsBesideGpus();

/// The processes of this job on this machine, as mpirun, torchrun or
/// Slurm say it; 1 when none says.
int localProcesses();

/// Makes every GEMM run on its calling thread (OpenBLAS's pool at one),
/// whatever OPENBLAS_NUM_THREADS says; call before any GEMM.
void runGemmsOnCallingThread();

/// OpenBLAS's pool size as OpenBLAS reports it.
int blasThreads();

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_THREADPOOLS_H
