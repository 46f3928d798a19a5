//===- TGDialect.td - The tensor graph dialect -------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TG_DIALECT
#define RONDO_TG_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def TG_Dialect : Dialect {
  let name = "tg";
  let cppNamespace = "::rondo::tg";
  let summary = "Tensor graph: the value-semantics model Rondo trains";
  let description = [{
    `tg` is the first IR of the Rondo pipeline. The ONNX importer maps the
    ONNX operator set onto a small canonical op set: elementwise `tg.unary`
    and `tg.binary` with an operation kind, `tg.matmul`, layout ops, and the
    fused structures that later phases need whole (`tg.rms_norm`,
    `tg.rotary`, `tg.attention`, `tg.linear_cross_entropy`, ...).

    Invariants:
    - every tensor is ranked with static shape; compute is fp32 (bf16
      storage is a later lowering decision), ids and labels are i64;
    - model parameters are function arguments carrying `tg.param` (the ONNX
      initializer name) and, when trainable, `tg.trainable`;
    - data-independent computation has been folded by the importer, so only
      computation that depends on the token data remains; large
      data-independent tensors such as the causal mask are represented
      symbolically (`tg.causal_mask`), never materialised.

    Every op implements `CostOpInterface`, and every differentiable op
    `GradientOpInterface`, which builds its vector-Jacobian product from other
    `tg` ops.
  }];
  let hasConstantMaterializer = 1;
  // The `tg.` discardable attributes (TGDialect.h) are checked where they
  // sit: on function arguments, on function results, on the module.
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
}

def TG_LoraAttr : AttrDef<TG_Dialect, "Lora"> {
  let mnemonic = "lora";
  let summary = "A module's LoRA configuration (tg-insert-lora)";
  let description = [{
    The adapters `tg-insert-lora` added: their rank, the scale numerator
    alpha (adapters add `(alpha / rank) * (x A) B`), the dropout (0: the
    trainer supports no other) and the targets as the user gave them (roles
    joined by `+`, or a regular expression on weight names). The trainer's
    initialisation, messages and PEFT's adapter_config.json read it.

    ```mlir
    module attributes {tg.lora = #tg.lora<rank = 8, alpha = 1.6e+01 : f64,
                                          dropout = 0.0 : f64,
                                          targets = "all-linear">}
    ```
  }];
  let parameters = (ins "int64_t":$rank, "::mlir::FloatAttr":$alpha,
                        "::mlir::FloatAttr":$dropout,
                        StringRefParameter<"the targets">:$targets);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def TG_UnaryKind : I32EnumAttr<"UnaryKind", "elementwise unary function", [
    I32EnumAttrCase<"neg", 0>, I32EnumAttrCase<"exp", 1>,
    I32EnumAttrCase<"log", 2>, I32EnumAttrCase<"sqrt", 3>,
    I32EnumAttrCase<"rsqrt", 4>, I32EnumAttrCase<"reciprocal", 5>,
    I32EnumAttrCase<"sigmoid", 6>, I32EnumAttrCase<"tanh", 7>,
    I32EnumAttrCase<"relu", 8>, I32EnumAttrCase<"silu", 9>,
    I32EnumAttrCase<"gelu_tanh", 10>, I32EnumAttrCase<"gelu_erf", 11>,
    I32EnumAttrCase<"abs", 12>, I32EnumAttrCase<"sin", 13>,
    I32EnumAttrCase<"cos", 14>]> {
  let cppNamespace = "::rondo::tg";
}

def TG_BinaryKind : I32EnumAttr<"BinaryKind", "elementwise binary function", [
    I32EnumAttrCase<"add", 0>, I32EnumAttrCase<"sub", 1>,
    I32EnumAttrCase<"mul", 2>, I32EnumAttrCase<"div", 3>,
    I32EnumAttrCase<"pow", 4>, I32EnumAttrCase<"max", 5>,
    I32EnumAttrCase<"min", 6>]> {
  let cppNamespace = "::rondo::tg";
}

def TG_ReduceKind : I32EnumAttr<"ReduceKind", "reduction", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>]> {
  let cppNamespace = "::rondo::tg";
}

#endif // RONDO_TG_DIALECT
