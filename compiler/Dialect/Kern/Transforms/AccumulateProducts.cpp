//===- AccumulateProducts.cpp - The kern-accumulate-products pass ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Rewrites `x + a·b` (a binary Add of a product and a value nothing else
// reads) as the product accumulating into x, in program order, so that a
// chain x + p1 + p2 becomes two accumulating products.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNACCUMULATEPRODUCTSPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

bool isF32(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType().isF32();
}

/// A product that may take an accumulator: a matmul nothing else reads,
/// with no accumulator of its own.
CallOp freeProduct(Value v) {
  auto call = v.getDefiningOp<CallOp>();
  if (!call || call.getKernel() != "matmul" || !call.getInits().empty() ||
      call->getNumResults() != 1 || !v.hasOneUse() || !call.getArgs())
    return {};
  auto accumulate =
      dyn_cast_or_null<BoolAttr>(call.getArgsAttr().get("accumulate"));
  return accumulate && !accumulate.getValue() ? call : CallOp();
}

/// A value the product may add into in place: computed by a kernel call
/// (not an argument, whose buffer belongs to the exec program, nor a
/// reshape, which aliases another value) and read by nothing else.
bool isFreeAccumulator(Value v) {
  return v.getDefiningOp<CallOp>() && v.hasOneUse();
}

struct KernAccumulateProductsPass
    : kern::impl::KernAccumulateProductsPassBase<KernAccumulateProductsPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr))
      return;
    SmallVector<CallOp> adds;
    fn.walk([&](CallOp call) {
      if (isBinaryOf(call, "Add") && call->getNumResults() == 1)
        adds.push_back(call);
    });
    for (CallOp add : adds) {
      Value lhs = add.getInputs()[0], rhs = add.getInputs()[1];
      Type type = add.getResult(0).getType();
      if (lhs.getType() != type || rhs.getType() != type || !isF32(lhs))
        continue; // broadcasting adds stay
      // Accumulate the later product into the other operand.
      CallOp product;
      Value into;
      for (auto [p, x] : {std::pair(rhs, lhs), std::pair(lhs, rhs)}) {
        if (CallOp c = freeProduct(p); c && isFreeAccumulator(x) && p != x) {
          product = c;
          into = x;
          break;
        }
      }
      if (!product)
        continue;
      OpBuilder b(add);
      SmallVector<NamedAttribute> args;
      for (NamedAttribute a : product.getArgsAttr())
        args.push_back(a.getName() == "accumulate"
                           ? b.getNamedAttr("accumulate", b.getBoolAttr(true))
                           : a);
      auto sum =
          CallOp::create(b, add.getLoc(), TypeRange{type},
                         product.getKernelAttr(), product.getInputs(),
                         ValueRange{into}, b.getDictionaryAttr(args), nullptr);
      add.getResult(0).replaceAllUsesWith(sum.getResult(0));
      add.erase();
      product.erase();
    }
  }
};

} // namespace
