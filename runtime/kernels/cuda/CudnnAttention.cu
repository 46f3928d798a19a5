//===- CudnnAttention.cu - bf16 attention on cuDNN's fused SDPA -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The Precision::Bf16 attention on cuDNN's fused scaled-dot-product attention
// (FlashAttention.cu dispatches here first on compute capability 9.0; every
// case this file declines runs on Rondo's own kernels).
//
// Why cuDNN: on an H100 at W1's heads Rondo's wgmma kernels reached ~255 /
// ~221 TFLOP/s (forward / backward) while PyTorch's SDPA on cuDNN ran 345 /
// 336 in the same run. Through this file, at W1's B 2 x T 4096: 367 / 301
// TFLOP/s against the own kernels' 264 / 224, deterministic
// (runtime/kernels/cuda/NOTES.md, bench/results/h100x1/
// attention-cudnn-2026-11-27). cuDNN's Hopper attention engines are
// runtime-compiled for the operation graph they are given, so the library
// is used through its graph (backend) API.
//
// Loading: libcudnn.so.9 is opened with dlopen at the first bf16 attention
// call, never linked, so that trainers and tests run unchanged where cuDNN is
// missing (CI, machines without PyTorch's wheel); the reason it is not used
// is printed once ("rondo: ..."), and the call falls back to Rondo's kernels.
// The header (cudnn_graph.h) is needed at build time only, for the types and
// enumerators; without it this file builds the fallback alone.
//
// The graphs: cuDNN 9.19 (PyTorch's wheel at the time of writing) has a
// native SDPA operation (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR) but
// takes masks for it only from 9.21 on (its score-modifier subgraph), so the
// causal and windowed attention here is built as the composite graph that
// the fused engines recognise: matrix products, pointwise operations and
// row reductions, in the order and with the tensor types cudnn-frontend's
// composite SDPA nodes use (cuDNN's engines match the graph's structure;
// another arrangement of the same mathematics is refused, not run slower).
//  - Forward: S = Q K^T, S * scale, the mask (bottom-right causal: row + S -
//    T >= column; window w: column + w - (S - T) > row, each as a generated
//    index comparison and a select of -inf), the softmax with statistics
//    (max, exp, sum, log; stats = max + log(sum) in fp32, natural log of the
//    scaled scores: exactly Rondo's lse), P = exp / sum in bf16, O = P V.
//  - Backward: softmax_sum = rowsum(dO * O), S recomputed, P = exp(S * scale
//    - stats) under the same mask, dV = P^T dO, dP = dO V^T, dS = P (dP -
//    softmax_sum) * scale, dK = dS^T Q, dQ = dS K; with GQA dK and dV come
//    per query head and are summed over each kv head's group by a reduction.
// Determinism: cudnn-frontend's deterministic backward on Hopper
// (SDPA_backward_attributes::set_deterministic_algorithm) is the graph whose
// dQ = dS K writes dQ itself rather than an fp32 dQ accumulator tensor: the
// accumulator is what tells the engine to add dQ with atomics; without it the
// engine keeps dP in its workspace (B * Hq * T * S bf16) and accumulates dQ
// in a fixed order. That is the graph built here (RONDO_CUDNN_BWD=atomic
// builds the accumulator graph instead, for timing only: it is not
// reproducible). Engine configurations whose numerical notes say
// NONDETERMINISTIC are skipped either way, and the tests compare two runs
// bit for bit. That workspace grows with T^2 (64 GiB for 32 query heads at
// T = 32K): over RONDO_CUDNN_WORKSPACE_MB the backward runs in groups of
// rows, or of query heads of one row, one call each on slices of the same
// tensors (the group's plan has the whole tensors' strides), and where a
// group is part of a kv head's, the parts of that head's dK and dV are
// summed in a fixed order (headGroupPlan), rather than on Rondo's slower
// kernels.
//
// The contract is unchanged: fp32 views in and out. q, k, v (and O, dO) are
// rounded to bf16 into stream-ordered temporaries, as for Rondo's kernels;
// cuDNN writes O, dQ, dK and dV in bf16, which are widened into the fp32
// outputs. So unlike the own kernels these outputs carry bf16 precision
// (their consumers round them to bf16 again, except the norms' and rotary's
// backward, which see gradients rounded once more than before).
//
// Plans: one execution plan per (device, shapes, causal, window, direction),
// built at the shape's first call (the engines compile then: 0.5-1 s) and
// cached for the process; a refusal is cached too, so each shape is tried
// once. Handles: one per device, bound to the calling thread's current
// stream at each call under the device's lock.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "CudnnAttention.h"

namespace rondo::cuda {

namespace {
thread_local AttentionImpl tlsLastImpl = AttentionImpl::None;

/// Prints "rondo: <text>" to stderr once per distinct text: the trainer's
/// log says which attention runs and why, without a line per call.
void noteOnce(const std::string &text) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(text).second)
    std::fprintf(stderr, "rondo: %s\n", text.c_str());
}
} // namespace

AttentionImpl lastAttentionImpl() { return tlsLastImpl; }

namespace detail {

void setLastAttentionImpl(AttentionImpl impl) { tlsLastImpl = impl; }

namespace {

/// The RONDO_ATTENTION switch: "flash" keeps Rondo's kernels, "cudnn" asks
/// for cuDNN where it applies; unset (or "auto") takes cuDNN where it applies.
bool cudnnWanted() {
  const char *env = std::getenv("RONDO_ATTENTION");
  if (!env || !*env || std::strcmp(env, "auto") == 0)
    return true;
  if (std::strcmp(env, "cudnn") == 0)
    return true;
  if (std::strcmp(env, "flash") == 0)
    return false;
  noteOnce(std::string("RONDO_ATTENTION=") + env +
           " is not one of auto, cudnn, flash: taken as auto");
  return true;
}

/// Why the shape cannot take cuDNN's graph at all (null: it can): sinks
/// change the softmax (forward only), D other than 64 / 128 is outside the
/// measured engines, and a causal mask with S < T leaves rows without a key
/// (Rondo defines out = 0 and lse = -inf there; cuDNN would divide by 0).
const char *shapeRefusal(const FlashDims &d, bool causal) {
  if (d.D != 64 && d.D != 128)
    return "head dimension not 64 or 128";
  if (d.sinks)
    return "attention sinks";
  if (causal && d.S < d.T)
    return "causal with fewer keys than queries";
  if (d.B * d.Hq == 0 || d.T == 0 || d.S == 0)
    return "empty";
  return nullptr;
}

} // namespace

#if RONDO_HAVE_CUDNN

namespace {

using namespace cudnn;

/// Up to five conversions between fp32 and bf16 (nearest even) in one
/// launch, one per blockIdx.y: job j converts n[j] elements, a multiple of 8
/// (rows of D = 64 or 128), in 16-byte bf16 chunks; the fp32 side is read
/// or written as float4 where it is 16-byte aligned. One launch for q, k, v
/// (and O, dO) instead of one each, and wide accesses instead of the
/// elementwise roundToBf16Copy: at W1's shape the conversions move ~150 MB a
/// call around the cuDNN kernels.
struct Conversions {
  static constexpr int kMax = 5;
  const void *src[kMax];
  void *dst[kMax];
  int64_t n[kMax];
  bool fp32Aligned[kMax];
  int count = 0;
};

template <bool ToBf16> __global__ void convertKernel(Conversions jobs) {
  const int j = int(blockIdx.y);
  const int64_t chunks = jobs.n[j] / 8;
  const bool aligned = jobs.fp32Aligned[j];
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (ToBf16) {
      const float *in = static_cast<const float *>(jobs.src[j]) + c * 8;
      float x[8];
      if (aligned) {
        float4 lo = *reinterpret_cast<const float4 *>(in);
        float4 hi = *reinterpret_cast<const float4 *>(in + 4);
        x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
        x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[e] = in[e];
      }
      uint4 out;
      out.x = packBf16(x[0], x[1]);
      out.y = packBf16(x[2], x[3]);
      out.z = packBf16(x[4], x[5]);
      out.w = packBf16(x[6], x[7]);
      static_cast<uint4 *>(jobs.dst[j])[c] = out;
    } else {
      uint4 raw = static_cast<const uint4 *>(jobs.src[j])[c];
      const __nv_bfloat16 *h = reinterpret_cast<const __nv_bfloat16 *>(&raw);
      float x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[e] = __bfloat162float(h[e]);
      float *out = static_cast<float *>(jobs.dst[j]) + c * 8;
      if (aligned) {
        *reinterpret_cast<float4 *>(out) = make_float4(x[0], x[1], x[2], x[3]);
        *reinterpret_cast<float4 *>(out + 4) =
            make_float4(x[4], x[5], x[6], x[7]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          out[e] = x[e];
      }
    }
  }
}

struct Conversion {
  const void *src;
  void *dst; ///< null: skipped (a gradient nobody wants)
  int64_t n;
};

/// Enqueues the conversions (fp32 -> bf16 with toBf16, else bf16 -> fp32).
void convert(bool toBf16, std::initializer_list<Conversion> list,
             const char *name) {
  Conversions jobs;
  int64_t most = 0;
  for (const Conversion &c : list) {
    if (!c.dst || c.n == 0)
      continue;
    const int j = jobs.count++;
    jobs.src[j] = c.src;
    jobs.dst[j] = c.dst;
    jobs.n[j] = c.n;
    jobs.fp32Aligned[j] = aligned16(toBf16 ? c.src : c.dst);
    most = c.n / 8 > most ? c.n / 8 : most;
  }
  if (jobs.count == 0)
    return;
  dim3 grid(std::min(gridFor(most), 4096u), unsigned(jobs.count));
  if (toBf16)
    convertKernel<true><<<grid, kThreads, 0, currentStream()>>>(jobs);
  else
    convertKernel<false><<<grid, kThreads, 0, currentStream()>>>(jobs);
  checkLaunch(name);
}

/// An operand stored in bf16, else its rounded copy. (cuDNN's variant pack
/// takes non-const pointers; it does not write its inputs.)
void *pickBf16(const void *stored, Temp &copy) {
  return stored ? const_cast<void *>(stored) : copy.as<void>();
}

/// The bf16 q, k and v cuDNN reads: those stored in bf16 as they are, the
/// others rounded (one launch) into qb, kb and vb.
struct Bf16Qkv {
  void *q, *k, *v;
};
Bf16Qkv roundedQkv(const float *q, const float *k, const float *v, int64_t nq,
                   int64_t nk, const StoredBf16Qkv &stored, Temp &qb, Temp &kb,
                   Temp &vb, const char *name) {
  convert(true,
          {{q, stored.q ? nullptr : qb.as<void>(), nq},
           {k, stored.k ? nullptr : kb.as<void>(), nk},
           {v, stored.v ? nullptr : vb.as<void>(), nk}},
          name);
  return {pickBf16(stored.q, qb), pickBf16(stored.k, kb),
          pickBf16(stored.v, vb)};
}

std::string shapeText(const Key &k) {
  return "B=" + std::to_string(k.B) + " Hq=" + std::to_string(k.Hq) +
         " Hkv=" + std::to_string(k.Hkv) + " T=" + std::to_string(k.T) +
         " S=" + std::to_string(k.S) + " D=" + std::to_string(k.D) +
         (k.causal ? " causal" : "") +
         (k.window ? " window=" + std::to_string(k.window) : "") +
         (k.vTokens ? " v token-major" : "") +
         (k.outTokens ? " out token-major" : "") +
         (k.qHeadsAll != k.Hq
              ? " (one group of the " + std::to_string(k.qHeadsAll) +
                    " query heads)"
              : "");
}

struct DeviceState {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex; ///< the handle's stream binding and execution
  std::map<Key, std::unique_ptr<Plan>> plans;
};

/// The device's state (handle created at first use), or null with the
/// reason in `why`.
DeviceState *deviceState(int device, std::string &why) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<DeviceState>> states;
  static std::map<int, std::string> failures;
  std::lock_guard<std::mutex> lock(mutex);
  auto f = failures.find(device);
  if (f != failures.end()) {
    why = f->second;
    return nullptr;
  }
  auto &s = states[device];
  if (!s) {
    auto fresh = std::make_unique<DeviceState>();
    // Never destroyed: the handle may be in use until the process exits, and
    // at static destruction the CUDA context may already be gone.
    cudnnStatus_t st = api().create(&fresh->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
      why = failures[device] = "cudnnCreate failed: " + statusText(st);
      states.erase(device);
      return nullptr;
    }
    s = std::move(fresh);
  }
  return s.get();
}

/// The plan for k (built on first use), or null when cuDNN refused it; the
/// device lock must be held.
Plan *planFor(DeviceState &st, const Key &k) {
  auto &slot = st.plans[k];
  if (!slot) {
    slot = std::make_unique<Plan>();
    try {
      buildPlan(*slot, st.handle, k);
      noteOnce("cuDNN " + std::to_string(api().version) + " attention " +
               (k.backward ? (k.deterministic ? "backward (deterministic)"
                                              : "backward (atomic dQ)")
                           : "forward") +
               " " + shapeText(k) + ": engine " + std::to_string(slot->engine) +
               ", workspace " + std::to_string(slot->workspace >> 20) + " MiB");
    } catch (const Refused &r) {
      slot->refused = r.what;
      slot->plan = nullptr;
    }
  }
  return slot->plan ? slot.get() : nullptr;
}

/// Binds the variant pack (device pointers by uid, the by-value constants)
/// and runs the plan on the current stream; the device lock must be held.
void execute(DeviceState &st, Plan &p,
             std::vector<std::pair<int64_t, void *>> bindings, void *workspace,
             const char *name) {
  for (Constant &c : p.constants)
    bindings.push_back({c.uid, &c.f});
  std::vector<int64_t> uids;
  std::vector<void *> ptrs;
  for (auto &b : bindings) {
    uids.push_back(b.first);
    ptrs.push_back(b.second);
  }
  try {
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    setAttr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
            int64_t(uids.size()), uids.data(), "pack uids");
    setAttr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
            int64_t(ptrs.size()), ptrs.data(), "pack pointers");
    setAttr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
            &workspace, "pack workspace");
    must(api().finalize(pack.get()), "finalize variant pack");
    must(api().setStream(st.handle, currentStream()), "cudnnSetStream");
    must(api().execute(st.handle, p.plan, pack.get()), "cudnnBackendExecute");
  } catch (const Refused &r) {
    // A plan that finalized but does not run is a failure, not a fallback:
    // the outputs were promised.
    fail(name, "cuDNN attention", r.what.c_str());
  }
}

/// The most workspace a plan may take (RONDO_CUDNN_WORKSPACE_MB, default 4096
/// MiB). The deterministic backward keeps dP in its workspace, B * Hq * T * S
/// bf16: 1 GiB at W1's B 2 x T 4096, but 64 GiB for 32 heads at T = 32K, so
/// long sequences go to Rondo's kernels instead. A fixed limit rather than
/// the free memory, so that which implementation runs (and so the bits) does
/// not depend on what else holds memory.
int64_t workspaceLimit() {
  const char *env = std::getenv("RONDO_CUDNN_WORKSPACE_MB");
  const int64_t mb = env && *env ? std::atoll(env) : 4096;
  return mb << 20;
}

/// The group a deterministic backward runs in when its plan for the whole
/// microbatch needs more workspace than `limit` (its dP is B * Hq * T * S
/// bf16: 64 GiB for 32 query heads at T = 32K): rows of all heads where
/// some rows' plan fits (the most rows dividing B: W1's 8-row microbatch
/// in two calls of 4 rows), else one row a call with the most query heads g
/// whose plan fits, either whole kv heads' groups (g a multiple of Hq /
/// Hkv: each call writes its kv heads' dK and dV) or a part of one kv
/// head's group (g dividing Hq / Hkv: each call's share of dK and dV goes
/// to a temporary and the parts are summed in a fixed order). A group of
/// fewer heads takes one row: cuDNN's deterministic engine writes dQ as if
/// its batch stride were the group's, not the whole tensor's (with all
/// heads the two are the same). The shapes and the limit alone choose the
/// group, so the bits do not depend on what else holds memory. Null when
/// no group fits (or the stats rows of a group would not start 16-byte
/// aligned); the device lock must be held.
Plan *headGroupPlan(DeviceState &st, const Key &full, int64_t limit,
                    Key &group) {
  const int64_t ratio = full.Hq / full.Hkv;
  if (!full.backward || !full.deterministic || full.T % 4 != 0)
    return nullptr;
  auto tryGroup = [&](int64_t rows, int64_t g) -> Plan * {
    // dP alone over the limit: not worth compiling the plan.
    if (rows * g * full.T * full.S * 2 > limit)
      return nullptr;
    Key k = full;
    k.B = rows;
    k.Hq = g;
    k.Hkv = g >= ratio ? g / ratio : 1;
    k.kvOutHeads = g >= ratio ? full.Hkv : 1;
    Plan *p = planFor(st, k);
    if (!p || p->workspace > limit)
      return nullptr;
    group = k;
    return p;
  };
  for (int64_t rows = full.B - 1; rows >= 1; --rows)
    if (full.B % rows == 0)
      if (Plan *p = tryGroup(rows, full.Hq))
        return p;
  for (int64_t g = full.Hq - 1; g >= 1; --g)
    if (full.Hq % g == 0 && (g >= ratio ? g % ratio : ratio % g) == 0)
      if (Plan *p = tryGroup(1, g))
        return p;
  return nullptr;
}

/// Whether cuDNN serves the call: true with `state` and `plan` set and the
/// device lock taken into `lock`; false with the log line saying why not.
/// A deterministic backward over the workspace limit may be served in head
/// groups: `plan` and `call` are then a group's (`call` is `k` otherwise).
bool acquire(const Key &k, DeviceState *&state, Plan *&plan,
             std::unique_lock<std::mutex> &lock, std::string &note, Key &call) {
  call = k;
  const Api &a = api();
  std::string why;
  if (!a.failure.empty()) {
    note = "attention on Rondo's kernels, not cuDNN: " + a.failure;
    return false;
  }
  state = deviceState(k.device, why);
  if (!state) {
    note = "attention on Rondo's kernels, not cuDNN: " + why;
    return false;
  }
  lock = std::unique_lock<std::mutex>(state->mutex);
  plan = planFor(*state, k);
  if (!plan) {
    note = std::string("attention ") + (k.backward ? "backward " : "forward ") +
           shapeText(k) + " on Rondo's kernels: cuDNN refused the graph (" +
           state->plans[k]->refused + ")";
    lock.unlock();
    return false;
  }
  const int64_t limit = workspaceLimit();
  if (plan->workspace > limit) {
    if (Plan *group = headGroupPlan(*state, k, limit, call)) {
      note = "attention backward " + shapeText(k) + ": cuDNN's plan needs " +
             std::to_string(plan->workspace >> 20) +
             " MiB of workspace, over RONDO_CUDNN_WORKSPACE_MB=" +
             std::to_string(limit >> 20) + ": run in groups of " +
             std::to_string(call.B) + " row(s) of " + std::to_string(call.Hq) +
             " query heads (" + std::to_string(group->workspace >> 20) +
             " MiB each)";
      plan = group;
      return true;
    }
    note = std::string("attention ") + (k.backward ? "backward " : "forward ") +
           shapeText(k) + " on Rondo's kernels: cuDNN's plan needs " +
           std::to_string(plan->workspace >> 20) + " MiB of workspace, over " +
           "RONDO_CUDNN_WORKSPACE_MB=" + std::to_string(limit >> 20);
    lock.unlock();
    return false;
  }
  return true;
}

Key makeKey(const FlashDims &d, bool causal, bool backward,
            const StoredBf16Qkv &stored) {
  Key k{};
  int dev = 0;
  cudaGetDevice(&dev);
  k.device = dev;
  k.backward = backward;
  const char *mode = std::getenv("RONDO_CUDNN_BWD");
  k.deterministic = !(backward && mode && std::strcmp(mode, "atomic") == 0);
  k.B = d.B;
  k.Hq = d.Hq;
  k.Hkv = d.Hkv;
  k.T = d.T;
  k.S = d.S;
  k.D = d.D;
  k.causal = causal;
  k.window = d.window > 0 && d.window < d.S ? d.window : 0;
  k.vTokens = stored.vTokens;
  k.outTokens = stored.outTokens;
  k.qHeadsAll = d.Hq;
  k.kvHeadsAll = k.kvOutHeads = d.Hkv;
  return k;
}

/// Whether this call should try cuDNN at all (the switch, the device, the
/// shape); a refusal is noted once with its reason.
bool wanted(const FlashDims &d, bool causal, const char *direction) {
  if (!cudnnWanted())
    return false;
  // Compute capability 9.0 is the only one this path has been measured on.
  if (!currentDeviceIsSm90())
    return false;
  if (const char *why = shapeRefusal(d, causal)) {
    noteOnce(std::string("attention ") + direction +
             " on Rondo's kernels, not cuDNN: " + why);
    return false;
  }
  return true;
}

/// wanted() and acquire() for one call: true with the plan and the device
/// lock held, false (the reason noted once) when Rondo's kernels run.
bool cudnnServes(const FlashDims &d, bool causal, const Key &key,
                 DeviceState *&st, Plan *&plan,
                 std::unique_lock<std::mutex> &lock, Key &call) {
  if (!wanted(d, causal, key.backward ? "backward" : "forward"))
    return false;
  std::string note;
  const bool served = acquire(key, st, plan, lock, note, call);
  if (!note.empty())
    noteOnce(note);
  return served;
}

/// dK or dV of one kv head of one row from the parts its query heads'
/// groups wrote ([S, D] each): out[s, :] (rows rowStride apart) = the sum
/// over the parts in order, in fp32, rounded once.
__global__ void sumHeadPartsKernel(const __nv_bfloat16 *parts, int64_t count,
                                   int64_t partElems, int64_t D,
                                   __nv_bfloat16 *out, int64_t rowStride) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < partElems; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = 0; j < count; ++j)
      sum += __bfloat162float(parts[j * partElems + i]);
    out[(i / D) * rowStride + i % D] = __float2bfloat16_rn(sum);
  }
}

/// `p` moved by `elements` bf16 elements.
void *bf16At(const void *p, int64_t elements) {
  return const_cast<char *>(static_cast<const char *>(p)) + elements * 2;
}

/// lse as cuDNN's stats tensor: the caller's pointer where it is aligned to
/// 16 bytes (cuDNN's requirement), otherwise a temporary copied in / out.
struct StatsBuffer {
  Temp temp;
  float *ptr;
  StatsBuffer(float *lse, int64_t n, const char *name)
      : temp(lse && aligned16(lse) ? 0 : size_t(n) * sizeof(float), name),
        ptr(lse && aligned16(lse) ? lse : temp.as<float>()) {}
};

} // namespace

bool cudnnAttentionForward(const FlashDims &d, const float *q, const float *k,
                           const float *v, bool causal, float scale, float *out,
                           float *lse, const char *name,
                           const StoredBf16Qkv &stored) {
  DeviceState *st = nullptr;
  Plan *plan = nullptr;
  std::unique_lock<std::mutex> lock;
  Key call;
  if (!cudnnServes(d, causal, makeKey(d, causal, /*backward=*/false, stored),
                   st, plan, lock, call))
    return false;
  const int64_t nq = d.B * d.Hq * d.T * d.D, nk = d.B * d.Hkv * d.S * d.D;
  Temp qb(stored.q ? 0 : size_t(nq) * 2, name),
      kb(stored.k ? 0 : size_t(nk) * 2, name),
      vb(stored.v ? 0 : size_t(nk) * 2, name),
      ob(stored.outStore ? 0 : size_t(nq) * 2, name);
  Bf16Qkv in = roundedQkv(q, k, v, nq, nk, stored, qb, kb, vb, name);
  void *o = stored.outStore ? stored.outStore : ob.as<void>();
  StatsBuffer stats(lse, d.B * d.Hq * d.T, name);
  Temp ws(size_t(plan->workspace), name);
  float scaleValue = scale;
  execute(*st, *plan,
          {{kQ, in.q},
           {kK, in.k},
           {kV, in.v},
           {kO, o},
           {kStats, stats.ptr},
           {kScale, &scaleValue}},
          ws.as<void>(), name);
  lock.unlock();
  if (!stored.outStore)
    convert(false, {{ob.as<void>(), out, nq}}, name);
  if (lse && stats.ptr != lse)
    RONDO_CHECK(cudaMemcpyAsync(lse, stats.ptr,
                                size_t(d.B * d.Hq * d.T) * sizeof(float),
                                cudaMemcpyDeviceToDevice, currentStream()),
                name);
  ws.release();
  stats.temp.release();
  ob.release();
  vb.release();
  kb.release();
  qb.release();
  setLastAttentionImpl(AttentionImpl::Cudnn);
  return true;
}

bool cudnnAttentionBackward(const FlashDims &d, const float *q, const float *k,
                            const float *v, const float *out, const float *lse,
                            const float *dOut, bool causal, float scale,
                            float *dQ, float *dK, float *dV, const char *name,
                            const StoredBf16Qkv &stored) {
  // Sinks only change the forward: lse carries them, P = exp(s - lse).
  FlashDims dims = d;
  dims.sinks = nullptr;
  const Key key = makeKey(dims, causal, /*backward=*/true, stored);
  DeviceState *st = nullptr;
  Plan *plan = nullptr;
  std::unique_lock<std::mutex> lock;
  Key call;
  if (!cudnnServes(dims, causal, key, st, plan, lock, call))
    return false;
  const int64_t rows = d.B * d.Hq * d.T;
  const int64_t nq = rows * d.D, nk = d.B * d.Hkv * d.S * d.D;
  Temp qb(stored.q ? 0 : size_t(nq) * 2, name),
      kb(stored.k ? 0 : size_t(nk) * 2, name),
      vb(stored.v ? 0 : size_t(nk) * 2, name),
      ob(stored.out ? 0 : size_t(nq) * 2, name),
      gb(stored.dOut ? 0 : size_t(nq) * 2, name);
  convert(true,
          {{q, stored.q ? nullptr : qb.as<void>(), nq},
           {k, stored.k ? nullptr : kb.as<void>(), nk},
           {v, stored.v ? nullptr : vb.as<void>(), nk},
           {out, stored.out ? nullptr : ob.as<void>(), nq},
           {dOut, stored.dOut ? nullptr : gb.as<void>(), nq}},
          name);
  Bf16Qkv in{pickBf16(stored.q, qb), pickBf16(stored.k, kb),
             pickBf16(stored.v, vb)};
  void *o = pickBf16(stored.out, ob), *g = pickBf16(stored.dOut, gb);
  // cuDNN wants its stats 16-byte aligned; lse is copied when it is not.
  Temp statsCopy(aligned16(lse) ? 0 : size_t(rows) * sizeof(float), name);
  const float *statsPtr = lse;
  if (!aligned16(lse)) {
    RONDO_CHECK(cudaMemcpyAsync(statsCopy.as<float>(), lse,
                                size_t(rows) * sizeof(float),
                                cudaMemcpyDeviceToDevice, currentStream()),
                name);
    statsPtr = statsCopy.as<float>();
  }
  Temp softmaxSum(size_t(rows) * sizeof(float), name);
  // cuDNN writes all three: a skipped one goes to a temporary.
  Temp dqb(stored.dQStore ? 0 : size_t(nq) * 2, name),
      dkb(stored.dKStore ? 0 : size_t(nk) * 2, name),
      dvb(stored.dVStore ? 0 : size_t(nk) * 2, name);
  void *dq = stored.dQStore ? stored.dQStore : dqb.as<void>(),
       *dk = stored.dKStore ? stored.dKStore : dkb.as<void>(),
       *dv = stored.dVStore ? stored.dVStore : dvb.as<void>();
  Temp acc(key.deterministic ? 0 : size_t(nq) * sizeof(float), name);
  Temp ws(size_t(plan->workspace), name);
  float scaleValue = scale;
  std::vector<std::pair<int64_t, void *>> bindings = {
      {kQ, in.q},
      {kK, in.k},
      {kV, in.v},
      {kO, o},
      {kDO, g},
      {kStats, const_cast<float *>(statsPtr)},
      {kScale, &scaleValue},
      {kSoftmaxSum, softmaxSum.as<void>()},
      {kDQ, dq},
      {kDK, dk},
      {kDV, dv}};
  if (!key.deterministic)
    bindings.push_back({kDQAccum, acc.as<void>()});
  if (call.Hq == key.Hq && call.B == key.B) {
    execute(*st, *plan, bindings, ws.as<void>(), name);
  } else {
    // Groups of rows or heads (headGroupPlan): the pointers of each group's
    // slice of every tensor; the strides are the whole tensors' (the
    // group's Key). A row's offset is the same in either layout; the parts
    // of dK and dV exist only for groups of one row.
    const int64_t ratio = key.Hq / key.Hkv, groupHeads = call.Hq;
    const int64_t parts = groupHeads < ratio ? ratio / groupHeads : 1;
    const int64_t partElems = d.S * d.D;
    const int64_t qRow = d.Hq * d.T * d.D, kvRow = d.Hkv * d.S * d.D;
    Temp partsBuf(parts > 1 ? size_t(2 * parts * partElems) * 2 : 0, name);
    const auto headAt = [&](bool tokens, int64_t head, int64_t L) {
      return tokens ? head * d.D : head * L * d.D;
    };
    for (int64_t b = 0; b < d.B; b += call.B)
      for (int64_t h = 0; h < key.Hq; h += groupHeads) {
        const int64_t kv = h / ratio, part = (h % ratio) / groupHeads;
        void *dkHead = bf16At(dk, b * kvRow + kv * d.S * d.D);
        void *dvHead = bf16At(dv, b * kvRow + headAt(key.vTokens, kv, d.S));
        void *partK = bf16At(partsBuf.as<void>(), part * partElems);
        void *partV = bf16At(partsBuf.as<void>(), (parts + part) * partElems);
        execute(*st, *plan,
                {{kQ, bf16At(in.q, b * qRow + h * d.T * d.D)},
                 {kK, bf16At(in.k, b * kvRow + kv * d.S * d.D)},
                 {kV, bf16At(in.v, b * kvRow + headAt(key.vTokens, kv, d.S))},
                 {kO, bf16At(o, b * qRow + headAt(key.outTokens, h, d.T))},
                 {kDO, bf16At(g, b * qRow + headAt(key.outTokens, h, d.T))},
                 {kStats, const_cast<float *>(statsPtr) + (b * d.Hq + h) * d.T},
                 {kScale, &scaleValue},
                 {kSoftmaxSum, softmaxSum.as<void>()},
                 {kDQ, bf16At(dq, b * qRow + h * d.T * d.D)},
                 {kDK, parts > 1 ? partK : dkHead},
                 {kDV, parts > 1 ? partV : dvHead}},
                ws.as<void>(), name);
        if (parts > 1 && part == parts - 1) {
          const auto *partsPtr = partsBuf.as<__nv_bfloat16>();
          const unsigned blocks = std::min(gridFor(partElems), 4096u);
          sumHeadPartsKernel<<<blocks, kThreads, 0, currentStream()>>>(
              partsPtr, parts, partElems, d.D,
              static_cast<__nv_bfloat16 *>(dkHead), d.D);
          checkLaunch(name);
          sumHeadPartsKernel<<<blocks, kThreads, 0, currentStream()>>>(
              partsPtr + parts * partElems, parts, partElems, d.D,
              static_cast<__nv_bfloat16 *>(dvHead),
              key.vTokens ? key.Hkv * d.D : d.D);
          checkLaunch(name);
        }
      }
    partsBuf.release();
  }
  lock.unlock();
  convert(false,
          {{dq, stored.dQStore ? nullptr : dQ, nq},
           {dk, stored.dKStore ? nullptr : dK, nk},
           {dv, stored.dVStore ? nullptr : dV, nk}},
          name);
  ws.release();
  acc.release();
  dvb.release();
  dkb.release();
  dqb.release();
  softmaxSum.release();
  statsCopy.release();
  gb.release();
  ob.release();
  vb.release();
  kb.release();
  qb.release();
  setLastAttentionImpl(AttentionImpl::Cudnn);
  return true;
}

} // namespace detail

const char *cudnnAttentionUnavailable() {
  if (!detail::currentDeviceIsSm90())
    return "the current device is not compute capability 9.0";
  const detail::cudnn::Api &a = detail::cudnn::api();
  if (!a.failure.empty())
    return a.failure.c_str();
  int dev = 0;
  cudaGetDevice(&dev);
  static thread_local std::string why;
  if (!detail::deviceState(dev, why))
    return why.c_str();
  return nullptr;
}

#else // !RONDO_HAVE_CUDNN

bool cudnnAttentionForward(const FlashDims &d, const float *, const float *,
                           const float *, bool causal, float, float *, float *,
                           const char *, const StoredBf16Qkv &) {
  if (cudnnWanted() && currentDeviceIsSm90() && !shapeRefusal(d, causal))
    noteOnce("attention on Rondo's kernels, not cuDNN: built without "
             "cudnn_graph.h");
  return false;
}

bool cudnnAttentionBackward(const FlashDims &d, const float *, const float *,
                            const float *, const float *, const float *,
                            const float *, bool causal, float, float *, float *,
                            float *, const char *, const StoredBf16Qkv &) {
  FlashDims dims = d;
  dims.sinks = nullptr;
  if (cudnnWanted() && currentDeviceIsSm90() && !shapeRefusal(dims, causal))
    noteOnce("attention on Rondo's kernels, not cuDNN: built without "
             "cudnn_graph.h");
  return false;
}

} // namespace detail

const char *cudnnAttentionUnavailable() {
  return "built without cuDNN's header (cudnn_graph.h)";
}

#endif // RONDO_HAVE_CUDNN

} // namespace rondo::cuda
