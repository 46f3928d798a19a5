//===- HostMemory.h - The trainer's use of the C allocator ------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Host kernels allocate their temporaries per call (cpu::TempBuffer), and
// glibc's malloc hands large blocks back to the kernel on free (mmap'd
// blocks, and the top of each heap past its trim threshold), so the next
// call of the same kernel faulted the same pages in again: on a 2-core
// machine a small model's step took 33,000 page faults and 12% of its time
// in them. A trainer's temporaries repeat every step, so it keeps what it
// freed instead.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_HOSTMEMORY_H
#define RONDO_RUNTIME_SRC_HOSTMEMORY_H

namespace rondo::rt {

/// Makes freed blocks up to 32 MB stay with the process for reuse (no
/// mmap per block, no trimming of the heaps); call before the first step.
void keepFreedHostMemory();

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_HOSTMEMORY_H
