//===- TGDialect.h - The tensor graph dialect -------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_TG_IR_TGDIALECT_H
#define RONDO_DIALECTS_TG_IR_TGDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/ValueRange.h"

#include "Dialect/TG/IR/TGDialect.h.inc"
#include "Dialect/TG/IR/TGEnums.h.inc"
#define GET_ATTRDEF_CLASSES
#include "Dialect/TG/IR/TGAttrs.h.inc"

namespace rondo::tg {
/// Attribute names shared by the importer, passes and emitter. The dialect
/// verifies each one's type and placement (TGDialect.cpp), so readers may
/// rely on them; any other `tg.` key is an error.
inline constexpr llvm::StringLiteral kParamAttr = "tg.param";
inline constexpr llvm::StringLiteral kTrainableAttr = "tg.trainable";
/// A parameter stored as fp32 ONNX external data: frozen, the trainer can
/// use it in place from a read-only mapping (trainer --map-weights), so the
/// planner need not count it as host memory the trainer allocates.
inline constexpr llvm::StringLiteral kExternalF32Attr = "tg.external_f32";
inline constexpr llvm::StringLiteral kTorchNameAttr = "tg.torch_name";
/// Hugging Face interop (the trainer's --export-safetensors): every PyTorch
/// name one initializer stands for, when the exporter merged several (a tied
/// embedding is both `model.embed_tokens.weight` and `lm_head.weight`), and
/// a unit attribute on weights stored as the transpose of PyTorch's tensor
/// (the exporter pre-transposes nn.Linear weights to feed MatMul directly).
inline constexpr llvm::StringLiteral kTorchAliasesAttr = "tg.torch_aliases";
inline constexpr llvm::StringLiteral kTorchTransposedAttr =
    "tg.torch_transposed";
inline constexpr llvm::StringLiteral kInputAttr = "tg.input";
inline constexpr llvm::StringLiteral kLabelsAttr = "tg.labels";
inline constexpr llvm::StringLiteral kLossScaleAttr = "tg.loss_scale";
inline constexpr llvm::StringLiteral kResultNameAttr = "tg.result";
/// On a result of the training function (and of a stage function): the
/// `tg.param` name of the parameter whose gradient it is (tg-autodiff).
inline constexpr llvm::StringLiteral kGradOfAttr = "tg.grad_of";
/// On the module: the loss tg-attach-loss built ("output", the model's own,
/// or "causal-lm") and the model file the importer read.
inline constexpr llvm::StringLiteral kLossAttr = "tg.loss";
inline constexpr llvm::StringLiteral kSourceAttr = "tg.source";
/// LoRA adapters (tg-insert-lora): on an adapter argument, the `tg.param`
/// name of the weight it adapts and which factor it is ("A" or "B"); the
/// unit attribute marks a base weight stored [out, in] (its uses transpose
/// it). On the module, the adapter configuration (rank, alpha, dropout,
/// targets). `tg.lora_parameter` marks the adapters of a base that PEFT
/// targets as an nn.Parameter (`target_parameters`: stacked experts, whose
/// adapters are [E, d1, r] and [E, r, d2] on the stored layout, and
/// routers), not as an nn.Linear (`target_modules`).
inline constexpr llvm::StringLiteral kLoraOfAttr = "tg.lora_of";
inline constexpr llvm::StringLiteral kLoraFactorAttr = "tg.lora_factor";
inline constexpr llvm::StringLiteral kLoraBaseTransposedAttr =
    "tg.lora_base_transposed";
inline constexpr llvm::StringLiteral kLoraParameterAttr = "tg.lora_parameter";
inline constexpr llvm::StringLiteral kLoraConfigAttr = "tg.lora";
} // namespace rondo::tg

#endif // RONDO_DIALECTS_TG_IR_TGDIALECT_H
