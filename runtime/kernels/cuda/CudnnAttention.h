//===- CudnnAttention.h - cuDNN's graph API for the attention --*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Shared by CudnnAttention.cu (dispatch, plans, execution) and
// CudnnAttentionGraph.cpp (the library, the operation graphs, engine
// choice); the design is in CudnnAttention.cu's header comment. Host code
// only, built where cudnn_graph.h exists (RONDO_HAVE_CUDNN).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_CUDNNATTENTION_H
#define RONDO_RUNTIME_KERNELS_CUDA_CUDNNATTENTION_H

#if RONDO_HAVE_CUDNN

#include <cudnn_graph.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace rondo::cuda::detail::cudnn {

/// The entry points of libcudnn.so.9, opened with dlopen at first use.
struct Api {
  decltype(&::cudnnGetVersion) getVersion = nullptr;
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnSetStream) setStream = nullptr;
  decltype(&::cudnnGetErrorString) errorString = nullptr;
  decltype(&::cudnnGetLastErrorString) lastError = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) createDesc = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) destroyDesc = nullptr;
  decltype(&::cudnnBackendSetAttribute) setAttr = nullptr;
  decltype(&::cudnnBackendGetAttribute) getAttr = nullptr;
  decltype(&::cudnnBackendFinalize) finalize = nullptr;
  decltype(&::cudnnBackendExecute) execute = nullptr;
  size_t version = 0;
  std::string failure; ///< why the library is not usable; empty when it is
};
const Api &api();

/// A graph the library refused (build or finalize): the caller falls back.
struct Refused {
  std::string what;
};

/// cuDNN's status text and its last error message.
std::string statusText(cudnnStatus_t s);
/// Throws Refused{what: status} unless s is success.
void must(cudnnStatus_t s, const char *what);

/// A backend descriptor, destroyed with its owner.
class Desc {
public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    must(api().createDesc(type, &d_), "create descriptor");
  }
  ~Desc() {
    if (d_)
      api().destroyDesc(d_);
  }
  Desc(const Desc &) = delete;
  Desc &operator=(const Desc &) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

template <typename T>
void setAttr(const Desc &d, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t count, const T *value,
             const char *what) {
  must(api().setAttr(d.get(), name, type, count, value), what);
}

inline void setDesc(const Desc &d, cudnnBackendAttributeName_t name,
                    cudnnBackendDescriptor_t value, const char *what) {
  setAttr(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}

/// Unique ids of the tensors the variant pack binds; by-value constants
/// take ids from kFirstConstant on, virtual tensors from kFirstVirtual on.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kDO,
  kSoftmaxSum,
  kDQ,
  kDK,
  kDV,
  kDQAccum,
  kFirstConstant = 100,
  kFirstVirtual = 1000,
};

/// What a plan is built for.
struct Key {
  int device;
  bool backward, deterministic;
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
  int64_t window;
  /// v and dV, and out and dOut, stored token-major (StoredBf16Qkv).
  bool vTokens, outTokens;
  /// The heads of the tensors the call's Hq query heads and Hkv kv heads
  /// are a slice of (the strides step over them): qHeadsAll for q, out, dO,
  /// dQ and the stats; kvHeadsAll for k and v; kvOutHeads for dK and dV
  /// (1 where a head group's share of them goes to a temporary). Equal to
  /// Hq and Hkv but in a head group of a split backward (CudnnAttention.cu).
  int64_t qHeadsAll, kvHeadsAll, kvOutHeads;
  bool operator<(const Key &o) const {
    auto tie = [](const Key &k) {
      return std::make_tuple(k.device, k.backward, k.deterministic, k.B, k.Hq,
                             k.Hkv, k.T, k.S, k.D, k.causal, k.window,
                             k.vTokens, k.outTokens, k.qHeadsAll, k.kvHeadsAll,
                             k.kvOutHeads);
    };
    return tie(*this) < tie(o);
  }
};

/// A by-value scalar of a graph: its uid and 4 bytes of value (fp32 or
/// int32); the variant pack points at `f`.
struct Constant {
  int64_t uid;
  union {
    float f;
    int32_t i;
  };
};

/// A finalized execution plan with every descriptor it was built from, or
/// why there is none.
struct Plan {
  std::vector<std::unique_ptr<Desc>> owned;
  std::vector<Constant> constants;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0, engine = -1;
  std::string refused;
};

/// Builds k's operation graph on `handle`, asks the heuristics (mode A) for
/// engine configurations and keeps the first that finalizes (and, for a
/// deterministic plan, is not marked nondeterministic). Throws Refused.
void buildPlan(Plan &p, cudnnHandle_t handle, const Key &k);

} // namespace rondo::cuda::detail::cudnn

#endif // RONDO_HAVE_CUDNN

#endif // RONDO_RUNTIME_KERNELS_CUDA_CUDNNATTENTION_H
