//===- FuseNormRotary.cpp - The kern-fuse-norm-rotary pass ----------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Queries and keys normed per head (Qwen3, OLMo-2) reach attention through
// rmsNorm, a [B, T, H, D] -> [B, H, T, D] transpose and rotary: three kernels
// and two intermediate tensors forward, the same backward. The chains become
// rmsNormRotary and rmsNormRotaryBackward when the intermediates have no
// other reader. Heads without a norm (Llama, Qwen2) reach attention through
// the transpose and rotary alone: transposeRotary and
// transposeRotaryBackward, one pass each instead of two.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNFUSENORMROTARYPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

/// The call of `kernel` that defines `v`, when `v` is its only result that
/// anything reads and it has no other reader.
CallOp soleUseProducer(Value v, StringRef kernel) {
  auto call = v.getDefiningOp<CallOp>();
  if (!call || call.getKernel() != kernel || !v.hasOneUse() ||
      !call.getInits().empty())
    return {};
  return call;
}

/// A transpose moving the heads axis of a rank-4 tensor next to the batch.
bool isHeadTranspose(CallOp call) {
  return isHeadTransposeOf(call, "transpose");
}

/// rotary(transpose(rmsNorm(x, w))) -> rmsNormRotary(x, w, cos, sin).
void fuseForward(CallOp rotary) {
  CallOp transpose = soleUseProducer(rotary.getInputs()[0], "transpose");
  if (!transpose || !isHeadTranspose(transpose))
    return;
  CallOp norm = soleUseProducer(transpose.getInputs()[0], "rmsNorm");
  if (!norm || norm.getInputs().size() != 2 || norm.getSkip())
    return;
  OpBuilder b(rotary);
  auto fused = CallOp::create(
      b, rotary.getLoc(), rotary->getResultTypes(), "rmsNormRotary",
      ValueRange{norm.getInputs()[0], norm.getInputs()[1],
                 rotary.getInputs()[1], rotary.getInputs()[2]},
      ValueRange{}, norm.getArgsAttr(), nullptr);
  rotary.getResult(0).replaceAllUsesWith(fused.getResult(0));
  rotary.erase();
  transpose.erase();
  norm.erase();
}

/// rmsNormBackward(x, w, transpose(rotaryBackward(dy))) ->
/// rmsNormRotaryBackward(x, w, cos, sin, dy).
void fuseBackward(CallOp normGrad) {
  if (normGrad.getInputs().size() != 3 || !normGrad.getInits().empty())
    return;
  CallOp transpose = soleUseProducer(normGrad.getInputs()[2], "transpose");
  if (!transpose || !isHeadTranspose(transpose))
    return;
  CallOp rotaryGrad =
      soleUseProducer(transpose.getInputs()[0], "rotaryBackward");
  if (!rotaryGrad)
    return;
  OpBuilder b(normGrad);
  ValueRange in = normGrad.getInputs(), rot = rotaryGrad.getInputs();
  auto fused = CallOp::create(
      b, normGrad.getLoc(), normGrad->getResultTypes(), "rmsNormRotaryBackward",
      ValueRange{in[0], in[1], rot[1], rot[2], rot[0]}, ValueRange{},
      normGrad.getArgsAttr(), normGrad.getSkipAttr());
  normGrad.replaceAllUsesWith(fused.getResults());
  normGrad.erase();
  transpose.erase();
  rotaryGrad.erase();
}

/// rotary(transpose(x)) -> transposeRotary(x, cos, sin).
void fuseTransposeRotary(CallOp rotary) {
  CallOp transpose = soleUseProducer(rotary.getInputs()[0], "transpose");
  if (!transpose || !isHeadTranspose(transpose))
    return;
  OpBuilder b(rotary);
  auto fused = CallOp::create(
      b, rotary.getLoc(), rotary->getResultTypes(), "transposeRotary",
      ValueRange{transpose.getInputs()[0], rotary.getInputs()[1],
                 rotary.getInputs()[2]},
      ValueRange{}, nullptr, nullptr);
  rotary.getResult(0).replaceAllUsesWith(fused.getResult(0));
  rotary.erase();
  transpose.erase();
}

/// transpose(rotaryBackward(dy)) -> transposeRotaryBackward(dy, cos, sin).
void fuseTransposeRotaryBackward(CallOp rotaryGrad) {
  Value rotated = rotaryGrad.getResult(0);
  if (!rotated.hasOneUse() || !rotaryGrad.getInits().empty())
    return;
  auto transpose = dyn_cast<CallOp>(*rotated.getUsers().begin());
  if (!isHeadTranspose(transpose))
    return;
  OpBuilder b(transpose);
  auto fused =
      CallOp::create(b, transpose.getLoc(), transpose->getResultTypes(),
                     "transposeRotaryBackward", rotaryGrad.getInputs(),
                     ValueRange{}, nullptr, nullptr);
  transpose.getResult(0).replaceAllUsesWith(fused.getResult(0));
  transpose.erase();
  rotaryGrad.erase();
}

struct KernFuseNormRotaryPass
    : kern::impl::KernFuseNormRotaryPassBase<KernFuseNormRotaryPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr))
      return;
    SmallVector<CallOp> rotaries, normGrads;
    fn.walk([&](CallOp call) {
      if (call.getKernel() == "rotary")
        rotaries.push_back(call);
      else if (call.getKernel() == "rmsNormBackward")
        normGrads.push_back(call);
    });
    for (CallOp call : rotaries)
      fuseForward(call);
    for (CallOp call : normGrads)
      fuseBackward(call);
    // What the norms did not take: heads without a norm.
    SmallVector<CallOp> plainRotaries, rotaryGrads;
    fn.walk([&](CallOp call) {
      if (call.getKernel() == "rotary")
        plainRotaries.push_back(call);
      else if (call.getKernel() == "rotaryBackward")
        rotaryGrads.push_back(call);
    });
    for (CallOp call : plainRotaries)
      fuseTransposeRotary(call);
    for (CallOp call : rotaryGrads)
      fuseTransposeRotaryBackward(call);
  }
};

} // namespace
