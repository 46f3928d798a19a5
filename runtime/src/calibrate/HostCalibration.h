//===- HostCalibration.h - Measure this machine for the planner -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The host's side of the cost model's device spec, measured with the
// kernels a host trainer runs, on one worker's share of the machine (one
// thread: the trainer gives each worker one BLAS thread). The counterpart
// of bench/measure_device.py for GPUs.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_CALIBRATE_HOSTCALIBRATION_H
#define RONDO_RUNTIME_CALIBRATE_HOSTCALIBRATION_H

#include <string>
#include <vector>

namespace rondo::rt {

/// One measured point: the size measured and the seconds it took.
struct CalibrationSample {
  std::string kernel;
  double size = 0; ///< rows for GEMMs, bytes for memory-bound kernels
  double flops = 0;
  double seconds = 0;
};

struct HostCalibration {
  int cores = 0;
  double physicalMemoryBytes = 0;
  /// One thread's GEMM rate: rate(rows) = peak / (1 + (half / rows)^exp).
  double gemmPeakFlops = 0;
  double gemmRowsForHalf = 0;
  double gemmCurveExponent = 1;
  /// Fused causal attention, forward and backward, as a fraction of the
  /// GEMM peak (the cost model's attention_efficiency).
  double attentionEfficiency = 0;
  /// A memory-bound kernel: seconds = callSeconds + bytes / bandwidth.
  double memoryBandwidth = 0;
  double callSeconds = 0;
  double memcpyBandwidth = 0;
  /// AdamW over all cores, as the trainer's host optimizer runs it.
  double adamwParamsPerSecond = 0;
  /// How much slower a worker's kernels (a GEMM and an elementwise pass)
  /// run while every core runs them: shared caches, memory bandwidth and
  /// sibling hyperthreads (at least 1).
  double concurrentSlowdown = 1;
  std::vector<CalibrationSample> samples;
};

/// Measures this machine; `progress` (if non-null) gets one line per
/// kernel measured. Takes a few seconds.
HostCalibration calibrateHost(void (*progress)(const char *line) = nullptr);

/// The device spec JSON (docs/CostModel.md's format, `"base": "cpu"`) that
/// `--device=host` and `--device=FILE` read.
std::string hostSpecJson(const HostCalibration &c);
/// The raw measurements, a JSON array (the spec reader rejects unknown
/// fields, so they are written to a file of their own).
std::string hostSamplesJson(const HostCalibration &c);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_CALIBRATE_HOSTCALIBRATION_H
