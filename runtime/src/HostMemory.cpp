//===- HostMemory.cpp - The trainer's use of the C allocator ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "HostMemory.h"

#if __has_include(<malloc.h>)
#include <malloc.h>
#endif

namespace rondo::rt {

void keepFreedHostMemory() {
#if defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
  // Blocks above the mmap threshold are mapped and unmapped per call. 32 MB
  // is the largest threshold glibc accepts (a larger one is refused, and
  // the default stays); larger blocks (a big model's logits chunks) are
  // still mapped, and so do not stay resident after their stage.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

} // namespace rondo::rt
