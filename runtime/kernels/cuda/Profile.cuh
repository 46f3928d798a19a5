//===- Profile.cuh - Per-kernel GPU time, on demand -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// With RONDO_PROFILE_KERNELS=1 in the environment every public kernel
// function brackets its work with two CUDA events on the current stream, and
// at exit the process prints GPU time per kernel (and per matmul shape, with
// its TFLOP/s) to stderr. It exists because the GPU machines have no
// system-wide profiler; off, it costs one branch per call. Events measure
// stream time, so work of other streams that overlaps is counted too.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_PROFILE_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_PROFILE_CUH

#include <cuda_runtime.h>

#include <string>

namespace rondo::cuda::detail {

/// Whether RONDO_PROFILE_KERNELS is set to a non-empty value other than 0.
bool profiling();

class ProfileScope {
public:
  explicit ProfileScope(const char *name) {
    if (profiling())
      begin(name, 0.0);
  }
  /// `key` names a class of calls (e.g. a matmul shape); `flops` per call.
  ProfileScope(const std::string &key, double flops) {
    if (profiling())
      begin(key, flops);
  }
  ~ProfileScope() {
    if (start_)
      end();
  }
  /// Records nothing for this scope (a call handed to another kernel
  /// entry, which profiles it under its own scope).
  void discard();
  ProfileScope(const ProfileScope &) = delete;
  ProfileScope &operator=(const ProfileScope &) = delete;

private:
  void begin(const std::string &key, double flops);
  void end();
  std::string key_;
  double flops_ = 0;
  cudaEvent_t start_ = nullptr;
};

} // namespace rondo::cuda::detail

#endif // RONDO_RUNTIME_KERNELS_CUDA_PROFILE_CUH
