//===- Target.h - The resolved compilation target ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// What a compilation is for: the backend the trainer runs on, the device
// spec its plans are costed with, and the precision its matrix products
// compute in. The driver resolves the three once from --target, --device
// and --precision and records them on the module as `rondo.target`; the
// planner (pipe-partition), the emitter and --explain read that one value,
// so the plan's costs and the emitted code cannot disagree.
//
// The rule (docs/CostModel.md, "Target and precision"):
//   - backend: --target; without it, cuda when --device names a GPU spec,
//     else host;
//   - device: --device; without it, h100 for cuda and host for host;
//   - precision: --precision; without it, bf16 for cuda and fp32 for host.
//     The host kernels compute in fp32 only, so --precision=bf16 on the host
//     backend is an error.
//
// This library sits just above the cost model, so that passes and the
// emitter can read the attribute without depending on the driver.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DRIVER_TARGET_H
#define RONDO_DRIVER_TARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace rondo {

/// The module attribute holding the resolved target, a dictionary
/// `{backend = "cuda", device = "h100", precision = "bf16"}`.
inline constexpr llvm::StringLiteral kTargetAttr = "rondo.target";

struct TargetConfig {
  /// "host" (CPU worker threads) or "cuda" (one GPU per worker).
  std::string backend;
  /// The device spec plans are costed with: h100|h200|rtx4090|host or a
  /// JSON spec file.
  std::string device;
  /// "fp32" or "bf16": how the stage functions' matrix products compute.
  std::string precision;

  bool isBf16() const { return precision == "bf16"; }
  mlir::DictionaryAttr toAttr(mlir::MLIRContext *ctx) const;
};

/// Resolves the target from the flags as given ("" where a flag was not
/// given) by the rule above. The error names the flag at fault.
llvm::Expected<TargetConfig> resolveTarget(llvm::StringRef backend,
                                           llvm::StringRef device,
                                           llvm::StringRef precision);

/// Records `target` on `module` as `rondo.target`.
void setModuleTarget(mlir::ModuleOp module, const TargetConfig &target);

/// The module's `rondo.target`: std::nullopt when it has none, a failure
/// (reported on the module) when it is malformed.
mlir::FailureOr<std::optional<TargetConfig>>
getModuleTarget(mlir::ModuleOp module);

} // namespace rondo

#endif // RONDO_DRIVER_TARGET_H
