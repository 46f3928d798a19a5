//===- DeviceSpec.cpp - Built-in and measured device specs ------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The built-in numbers are datasheet peaks corrected by what was measured on
// the H100/H200 machines (../shared/anchors.md): large bf16 GEMMs reach ~80%
// of peak, pinned host copies ~55 GB/s per GPU and ~157 GB/s for four GPUs
// together, NVLink 390 GB/s, host AdamW 4.6 Gparam/s on 16 cores.
//
//===----------------------------------------------------------------------===//

#include "CostModel/CostModel.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <unistd.h>

using namespace rondo::cost;

static constexpr double GB = 1e9;
static constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

static DeviceSpec h100() {
  DeviceSpec s;
  s.name = "h100";
  s.peakFlopsBf16 = 989e12;
  s.peakFlopsFp32 = 67e12;
  // What Rondo's own kernels and runtime do on an H100 80GB HBM3
  // (bench/calibrate_spec.py on W1's kernel profile and traces,
  // bench/specs/h100-rondo.json, docs/CostModel.md "Calibration"), so that
  // plans predict what runs. Recalibrated after kern-bf16-storage
  // (bench/results/h100x1/bf16-storage-2026-11-26): GEMMs at 74% of peak
  // from 4K tokens up (the rows curve's shape is bench/measure_device.py's:
  // half of that at ~800 tokens; cuBLAS itself reaches 75%), the fused
  // attention as below (PyTorch's SDPA reaches 48%), the memory-bound work
  // at 70% of 3.35 TB/s of its analytic bytes, no per-op overhead beyond
  // that (the two-plan fit finds none left), the host AdamW at 4.1
  // Gparam/s and pinned copies at 50 GB/s. The fit is redone whenever the
  // kernels change.
  s.matmulEfficiency = 0.74;
  s.rowsForHalfEfficiency = 808;
  s.rowsCurveExponent = 1.5;
  // The fused attention at W1's 4K keys as the trainer runs it: 242 TFLOP/s
  // forward and 197 backward in the kernel profile of
  // bench/results/h100x1/resident-bf16-2026-11-27 (24.5% and 19.9%). The
  // joint fit's 16.7% had taken in time that is not attention's, which
  // 32K-token rows (mostly attention) exposed: the Qwen3-8B LoRA plans
  // were predicted 1.32-1.40x slower than measured, 1.17-1.25x with one
  // 21% for both directions, whose forward then cost 1.19x what it took.
  s.attentionEfficiency = 0.245;
  s.attentionBackwardEfficiency = 0.199;
  // The wgmma kernels' rate against the keys per row
  // (bench/results/h100x1/attention-2026-11-26, forward + backward at
  // W1's heads): 1.065 ms at 4K keys, 3.62 ms at 8K for 4x the work, so
  // 1.18x the rate; S / (S + 1774) gives that ratio. The rate above holds at
  // W1's 4K; 32K-token rows run 1.36x faster per FLOP (the 8B LoRA profile
  // of resident-bf16-2026-11-27 measured 330 / 268 TFLOP/s there, 1.36x
  // W1's).
  s.attentionTokensForHalfEfficiency = 1774;
  // cuDNN's fused attention (CudnnAttention.cu, deterministic backward), as
  // the trainer runs it at W1's 4K keys and 2 rows a microbatch: 336
  // TFLOP/s forward and 313 backward in the kernel profile of
  // bench/results/h100x1/full-table-2026-11-27, where it reads and writes
  // bf16 q, k, v, out, dO and gradients without conversions (255 and 254
  // with the fp32 interface's conversions, cudnn-graphs-2026-11-27).
  // Recalibrated on 2026-11-28 from CUPTI's kernel times, which a per-call
  // profile scope overstated for the short forward: at W1's shape the
  // forward kernel takes 63.8 ms a step (483 TFLOP/s, PyTorch's SDPA 60.4
  // in the same run) and the deterministic backward's kernels 234.6 ms
  // (329 TFLOP/s), bench/results/h100x1/attention-token-major-w1-2026-11-28
  // (the rates above had priced them at 91.6 and 245.6 ms).
  s.cudnnAttentionEfficiency = 0.488;
  s.cudnnAttentionBackwardEfficiency = 0.332;
  // Its rate against the keys per row, at the Qwen3-8B shape (one row, 32
  // query heads over 8 kv heads, token-major as the trainer calls it) on
  // an H200 (bench/results/h200x1/long-attention-2026-11-28): forward 634
  // and 666 TFLOP/s at 16K and 32K keys, 1.31x and 1.38x W1's 483, which
  // S / (S + 1877) gives; the backward, in head groups there (4 and 1
  // query heads of the row a call), 374 and 388, 1.14x and 1.18x W1's 329:
  // S / (S + 860). (The 5,100 of before came from 4K to 8K keys at one row
  // of 16 heads, whose 4K point is slower than W1's two rows.)
  s.cudnnAttentionTokensForHalfEfficiency = 1877;
  s.cudnnAttentionBackwardTokensForHalfEfficiency = 860;
  // The experts' grouped GEMMs (GroupedGemmSm90.cu) on Qwen3-30B-A3B's
  // expert shapes, forward, input and weight gradient: 204-244 TFLOP/s
  // (bench/results/h100x1/grouped-gemm-2026-11-27), against cuBLAS's
  // 514-654 on the same work: they stage fp32 operands through L2.
  s.expertMatmulEfficiency = 0.22;
  // The fp32 attention kernel (Attention.cu), which fp32 plans and head
  // dimensions without a bf16 flash kernel take: 1.6-2.4 TFLOP/s forward
  // and backward at Gemma-3-1B's heads (runtime/kernels/cuda/NOTES.md),
  // 2.75-3.6 at D = 128.
  s.attentionFallbackFlops = 2.2e12;
  s.attentionFitTokens = 4096;
  s.memoryBandwidth = 3.35e12;
  s.memoryEfficiency = 0.70;
  s.kernelLaunchSeconds = 0;
  // "80GB" is 80 GiB: nvidia-smi reports 81,559 MiB on the H100 80GB HBM3
  // (the default budget stays 90% of it).
  s.memoryBytes = 81559.0 * 1024 * 1024;
  s.hostMemoryBytes = 128 * GiB;
  s.hostLinkBandwidth = 50 * GB;
  s.hostLinkAggregateBandwidth = 157 * GB;
  // NVLink 4, as on the H200 boards (the 2- and 4-GPU H100 machines); a
  // 1-GPU machine never hands off between GPUs.
  s.peerBandwidth = 390 * GB;
  s.optimizerParamsPerSecond = 4.12e9;
  return s;
}

static DeviceSpec h200() {
  DeviceSpec s = h100();
  s.name = "h200";
  // Same compute die as the H100; anchors measured its 8192^3 bf16 GEMM at
  // 786-808 TFLOP/s against the H100's 783.
  s.memoryBandwidth = 4.8e12;
  s.memoryBytes = 141 * GB;
  s.hostMemoryBytes = 256 * GiB;
  s.peerBandwidth = 390 * GB; // NVLink, measured per direction
  // The host of the 4-GPU H200 machine (64 cores), from the streamed 1x2
  // trace of bench/results/h200x4/layouts-2026-11-28 (docs/CostModel.md,
  // "The host's memory"): the host AdamW alone (the tasks no copy
  // overlaps, 252M parameters in 53.5-58.6 ms) at 4.5 Gparam/s, 144 GB/s at
  // the 32 bytes a parameter its task moves (kOptimizerHostBytesPerParam):
  // that is the host's memory bandwidth, which the tasks and the gradient
  // downloads they overlap reach together (~142 GB/s) and which the
  // simulation shares between them (a task's 453 ms a step, the figure
  // before, is what it took with them); and the trainer's end-of-step pass
  // over the gradients for the logged norm at 60 GB/s alone (the step's
  // last worker op to the next step's issue: 206-250 ms, beside the last
  // AdamW task). Hosts of the other H200 machines differ (one H200 with 16
  // cores: the one-worker task takes 674-780 ms for W1's 1.72e9 parameters,
  // bench/results/h200x1/w1-head-groups-2026-11-28).
  s.optimizerParamsPerSecond = 4.5e9;
  s.hostMemoryBandwidth = 144 * GB;
  s.hostGradientPassBandwidth = 60 * GB;
  return s;
}

static DeviceSpec rtx4090() {
  DeviceSpec s;
  s.name = "rtx4090";
  s.peakFlopsBf16 = 165e12; // dense, fp32 accumulation
  s.peakFlopsFp32 = 82.6e12;
  s.matmulEfficiency = 0.75;
  s.memoryBandwidth = 1.008e12;
  s.memoryBytes = 24 * GB;
  s.hostMemoryBytes = 256 * GiB;
  s.hostLinkBandwidth = 25 * GB;           // PCIe 4.0 x16, pinned
  s.hostLinkAggregateBandwidth = 100 * GB; // 8 boards behind switches
  s.peerBandwidth = 0;                     // consumer boards: no P2P
  return s;
}

/// This machine's cores and memory with uncalibrated rates of one core of
/// a current x86 server (OpenBLAS SGEMM on one AVX-512 core; a kernel call
/// with its OpenMP fork and join). `rondo-calibrate-host` measures them.
static DeviceSpec cpu() {
  DeviceSpec s;
  s.name = "cpu";
  s.isGpu = false;
  s.sharedCompute = true;
  // The trainer's thread pools count hardware threads (omp_get_num_procs).
  s.cores = std::max(1u, std::thread::hardware_concurrency());
  s.peakFlopsBf16 = 80e9;
  s.peakFlopsFp32 = 80e9;
  s.matmulEfficiency = 1;
  s.rowsForHalfEfficiency = 64;
  s.attentionEfficiency = 0.2;
  s.memoryBandwidth = 10 * GB;
  s.memoryEfficiency = 1;
  double physical = physicalMemoryBytes();
  if (physical <= 0)
    physical = 16 * GiB;
  // The workers' arenas and the trainer's host state share the RAM.
  s.memoryBytes = physical;
  s.hostMemoryBytes = physical;
  s.hostLinkBandwidth = 10 * GB; // memcpy between arenas
  s.hostLinkAggregateBandwidth = 10 * GB;
  s.peerBandwidth = 10 * GB;
  s.optimizerParamsPerSecond = 0.3e9 * s.cores;
  s.kernelLaunchSeconds = 5e-6;
  return s;
}

double rondo::cost::physicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  return pages > 0 && pageSize > 0 ? double(pages) * double(pageSize) : 0;
}

std::string rondo::cost::hostCalibrationPath() {
  llvm::SmallString<256> path;
  if (const char *cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    path = cache;
  else if (const char *home = std::getenv("HOME"); home && *home)
    llvm::sys::path::append(path, home, ".cache");
  else
    return "";
  llvm::sys::path::append(path, "rondo", "host.json");
  return std::string(path);
}

llvm::SmallVector<std::string> rondo::cost::builtinDeviceNames() {
  return {"h100", "h200", "rtx4090", "host", "cpu"};
}

static std::optional<DeviceSpec> builtin(llvm::StringRef name) {
  if (name == "h100")
    return h100();
  if (name == "h200")
    return h200();
  if (name == "rtx4090")
    return rtx4090();
  if (name == "cpu")
    return cpu();
  return std::nullopt;
}

/// `host`: this machine, as described in "Device specs" of CostModel.md.
static llvm::Expected<DeviceSpec> thisHost() {
  if (const char *pinned = std::getenv("RONDO_HOST_SPEC"); pinned && *pinned)
    return lookupDeviceSpec(pinned);
  std::string calibrated = hostCalibrationPath();
  if (!calibrated.empty() && llvm::sys::fs::exists(calibrated))
    return lookupDeviceSpec(calibrated);
  DeviceSpec s = cpu();
  s.name = "host";
  return s;
}

static llvm::Error specError(llvm::StringRef path, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "device spec '" + path + "': " + msg);
}

llvm::Expected<DeviceSpec>
rondo::cost::lookupDeviceSpec(llvm::StringRef nameOrPath) {
  if (nameOrPath == "host")
    return thisHost();
  if (auto spec = builtin(nameOrPath))
    return *spec;
  if (!nameOrPath.ends_with(".json"))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "unknown device '" + nameOrPath +
            "' (expected h100, h200, rtx4090, host, cpu or a .json spec file)");
  auto buffer = llvm::MemoryBuffer::getFile(nameOrPath);
  if (!buffer)
    return specError(nameOrPath, "cannot read: " + buffer.getError().message());
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return specError(nameOrPath, llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root)
    return specError(nameOrPath, "the top level must be an object");

  DeviceSpec spec;
  if (auto base = root->getString("base")) {
    if (*base == "host") {
      // This machine (the op-timings template names it); a calibration
      // file is based on "cpu", so this does not recurse.
      llvm::Expected<DeviceSpec> host = thisHost();
      if (!host)
        return host.takeError();
      spec = *host;
    } else if (auto b = builtin(*base)) {
      spec = *b;
    } else {
      return specError(nameOrPath, "unknown base device '" + *base + "'");
    }
    spec.opTimings.clear();
  }
  spec.name = root->getString("name").value_or(nameOrPath).str();
  struct Field {
    const char *key;
    double *value;
  };
  Field fields[] = {
      {"peak_flops_bf16", &spec.peakFlopsBf16},
      {"peak_flops_fp32", &spec.peakFlopsFp32},
      {"matmul_efficiency", &spec.matmulEfficiency},
      {"rows_for_half_efficiency", &spec.rowsForHalfEfficiency},
      {"rows_curve_exponent", &spec.rowsCurveExponent},
      {"attention_efficiency", &spec.attentionEfficiency},
      {"attention_backward_efficiency", &spec.attentionBackwardEfficiency},
      {"expert_matmul_efficiency", &spec.expertMatmulEfficiency},
      {"attention_fallback_flops", &spec.attentionFallbackFlops},
      {"attention_tokens_for_half_efficiency",
       &spec.attentionTokensForHalfEfficiency},
      {"attention_fit_tokens", &spec.attentionFitTokens},
      {"cudnn_attention_efficiency", &spec.cudnnAttentionEfficiency},
      {"cudnn_attention_backward_efficiency",
       &spec.cudnnAttentionBackwardEfficiency},
      {"cudnn_attention_tokens_for_half_efficiency",
       &spec.cudnnAttentionTokensForHalfEfficiency},
      {"cudnn_attention_backward_tokens_for_half_efficiency",
       &spec.cudnnAttentionBackwardTokensForHalfEfficiency},
      {"cudnn_attention_workspace_bytes", &spec.cudnnAttentionWorkspaceBytes},
      {"memory_bandwidth", &spec.memoryBandwidth},
      {"memory_efficiency", &spec.memoryEfficiency},
      {"memory_bytes", &spec.memoryBytes},
      {"host_memory_bytes", &spec.hostMemoryBytes},
      {"host_link_bandwidth", &spec.hostLinkBandwidth},
      {"host_link_aggregate_bandwidth", &spec.hostLinkAggregateBandwidth},
      {"peer_bandwidth", &spec.peerBandwidth},
      {"optimizer_params_per_second", &spec.optimizerParamsPerSecond},
      {"host_memory_bandwidth", &spec.hostMemoryBandwidth},
      {"host_gradient_pass_bandwidth", &spec.hostGradientPassBandwidth},
      {"kernel_launch_seconds", &spec.kernelLaunchSeconds},
      {"cores", &spec.cores},
      {"concurrent_slowdown", &spec.concurrentSlowdown},
  };
  for (auto &[key, _] : *root) {
    llvm::StringRef k = key;
    bool known = k == "name" || k == "base" || k == "op_timings" ||
                 k == "shared_compute" || k == "is_gpu" || k == "measure_ops";
    for (Field &f : fields)
      known |= k == f.key;
    if (!known)
      return specError(nameOrPath, "unknown field '" + k + "'");
  }
  for (Field &f : fields) {
    if (const llvm::json::Value *v = root->get(f.key)) {
      std::optional<double> d = v->getAsNumber();
      if (!d || *d < 0)
        return specError(nameOrPath, llvm::Twine("'") + f.key +
                                         "' must be a non-negative number");
      *f.value = *d;
    }
  }
  if (auto b = root->getBoolean("shared_compute"))
    spec.sharedCompute = *b;
  if (auto b = root->getBoolean("is_gpu"))
    spec.isGpu = *b;
  if (auto b = root->getBoolean("measure_ops"))
    spec.measureOps = *b;
  if (const llvm::json::Array *timings = root->getArray("op_timings")) {
    for (auto [i, entry] : llvm::enumerate(*timings)) {
      const llvm::json::Object *o = entry.getAsObject();
      std::optional<llvm::StringRef> op = o ? o->getString("op") : std::nullopt;
      std::optional<double> seconds =
          o ? o->getNumber("seconds") : std::nullopt;
      if (!op || !seconds || *seconds < 0)
        return specError(nameOrPath,
                         "op_timings[" + llvm::Twine(i) +
                             "] needs \"op\" (a key as op-timings.json "
                             "writes it) and non-negative \"seconds\"");
      spec.opTimings[*op] = *seconds;
    }
  }
  for (auto [key, value] : {std::pair{"peak_flops_bf16", spec.peakFlopsBf16},
                            {"peak_flops_fp32", spec.peakFlopsFp32},
                            {"memory_bandwidth", spec.memoryBandwidth},
                            {"memory_bytes", spec.memoryBytes},
                            {"host_link_bandwidth", spec.hostLinkBandwidth}})
    if (value <= 0)
      return specError(nameOrPath, llvm::Twine("'") + key +
                                       "' is missing (give it, or a \"base\" "
                                       "device to start from)");
  if (spec.hostLinkAggregateBandwidth <= 0)
    spec.hostLinkAggregateBandwidth = spec.hostLinkBandwidth;
  if (spec.attentionFitTokens <= 0)
    return specError(nameOrPath, "'attention_fit_tokens' must be positive");
  if (spec.matmulEfficiency <= 0 || spec.matmulEfficiency > 1 ||
      spec.attentionEfficiency <= 0 || spec.attentionEfficiency > 1 ||
      spec.attentionBackwardEfficiency < 0 ||
      spec.attentionBackwardEfficiency > 1 ||
      spec.cudnnAttentionEfficiency < 0 || spec.cudnnAttentionEfficiency > 1 ||
      spec.cudnnAttentionBackwardEfficiency < 0 ||
      spec.cudnnAttentionBackwardEfficiency > 1 ||
      spec.expertMatmulEfficiency < 0 || spec.expertMatmulEfficiency > 1 ||
      spec.memoryEfficiency <= 0 || spec.memoryEfficiency > 1)
    return specError(nameOrPath, "efficiencies must be in (0, 1]");
  return spec;
}
