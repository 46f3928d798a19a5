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

/// Makes every GEMM run on its calling thread (OpenBLAS's pool at one),
/// whatever OPENBLAS_NUM_THREADS says; call before any GEMM.
void runGemmsOnCallingThread();

/// OpenBLAS's pool size as OpenBLAS reports it.
int blasThreads();

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_THREADPOOLS_H
