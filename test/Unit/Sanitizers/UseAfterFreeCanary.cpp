//===- UseAfterFreeCanary.cpp - Proves the sanitizer build is real -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Built only in the sanitizer build (RONDO_SANITIZER_CANARY). It reads a
// buffer after freeing it; scripts/sanitize.sh requires AddressSanitizer to
// report a heap-use-after-free here, so a sanitizer job that silently lost
// its flags fails instead of passing everything.
//
//===----------------------------------------------------------------------===//

#include <cstdio>
#include <cstdlib>

int main(int argc, char **) {
  volatile float *data = static_cast<float *>(std::malloc(64 * sizeof(float)));
  data[argc] = 1.0f;
  std::free(const_cast<float *>(data));
  float after = data[argc]; // The injected bug.
  std::printf("read %f after free: the build has no AddressSanitizer\n",
              static_cast<double>(after));
  return 0;
}
