//===- FuseProductScale.cpp - The kern-fuse-product-scale pass ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// LoRA adds (x A) B scaled by alpha / rank to every adapted projection: the
// B product writes [tokens, out] in fp32 and a Mul kernel reads and writes
// all of it again to scale it, 465 ms of an 8.9 s step for the Qwen3-8B
// shape at 32K tokens. cuBLAS scales in its epilogue for free (alpha), so a
// product whose only reader multiplies it by a constant scalar becomes
// matmulBf16Scaled.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/TG/IR/TGOps.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNFUSEPRODUCTSCALEPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

/// The value of a one-element fp32 constant, if `v` is one.
std::optional<float> scalarConstant(Value v) {
  auto constant = v.getDefiningOp<tg::ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto value = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!value || value.getNumElements() != 1 || !value.getElementType().isF32())
    return std::nullopt;
  return value.getSplatValue<float>();
}

bool flag(CallOp call, StringRef name) {
  auto value = call.getArgs()
                   ? dyn_cast_or_null<BoolAttr>(call.getArgsAttr().get(name))
                   : BoolAttr();
  return value && value.getValue();
}

/// binary Mul(product, c) or Mul(c, product) -> matmulBf16Scaled(a, b)
/// {alpha = c}, when the product is a plain matmulBf16 (nothing to
/// accumulate into) that nothing else reads.
void fuse(CallOp mul) {
  if (!isBinaryOf(mul, "Mul"))
    return;
  for (unsigned k : {0u, 1u}) {
    Value productValue = mul.getInputs()[k];
    std::optional<float> alpha = scalarConstant(mul.getInputs()[1 - k]);
    auto product = productValue.getDefiningOp<CallOp>();
    if (!alpha || !product || product.getKernel() != "matmulBf16" ||
        !product.getInits().empty() || flag(product, "accumulate") ||
        !productValue.hasOneUse() ||
        productValue.getType() != mul.getResult(0).getType())
      continue;
    OpBuilder b(mul);
    NamedAttribute args[] = {
        b.getNamedAttr("alpha", b.getF32FloatAttr(*alpha)),
        b.getNamedAttr("transA", b.getBoolAttr(flag(product, "transA"))),
        b.getNamedAttr("transB", b.getBoolAttr(flag(product, "transB")))};
    auto scaled = CallOp::create(
        b, mul.getLoc(), mul->getResultTypes(), "matmulBf16Scaled",
        product.getInputs(), ValueRange{}, b.getDictionaryAttr(args), nullptr);
    mul.getResult(0).replaceAllUsesWith(scaled.getResult(0));
    mul.erase();
    product.erase();
    return;
  }
}

struct KernFuseProductScalePass
    : kern::impl::KernFuseProductScalePassBase<KernFuseProductScalePass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr))
      return;
    SmallVector<CallOp> muls;
    fn.walk([&](CallOp call) {
      if (call.getKernel() == "binary")
        muls.push_back(call);
    });
    for (CallOp call : muls)
      fuse(call);
  }
};

} // namespace
