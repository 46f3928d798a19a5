//===- CostModel.cpp - Op times and the layer table -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The IR is specialised to the whole step's batch; a microbatch is 1/M of
// it. Everything that scales with tokens (FLOPs, activation bytes) is
// divided by M; parameter reads are not, which is what makes tiny
// microbatches memory-bound.
//
//===----------------------------------------------------------------------===//

#include "CostModel/CostModel.h"

#include "Dialect/Pipe/IR/PipeOps.h"
#include "Dialect/TG/IR/TGOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;
using namespace rondo;
using namespace rondo::cost;

double rondo::cost::deviceBytes(Type type, bool bf16) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t)
    return 0;
  Type e = t.getElementType();
  double width = e.getIntOrFloatBitWidth() / 8.0;
  if (bf16 && isa<FloatType>(e))
    width = std::min(width, 2.0);
  return width * static_cast<double>(t.getNumElements());
}

std::string rondo::cost::opTimingKey(Operation *op) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << op->getName().getStringRef();
  SmallVector<NamedAttribute> attrs;
  for (NamedAttribute attr : op->getAttrs())
    if (attr.getName() != pipe::kLayerAttr)
      attrs.push_back(attr);
  if (!attrs.empty())
    os << " " << DictionaryAttr::get(op->getContext(), attrs);
  os << " (";
  llvm::interleaveComma(op->getOperandTypes(), os);
  os << ")";
  return key;
}

/// Whether a forward value the backward keeps is held in bf16 by a bf16
/// plan's kernels: kern-bf16-storage produces a value that only bf16
/// readers read (through reshapes: the operands of matrix products, and
/// attention's q, k and v) with its kernel's bf16 twin, where the kernel has
/// one (KernelList.def's `<kernel>ToBf16`: the norm's, the element-wise
/// binaries', the gated activation's and its gradient's, the unary
/// gradients', transposes', the products' own, and the fused rotary's, with
/// or without a QK norm). W1's normed inputs of the projections, the attention
/// output on its way to the output projection, the gate and up products, the
/// gated activation, and the queries, keys and values are such values: fp32 for
/// them had put 7.5 GB too much into its 74 GB prediction.
///
/// Attention without sinks, whose kernels read q, k and v in bf16 (the sink
/// kernels read fp32).
static bool readsQkvInBf16(Operation *op) {
  if (auto attention = dyn_cast<tg::AttentionOp>(op))
    return !attention.getSinks();
  if (auto grad = dyn_cast<tg::AttentionGradOp>(op))
    return !grad.getSinks();
  return false;
}

/// The value `v` reshapes (itself when no tg.reshape produces it).
static Value throughReshapes(Value v) {
  while (auto reshape = v.getDefiningOp<tg::ReshapeOp>())
    v = reshape.getX();
  return v;
}

/// A transpose between [B, T, H, D] and [B, H, T, D] (the heads axis next
/// to the batch, or back), or null.
static tg::TransposeOp headTranspose(Operation *op) {
  auto transpose = dyn_cast_or_null<tg::TransposeOp>(op);
  return transpose && transpose.getPerm() == ArrayRef<int64_t>{0, 2, 1, 3}
             ? transpose
             : tg::TransposeOp();
}

/// The gated activation and its gradient, whose bf16 twins
/// (gatedActBf16, gatedActBackwardBf16) read gate and up in bf16 where all
/// their operands are products (kern-bf16-storage's fixed point, in its
/// common case: the MLP's gate and up projections). Counted in fp32 they had
/// put W1's prediction at 1.13x what it allocated, Llama-3.2-1B's at 1.24x.
static bool readsGateAndUpInBf16(Operation *reader, unsigned operand) {
  if (!isa<tg::GatedActOp, tg::GatedActGradOp>(reader) || operand >= 2)
    return false;
  auto isProduct = [](Value v) {
    return isa_and_nonnull<tg::MatmulOp>(throughReshapes(v).getDefiningOp());
  };
  // The gradient's twin reads dOut in bf16 too (the down projection's
  // input gradient): it takes the twin only where that is a product as well.
  return isProduct(reader->getOperand(0)) && isProduct(reader->getOperand(1)) &&
         (!isa<tg::GatedActGradOp>(reader) || isProduct(reader->getOperand(2)));
}

static bool savedInBf16(Value v, const CostOptions &options) {
  if (!options.bf16)
    return false;
  Value stored = throughReshapes(v);
  Operation *producer = stored.getDefiningOp();
  // Attention's output, when the transpose in front of the output
  // projection and the backward are its readers (attentionBf16ToBf16).
  if (auto attention = dyn_cast_or_null<tg::AttentionOp>(producer);
      attention && !attention.getSinks() && stored == attention->getResult(0))
    return llvm::all_of(stored.getUses(), [](OpOperand &use) {
      return isa<tg::TransposeOp>(use.getOwner()) ||
             (isa<tg::AttentionGradOp>(use.getOwner()) &&
              use.getOperandNumber() == 3);
    });
  // A rotary has a twin when kern-fuse-norm-rotary makes it one kernel
  // with the transpose in front of it (transposeRotary) and the head norm
  // in front of that where there is one (rmsNormRotary: Qwen3's, OLMo-2's).
  auto fusedRotary = [](tg::RotaryOp rotary) {
    return static_cast<bool>(headTranspose(rotary.getX().getDefiningOp()));
  };
  if (!producer ||
      !(isa<tg::RmsNormOp, tg::BinaryOp, tg::GatedActOp, tg::GatedActGradOp,
            tg::UnaryGradOp, tg::TransposeOp, tg::MatmulOp>(producer) ||
        (isa<tg::RotaryOp>(producer) &&
         fusedRotary(cast<tg::RotaryOp>(producer)))))
    return false;
  SmallVector<Value> views{stored};
  while (!views.empty())
    for (OpOperand &use : views.pop_back_val().getUses()) {
      Operation *reader = use.getOwner();
      if (auto reshape = dyn_cast<tg::ReshapeOp>(reader))
        views.push_back(reshape.getResult());
      else if (!isa<tg::MatmulOp>(reader) &&
               !(readsQkvInBf16(reader) && use.getOperandNumber() < 3) &&
               !readsGateAndUpInBf16(reader, use.getOperandNumber()))
        return false;
    }
  return true;
}

static bool isParameter(Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg)
    return false;
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  return func && func.getArgAttr(arg.getArgNumber(), tg::kParamAttr);
}

/// What a bf16 plan keeps of parameter `p` on a worker that holds it: its
/// fp32 master weights, and a bf16 copy when products read it in bf16
/// (convert-pipe-to-exec's `param_bf16` arguments); the copy alone for a
/// frozen weight held in bf16 (`frozenBf16`).
static double residentBytesOf(func::FuncOp func, BlockArgument p,
                              bool frozenBf16) {
  double bytes = deviceBytes(p.getType(), /*bf16=*/false);
  if (frozenBf16 && tg::isFrozenProductWeight(func, p.getArgNumber()))
    return 0.5 * bytes;
  return tg::readByBf16Products(p) ? 1.5 * bytes : bytes;
}

/// Ops whose FLOPs run on tensor cores (GEMM-shaped work; the grouped
/// expert products of a mixture of experts are one GEMM per expert).
static bool isMatmulLike(Operation *op) {
  return isa<tg::MatmulOp, tg::AttentionOp, tg::AttentionGradOp,
             tg::LinearCrossEntropyOp, tg::LinearCrossEntropyGradOp,
             tg::ExpertMatmulOp, tg::ExpertMatmulWGradOp>(op);
}

/// The workspace of a cuDNN deterministic attention backward call over
/// `rows` rows of `heads` query heads: dP in bf16 and dQ accumulated in
/// fp32, 2 rows heads T S + 4 rows heads T D bytes (cuDNN 9.19 asked for
/// 4,224 MiB at 4 rows x 32 heads x T = S = 4096, D 64: 4,096 + 128; priced
/// without the second term, that plan was taken for cuDNN's and ran on
/// Rondo's kernels, 2.3x slower).
static double cudnnCallWorkspaceBytes(Operation *op, double rows,
                                      double heads) {
  auto q = cast<RankedTensorType>(op->getOperand(0).getType());
  auto k = cast<RankedTensorType>(op->getOperand(1).getType());
  return rows * heads * static_cast<double>(q.getDimSize(2)) *
         (2 * static_cast<double>(k.getDimSize(2)) +
          4 * static_cast<double>(q.getDimSize(3)));
}

/// That workspace for one microbatch over all heads.
static double cudnnWorkspaceBytes(Operation *op, const CostOptions &options) {
  auto q = cast<RankedTensorType>(op->getOperand(0).getType());
  double rows = std::max(1.0, static_cast<double>(q.getDimSize(0)) /
                                  static_cast<double>(options.microbatches));
  return cudnnCallWorkspaceBytes(op, rows,
                                 static_cast<double>(q.getDimSize(1)));
}

/// The rows and query heads of the calls a cuDNN backward whose microbatch
/// is over the workspace limit runs in (the runtime's headGroupPlan in
/// runtime/kernels/cuda/CudnnAttention.cu): rows of all heads where some
/// rows fit (the most rows dividing the microbatch's), else one row with
/// the most heads g, a multiple or a divisor of the query heads a kv head
/// serves, whose workspace (cudnnWorkspaceBytes of those rows and heads)
/// fits. {0, 0} where none fits (a single head of one row at 64K keys: 8.6
/// GB), and the flash kernels run.
struct CudnnGroup {
  int64_t rows = 0, heads = 0;
};
static CudnnGroup cudnnGroup(Operation *op, const DeviceSpec &spec,
                             const CostOptions &options) {
  auto q = cast<RankedTensorType>(op->getOperand(0).getType());
  auto k = cast<RankedTensorType>(op->getOperand(1).getType());
  int64_t heads = q.getDimSize(1), kvHeads = k.getDimSize(1),
          queries = q.getDimSize(2);
  int64_t microbatchRows = std::max<int64_t>(
      1, q.getDimSize(0) / std::max<int64_t>(1, options.microbatches));
  if (kvHeads <= 0 || heads % kvHeads != 0 || queries % 4 != 0)
    return {};
  auto fits = [&](int64_t rows, int64_t g) {
    return cudnnCallWorkspaceBytes(op, static_cast<double>(rows),
                                   static_cast<double>(g)) <=
           spec.cudnnAttentionWorkspaceBytes;
  };
  for (int64_t rows = microbatchRows - 1; rows >= 1; --rows)
    if (microbatchRows % rows == 0 && fits(rows, heads))
      return {rows, heads};
  int64_t ratio = heads / kvHeads;
  for (int64_t g = heads - 1; g >= 1; --g)
    if (heads % g == 0 && (g >= ratio ? g % ratio : ratio % g) == 0 &&
        fits(1, g))
      return {1, g};
  return {};
}

/// Why a GPU runs this attention on Rondo's flash kernels rather than
/// cuDNN's fused graph, or "" when cuDNN takes it: the runtime's rules
/// (shapeRefusal, workspaceLimit and headGroupPlan in
/// runtime/kernels/cuda/CudnnAttention.cu).
static std::string cudnnRefusal(Operation *op, const DeviceSpec &spec,
                                const CostOptions &options) {
  if (!spec.isGpu || spec.cudnnAttentionEfficiency <= 0)
    return "the device has no cuDNN attention";
  if (!options.bf16)
    return "an fp32 plan";
  auto q = cast<RankedTensorType>(op->getOperand(0).getType());
  auto k = cast<RankedTensorType>(op->getOperand(1).getType());
  int64_t headDim = q.getDimSize(3), queries = q.getDimSize(2),
          keys = k.getDimSize(2);
  if (headDim != 64 && headDim != 128)
    return llvm::formatv("head dimension {0}, where cuDNN's graph takes 64 "
                         "and 128",
                         headDim);
  if (op->hasAttr("causal") && keys < queries)
    return "causal with fewer keys than queries";
  if (auto forward = dyn_cast<tg::AttentionOp>(op))
    return forward.getSinks() ? "attention sinks" : "";
  double workspace = cudnnWorkspaceBytes(op, options);
  if (workspace > spec.cudnnAttentionWorkspaceBytes &&
      cudnnGroup(op, spec, options).rows == 0)
    return llvm::formatv("cuDNN's deterministic workspace, {0:f2} GB a "
                         "microbatch, exceeds the runtime's {1:f2} GB "
                         "(RONDO_CUDNN_WORKSPACE_MB) even for one query "
                         "head of one row",
                         workspace / 1e9,
                         spec.cudnnAttentionWorkspaceBytes / 1e9);
  return "";
}

static bool onCudnn(Operation *op, const DeviceSpec &spec,
                    const CostOptions &options) {
  return cudnnRefusal(op, spec, options).empty();
}

/// The workspace a cuDNN attention backward holds while it runs: the
/// microbatch's, or where that is over the limit its group's (cudnnGroup's
/// rows and heads; the parts of dK and dV summed after the groups are S D
/// bf16 each, negligible beside it).
static double cudnnWorkspaceInUse(Operation *op, const DeviceSpec &spec,
                                  const CostOptions &options) {
  double whole = cudnnWorkspaceBytes(op, options);
  if (whole <= spec.cudnnAttentionWorkspaceBytes)
    return whole;
  CudnnGroup group = cudnnGroup(op, spec, options);
  return cudnnCallWorkspaceBytes(op, static_cast<double>(group.rows),
                                 static_cast<double>(group.heads));
}

std::optional<std::string>
rondo::cost::attentionImplementation(Operation *op, const DeviceSpec &spec,
                                     const CostOptions &options) {
  if (!spec.isGpu || !isa<tg::AttentionOp, tg::AttentionGradOp>(op))
    return std::nullopt;
  std::string why = cudnnRefusal(op, spec, options);
  if (!why.empty())
    return "Rondo's flash kernels: " + why;
  double workspace = cudnnWorkspaceBytes(op, options);
  if (isa<tg::AttentionGradOp>(op) &&
      workspace > spec.cudnnAttentionWorkspaceBytes) {
    CudnnGroup group = cudnnGroup(op, spec, options);
    auto q = cast<RankedTensorType>(op->getOperand(0).getType());
    std::string calls =
        group.heads == q.getDimSize(1)
            ? llvm::formatv("{0} row{1} of all heads", group.rows,
                            group.rows == 1 ? "" : "s")
                  .str()
            : llvm::formatv("{0} query head{1} of one row", group.heads,
                            group.heads == 1 ? "" : "s")
                  .str();
    return std::string(llvm::formatv(
        "cuDNN's fused graph, in groups of {0} (its deterministic workspace, "
        "{1:f2} GB a microbatch, exceeds the runtime's {2:f2} GB, "
        "RONDO_CUDNN_WORKSPACE_MB)",
        calls, workspace / 1e9, spec.cudnnAttentionWorkspaceBytes / 1e9));
  }
  return std::string("cuDNN's fused graph");
}

/// The fused attention's efficiency at the keys its rows see (the spec's
/// attentionTokensForHalfEfficiency curve, anchored at attentionFitTokens).
static double attentionEfficiency(Operation *op, const DeviceSpec &spec,
                                  const CostOptions &options) {
  bool backward = isa<tg::AttentionGradOp>(op);
  double efficiency = backward && spec.attentionBackwardEfficiency > 0
                          ? spec.attentionBackwardEfficiency
                          : spec.attentionEfficiency;
  double h = spec.attentionTokensForHalfEfficiency;
  if (onCudnn(op, spec, options)) {
    efficiency = backward && spec.cudnnAttentionBackwardEfficiency > 0
                     ? spec.cudnnAttentionBackwardEfficiency
                     : spec.cudnnAttentionEfficiency;
    h = backward && spec.cudnnAttentionBackwardTokensForHalfEfficiency > 0
            ? spec.cudnnAttentionBackwardTokensForHalfEfficiency
            : spec.cudnnAttentionTokensForHalfEfficiency;
  }
  if (h <= 0)
    return efficiency;
  Value k = op->getOperand(1); // q, k, v, ... for both ops
  auto type = cast<RankedTensorType>(k.getType());
  double keys = static_cast<double>(type.getDimSize(type.getRank() - 2));
  if (auto window = op->getAttrOfType<IntegerAttr>("window"))
    if (window.getInt() > 0)
      keys = std::min(keys, static_cast<double>(window.getInt()));
  auto curve = [h](double s) { return s / (s + h); };
  return std::min(efficiency * curve(keys) / curve(spec.attentionFitTokens),
                  spec.matmulEfficiency);
}

/// Whether the GPU runs this attention on a flash kernel: bf16 plans with a
/// head dimension the kernels are built for (flashAttentionSupports in
/// runtime/kernels/cuda/FlashAttention.cu); the rest take the fp32 kernel.
static bool hasFlashAttention(Operation *op, const DeviceSpec &spec,
                              const CostOptions &options) {
  if (!spec.isGpu || spec.attentionFallbackFlops <= 0)
    return true;
  auto q = cast<RankedTensorType>(op->getOperand(0).getType());
  int64_t headDim = q.getDimSize(q.getRank() - 1);
  return options.bf16 && (headDim == 64 || headDim == 128 || headDim == 256);
}

static double tokensPerStep(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), tg::kInputAttr))
      if (auto t = dyn_cast<RankedTensorType>(arg.getType()))
        return static_cast<double>(t.getNumElements());
  return 1;
}

/// A head transpose ([B, T, H, D] <-> [B, H, T, D]) that a bf16 GPU plan's
/// kernel layer folds into its neighbour, so that it moves no bytes of its
/// own: the query and key heads' into their rotary (kern-fuse-norm-rotary:
/// rmsNormRotary, transposeRotary and their gradients), v's, the output's,
/// dO's and dV's into attention without sinks (kern-fuse-attention-layout;
/// attention with sinks keeps fp32 operands and its transposes).
static bool isFusedHeadTranspose(Operation *op) {
  tg::TransposeOp transpose = headTranspose(op);
  if (!transpose)
    return false;
  auto foldsInto = [](Operation *neighbour) {
    if (!neighbour)
      return false;
    if (isa<tg::RotaryOp, tg::RotaryGradOp>(neighbour))
      return true;
    if (auto attention = dyn_cast<tg::AttentionOp>(neighbour))
      return !attention.getSinks();
    if (auto grad = dyn_cast<tg::AttentionGradOp>(neighbour))
      return !grad.getSinks();
    return false;
  };
  Value result = transpose.getResult();
  return foldsInto(transpose.getX().getDefiningOp()) ||
         (!result.use_empty() && llvm::all_of(result.getUsers(), foldsInto));
}

/// Whether `v`, through reshapes, is read by a matrix product.
static bool readByProduct(Value v, Operation *except) {
  for (Operation *user : v.getUsers()) {
    if (user == except)
      continue;
    if (isa<tg::MatmulOp>(user))
      return true;
    if (auto reshape = dyn_cast<tg::ReshapeOp>(user);
        reshape && readByProduct(reshape.getResult(), except))
      return true;
  }
  return false;
}

/// Whether only matrix products read `v`, through reshapes.
static bool onlyProductsRead(Value v) {
  for (Operation *user : v.getUsers()) {
    if (auto reshape = dyn_cast<tg::ReshapeOp>(user)) {
      if (!onlyProductsRead(reshape.getResult()))
        return false;
    } else if (!isa<tg::MatmulOp>(user)) {
      return false;
    }
  }
  return !v.use_empty();
}

/// A Mul by a one-element constant that a bf16 GPU plan's kernel layer
/// folds into cuBLAS's alpha (kern-fuse-product-scale), so that it moves no
/// bytes of its own: LoRA's alpha / rank on the B product's result, which
/// nothing else reads; and in the backward on a gradient that only
/// products read, by a power of two, when another product reads the
/// gradient itself (the base weight's input gradient, whose bf16 copy the
/// scaled products then share).
static bool isScaleFoldedIntoProduct(Operation *op) {
  auto mul = dyn_cast<tg::BinaryOp>(op);
  if (!mul || mul.getKind() != tg::BinaryKind::mul)
    return false;
  for (auto [x, c] : {std::pair(mul.getLhs(), mul.getRhs()),
                      std::pair(mul.getRhs(), mul.getLhs())}) {
    auto constant = c.getDefiningOp<tg::ConstantOp>();
    auto value =
        constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
    if (!value || value.getNumElements() != 1 ||
        !value.getElementType().isF32())
      continue;
    if (x.getDefiningOp<tg::MatmulOp>() && x.hasOneUse())
      return true;
    float scale = value.getSplatValue<float>();
    int exponent = 0;
    if (!(scale > 0 && std::isfinite(scale) &&
          std::frexp(scale, &exponent) == 0.5f) ||
        !onlyProductsRead(mul.getResult()))
      continue;
    Value source = x;
    while (auto reshape = source.getDefiningOp<tg::ReshapeOp>())
      source = reshape.getOperand();
    if (readByProduct(source, op))
      return true;
  }
  return false;
}

double rondo::cost::opSeconds(Operation *op, const DeviceSpec &spec,
                              const CostOptions &options) {
  double m = static_cast<double>(options.microbatches);
  double share = 1;
  if (spec.sharedCompute && !spec.measureOps) {
    share =
        spec.cores > 0
            ? std::max(1.0, static_cast<double>(options.workers) / spec.cores)
            : static_cast<double>(options.workers);
  }
  auto measured = spec.opTimings.find(opTimingKey(op));
  if (measured != spec.opTimings.end())
    return measured->second / m * share;
  if (spec.measureOps) {
    // A worker's kernels run on its share of the cores (ThreadPools.cpp);
    // min(W, cores) workers compute at once.
    int cores = std::max(1, static_cast<int>(spec.cores));
    int workers = static_cast<int>(std::max<int64_t>(1, options.workers));
    double concurrent = std::min(workers, cores);
    double slowdown = cores > 1 ? 1 + (spec.concurrentSlowdown - 1) *
                                          (concurrent - 1) / (cores - 1)
                                : 1;
    if (std::optional<double> s = measuredHostOpSecondsInStep(
            op, options.microbatches, std::max(1, cores / workers), slowdown))
      return *s;
  }
  auto cost = dyn_cast<tg::CostOpInterface>(op);
  if (!cost)
    return 0;
  double flops = cost.getFlops() / m;
  // Reads and writes at the plan's precision; parameters are read whole by
  // every microbatch.
  double bytes = 0;
  for (Value v : op->getOperands())
    bytes += deviceBytes(v.getType(), options.bf16Storage) /
             (isParameter(v) ? 1 : m);
  for (Value v : op->getResults())
    bytes += deviceBytes(v.getType(), options.bf16Storage) / m;
  double rate;
  if (isMatmulLike(op)) {
    double rows = 1;
    if (auto func = op->getParentOfType<func::FuncOp>())
      rows = tokensPerStep(func) / m;
    double peak = options.bf16 ? spec.peakFlopsBf16 : spec.peakFlopsFp32;
    if (isa<tg::AttentionOp, tg::AttentionGradOp>(op))
      rate = hasFlashAttention(op, spec, options)
                 ? peak * attentionEfficiency(op, spec, options)
                 : spec.attentionFallbackFlops;
    else if (isa<tg::ExpertMatmulOp, tg::ExpertMatmulWGradOp>(op) &&
             spec.expertMatmulEfficiency > 0 && options.bf16)
      rate = peak * spec.expertMatmulEfficiency;
    else
      rate = peak * spec.matmulEfficiency /
             (1 + std::pow(spec.rowsForHalfEfficiency / rows,
                           spec.rowsCurveExponent));
  } else {
    // Elementwise and reduction work runs on the vector units at a
    // fraction of the fp32 rate; it is bandwidth-bound in practice.
    rate = spec.peakFlopsFp32 * 0.5;
  }
  double bandwidth = spec.memoryBandwidth * spec.memoryEfficiency;
  if (isa<tg::ConstantOp, tg::RotaryTableOp, tg::CausalMaskOp>(op))
    return 0; // materialised once, or never
  bool layoutOnly =
      isa<tg::ReshapeOp>(op) || (options.bf16 && isFusedHeadTranspose(op)) ||
      (options.bf16 && spec.isGpu && isScaleFoldedIntoProduct(op));
  double seconds = std::max(flops / rate, layoutOnly ? 0 : bytes / bandwidth);
  return (seconds + spec.kernelLaunchSeconds) * share;
}

llvm::Expected<LayerTable>
rondo::cost::buildLayerTable(func::FuncOp func, const DeviceSpec &spec,
                             const CostOptions &options) {
  auto kinds = func->getAttrOfType<ArrayAttr>(pipe::kLayerKindsAttr);
  if (!kinds || kinds.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "@main has no layers (run pipe-layerize before tg-autodiff)");
  size_t numLayers = kinds.size();
  double m = static_cast<double>(options.microbatches);
  LayerTable table;
  table.layers.resize(numLayers);
  table.trainableParams.assign(numLayers, 0);
  for (auto [i, kind] : llvm::enumerate(kinds)) {
    StringRef k = cast<StringAttr>(kind).getValue();
    planner::LayerCost &layer = table.layers[i];
    layer.kind = k == "prefix" ? planner::LayerKind::Prefix
                 : k == "tail" ? planner::LayerKind::Tail
                               : planner::LayerKind::Block;
    layer.name = (k + " " + llvm::Twine(i)).str();
    layer.backwardWork = false; // until a gradient op is found in it
  }

  // Gradient ops are those downstream of the loss-scale seed.
  Block &body = func.getBody().front();
  llvm::DenseSet<Value> backward;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), tg::kLossScaleAttr))
      backward.insert(arg);

  std::vector<llvm::SetVector<Value>> paramsOf(numLayers), inputsOf(numLayers);
  llvm::DenseSet<Value> saved; // forward values the backward reads
  llvm::DenseSet<Value> ownedParams;
  // The gradients and other backward values alive at each point: a layer's
  // backward holds what its ops produce beside what flows in from the
  // layers after it until each value's last reader (the mixture of
  // experts' permuted gradients are several at once), which one op's
  // outputs alone under-counted.
  llvm::DenseMap<Value, Operation *> lastReader;
  for (Operation &op : body)
    for (Value v : op.getOperands())
      lastReader[v] = &op;
  double liveBackward = 0;
  for (Operation &op : body.without_terminator()) {
    bool isBackward = llvm::any_of(
        op.getOperands(), [&](Value v) { return backward.contains(v); });
    double liveBefore = liveBackward;
    if (isBackward)
      for (Value r : op.getResults()) {
        backward.insert(r);
        if (lastReader.count(r))
          liveBackward += deviceBytes(r.getType(), /*bf16=*/false) / m;
      }
    llvm::SmallPtrSet<Value, 8> released;
    for (Value v : op.getOperands())
      if (backward.contains(v) && lastReader.lookup(v) == &op &&
          released.insert(v).second)
        liveBackward -= deviceBytes(v.getType(), /*bf16=*/false) / m;
    std::optional<int64_t> layerIndex = pipe::getLayer(&op);
    if (!layerIndex)
      continue; // side data: every stage recomputes it, at negligible cost
    if (*layerIndex < 0 || static_cast<size_t>(*layerIndex) >= numLayers)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "op tagged with layer " + llvm::Twine(*layerIndex) +
              " but @main has " + llvm::Twine(numLayers) + " layers");
    planner::LayerCost &layer = table.layers[*layerIndex];
    double seconds = opSeconds(&op, spec, options);
    double flops = 0;
    if (auto cost = dyn_cast<tg::CostOpInterface>(&op))
      flops = cost.getFlops() / m;
    if (isBackward) {
      double outputs = 0;
      for (Value r : op.getResults())
        outputs += deviceBytes(r.getType(), /*bf16=*/false) / m;
      // cuDNN's deterministic attention backward keeps dP, in bf16, in its
      // workspace while it runs (2 B Hq T S bytes a microbatch, and dQ in
      // fp32: 2.2 GB at the Qwen3-30B-A3B shape's 32 heads and 2 rows of
      // 4K tokens), or a head group's share where the whole is over the
      // limit (2.2 GB for one head of the 8B shape's 32K-token row).
      if (isa<tg::AttentionGradOp>(op) && onCudnn(&op, spec, options))
        outputs += cudnnWorkspaceInUse(&op, spec, options);
      layer.transientBytes =
          std::max(layer.transientBytes, liveBefore + outputs);
      layer.backwardWork = true;
      layer.backwardSeconds += seconds;
      layer.backwardFlops += flops;
    } else {
      layer.forwardSeconds += seconds;
      layer.forwardFlops += flops;
      // The fused LM head's logits exist a chunk at a time in fp32, or in
      // bf16 plans for a group of eight chunks in bf16, each chunk's logits
      // replaced in place by their gradient (the kDwGroupChunks of
      // runtime/kernels/cuda/Loss.cu), neither more rows than a microbatch
      // has: transient, but beside everything saved.
      if (auto head = dyn_cast<tg::LinearCrossEntropyOp>(&op)) {
        auto w = cast<RankedTensorType>(head.getW().getType());
        auto h = cast<RankedTensorType>(head.getH().getType());
        double vocab = static_cast<double>(
            head.getTransposeW() ? w.getShape()[0] : w.getShape()[1]);
        double rows =
            static_cast<double>(h.getNumElements()) /
            static_cast<double>(std::max<int64_t>(h.getShape().back(), 1)) / m;
        double chunk = head.getChunkRows() > 0
                           ? static_cast<double>(head.getChunkRows())
                           : rows;
        layer.workspaceBytes +=
            (options.bf16Storage ? 2 * std::min(8 * chunk, rows)
                                 : 4 * std::min(chunk, rows)) *
            vocab;
      }
    }
    // A layer's workspace is what its backward keeps of its forward: every
    // forward value a gradient op reads, once however many read it (the
    // normed hidden state feeds q, k and v), never a parameter (read from
    // the parameter buffer) nor side data.
    if (isBackward)
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || backward.contains(v) || !saved.insert(v).second)
          continue;
        std::optional<int64_t> from = pipe::getLayer(def);
        if (!from || *from < 0 || static_cast<size_t>(*from) >= numLayers ||
            isa<tg::ConstantOp, tg::RotaryTableOp, tg::CausalMaskOp>(def))
          continue;
        table.layers[*from].workspaceBytes +=
            deviceBytes(v.getType(),
                        options.bf16Storage || savedInBf16(v, options)) /
            m;
      }
    for (Value v : op.getOperands()) {
      if (isParameter(v)) {
        paramsOf[*layerIndex].insert(v);
        continue;
      }
      if (isBackward)
        continue;
      // The activation entering the layer: produced by an earlier layer
      // (or the token data, for the first layer that reads it).
      std::optional<int64_t> from = pipe::getLayer(v.getDefiningOp());
      bool isData = isa<BlockArgument>(v);
      if ((from && *from < *layerIndex) || (isData && !backward.contains(v)))
        inputsOf[*layerIndex].insert(v);
    }
  }

  // What a worker's image and its uploads hold of parameter `p`.
  auto imageBytes = [&](BlockArgument p) {
    if (options.frozenBf16 && tg::isFrozenProductWeight(func, p.getArgNumber()))
      return 2.0 * static_cast<double>(
                       cast<RankedTensorType>(p.getType()).getNumElements());
    return deviceBytes(p.getType(), options.bf16Storage);
  };
  for (BlockArgument arg : func.getArguments()) {
    if (!func.getArgAttr(arg.getArgNumber(), tg::kParamAttr))
      continue;
    double elements = static_cast<double>(
        cast<RankedTensorType>(arg.getType()).getNumElements());
    table.paramCount += elements;
    if (func.getArgAttr(arg.getArgNumber(), tg::kTrainableAttr))
      table.trainableCount += elements;
    else if (options.frozenBf16 &&
             tg::isFrozenProductWeight(func, arg.getArgNumber()))
      // Rounded as it loads: no fp32 file can be mapped as bf16.
      table.frozenBf16Count += elements;
    else if (func.getArgAttr(arg.getArgNumber(), tg::kExternalF32Attr))
      table.mappableBytes += 4 * elements;
  }
  table.layerParamArgs.assign(numLayers, {});
  for (size_t l = 0; l < numLayers; ++l) {
    planner::LayerCost &layer = table.layers[l];
    for (Value p : paramsOf[l]) {
      auto arg = cast<BlockArgument>(p);
      table.layerParamArgs[l].push_back(arg.getArgNumber());
      layer.paramBytes += imageBytes(arg);
      if (options.bf16)
        layer.residentBytes = layer.residentBytes.value_or(0) +
                              residentBytesOf(func, arg, options.frozenBf16);
      if (!func.getArgAttr(arg.getArgNumber(), tg::kTrainableAttr))
        continue;
      // Gradients accumulate over the microbatches in fp32 on the worker.
      layer.gradBytes += deviceBytes(p.getType(), /*bf16=*/false);
      if (ownedParams.insert(p).second)
        table.trainableParams[l] += static_cast<double>(
            cast<RankedTensorType>(p.getType()).getNumElements());
    }
    for (Value v : inputsOf[l]) {
      // Labels and masks are side data every stage reads from the host;
      // only activations (and the first layer's token ids) are handed off.
      if (isa<BlockArgument>(v) && l != 0)
        continue;
      layer.inputBytes += deviceBytes(v.getType(), options.bf16Storage) / m;
    }
  }
  for (BlockArgument arg : func.getArguments()) {
    planner::SharedParam shared;
    for (size_t l = 0; l < numLayers; ++l)
      if (paramsOf[l].contains(arg))
        shared.layers.push_back(static_cast<int>(l));
    if (shared.layers.size() < 2)
      continue;
    shared.paramBytes = imageBytes(arg);
    if (options.bf16)
      shared.residentBytes = residentBytesOf(func, arg, options.frozenBf16);
    if (func.getArgAttr(arg.getArgNumber(), tg::kTrainableAttr))
      shared.gradBytes = deviceBytes(arg.getType(), /*bf16=*/false);
    table.sharedParams.push_back(std::move(shared));
  }
  // fp32 master weights for every parameter but the frozen ones held in
  // bf16 (two bytes), AdamW moments and an fp32 gradient for every
  // trainable one; with bf16 storage also the bf16 upload copy (fp32
  // storage uploads the master weights themselves).
  table.hostFixedBytes =
      4 * (table.paramCount - table.frozenBf16Count) +
      2 * table.frozenBf16Count + 12 * table.trainableCount +
      (options.bf16Storage ? 2 * (table.paramCount - table.frozenBf16Count)
                           : 0);
  return table;
}

void rondo::cost::writeOpTimingsTemplate(func::FuncOp func,
                                         const DeviceSpec &spec, bool bf16,
                                         llvm::raw_ostream &os) {
  struct Entry {
    double seconds = 0, flops = 0;
    int64_t count = 0;
  };
  std::vector<std::pair<std::string, Entry>> entries;
  llvm::StringMap<size_t> index;
  CostOptions options{/*microbatches=*/1, /*workers=*/1, bf16};
  DeviceSpec analytic = spec;
  analytic.opTimings.clear();
  for (Operation &op : func.getBody().front().without_terminator()) {
    auto cost = dyn_cast<tg::CostOpInterface>(&op);
    // Constants are materialised once and the causal mask never is.
    if (!cost || isa<tg::ConstantOp, tg::RotaryTableOp, tg::CausalMaskOp>(&op))
      continue;
    std::string key = opTimingKey(&op);
    auto [it, inserted] = index.try_emplace(key, entries.size());
    if (inserted)
      entries.push_back({key, Entry()});
    Entry &e = entries[it->second].second;
    e.seconds = opSeconds(&op, analytic, options);
    e.flops = cost.getFlops();
    ++e.count;
  }
  llvm::json::Array timings;
  for (auto &[key, e] : entries)
    timings.push_back(llvm::json::Object{{"op", key},
                                         {"seconds", e.seconds},
                                         {"count", e.count},
                                         {"flops", e.flops}});
  llvm::json::Object root{{"name", spec.name + "-profile"},
                          {"base", spec.name},
                          {"op_timings", std::move(timings)}};
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}
