//===- CostModel.h - Device specs and the analytic cost model ---*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// `tg` ops count their FLOPs and bytes (CostOpInterface); this library turns
// counts into seconds on a device and builds the planner's layer table.
// Op time is a roofline, max(FLOPs / achievable rate, bytes / bandwidth),
// plus a launch overhead; a measured profile (`op_timings` in a device spec
// JSON file) replaces the analytic time of the ops it lists.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_COSTMODEL_COSTMODEL_H
#define RONDO_COSTMODEL_COSTMODEL_H

#include "Planner/Planner.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <string>

namespace rondo::cost {

/// What the planner needs to know about one kind of worker and its host.
/// Rates in FLOP/s and bytes/s, sizes in bytes.
struct DeviceSpec {
  std::string name;
  /// Dense tensor-core rate with fp32 accumulation, for bf16 inputs, and
  /// the rate for fp32 inputs (no TF32: what PyTorch's default matmul gets).
  double peakFlopsBf16 = 0;
  double peakFlopsFp32 = 0;
  /// Fraction of the peak a large GEMM reaches (measured 783 of 989 on
  /// H100); small GEMMs lose more, see `rowsForHalfEfficiency`.
  double matmulEfficiency = 0.8;
  /// Tokens per microbatch at which a GEMM runs at half its large-GEMM
  /// efficiency, and how sharply it falls below that: the GEMM efficiency
  /// is matmulEfficiency / (1 + (rowsForHalfEfficiency / rows)^exponent).
  double rowsForHalfEfficiency = 128;
  double rowsCurveExponent = 1;
  /// Fraction of the peak fused causal attention reaches (the forward, and
  /// the backward unless attentionBackwardEfficiency is set); below the
  /// GEMM efficiency on every current kernel.
  double attentionEfficiency = 0.6;
  /// The backward's own efficiency (tg.attention_grad), where its kernels
  /// run at another rate than the forward's; 0: attentionEfficiency.
  double attentionBackwardEfficiency = 0;
  /// The grouped products of a mixture of experts (tg.expert_matmul and its
  /// weight gradient), whose kernels reach another rate than one dense
  /// GEMM's; 0: matmulEfficiency with its rows curve.
  double expertMatmulEfficiency = 0;
  /// A GPU's attention without a bf16 flash kernel (fp32 plans, and head
  /// dimensions other than 64, 128 and 256): the fp32 tiled kernel's
  /// FLOP/s, whatever the length. 0: priced as the flash kernels are.
  double attentionFallbackFlops = 0;
  /// How the fused attention's rate grows with the keys a query row sees
  /// (S, or the window when narrower): attentionEfficiency holds at
  /// attentionFitTokens keys and scales as S / (S + this), as the kernels'
  /// per-tile costs (softmax, the causal diagonal, staging) spread over
  /// longer rows; never above matmulEfficiency. 0: one rate for all.
  double attentionTokensForHalfEfficiency = 0;
  double attentionFitTokens = 4096;
  /// Hopper's attention on cuDNN's fused graph (runtime/kernels/cuda/
  /// CudnnAttention.cu), which bf16 plans take at head dimensions 64 and
  /// 128 unless a forward has sinks, a causal one has fewer keys than
  /// queries, or a backward's deterministic workspace (dP in bf16 and dQ in
  /// fp32, 2 B Hq T S + 4 B Hq T D bytes a microbatch) exceeds
  /// cudnnAttentionWorkspaceBytes (the runtime's RONDO_CUDNN_WORKSPACE_MB)
  /// even for one query head of one row (over it, the runtime calls cuDNN
  /// for groups of heads of one row, priced alike):
  /// forward and backward efficiencies at attentionFitTokens keys and their
  /// own half-efficiency lengths, as above (the backward's, where 0, the
  /// forward's). 0: no cuDNN path (the flash kernels' rates apply).
  double cudnnAttentionEfficiency = 0;
  double cudnnAttentionBackwardEfficiency = 0;
  double cudnnAttentionTokensForHalfEfficiency = 0;
  double cudnnAttentionBackwardTokensForHalfEfficiency = 0;
  double cudnnAttentionWorkspaceBytes = 4.0 * (1 << 30);
  double memoryBandwidth = 0;
  double memoryEfficiency = 0.8;
  double memoryBytes = 0;     // per worker
  double hostMemoryBytes = 0; // the host's RAM
  /// Host<->device copy bandwidth of one worker per direction, and of all
  /// workers together (the host's root complex and DRAM are shared).
  double hostLinkBandwidth = 0;
  double hostLinkAggregateBandwidth = 0;
  /// Worker-to-worker bandwidth (NVLink / P2P); 0: hand-offs are staged
  /// through host memory.
  double peerBandwidth = 0;
  /// Host AdamW throughput (parameters per second, all cores), alone on
  /// the host.
  double optimizerParamsPerSecond = 4.6e9;
  /// The host memory bandwidth (bytes/s) that the host AdamW, the
  /// trainer's other passes over host-held gradients and the pinned
  /// host<->device copies of every worker (of every replica process on the
  /// host) share: when what they would move alone exceeds it, each slows in
  /// proportion (planner::PlanProblem::hostMemoryBytesPerSecond). 0: each
  /// runs at its own rate as if alone.
  double hostMemoryBandwidth = 0;
  /// The rate (bytes/s) of the trainer thread's pass over the host-held
  /// gradients at the end of a step (the logged norm, with the sums of a
  /// parameter's gradient parts) alone on the host; 0: at
  /// hostMemoryBandwidth.
  double hostGradientPassBandwidth = 0;
  double kernelLaunchSeconds = 5e-6;
  /// Host workers are threads on the same cores: N workers share the
  /// compute and the memory bandwidth.
  bool sharedCompute = false;
  /// With sharedCompute: the cores the workers share. Each worker runs its
  /// kernels on its own core (the trainer gives every worker one BLAS
  /// thread), so an op slows by N / cores only once workers outnumber the
  /// cores; 0 keeps the older rule that every op uses all cores and so
  /// costs N times as much with N workers.
  double cores = 0;
  bool isGpu = true;
  /// This machine's CPU (a spec rondo-calibrate-host wrote): an op's time
  /// is its kernels' measured time at the microbatch's shape
  /// (measuredHostOpSeconds), not a roofline.
  bool measureOps = false;
  /// With measureOps: how much slower a kernel runs while every core runs
  /// one (shared caches, memory bandwidth, sibling hyperthreads), measured
  /// by rondo-calibrate-host. With W workers on C cores, min(W, C) kernels
  /// run at once and each op is slowed by the share of this that many
  /// cause; more workers than cores take turns (PlanProblem::sharedCores),
  /// not a slower op.
  double concurrentSlowdown = 1;
  /// Measured op times: key "opname operand-types" (as `--explain=DIR`
  /// writes them in op-timings.json), value seconds for the op at the
  /// step's full batch; the cost model scales it to a microbatch.
  llvm::StringMap<double> opTimings;
};

/// h100 | h200 | rtx4090 | host | cpu, or a path to a JSON spec (see
/// docs/CostModel.md for the format; `"base"` starts from a built-in).
/// `host` is this machine: the spec file $RONDO_HOST_SPEC names, else the
/// calibration `rondo-calibrate-host` wrote (hostCalibrationPath), else
/// `cpu`: uncalibrated single-core rates with this machine's cores and
/// memory.
llvm::Expected<DeviceSpec> lookupDeviceSpec(llvm::StringRef nameOrPath);
/// Where `rondo-calibrate-host` writes this machine's spec and `host`
/// finds it: $XDG_CACHE_HOME/rondo/host.json, else ~/.cache/rondo/host.json
/// ("" when neither variable is set).
std::string hostCalibrationPath();
/// This machine's RAM in bytes (0 if unknown).
double physicalMemoryBytes();
/// The names of the built-in specs.
llvm::SmallVector<std::string> builtinDeviceNames();

/// The key of an op in `DeviceSpec::opTimings`.
std::string opTimingKey(mlir::Operation *op);

struct CostOptions {
  int64_t microbatches = 1;
  int64_t workers = 1;
  /// bf16 compute: the device's bf16 peak for matrix products.
  bool bf16 = false;
  /// bf16 storage of activations, parameters on the device and hand-offs.
  /// Off: the CUDA backend computes in bf16 but stores fp32 (GEMM operands
  /// are rounded on the way into the tensor cores), so memory, transfer
  /// and bandwidth costs are at four bytes per float. Counting them at two
  /// bytes under-predicted the 1-worker W1 plan's memory by 1.4x (63 GB
  /// predicted, 89 GiB measured on an H200), and its default plan did not
  /// fit an H100.
  bool bf16Storage = false;
  /// Frozen weights that only matrix products read are held in bf16 on
  /// the host and in stage images (tg::isFrozenProductWeight; a bf16
  /// plan's default, `--frozen-storage`): two bytes per element in host
  /// memory, images and uploads.
  bool frozenBf16 = false;
};

/// Device bytes of a tensor at the plan's precision (floats shrink to two
/// bytes in bf16; integers keep their width).
double deviceBytes(mlir::Type type, bool bf16);

/// The seconds one microbatch's share of `op` takes alone in this
/// process's CPU kernels with `threads` OpenMP threads (one BLAS thread),
/// measured once per distinct op, microbatch count and thread count (the
/// least run); nullopt for an op that runs no kernel or cannot be run
/// alone; 0 for an LM head loss the trainer computes in its gradient's
/// call.
std::optional<double> measuredHostOpSeconds(mlir::Operation *op,
                                            int64_t microbatches, int threads);
/// The same op in a step: scaled by how much longer its function's
/// kernels typically take in sequence than its ops alone at best
/// (HostOpTiming.cpp, KernelTimes.h), and by
/// `concurrentSlowdown` for the other workers computing beside it.
/// nullopt: the roofline prices it.
std::optional<double> measuredHostOpSecondsInStep(mlir::Operation *op,
                                                  int64_t microbatches,
                                                  int threads,
                                                  double concurrentSlowdown);

/// Predicted seconds of one microbatch's share of `op`.
double opSeconds(mlir::Operation *op, const DeviceSpec &spec,
                 const CostOptions &options);

/// Where a GPU runs tg.attention or tg.attention_grad `op` in a plan of
/// these options, as the cost model prices it: "cuDNN's fused graph", or
/// "Rondo's flash kernels: why"; nullopt for another op or a host spec.
/// (A backward whose deterministic workspace exceeds the runtime's limit
/// ran 2.3x slower on the flash kernels: --explain says so.)
std::optional<std::string> attentionImplementation(mlir::Operation *op,
                                                   const DeviceSpec &spec,
                                                   const CostOptions &options);

/// The layer table of the training function @main (tagged by
/// pipe-layerize) for one microbatch, plus what the plan needs besides.
struct LayerTable {
  std::vector<planner::LayerCost> layers;
  /// Parameters read by several layers, in argument order.
  std::vector<planner::SharedParam> sharedParams;
  std::vector<double> trainableParams; // per layer, first user owns a param
  /// The @main argument numbers of the parameters each layer reads: a
  /// parameter is device-resident when every layer reading it is.
  std::vector<std::vector<unsigned>> layerParamArgs;
  double paramCount = 0;
  double trainableCount = 0;
  /// Host bytes that do not depend on the partition: fp32 master weights,
  /// AdamW moments, fp32 gradients, and bf16 upload copies.
  double hostFixedBytes = 0;
  /// fp32 bytes of the frozen parameters stored as ONNX external data,
  /// which the trainer may map instead of copying (part of hostFixedBytes).
  double mappableBytes = 0;
  /// Elements of the frozen weights held in bf16 (CostOptions::frozenBf16).
  double frozenBf16Count = 0;
};

/// A starting point for a measured profile: a device spec JSON with
/// `"base"` set to `spec` and one `op_timings` entry per distinct op key of
/// @main, holding the analytic seconds at the step's full batch (and, as
/// documentation, the op's count and FLOPs). Replace the seconds with
/// measured ones and pass the file as --device.
void writeOpTimingsTemplate(mlir::func::FuncOp func, const DeviceSpec &spec,
                            bool bf16, llvm::raw_ostream &os);

llvm::Expected<LayerTable> buildLayerTable(mlir::func::FuncOp func,
                                           const DeviceSpec &spec,
                                           const CostOptions &options);

} // namespace rondo::cost

#endif // RONDO_COSTMODEL_COSTMODEL_H
