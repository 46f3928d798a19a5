//===- ConvertTGToKern.cpp - The convert-tg-to-kern pass ------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One walk applies the family patterns (no folding, no dead-code removal:
// the stage function keeps exactly the computations it had), then the
// contract check names any op left without a kernel.
//
//===----------------------------------------------------------------------===//

#include "Patterns.h"

#include "Dialect/Exec/IR/ExecOps.h"

#include "mlir/Transforms/WalkPatternRewriteDriver.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_CONVERTTGTOKERNPASS
#include "Conversion/TGToKern/Passes.h.inc"
} // namespace rondo::kern

void rondo::kern::populateTGToKernPatterns(RewritePatternSet &patterns) {
  populateTGToKernElementwisePatterns(patterns);
  populateTGToKernDataMovementPatterns(patterns);
  populateTGToKernStructurePatterns(patterns);
  populateTGToKernLossPatterns(patterns);
}

namespace {
/// Ops a kernel-level function keeps: storage, not computation.
bool isStorageOp(Operation *op) {
  return isa<tg::ConstantOp, tg::RotaryTableOp, tg::ReshapeOp, func::ReturnOp>(
      op);
}
} // namespace

LogicalResult rondo::kern::convertToKernelCalls(func::FuncOp func) {
  func.getContext()->getOrLoadDialect<KernDialect>();
  RewritePatternSet patterns(func.getContext());
  populateTGToKernPatterns(patterns);
  walkAndApplyPatterns(func, FrozenRewritePatternSet(std::move(patterns)));
  WalkResult contract = func.walk([](Operation *op) {
    if (isa<func::FuncOp, CallOp>(op) || isStorageOp(op))
      return WalkResult::advance();
    op->emitError("no kernel implements '")
        << op->getName()
        << "' (runtime/kernels/cpu/KernelList.def): the kernel-call layer "
           "(convert-tg-to-kern) cannot lower it";
    return WalkResult::interrupt();
  });
  return failure(contract.wasInterrupted());
}

namespace {
struct ConvertTGToKernPass
    : kern::impl::ConvertTGToKernPassBase<ConvertTGToKernPass> {
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (func->hasAttr(exec::kStageAttr) && failed(convertToKernelCalls(func)))
        return signalPassFailure();
  }
};
} // namespace
