//===- FuseResidualNorm.cpp - The kern-fuse-residual-norm pass ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A decoder's residual stream is added to and normed at every block: forward
// an Add then the norm of the sum, backward the norm's gradient then an Add
// into the stream's gradient (and the bf16 copy its products read). Each is
// a separate pass over rows the other just wrote; fused, the rows are read
// once and the sums written as they go (W1: 448 Adds a step of 64 MB each).
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNFUSERESIDUALNORMPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

/// A binary Add of two fp32 operands of the result's own type (no
/// broadcasting), with nothing to accumulate into.
bool isPlainAdd(CallOp call) {
  if (!isBinaryOf(call, "Add") || call->getNumResults() != 1 || call.getSkip())
    return false;
  Type type = call.getResult(0).getType();
  return cast<RankedTensorType>(type).getElementType().isF32() &&
         call.getInputs()[0].getType() == type &&
         call.getInputs()[1].getType() == type;
}

/// Whether `v` is available at `op` (an argument, or defined before it in
/// the same block).
bool availableAt(Value v, Operation *op) {
  Operation *def = v.getDefiningOp();
  if (!def)
    return true;
  return def->getBlock() == op->getBlock() && def->isBeforeInBlock(op);
}

/// Add(a, b) read by rmsNorm[ToBf16](sum, w) -> addRmsNorm[ToBf16](a, b, w):
/// the fused call takes the Add's place, the sum is its first result; and
/// addBf16(a, b) read by them -> addRmsNormBf16[ToBf16](a, b, w).
void fuseForward(CallOp add) {
  Value sum = add.getResult(0);
  CallOp norm;
  for (Operation *user : sum.getUsers()) {
    auto call = dyn_cast<CallOp>(user);
    if (call &&
        (call.getKernel() == "rmsNorm" ||
         call.getKernel() == "rmsNormToBf16") &&
        call.getInputs().size() == 2 && call.getInputs()[0] == sum &&
        call.getInits().empty() && !call.getSkip() &&
        availableAt(call.getInputs()[1], add) &&
        (!norm || call->isBeforeInBlock(norm)))
      norm = call;
  }
  if (!norm)
    return;
  // addBf16's b is stored in bf16 (kern-bf16-storage): the fused kernel
  // widens it as it adds.
  bool bf16B = add.getKernel() == "addBf16";
  bool toBf16 = norm.getKernel() == "rmsNormToBf16";
  StringRef kernel = bf16B
                         ? (toBf16 ? "addRmsNormBf16ToBf16" : "addRmsNormBf16")
                         : (toBf16 ? "addRmsNormToBf16" : "addRmsNorm");
  OpBuilder builder(add);
  auto fused = CallOp::create(
      builder, norm.getLoc(),
      TypeRange{sum.getType(), norm.getResult(0).getType()},
      FlatSymbolRefAttr::get(add.getContext(), kernel),
      ValueRange{add.getInputs()[0], add.getInputs()[1], norm.getInputs()[1]},
      ValueRange{}, norm.getArgsAttr(), nullptr);
  norm.getResult(0).replaceAllUsesWith(fused.getResult(1));
  norm.erase();
  sum.replaceAllUsesWith(fused.getResult(0));
  add.erase();
}

/// Add(r, rmsNormBackward(x, w, dY)#0) (either order) ->
/// rmsNormBackwardAdd(x, w, dY, r), or rmsNormBackwardAddWithBf16 taking the
/// place of the sum's first toBf16 copy too; from rmsNormBackwardBf16 (dY in
/// bf16), rmsNormBackwardBf16Add[WithBf16].
void fuseBackward(CallOp add) {
  CallOp grad;
  Value residual;
  for (auto [d, r] : {std::pair(add.getInputs()[1], add.getInputs()[0]),
                      std::pair(add.getInputs()[0], add.getInputs()[1])}) {
    auto call = d.getDefiningOp<CallOp>();
    if (call &&
        (call.getKernel() == "rmsNormBackward" ||
         call.getKernel() == "rmsNormBackwardBf16") &&
        d == call.getResult(0) && d.hasOneUse() &&
        call.getInputs().size() == 3 && call.getInits().empty() && d != r) {
      grad = call;
      residual = r;
      break;
    }
  }
  if (!grad)
    return;
  Value sum = add.getResult(0);
  CallOp copy;
  for (Operation *user : sum.getUsers()) {
    auto call = dyn_cast<CallOp>(user);
    if (call && call.getKernel() == "toBf16" &&
        (!copy || call->isBeforeInBlock(copy)))
      copy = call;
  }
  MLIRContext *ctx = add.getContext();
  OpBuilder b(add);
  SmallVector<Value> inputs(grad.getInputs());
  inputs.push_back(residual);
  // The norm's weight gradient keeps its place among the results, and its
  // skip: result 1, or 2 after the bf16 copy.
  DenseI64ArrayAttr skip;
  if (auto s = grad.getSkipAttr(); s && llvm::is_contained(s.asArrayRef(), 1))
    skip = b.getDenseI64ArrayAttr({copy ? 2 : 1});
  SmallVector<Type> types{sum.getType()};
  if (copy)
    types.push_back(copy.getResult(0).getType());
  types.push_back(grad.getResult(1).getType());
  // rmsNormBackwardBf16 reads its dY in bf16 (kern-bf16-storage): so does
  // the fused kernel.
  bool bf16Dy = grad.getKernel() == "rmsNormBackwardBf16";
  StringRef kernel =
      bf16Dy
          ? (copy ? "rmsNormBackwardBf16AddWithBf16" : "rmsNormBackwardBf16Add")
          : (copy ? "rmsNormBackwardAddWithBf16" : "rmsNormBackwardAdd");
  auto fused = CallOp::create(b, add.getLoc(), types,
                              FlatSymbolRefAttr::get(ctx, kernel), inputs,
                              ValueRange{}, grad.getArgsAttr(), skip);
  grad.getResult(1).replaceAllUsesWith(fused.getResults().back());
  sum.replaceAllUsesWith(fused.getResult(0));
  if (copy) {
    copy.getResult(0).replaceAllUsesWith(fused.getResult(1));
    copy.erase();
  }
  add.erase();
  grad.erase();
}

struct KernFuseResidualNormPass
    : kern::impl::KernFuseResidualNormPassBase<KernFuseResidualNormPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr))
      return;
    SmallVector<CallOp> adds;
    fn.walk([&](CallOp call) {
      if (isPlainAdd(call) || call.getKernel() == "addBf16")
        adds.push_back(call);
    });
    for (CallOp add : adds) {
      Value lhs = add.getInputs()[0], rhs = add.getInputs()[1];
      auto producedBy = [](Value v, StringRef kernel) {
        auto call = v.getDefiningOp<CallOp>();
        return call && call.getKernel() == kernel;
      };
      auto normGrad = [&](Value v) {
        return producedBy(v, "rmsNormBackward") ||
               producedBy(v, "rmsNormBackwardBf16");
      };
      if (add.getKernel() == "binary" && (normGrad(lhs) || normGrad(rhs)))
        fuseBackward(add);
      else
        fuseForward(add);
    }
  }
};

} // namespace
