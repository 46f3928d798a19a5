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
// The backward scales the delta's gradient the same way before the A and B
// gradients' products read it, into a bf16 copy (binaryToBf16) of a
// [tokens, out] gradient whose plain bf16 copy (toBf16) the base weight's
// product reads anyway. With a power-of-two scale the products read that
// copy and scale in their epilogue: bf16(x c) = bf16(x) c exactly, and
// every fp32 partial sum scales exactly, so the bits are the Mul's.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/TG/IR/TGOps.h"

#include <cmath>

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

/// A matmulBf16 with nothing to accumulate into: its result is the product
/// alone, which cuBLAS may scale.
bool isPlainProduct(CallOp call) {
  return call && call.getKernel() == "matmulBf16" && call.getInits().empty() &&
         !flag(call, "accumulate") && call->getNumResults() == 1;
}

/// matmulBf16Scaled of `product`'s operands and layout with `alpha`, made
/// in front of `at`, producing `types`.
CallOp scaledProduct(CallOp product, float alpha, Operation *at,
                     TypeRange types) {
  OpBuilder b(at);
  NamedAttribute args[] = {
      b.getNamedAttr("alpha", b.getF32FloatAttr(alpha)),
      b.getNamedAttr("transA", b.getBoolAttr(flag(product, "transA"))),
      b.getNamedAttr("transB", b.getBoolAttr(flag(product, "transB")))};
  return CallOp::create(b, at->getLoc(), types, "matmulBf16Scaled",
                        product.getInputs(), ValueRange{},
                        b.getDictionaryAttr(args), nullptr);
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
    if (!alpha || !isPlainProduct(product) || !productValue.hasOneUse() ||
        productValue.getType() != mul.getResult(0).getType())
      continue;
    CallOp scaled = scaledProduct(product, *alpha, mul, mul->getResultTypes());
    mul.getResult(0).replaceAllUsesWith(scaled.getResult(0));
    mul.erase();
    product.erase();
    return;
  }
}

/// Whether c is 2^k (a finite, positive power of two).
bool isPowerOfTwo(float c) {
  if (!std::isfinite(c) || c <= 0.0f)
    return false;
  int exponent = 0;
  return std::frexp(c, &exponent) == 0.5f;
}

/// Collects the products that read `v`, through reshapes (and those
/// reshapes); false when a reader is anything but a plain matmulBf16 (no
/// accumulation) or a reshape leading only to such products.
bool onlyPlainProducts(Value v, SmallVectorImpl<CallOp> &products) {
  for (Operation *user : v.getUsers()) {
    if (auto reshape = dyn_cast<tg::ReshapeOp>(user)) {
      if (!onlyPlainProducts(reshape.getResult(), products))
        return false;
      continue;
    }
    auto call = dyn_cast<CallOp>(user);
    if (!isPlainProduct(call))
      return false;
    products.push_back(call);
  }
  return true;
}

/// x's bf16 rounding where the function has it already, as a value at the
/// Mul's place (null otherwise). With s the value x reshapes (x itself if
/// none): a toBf16(s) in the same block, moved up to the Mul (the base
/// product's operand, the query and key gradients' rounded after their
/// norm's backward); or, for s = fromBf16(y) (attention's bf16 dV widened
/// for the Mul), y itself (bf16(fromBf16(y)) is y); reshaped as x.
Value roundedCopy(Value x, CallOp mul) {
  auto type = cast<RankedTensorType>(mul.getResult(0).getType());
  Value source = x;
  while (auto reshape = source.getDefiningOp<tg::ReshapeOp>())
    source = reshape.getOperand();
  if (cast<RankedTensorType>(source.getType()).getNumElements() !=
      type.getNumElements())
    return {};
  Value bits;
  for (Operation *user : source.getUsers())
    if (auto call = dyn_cast<CallOp>(user);
        call && call.getKernel() == "toBf16" && call.getInputs().size() == 1 &&
        call->getNumResults() == 1 && call->getBlock() == mul->getBlock()) {
      if (!call->isBeforeInBlock(mul))
        call->moveBefore(mul);
      bits = call.getResult(0);
      break;
    }
  if (!bits)
    if (auto widen = source.getDefiningOp<CallOp>();
        widen && widen.getKernel() == "fromBf16" &&
        widen.getInputs().size() == 1)
      bits = widen.getInputs()[0];
  if (!bits)
    return {};
  if (bits.getType() == type)
    return bits;
  OpBuilder b(mul);
  return tg::ReshapeOp::create(b, mul.getLoc(), type, bits).getResult();
}

/// Erases `v`'s producer chain of reshapes and a fromBf16 when nothing reads
/// it any more.
void eraseIfDead(Value v) {
  while (v && v.use_empty()) {
    Operation *def = v.getDefiningOp();
    if (!def ||
        !(isa<tg::ReshapeOp>(def) ||
          (isa<CallOp>(def) && cast<CallOp>(def).getKernel() == "fromBf16")) ||
        def->getNumResults() != 1)
      return;
    Value next = def->getOperand(0);
    def->erase();
    v = next;
  }
}

/// binaryToBf16 Mul(x, c) (or Mul(c, x)), c a power-of-two constant, that
/// only plain matmulBf16 products read (through reshapes), where the
/// function has x's bf16 rounding already (roundedCopy): the products read
/// that copy as matmulBf16Scaled {alpha = c}.
void fuseScaledOperand(CallOp mul) {
  if (!isBinaryOf(mul, "Mul", "binaryToBf16") || mul->getNumResults() != 1)
    return;
  for (unsigned k : {0u, 1u}) {
    Value x = mul.getInputs()[k];
    std::optional<float> alpha = scalarConstant(mul.getInputs()[1 - k]);
    if (!alpha || !isPowerOfTwo(*alpha) ||
        cast<RankedTensorType>(x.getType()).getShape() !=
            cast<RankedTensorType>(mul.getResult(0).getType()).getShape())
      continue;
    SmallVector<CallOp> products;
    if (!onlyPlainProducts(mul.getResult(0), products) || products.empty())
      continue;
    Value rounded = roundedCopy(x, mul);
    if (!rounded)
      continue;
    mul.getResult(0).replaceAllUsesWith(rounded);
    for (CallOp product : products) {
      CallOp scaled =
          scaledProduct(product, *alpha, product, product->getResultTypes());
      product.getResult(0).replaceAllUsesWith(scaled.getResult(0));
      product.erase();
    }
    mul.erase();
    eraseIfDead(x);
    return;
  }
}

struct KernFuseProductScalePass
    : kern::impl::KernFuseProductScalePassBase<KernFuseProductScalePass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr))
      return;
    SmallVector<CallOp> muls, scaledOperands;
    fn.walk([&](CallOp call) {
      if (call.getKernel() == "binary")
        muls.push_back(call);
      else if (call.getKernel() == "binaryToBf16")
        scaledOperands.push_back(call);
    });
    for (CallOp call : muls)
      fuse(call);
    for (CallOp call : scaledOperands)
      fuseScaledOperand(call);
  }
};

} // namespace
