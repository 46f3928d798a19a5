//===- HostDeviceOps.cpp - The host backend's workers ---------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host's DeviceOps (runtime/include/rondo/runtime/DeviceOps.h), beside
// CudaDeviceOps.cpp: what a worker is when it is a thread of this process.
//
//===----------------------------------------------------------------------===//

#include "exec/HostExec.h"

#include <cstring>

namespace rondo::rt {
namespace {

/// Workers are threads of this process: arenas are host memory, copies are
/// memmove, a launch is a call.
class HostDeviceOps final : public DeviceOps {
public:
  const char *name() const override { return "host"; }
  std::unique_ptr<PinnedPool> makeHostPool() override {
    return makeHostPinnedPool();
  }
  void registerHostMemory(void *, size_t) override {}
  void unregisterHostMemory(void *) override {}
  char *allocateArena(int32_t, size_t bytes) override {
    if (!arenaPool)
      arenaPool = makeHostPinnedPool();
    return static_cast<char *>(arenaPool->allocate(bytes));
  }
  void releaseArena(int32_t, char *arena) override {
    arenaPool->release(arena);
  }
  void bindThread(int32_t, int32_t) override {}
  bool streamsShareCores() const override { return true; }
  void copy(int32_t, void *dst, const void *src, size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void zero(int32_t, void *dst, size_t bytes) override {
    std::memset(dst, 0, bytes);
  }
  void launch(int32_t, rondo_stage_fn fn, void *const *io, size_t,
              float lossScale) override {
    fn(io, lossScale);
  }

private:
  std::unique_ptr<PinnedPool> arenaPool;
};

} // namespace

std::unique_ptr<DeviceOps> makeHostDeviceOps(int32_t, const std::string &) {
  return std::make_unique<HostDeviceOps>();
}

} // namespace rondo::rt
