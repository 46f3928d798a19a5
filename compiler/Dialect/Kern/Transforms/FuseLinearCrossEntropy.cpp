//===- FuseLinearCrossEntropy.cpp - kern-fuse-linear-cross-entropy --------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The fused LM head's backward recomputes every chunk's logits, the largest
// product of the step, which the forward has just computed and dropped. When
// the loss and its gradient are in one stage function (the tail stage always
// holds both), the two calls become one at the loss's place: each chunk's
// logits serve the loss and then become its gradient.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNFUSELINEARCROSSENTROPYPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

constexpr StringLiteral kForward = "linearCrossEntropy";
constexpr StringLiteral kBackward = "linearCrossEntropyBackward";
constexpr StringLiteral kFused = "linearCrossEntropyWithGrad";

/// Whether `v` is available at `at`: an argument of the function, or the
/// result of an operation before `at` in its block.
bool availableAt(Value v, Operation *at) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getOwner() == at->getBlock() ||
           arg.getOwner()->getParentOp()->isProperAncestor(at);
  Operation *def = v.getDefiningOp();
  return def->getBlock() == at->getBlock() && def->isBeforeInBlock(at);
}

/// The forward call that computed the same loss as `backward`: the same
/// hidden states, weight and labels, the same chunking, in the same block.
CallOp matchingForward(CallOp backward) {
  ValueRange in = backward.getInputs();
  if (in.size() < 3 || !backward.getInits().empty())
    return {};
  CallOp forward;
  for (Operation *user : in[2].getUsers()) {
    auto call = dyn_cast<CallOp>(user);
    if (!call || call.getKernel() != kForward ||
        call->getBlock() != backward->getBlock() ||
        !call->isBeforeInBlock(backward) || call.getInputs().size() != 3 ||
        call.getInputs() != in.take_front(3))
      continue;
    DictionaryAttr fa = call.getArgsAttr(), ba = backward.getArgsAttr();
    if (!fa || !ba)
      continue;
    bool sameArgs = llvm::all_of(fa, [&](NamedAttribute a) {
      return ba.get(a.getName()) == a.getValue();
    });
    if (sameArgs)
      forward = call;
  }
  return forward;
}

struct KernFuseLinearCrossEntropyPass
    : kern::impl::KernFuseLinearCrossEntropyPassBase<
          KernFuseLinearCrossEntropyPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn->hasAttr(exec::kStageAttr))
      fuseLinearCrossEntropy(fn);
  }
};

} // namespace

void rondo::kern::fuseLinearCrossEntropy(func::FuncOp fn) {
  SmallVector<CallOp> backwards;
  fn.walk([&](CallOp call) {
    if (call.getKernel() == kBackward)
      backwards.push_back(call);
  });
  for (CallOp backward : backwards) {
    CallOp forward = matchingForward(backward);
    if (!forward || forward->getNumResults() != 1 ||
        !llvm::all_of(backward.getInputs().drop_front(3),
                      [&](Value v) { return availableAt(v, forward); }))
      continue;
    OpBuilder b(forward);
    SmallVector<Type> types{forward.getResult(0).getType()};
    llvm::append_range(types, backward->getResultTypes());
    DenseI64ArrayAttr skip;
    if (std::optional<ArrayRef<int64_t>> s = backward.getSkip()) {
      SmallVector<int64_t> shifted;
      for (int64_t i : *s)
        shifted.push_back(i + 1);
      skip = b.getDenseI64ArrayAttr(shifted);
    }
    auto fused =
        CallOp::create(b, forward.getLoc(), types, kFused, backward.getInputs(),
                       ValueRange{}, backward.getArgsAttr(), skip);
    forward.getResult(0).replaceAllUsesWith(fused.getResult(0));
    for (auto [from, to] :
         llvm::zip(backward.getResults(), fused.getResults().drop_front()))
      from.replaceAllUsesWith(to);
    backward.erase();
    forward.erase();
  }
}
