//===- TGInterfaces.td - Cost and gradient interfaces ------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TG_INTERFACES
#define RONDO_TG_INTERFACES

include "mlir/IR/OpBase.td"

def TG_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::rondo::tg";
  let description = [{
    The analytic cost of one execution of the op, derived from its static
    types: floating-point operations, bytes read and written (at the
    element sizes of the IR), and the bytes of activations the op's backward
    needs kept alive (what a pipeline stage must hold per microbatch when it
    does not recompute). Device-specific timing is the cost model's job
    (compiler/CostModel); this interface only counts.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations of one execution.",
      "double", "getFlops">,
    InterfaceMethod<"Bytes read from operands.",
      "double", "getBytesRead", (ins), [{}], [{
        return ::rondo::tg::detail::sumTensorBytes($_op->getOperands());
      }]>,
    InterfaceMethod<"Bytes written to results.",
      "double", "getBytesWritten", (ins), [{}], [{
        return ::rondo::tg::detail::sumTensorBytes($_op->getResults());
      }]>,
    InterfaceMethod<[{Bytes that the op's gradient rule needs saved from the
      forward pass (operands or results it reads).}],
      "double", "getActivationBytes">,
  ];
}

def TG_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::rondo::tg";
  let description = [{
    Reverse-mode rule of an op: given the gradients of its results (a null
    Value for a result that does not reach the loss), build `tg` ops that
    compute the gradient of each operand. `operandGrads` is filled with one
    entry per operand; entries stay null for operands without a gradient
    (integer operands, or operands that `needsGradient` says are not
    needed, which the rule may use to skip work).
  }];
  let methods = [
    InterfaceMethod<"Builds the vector-Jacobian product.",
      "::mlir::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::ArrayRef<bool>":$needsGradient,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

#endif // RONDO_TG_INTERFACES
