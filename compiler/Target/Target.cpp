//===- Target.cpp - The resolved compilation target -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Target/Target.h"
#include "CostModel/CostModel.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

DictionaryAttr rondo::TargetConfig::toAttr(MLIRContext *ctx) const {
  Builder b(ctx);
  return b.getDictionaryAttr(
      {b.getNamedAttr("backend", b.getStringAttr(backend)),
       b.getNamedAttr("device", b.getStringAttr(device)),
       b.getNamedAttr("precision", b.getStringAttr(precision))});
}

llvm::Expected<rondo::TargetConfig>
rondo::resolveTarget(StringRef backend, StringRef device, StringRef precision) {
  if (!backend.empty() && backend != "host" && backend != "cuda")
    return llvm::createStringError("--target=" + backend +
                                   " is not one of host, cuda");
  if (!precision.empty() && precision != "fp32" && precision != "bf16")
    return llvm::createStringError("--precision=" + precision +
                                   " is not supported (fp32 or bf16)");
  TargetConfig target;
  target.backend = backend.str();
  if (target.backend.empty()) {
    // A GPU cost model without a backend means planning for that GPU, so
    // the trainer runs on one (and computes as the plan assumed).
    bool gpu = false;
    if (!device.empty()) {
      llvm::Expected<cost::DeviceSpec> spec = cost::lookupDeviceSpec(device);
      if (!spec)
        return llvm::createStringError("--device: " +
                                       llvm::toString(spec.takeError()));
      gpu = spec->isGpu;
    }
    target.backend = gpu ? "cuda" : "host";
  }
  bool cuda = target.backend == "cuda";
  target.device = !device.empty() ? device.str() : cuda ? "h100" : "host";
  target.precision = !precision.empty() ? precision.str()
                     : cuda             ? "bf16"
                                        : "fp32";
  if (!cuda && target.precision != "fp32")
    return llvm::createStringError(
        "--precision=" + target.precision +
        " needs --target=cuda: the host backend computes in fp32");
  return target;
}

void rondo::setModuleTarget(ModuleOp module, const TargetConfig &target) {
  module->setAttr(kTargetAttr, target.toAttr(module.getContext()));
}

FailureOr<std::optional<rondo::TargetConfig>>
rondo::getModuleTarget(ModuleOp module) {
  Attribute attr = module->getAttr(kTargetAttr);
  if (!attr)
    return std::optional<TargetConfig>();
  auto dict = dyn_cast<DictionaryAttr>(attr);
  StringAttr backend, device, precision;
  if (dict) {
    backend = dict.getAs<StringAttr>("backend");
    device = dict.getAs<StringAttr>("device");
    precision = dict.getAs<StringAttr>("precision");
  }
  if (!backend || !device || !precision ||
      (backend.getValue() != "host" && backend.getValue() != "cuda") ||
      (precision.getValue() != "fp32" && precision.getValue() != "bf16") ||
      (backend.getValue() == "host" && precision.getValue() != "fp32")) {
    module.emitError() << kTargetAttr
                       << " must be {backend = \"host\"|\"cuda\", device = "
                          "\"...\", precision = \"fp32\"|\"bf16\"} (bf16 on "
                          "cuda only), not "
                       << attr;
    return failure();
  }
  return std::optional<TargetConfig>(
      TargetConfig{backend.str(), device.str(), precision.str()});
}
