//===- CudnnAttentionGraph.cpp - cuDNN's SDPA operation graphs ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The library (opened at first use), the composite forward and backward
// SDPA graphs and the engine choice of CudnnAttention.cu (whose header
// comment has the design). The graphs follow cudnn-frontend's composite
// nodes for cuDNN 9.x before 9.21 (scaled_dot_product_flash_attention.h,
// softmax.h, diagonal_band_mask.h): the fused engines recognise the graph's
// structure, so the order of the operations, their math precisions and the
// types of the virtual tensors are kept as the frontend builds them.
//
//===----------------------------------------------------------------------===//

#include "CudnnAttention.h"

#if RONDO_HAVE_CUDNN

#include <dlfcn.h>

#include <cmath>
#include <mutex>

namespace rondo::cuda::detail::cudnn {

namespace {

template <typename F> bool bind(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

} // namespace

//===----------------------------------------------------------------------===//
// The library, opened at first use
//===----------------------------------------------------------------------===//

const Api &api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    // The handle is never closed: plans and handles live for the process.
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *e = dlerror();
      a.failure =
          std::string("libcudnn.so.9 not loadable (") + (e ? e : "?") + ")";
      return;
    }
    bool ok = bind(lib, "cudnnGetVersion", a.getVersion) &&
              bind(lib, "cudnnCreate", a.create) &&
              bind(lib, "cudnnSetStream", a.setStream) &&
              bind(lib, "cudnnGetErrorString", a.errorString) &&
              bind(lib, "cudnnGetLastErrorString", a.lastError) &&
              bind(lib, "cudnnBackendCreateDescriptor", a.createDesc) &&
              bind(lib, "cudnnBackendDestroyDescriptor", a.destroyDesc) &&
              bind(lib, "cudnnBackendSetAttribute", a.setAttr) &&
              bind(lib, "cudnnBackendGetAttribute", a.getAttr) &&
              bind(lib, "cudnnBackendFinalize", a.finalize) &&
              bind(lib, "cudnnBackendExecute", a.execute);
    if (!ok) {
      a.failure = "libcudnn.so.9 lacks the backend graph API";
      return;
    }
    a.version = a.getVersion();
    // The composite flash graphs below are cuDNN 9's; 8.9 wanted other
    // workarounds (cudnn-frontend's version checks) that are not built here.
    if (a.version < 90000)
      a.failure = "cuDNN " + std::to_string(a.version) + " is older than 9.0";
  });
  return a;
}

std::string statusText(cudnnStatus_t s) {
  std::string text = api().errorString(s);
  char last[512] = {0};
  api().lastError(last, sizeof(last));
  if (last[0])
    text += std::string(" (") + last + ")";
  return text;
}

void must(cudnnStatus_t s, const char *what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw Refused{std::string(what) + ": " + statusText(s)};
}

//===----------------------------------------------------------------------===//
// Graph building
//===----------------------------------------------------------------------===//

namespace {

struct Dims4 {
  int64_t d[4];
};

Dims4 contiguous(const Dims4 &dims) {
  Dims4 s;
  s.d[3] = 1;
  for (int i = 2; i >= 0; --i)
    s.d[i] = s.d[i + 1] * dims.d[i + 1];
  return s;
}

/// The strides of a [B, H, L, D] operand, a slice of H of the `allHeads`
/// heads of a tensor stored heads-major ([B, allHeads, L, D]) or token-major
/// ([B, L, allHeads, D] in memory: the layout the projections around
/// attention write and read, Key::vTokens / outTokens).
Dims4 headStrides(const Dims4 &dims, bool tokens, int64_t allHeads) {
  const int64_t L = dims.d[2], D = dims.d[3];
  if (!tokens)
    return {{allHeads * L * D, L * D, D, 1}};
  return {{L * allHeads * D, D, allHeads * D, 1}};
}

/// The strides of the same operand viewed as its transpose [B, H, D, L].
Dims4 transposedHeadStrides(const Dims4 &dims, bool tokens, int64_t allHeads) {
  Dims4 s = headStrides(dims, tokens, allHeads);
  return {{s.d[0], s.d[1], s.d[3], s.d[2]}};
}

/// One graph under construction: owns every descriptor, hands out virtual
/// uids and keeps the by-value constants (their host addresses go into the
/// variant pack at each execution).
struct Builder {
  Plan &plan; ///< owns the descriptors and the constants
  cudnnHandle_t handle;
  std::vector<cudnnBackendDescriptor_t> ops;
  int64_t nextVirtual = kFirstVirtual;
  int64_t nextConstant = kFirstConstant;

  const Desc &own(cudnnBackendDescriptorType_t type) {
    plan.owned.push_back(std::make_unique<Desc>(type));
    return *plan.owned.back();
  }

  cudnnBackendDescriptor_t tensor(int64_t uid, const Dims4 &dims,
                                  const Dims4 &strides, cudnnDataType_t type,
                                  bool isVirtual, bool byValue = false) {
    const Desc &t = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    setAttr(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type,
            "tensor type");
    setAttr(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.d,
            "tensor dims");
    setAttr(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.d,
            "tensor strides");
    setAttr(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid,
            "tensor uid");
    setAttr(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
            &alignment, "tensor alignment");
    setAttr(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual,
            "tensor virtual");
    if (byValue)
      setAttr(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byValue,
              "tensor by value");
    must(api().finalize(t.get()), "finalize tensor");
    return t.get();
  }

  /// A virtual tensor of `dims` (contiguous unless strides are given).
  cudnnBackendDescriptor_t virt(const Dims4 &dims, cudnnDataType_t type) {
    return tensor(nextVirtual++, dims, contiguous(dims), type, true);
  }
  cudnnBackendDescriptor_t virt(const Dims4 &dims, const Dims4 &strides,
                                cudnnDataType_t type) {
    return tensor(nextVirtual++, dims, strides, type, true);
  }

  /// A by-value scalar tensor (fp32 or int32).
  cudnnBackendDescriptor_t scalarF(float value) {
    Constant c;
    c.uid = nextConstant++;
    c.f = value;
    plan.constants.push_back(c);
    return tensor(c.uid, {{1, 1, 1, 1}}, {{1, 1, 1, 1}}, CUDNN_DATA_FLOAT,
                  false, true);
  }
  cudnnBackendDescriptor_t scalarI(int32_t value) {
    Constant c;
    c.uid = nextConstant++;
    c.i = value;
    plan.constants.push_back(c);
    return tensor(c.uid, {{1, 1, 1, 1}}, {{1, 1, 1, 1}}, CUDNN_DATA_INT32,
                  false, true);
  }

  /// y = mode(x, b, t) with math precision `prec` (and an axis for
  /// GEN_INDEX and the index arithmetic, as cudnn-frontend sets it).
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y) {
    const Desc &pw = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    setAttr(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode,
            "pointwise mode");
    setAttr(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec,
            "pointwise precision");
    if (axis >= 0)
      setAttr(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis,
              "pointwise axis");
    must(api().finalize(pw.get()), "finalize pointwise");
    const Desc &op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get(),
            "pointwise op");
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (b)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
    if (t)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    must(api().finalize(op.get()), "finalize pointwise op");
    ops.push_back(op.get());
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t c) {
    const Desc &mm = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    setAttr(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp,
            "matmul type");
    must(api().finalize(mm.get()), "finalize matmul");
    const Desc &op = own(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get(), "matmul desc");
    must(api().finalize(op.get()), "finalize matmul op");
    ops.push_back(op.get());
  }

  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    const Desc &red = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    setAttr(red, CUDNN_ATTR_REDUCTION_OPERATOR,
            CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    setAttr(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp,
            "reduction type");
    must(api().finalize(red.get()), "finalize reduction");
    const Desc &op = own(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, red.get(),
            "reduction desc");
    must(api().finalize(op.get()), "finalize reduction op");
    ops.push_back(op.get());
  }

  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    const Desc &op = own(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
    must(api().finalize(op.get()), "finalize reshape");
    ops.push_back(op.get());
  }

  /// A new virtual fp32 tensor y = mode(x, b) of x's shape.
  cudnnBackendDescriptor_t pw(cudnnPointwiseMode_t mode, const Dims4 &dims,
                              cudnnBackendDescriptor_t x,
                              cudnnBackendDescriptor_t b = nullptr) {
    cudnnBackendDescriptor_t y = virt(dims, CUDNN_DATA_FLOAT);
    pointwise(mode, CUDNN_DATA_FLOAT, -1, x, b, nullptr, y);
    return y;
  }
};

/// The masks of the graph on scores `s` [B, Hq, T, S] (fp32 virtual), in
/// cudnn-frontend's composite diagonal band mask order: the right bound
/// (causal, bottom-right aligned when S != T), then the left bound (the
/// window); each masked score becomes -inf.
cudnnBackendDescriptor_t applyMasks(Builder &g, const Key &k, const Dims4 &sd,
                                    cudnnBackendDescriptor_t s) {
  if (k.causal) {
    cudnnBackendDescriptor_t row = g.virt(sd, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s, nullptr,
                nullptr, row);
    cudnnBackendDescriptor_t col = g.virt(sd, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s, nullptr,
                nullptr, col);
    if (k.S != k.T) { // row + S - T, as two integer steps
      cudnnBackendDescriptor_t plus = g.virt(sd, CUDNN_DATA_INT32);
      g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 3, row,
                  g.scalarI(int32_t(k.S)), nullptr, plus);
      row = g.virt(sd, CUDNN_DATA_INT32);
      g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, 3, plus,
                  g.scalarI(int32_t(k.T)), nullptr, row);
    }
    cudnnBackendDescriptor_t keep = g.virt(sd, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col,
                nullptr, keep);
    cudnnBackendDescriptor_t masked = g.virt(sd, CUDNN_DATA_FLOAT);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s,
                g.scalarF(-INFINITY), keep, masked);
    s = masked;
  }
  if (k.window > 0) {
    cudnnBackendDescriptor_t row = g.virt(sd, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s, nullptr,
                nullptr, row);
    cudnnBackendDescriptor_t col = g.virt(sd, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s, nullptr,
                nullptr, col);
    // Rondo's band: key j is seen by row i when j > i + (S - T) - window.
    cudnnBackendDescriptor_t shifted = g.virt(sd, CUDNN_DATA_FLOAT);
    g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, 3, col,
                g.scalarF(float(k.window - (k.S - k.T))), nullptr, shifted);
    cudnnBackendDescriptor_t keep = g.virt(sd, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, -1, shifted, row,
                nullptr, keep);
    cudnnBackendDescriptor_t masked = g.virt(sd, CUDNN_DATA_FLOAT);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s,
                g.scalarF(-INFINITY), keep, masked);
    s = masked;
  }
  return s;
}

/// Q, K^T (K read through swapped strides), stats and scale: the tensors
/// both graphs start from.
struct Inputs {
  cudnnBackendDescriptor_t q, kT, stats, scale;
};

Inputs commonInputs(Builder &g, const Key &k) {
  Inputs in;
  const Dims4 qd{{k.B, k.Hq, k.T, k.D}}, kd{{k.B, k.Hkv, k.S, k.D}};
  in.q = g.tensor(kQ, qd, headStrides(qd, false, k.qHeadsAll),
                  CUDNN_DATA_BFLOAT16, false);
  in.kT = g.tensor(kK, {{k.B, k.Hkv, k.D, k.S}},
                   transposedHeadStrides(kd, false, k.kvHeadsAll),
                   CUDNN_DATA_BFLOAT16, false);
  in.stats =
      g.tensor(kStats, {{k.B, k.Hq, k.T, 1}}, {{k.qHeadsAll * k.T, k.T, 1, 1}},
               CUDNN_DATA_FLOAT, false);
  in.scale = g.tensor(kScale, {{1, 1, 1, 1}}, {{1, 1, 1, 1}}, CUDNN_DATA_FLOAT,
                      false, true);
  return in;
}

void buildForward(Builder &g, const Key &k) {
  Inputs in = commonInputs(g, k);
  const Dims4 vd{{k.B, k.Hkv, k.S, k.D}}, qd{{k.B, k.Hq, k.T, k.D}};
  cudnnBackendDescriptor_t v =
      g.tensor(kV, vd, headStrides(vd, k.vTokens, k.kvHeadsAll),
               CUDNN_DATA_BFLOAT16, false);
  cudnnBackendDescriptor_t o =
      g.tensor(kO, qd, headStrides(qd, k.outTokens, k.qHeadsAll),
               CUDNN_DATA_BFLOAT16, false);
  const Dims4 sd{{k.B, k.Hq, k.T, k.S}};
  const Dims4 rd{{k.B, k.Hq, k.T, 1}}, rs{{k.Hq * k.T, k.T, 1, 1}};
  cudnnBackendDescriptor_t s = g.virt(sd, CUDNN_DATA_FLOAT);
  g.matmul(in.q, in.kT, s);
  s = g.pw(CUDNN_POINTWISE_MUL, sd, s, in.scale);
  s = applyMasks(g, k, sd, s);
  // The softmax with statistics.
  cudnnBackendDescriptor_t mx = g.virt(rd, rs, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  cudnnBackendDescriptor_t e =
      g.pw(CUDNN_POINTWISE_EXP, sd, g.pw(CUDNN_POINTWISE_SUB, sd, s, mx));
  cudnnBackendDescriptor_t sum = g.virt(rd, rs, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  cudnnBackendDescriptor_t logSum = g.virt(rd, rs, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, -1, sum, nullptr, nullptr,
              logSum);
  g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, -1, mx, logSum, nullptr,
              in.stats);
  // P in bf16: the second product's A operand is of the I/O type.
  cudnnBackendDescriptor_t p = g.virt(sd, CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, -1, e, sum, nullptr, p);
  g.matmul(p, v, o);
}

/// dK or dV: the product per query head (`a` [B, Hq, S, T] times `b` [B, Hq,
/// T, D]) and, with GQA, its sum over each kv head's group.
void perKvHead(Builder &g, const Key &k, cudnnBackendDescriptor_t a,
               cudnnBackendDescriptor_t b, int64_t uid) {
  const Dims4 kd{{k.B, k.Hkv, k.S, k.D}};
  cudnnBackendDescriptor_t out =
      g.tensor(uid, kd, headStrides(kd, uid == kDV && k.vTokens, k.kvOutHeads),
               CUDNN_DATA_BFLOAT16, false);
  if (k.Hq == k.Hkv) {
    g.matmul(a, b, out);
    return;
  }
  cudnnBackendDescriptor_t full =
      g.virt({{k.B, k.Hq, k.S, k.D}}, CUDNN_DATA_BFLOAT16);
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

void buildBackward(Builder &g, const Key &k) {
  Inputs in = commonInputs(g, k);
  const Dims4 qd{{k.B, k.Hq, k.T, k.D}}, vd{{k.B, k.Hkv, k.S, k.D}};
  cudnnBackendDescriptor_t vT =
      g.tensor(kV, {{k.B, k.Hkv, k.D, k.S}},
               transposedHeadStrides(vd, k.vTokens, k.kvHeadsAll),
               CUDNN_DATA_BFLOAT16, false);
  cudnnBackendDescriptor_t o =
      g.tensor(kO, qd, headStrides(qd, k.outTokens, k.qHeadsAll),
               CUDNN_DATA_BFLOAT16, false);
  cudnnBackendDescriptor_t dO =
      g.tensor(kDO, qd, headStrides(qd, k.outTokens, k.qHeadsAll),
               CUDNN_DATA_BFLOAT16, false);
  const Dims4 sd{{k.B, k.Hq, k.T, k.S}};
  const Dims4 rd{{k.B, k.Hq, k.T, 1}}, rs{{k.Hq * k.T, k.T, 1, 1}};
  // softmax_sum = rowsum(dO * O) (the strides of the product as
  // cudnn-frontend declares them; the tensor is virtual).
  cudnnBackendDescriptor_t prod = g.virt(
      qd, {{k.Hq * k.T * k.D, k.T * k.D, k.Hq * k.D, 1}}, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, dO, o, nullptr, prod);
  cudnnBackendDescriptor_t rowSum = g.virt(rd, rs, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, rowSum);
  cudnnBackendDescriptor_t softmaxSum =
      g.tensor(kSoftmaxSum, rd, rs, CUDNN_DATA_FLOAT, false);
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, rowSum,
              g.scalarF(1.0f), nullptr, softmaxSum);
  // P = exp(S * scale - stats) under the mask.
  cudnnBackendDescriptor_t s = g.virt(sd, CUDNN_DATA_FLOAT);
  g.matmul(in.q, in.kT, s);
  s = g.pw(CUDNN_POINTWISE_MUL, sd, s, in.scale);
  s = g.pw(CUDNN_POINTWISE_SUB, sd, s, in.stats);
  s = applyMasks(g, k, sd, s);
  cudnnBackendDescriptor_t p = g.pw(CUDNN_POINTWISE_EXP, sd, s);
  // P^T and dS^T: [B, Hq, S, T] views of the [T, S] scores (strides swapped).
  const Dims4 td{{k.B, k.Hq, k.S, k.T}};
  const Dims4 ts{{k.Hq * k.T * k.S, k.T * k.S, 1, k.S}};
  cudnnBackendDescriptor_t pT = g.virt(td, ts, CUDNN_DATA_BFLOAT16);
  g.reshape(p, pT);
  perKvHead(g, k, pT, dO, kDV);
  // dS = P (dP - softmax_sum) * scale.
  cudnnBackendDescriptor_t dP = g.virt(sd, CUDNN_DATA_FLOAT);
  g.matmul(dO, vT, dP);
  cudnnBackendDescriptor_t dS =
      g.pw(CUDNN_POINTWISE_MUL, sd,
           g.pw(CUDNN_POINTWISE_MUL, sd,
                g.pw(CUDNN_POINTWISE_SUB, sd, dP, softmaxSum), p),
           in.scale);
  cudnnBackendDescriptor_t dST = g.virt(td, ts, CUDNN_DATA_BFLOAT16);
  g.reshape(dS, dST);
  perKvHead(g, k, dST, in.q, kDK);
  // dQ = dS K, K as a reshape of K^T back to [B, Hkv, S, D].
  cudnnBackendDescriptor_t kk =
      g.virt({{k.B, k.Hkv, k.S, k.D}}, contiguous({{k.B, k.Hkv, k.S, k.D}}),
             CUDNN_DATA_FLOAT);
  g.reshape(in.kT, kk);
  cudnnBackendDescriptor_t dQ = g.tensor(
      kDQ, qd, headStrides(qd, false, k.qHeadsAll), CUDNN_DATA_BFLOAT16, false);
  if (k.deterministic) {
    g.matmul(dS, kk, dQ);
  } else {
    cudnnBackendDescriptor_t acc =
        g.tensor(kDQAccum, qd, contiguous(qd), CUDNN_DATA_FLOAT, false);
    g.matmul(dS, kk, acc);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, -1, acc, nullptr,
                nullptr, dQ);
  }
}

} // namespace

/// Builds the graph, asks the heuristics (mode A) for engine configurations
/// and keeps the first that finalizes and is not marked nondeterministic.
void buildPlan(Plan &p, cudnnHandle_t handle, const Key &k) {
  Builder g{p, handle, {}};
  if (k.backward)
    buildBackward(g, k);
  else
    buildForward(g, k);
  const Desc &opGraph = g.own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  setAttr(opGraph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
          &g.handle, "graph handle");
  setAttr(opGraph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
          int64_t(g.ops.size()), g.ops.data(), "graph ops");
  must(api().finalize(opGraph.get()), "finalize operation graph");
  const Desc &heur = g.own(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendDescriptor_t og = opGraph.get();
  setDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og, "heuristics graph");
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  setAttr(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
          "heuristics mode");
  must(api().finalize(heur.get()), "finalize heuristics");
  int64_t count = 0;
  must(api().getAttr(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
       "heuristics count");
  if (count == 0)
    throw Refused{"no engine for the graph"};
  std::vector<cudnnBackendDescriptor_t> cfgs;
  for (int64_t i = 0; i < count; ++i)
    cfgs.push_back(g.own(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  must(api().getAttr(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, cfgs.data()),
       "heuristics results");
  std::string why;
  for (int64_t i = 0; i < count; ++i) {
    const Desc &engine = g.own(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    int64_t got = 0;
    if (api().getAttr(cfgs[size_t(i)], CUDNN_ATTR_ENGINECFG_ENGINE,
                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                      &e) != CUDNN_STATUS_SUCCESS)
      continue;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t numNotes = 0;
    bool nondeterministic = false;
    if (api().getAttr(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                      CUDNN_TYPE_NUMERICAL_NOTE,
                      CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &numNotes,
                      notes) == CUDNN_STATUS_SUCCESS)
      for (int64_t n = 0; n < numNotes; ++n)
        nondeterministic |= notes[n] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    int64_t index = -1;
    api().getAttr(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                  &index);
    if (nondeterministic && k.deterministic) {
      why += " engine " + std::to_string(index) + ": nondeterministic;";
      continue;
    }
    const Desc &plan = g.own(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    setAttr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
            &g.handle, "plan handle");
    setDesc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[size_t(i)],
            "plan config");
    cudnnStatus_t s = api().finalize(plan.get());
    if (s != CUDNN_STATUS_SUCCESS) {
      why += " engine " + std::to_string(index) + ": " + statusText(s) + ";";
      continue;
    }
    must(api().getAttr(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                       CUDNN_TYPE_INT64, 1, &got, &p.workspace),
         "plan workspace");
    p.plan = plan.get();
    p.engine = index;
    return;
  }
  throw Refused{"no engine configuration finalized:" + why};
}

} // namespace rondo::cuda::detail::cudnn

#endif // RONDO_HAVE_CUDNN
