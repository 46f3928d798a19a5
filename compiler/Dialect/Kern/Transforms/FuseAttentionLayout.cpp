//===- FuseAttentionLayout.cpp - The kern-fuse-attention-layout pass ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Attention's kernels take [B, H, T, D] heads-major tensors; the projections
// around it write and read [B, T, H, D]. In a bf16 plan four transposeBf16
// calls a layer move v, the output, dO and dV between the two (about 26 ms
// of W1's 1.62 s step on an H100). cuDNN reads and writes any strides, so
// where those transposes do nothing else the attention calls take the
// token-major tensors themselves. Qwen2's v, an fp32 sum with its bias, is
// rounded by the transpose that moves it (transposeToBf16), and its dV
// widened and moved back in fp32 for the bias gradient: those become a
// toBf16 and a fromBf16 of the token-major tensors.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNFUSEATTENTIONLAYOUTPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

/// A transpose of `kernel` between [B, T, H, D] and [B, H, T, D].
bool isHeadSwapOf(Operation *op, StringRef kernel) {
  return isHeadTransposeOf(dyn_cast_or_null<CallOp>(op), kernel);
}

/// A bf16 transpose between the layouts.
bool isHeadSwap(Operation *op) { return isHeadSwapOf(op, "transposeBf16"); }

/// v's mover: a bf16 transpose, or (v an fp32 sum, as with Qwen2's biases)
/// the transpose that rounds it to bf16 as it moves it.
bool isValueSwap(Operation *op) {
  return isHeadSwap(op) || isHeadSwapOf(op, "transposeToBf16");
}

/// A reader of dV that moves it back: a bf16 transpose, or a widening
/// (fromBf16) that an fp32 transpose alone reads (dV summed into a bias
/// gradient in fp32).
bool isGradientSwap(Operation *op) {
  if (isHeadSwap(op))
    return true;
  auto widen = dyn_cast_or_null<CallOp>(op);
  if (!widen || widen.getKernel() != "fromBf16" || !widen.getInits().empty())
    return false;
  Value wide = widen.getResult(0);
  return wide.hasOneUse() &&
         isHeadSwapOf(*wide.getUsers().begin(), "transpose");
}

/// The forward's rewrite with its backwards, when every tensor moved around
/// them is moved by head swaps alone.
void fuse(CallOp forward) {
  Value vHeads = forward.getInputs()[2];
  auto vSwap = vHeads.getDefiningOp<CallOp>();
  if (!isValueSwap(vSwap))
    return;
  // v: read by this forward and its backwards, each as v.
  SmallVector<CallOp> backwards;
  for (OpOperand &use : vHeads.getUses()) {
    auto call = dyn_cast<CallOp>(use.getOwner());
    if (!call || use.getOperandNumber() != 2)
      return;
    if (call == forward)
      continue;
    if (call.getKernel() != "attentionBackwardBf16ToBf16")
      return;
    backwards.push_back(call);
  }
  // The output: one head swap (into the output projection) and the
  // backwards, each reading it as out.
  Value out = forward.getResult(0);
  CallOp outSwap;
  for (OpOperand &use : out.getUses()) {
    Operation *reader = use.getOwner();
    if (isHeadSwap(reader) && !outSwap) {
      outSwap = cast<CallOp>(reader);
      continue;
    }
    if (!llvm::is_contained(backwards, reader) || use.getOperandNumber() != 3)
      return;
  }
  if (!outSwap)
    return;
  // Each backward: this forward's out and lse (a recomputed forward's
  // backward reads its own), dOut a head swap it alone reads, dV read by
  // head swaps alone.
  for (CallOp backward : backwards) {
    Value dOut = backward.getInputs()[5];
    if (backward.getInputs()[3] != out ||
        backward.getInputs()[4] != forward.getResult(1) || !dOut.hasOneUse() ||
        !isHeadSwap(dOut.getDefiningOp()))
      return;
    if (!llvm::all_of(backward.getResult(2).getUsers(), isGradientSwap))
      return;
  }

  Value v = vSwap.getInputs()[0];
  if (vSwap.getKernel() == "transposeToBf16") {
    // Rounded where it was rounded and moved: the same bits, token-major.
    OpBuilder vb(vSwap);
    auto type = cast<RankedTensorType>(v.getType());
    v = CallOp::create(
            vb, vSwap.getLoc(),
            TypeRange{RankedTensorType::get(type.getShape(), vb.getBF16Type())},
            "toBf16", ValueRange{v}, ValueRange{}, nullptr, nullptr)
            .getResult(0);
  }
  OpBuilder b(forward);
  auto tokens = CallOp::create(
      b, forward.getLoc(),
      TypeRange{outSwap.getResult(0).getType(), forward.getResult(1).getType()},
      "attentionBf16ToBf16Tokens",
      ValueRange{forward.getInputs()[0], forward.getInputs()[1], v},
      ValueRange{}, forward.getArgsAttr(), forward.getSkipAttr());
  forward.getResult(1).replaceAllUsesWith(tokens.getResult(1));
  outSwap.getResult(0).replaceAllUsesWith(tokens.getResult(0));
  outSwap.erase();
  for (CallOp backward : backwards) {
    auto dOutSwap = backward.getInputs()[5].getDefiningOp<CallOp>();
    OpBuilder bb(backward);
    auto grads = CallOp::create(
        bb, backward.getLoc(),
        TypeRange{backward.getResult(0).getType(),
                  backward.getResult(1).getType(), v.getType()},
        "attentionBackwardBf16ToBf16Tokens",
        ValueRange{backward.getInputs()[0], backward.getInputs()[1], v,
                   tokens.getResult(0), backward.getInputs()[4],
                   dOutSwap.getInputs()[0]},
        ValueRange{}, backward.getArgsAttr(), backward.getSkipAttr());
    backward.getResult(0).replaceAllUsesWith(grads.getResult(0));
    backward.getResult(1).replaceAllUsesWith(grads.getResult(1));
    for (Operation *swap :
         llvm::make_early_inc_range(backward.getResult(2).getUsers())) {
      if (isHeadSwap(swap)) {
        swap->getResult(0).replaceAllUsesWith(grads.getResult(2));
        swap->erase();
        continue;
      }
      // fromBf16 then an fp32 transpose: the widening of the token-major dV.
      Operation *transpose = *swap->getResult(0).getUsers().begin();
      OpBuilder wb(swap);
      Value wide = CallOp::create(wb, swap->getLoc(),
                                  TypeRange{transpose->getResult(0).getType()},
                                  "fromBf16", ValueRange{grads.getResult(2)},
                                  ValueRange{}, nullptr, nullptr)
                       .getResult(0);
      transpose->getResult(0).replaceAllUsesWith(wide);
      transpose->erase();
      swap->erase();
    }
    backward.erase();
    dOutSwap.erase();
  }
  forward.erase();
  if (vSwap->use_empty())
    vSwap.erase();
}

struct KernFuseAttentionLayoutPass
    : kern::impl::KernFuseAttentionLayoutPassBase<KernFuseAttentionLayoutPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr))
      return;
    SmallVector<CallOp> forwards;
    fn.walk([&](CallOp call) {
      if (call.getKernel() == "attentionBf16ToBf16")
        forwards.push_back(call);
    });
    for (CallOp forward : forwards)
      fuse(forward);
  }
};

} // namespace
