//===- TGOps.td - tg op definitions ------------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TG_OPS
#define RONDO_TG_OPS

include "Dialect/TG/IR/TGDialect.td"
include "Dialect/TG/IR/TGInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class TG_Op<string mnemonic, list<Trait> traits = []>
    : Op<TG_Dialect, mnemonic,
         !listconcat(traits, [Pure, DeclareOpInterfaceMethods<TG_CostOpInterface,
                                  ["getFlops", "getActivationBytes"]>])>;

// A forward op: it also has a gradient rule.
class TG_DiffOp<string mnemonic, list<Trait> traits = []>
    : TG_Op<mnemonic, !listconcat(traits,
                                  [DeclareOpInterfaceMethods<TG_GradientOpInterface>])>;

def TG_Tensor : RankedTensorOf<[F32, F64, BF16, F16, I64, I32, I1]>;
def TG_FloatTensor : RankedTensorOf<[F32, F64, BF16, F16]>;
def TG_IndexTensor : RankedTensorOf<[I64, I32]>;
def TG_Scalar : 0DTensorOf<[F32]>;

//===----------------------------------------------------------------------===//
// Constants and elementwise
//===----------------------------------------------------------------------===//

def TG_ConstantOp : TG_Op<"constant", [ConstantLike, AllTypesMatch<["value", "result"]>]> {
  let summary = "A folded, data-independent tensor";
  let description = [{
    Holds a tensor that the importer computed at compile time (rotary tables,
    scalars). Parameters are never constants: they are function arguments.

    ```mlir
    %eps = tg.constant dense<1.0e-06> : tensor<f32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs TG_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def TG_UnaryOp : TG_DiffOp<"unary", [SameOperandsAndResultType]> {
  let summary = "Elementwise unary function";
  let description = [{
    Applies `kind` to every element. The GELU kinds are the fused forms the
    importer recognises (`gelu_tanh` is PyTorch's `approximate='tanh'`).

    ```mlir
    %y = tg.unary silu %x : tensor<2x32x176xf32>
    ```
  }];
  let arguments = (ins TG_UnaryKind:$kind, TG_FloatTensor:$x);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$kind $x attr-dict `:` type($x)";
}

def TG_ClampOp : TG_DiffOp<"clamp", [SameOperandsAndResultType]> {
  let summary = "Elementwise clamp into [min, max]";
  let description = [{
    `y = x < min ? min : (x > max ? max : x)`: ONNX Clip and `torch.clamp`
    (a NaN stays NaN). An absent bound is infinite. The gradient passes where
    `min <= x <= max` and is 0 elsewhere, as PyTorch's.

    ```mlir
    %y = tg.clamp %x {min = -7.0 : f32, max = 7.0 : f32} : tensor<2x32x176xf32>
    ```
  }];
  let arguments = (ins TG_FloatTensor:$x, F32Attr:$min, F32Attr:$max);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def TG_GatedActOp : TG_DiffOp<"gated_act", [AllTypesMatch<["gate", "up", "result"]>]> {
  let summary = "Gated activation of a gated MLP: act(gate) * up";
  let description = [{
    The elementwise core of SwiGLU/GeGLU MLPs (Llama, Qwen, Mistral, Phi-3):
    `act(gate) * up`, recognised from the exporter's primitives so that the
    backward reads only `gate` and `up`.

    ```mlir
    %h = tg.gated_act silu %gate, %up : tensor<2x32x176xf32>
    ```
  }];
  let arguments = (ins TG_UnaryKind:$act, TG_FloatTensor:$gate, TG_FloatTensor:$up);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$act $gate `,` $up attr-dict `:` type($gate)";
  let hasVerifier = 1;
}

def TG_BinaryOp : TG_DiffOp<"binary"> {
  let summary = "Elementwise binary function with NumPy broadcasting";
  let description = [{
    ```mlir
    %y = tg.binary mul %x, %w : (tensor<2x32x64xf32>, tensor<64xf32>) -> tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins TG_BinaryKind:$kind, TG_FloatTensor:$lhs, TG_FloatTensor:$rhs);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$kind $lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    /// The result type the operands and attributes imply; `loc` receives the
    /// reason when there is none. Shared by the verifier and the importer.
    static ::llvm::LogicalResult inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types);
  }];
  let builders = [OpBuilder<(ins "BinaryKind":$kind, "::mlir::Value":$lhs, "::mlir::Value":$rhs), [{
    build($_builder, $_state, inferBinaryType(lhs, rhs), kind, lhs, rhs);
  }]>];
  let hasVerifier = 1;
}

def TG_MatmulOp : TG_DiffOp<"matmul"> {
  let summary = "Batched matrix product with broadcast batch dimensions";
  let description = [{
    `a` is `[..., M, K]` (`[..., K, M]` with `transpose_a`), `b` is
    `[..., K, N]` (`[..., N, K]` with `transpose_b`); batch dimensions
    broadcast. A rank-1 operand is not accepted: the importer reshapes it.

    ```mlir
    %y = tg.matmul %x, %w : (tensor<2x32x64xf32>, tensor<64x176xf32>) -> tensor<2x32x176xf32>
    ```
  }];
  let arguments = (ins TG_FloatTensor:$a, TG_FloatTensor:$b,
                   UnitAttr:$transpose_a, UnitAttr:$transpose_b);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$a `,` $b attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    /// The result type the operands and attributes imply; `loc` receives the
    /// reason when there is none. Shared by the verifier and the importer.
    static ::llvm::LogicalResult inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types);
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$a, "::mlir::Value":$b, "bool":$transpose_a, "bool":$transpose_b), [{
    build($_builder, $_state, inferMatmulType(a, b, transpose_a, transpose_b), a, b, transpose_a, transpose_b);
  }]>];
  let hasVerifier = 1;
}

def TG_ReduceOp : TG_DiffOp<"reduce"> {
  let summary = "Sum or mean over axes";
  let description = [{
    ```mlir
    %m = tg.reduce mean %x {axes = array<i64: 2>, keepdims} : (tensor<2x32x64xf32>) -> tensor<2x32x1xf32>
    ```
  }];
  let arguments = (ins TG_ReduceKind:$kind, TG_FloatTensor:$x,
                   DenseI64ArrayAttr:$axes, UnitAttr:$keepdims);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$kind $x attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// The result type the operands and attributes imply; `loc` receives the
    /// reason when there is none. Shared by the verifier and the importer.
    static ::llvm::LogicalResult inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types);
  }];
  let builders = [OpBuilder<(ins "ReduceKind":$kind, "::mlir::Value":$x, "::mlir::DenseI64ArrayAttr":$axes, "bool":$keepdims), [{
    build($_builder, $_state, inferReduceType(x, axes.asArrayRef(), keepdims), kind, x, axes, keepdims);
  }]>];
  let hasVerifier = 1;
}

def TG_SelectOp : TG_DiffOp<"select"> {
  let summary = "Elementwise choice `cond ? a : b` with broadcasting";
  let arguments = (ins RankedTensorOf<[I1]>:$cond, TG_FloatTensor:$a, TG_FloatTensor:$b);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$cond `,` $a `,` $b attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    /// The result type the operands and attributes imply; `loc` receives the
    /// reason when there is none. Shared by the verifier and the importer.
    static ::llvm::LogicalResult inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types);
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$cond, "::mlir::Value":$a, "::mlir::Value":$b), [{
    build($_builder, $_state, inferSelectType(cond, a, b), cond, a, b);
  }]>];
  let hasVerifier = 1;
}

def TG_IsNanOp : TG_Op<"is_nan"> {
  let summary = "Elementwise NaN test";
  let arguments = (ins TG_FloatTensor:$x);
  let results = (outs RankedTensorOf<[I1]>:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

def TG_ReshapeOp : TG_DiffOp<"reshape"> {
  let summary = "Same elements, new static shape";
  let arguments = (ins TG_Tensor:$x);
  let results = (outs TG_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def TG_TransposeOp : TG_DiffOp<"transpose"> {
  let summary = "Permutes dimensions: result dim i is operand dim perm[i]";
  let arguments = (ins TG_Tensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs TG_Tensor:$result);
  let assemblyFormat = "$x $perm attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    /// The result type the operands and attributes imply; `loc` receives the
    /// reason when there is none. Shared by the verifier and the importer.
    static ::llvm::LogicalResult inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types);
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::DenseI64ArrayAttr":$perm), [{
    build($_builder, $_state, inferTransposeType(x, perm.asArrayRef()), x, perm);
  }]>];
  let hasVerifier = 1;
}

def TG_BroadcastOp : TG_DiffOp<"broadcast"> {
  let summary = "Broadcasts to the result shape with NumPy rules";
  let arguments = (ins TG_Tensor:$x);
  let results = (outs TG_Tensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def TG_SumToShapeOp : TG_DiffOp<"sum_to_shape"> {
  let summary = "Sums over broadcast dimensions down to the result shape";
  let description = [{
    The adjoint of `tg.broadcast`: the result shape broadcasts to the operand
    shape, and every result element is the sum of the operand elements that
    broadcasting would have copied it to.
  }];
  let arguments = (ins TG_FloatTensor:$x);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def TG_SliceOp : TG_DiffOp<"slice"> {
  let summary = "Strided slice; the result type gives the extents";
  let description = [{
    Result element `i` along dimension `d` is operand element
    `starts[d] + i * steps[d]`; starts are normalised and in bounds.
  }];
  let arguments = (ins TG_Tensor:$x, DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$steps);
  let results = (outs TG_Tensor:$result);
  let assemblyFormat = "$x $starts `step` $steps attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def TG_SliceGradOp : TG_Op<"slice_grad"> {
  let summary = "Adjoint of tg.slice: scatters into zeros of the result shape";
  let arguments = (ins TG_FloatTensor:$dy, DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$steps);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$dy $starts `step` $steps attr-dict `:` functional-type(operands, results)";
}

def TG_ConcatOp : TG_DiffOp<"concat"> {
  let summary = "Concatenation along an axis";
  let arguments = (ins Variadic<TG_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs TG_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// The result type the operands and attributes imply; `loc` receives the
    /// reason when there is none. Shared by the verifier and the importer.
    static ::llvm::LogicalResult inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types);
  }];
  let builders = [OpBuilder<(ins "::mlir::ValueRange":$inputs, "int64_t":$axis), [{
    build($_builder, $_state, inferConcatType(inputs, axis), inputs, axis);
  }]>];
  let hasVerifier = 1;
}

def TG_GatherOp : TG_DiffOp<"gather"> {
  let summary = "Row lookup `table[ids]` (embedding)";
  let description = [{
    ```mlir
    %h = tg.gather %table[%ids] : (tensor<512x64xf32>, tensor<2x32xi64>) -> tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins TG_FloatTensor:$table, TG_IndexTensor:$ids);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$table `[` $ids `]` attr-dict `:` functional-type(operands, results)";

  let extraClassDeclaration = [{
    /// The result type the operands and attributes imply; `loc` receives the
    /// reason when there is none. Shared by the verifier and the importer.
    static ::llvm::LogicalResult inferReturnTypes(::mlir::MLIRContext *context,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types);
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$table, "::mlir::Value":$ids), [{
    build($_builder, $_state, inferGatherType(table, ids), table, ids);
  }]>];
  let hasVerifier = 1;
}

def TG_GatherGradOp : TG_Op<"gather_grad"> {
  let summary = "Adjoint of tg.gather: scatter-add of rows into zeros";
  let arguments = (ins TG_IndexTensor:$ids, TG_FloatTensor:$dy);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$dy `into` $ids attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Matrix-free structures
//===----------------------------------------------------------------------===//

def TG_SoftmaxOp : TG_DiffOp<"softmax", [SameOperandsAndResultType]> {
  let summary = "Softmax over the last axis";
  let arguments = (ins TG_FloatTensor:$x);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

def TG_SoftmaxGradOp : TG_Op<"softmax_grad", [SameOperandsAndResultType]> {
  let summary = "Adjoint of tg.softmax from its output";
  let arguments = (ins TG_FloatTensor:$y, TG_FloatTensor:$dy);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$y `,` $dy attr-dict `:` type($y)";
}

def TG_ClampGradOp : TG_Op<"clamp_grad", [SameOperandsAndResultType]> {
  let summary = "Adjoint of tg.clamp: dy where min <= x <= max, else 0";
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$dy, F32Attr:$min,
                       F32Attr:$max);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x `,` $dy attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def TG_CausalMaskOp : TG_Op<"causal_mask"> {
  let summary = "The additive causal mask, symbolically";
  let description = [{
    `[..., T, S]` with 0 where key `j <= i + S - T` and `-inf` elsewhere;
    with a positive `window` (sliding-window attention) also `-inf` where
    `j <= i + S - T - window`, so that each query sees its last `window`
    keys. Absent or 0 is the full causal mask. The importer produces it
    when it recognises the exporter's mask subgraph, so that the
    `[B, 1, T, T]` tensor is never built; attention recognition absorbs it
    into `tg.attention {causal}` (with the same `window`).

    ```mlir
    %m = tg.causal_mask : tensor<1x1x32x32xf32>
    %l = tg.causal_mask {window = 8 : i64} : tensor<1x1x32x32xf32>
    ```
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$window);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The sliding window: 0 (the attribute absent) for full causal.
    int64_t getWindowSize() {
      return getWindowAttr() ? getWindowAttr().getInt() : 0;
    }
  }];
}

def TG_RotaryTableOp : TG_Op<"rotary_table"> {
  let summary = "A rotary cos or sin table, computed rather than stored";
  let description = [{
    `result[..., p, j] = scale * kind(p * freqs[j])` for positions `p` in
    `[0, T)` along the second-to-last axis, each step rounded to f32 as the
    exporter's graph does (`rondo/runtime/RotaryTable.h`). The importer
    produces it in place of a folded rotary table after checking every
    element, so that the table of a long sequence (`2 x T x head_dim`
    floats) is computed by the trainer at start-up instead of being
    embedded in it. `kind` is `cos` or `sin`.

    ```mlir
    %cos = tg.rotary_table cos freqs [1.0, 0.01, 1.0, 0.01] scale 1.0 : tensor<32x4xf32>
    ```
  }];
  let arguments = (ins TG_UnaryKind:$kind, DenseF32ArrayAttr:$freqs, F32Attr:$scale);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$kind `freqs` $freqs `scale` $scale attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def TG_RmsNormOp : TG_DiffOp<"rms_norm"> {
  let summary = "RMSNorm over the last axis";
  let description = [{
    `y = x * rsqrt(mean(x^2, -1) + eps) * w`.

    ```mlir
    %y = tg.rms_norm %x, %w {eps = 1.0e-06 : f32} : (tensor<2x32x64xf32>, tensor<64xf32>) -> tensor<2x32x64xf32>
    ```
  }];
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$w, F32Attr:$eps);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x `,` $w attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def TG_RmsNormGradOp : TG_Op<"rms_norm_grad"> {
  let summary = "Adjoint of tg.rms_norm";
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$w, TG_FloatTensor:$dy, F32Attr:$eps);
  let results = (outs TG_FloatTensor:$dx, TG_FloatTensor:$dw);
  let assemblyFormat = "$x `,` $w `,` $dy attr-dict `:` functional-type(operands, results)";
}

def TG_LayerNormOp : TG_DiffOp<"layer_norm"> {
  let summary = "LayerNorm over the last axis with weight and bias";
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$w, TG_FloatTensor:$b, F32Attr:$eps);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x `,` $w `,` $b attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def TG_LayerNormGradOp : TG_Op<"layer_norm_grad"> {
  let summary = "Adjoint of tg.layer_norm";
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$w, TG_FloatTensor:$dy, F32Attr:$eps);
  let results = (outs TG_FloatTensor:$dx, TG_FloatTensor:$dw, TG_FloatTensor:$db);
  let assemblyFormat = "$x `,` $w `,` $dy attr-dict `:` functional-type(operands, results)";
}

def TG_RotaryOp : TG_DiffOp<"rotary", [AllTypesMatch<["x", "result"]>]> {
  let summary = "Rotary position embedding (rotate-half convention)";
  let description = [{
    `y = x * cos + rotate_half(x) * sin` for `x : [B, H, T, D]` and tables
    `[T, D]`.
  }];
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$cos, TG_FloatTensor:$sin);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x `,` $cos `,` $sin attr-dict `:` type($x) `,` type($cos) `,` type($sin)";
  let hasVerifier = 1;
}

def TG_RotaryGradOp : TG_Op<"rotary_grad", [AllTypesMatch<["dy", "result"]>]> {
  let summary = "Adjoint of tg.rotary";
  let arguments = (ins TG_FloatTensor:$dy, TG_FloatTensor:$cos, TG_FloatTensor:$sin);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$dy `,` $cos `,` $sin attr-dict `:` type($dy) `,` type($cos) `,` type($sin)";
}

def TG_AttentionOp : TG_DiffOp<"attention"> {
  let summary = "Scaled dot-product attention with grouped-query heads";
  let description = [{
    `q : [B, Hq, T, D]`, `k, v : [B, Hkv, S, D]`, `Hq % Hkv == 0`. Returns the
    output and the per-row log-sum-exp of the scores, which the backward
    reuses. A positive `window` (only with `causal`) restricts query `i` to
    the keys `i + S - T - window < j <= i + S - T`: sliding-window
    attention, the band of `tg.causal_mask {window}`. Absent or 0 is full
    causal attention.

    An optional `sinks : [Hq]` operand (GPT-OSS's attention sinks) is one
    learned logit per query head that joins every row's softmax denominator
    and contributes no value: `p_ij = exp(s_ij) / (exp(sinks[h]) + sum_k
    exp(s_ik))`; `lse` then includes the sink. It combines with `window`.

    ```mlir
    %o, %lse = tg.attention %q, %k, %v {causal, scale = 2.500000e-01 : f32}
        : (tensor<2x4x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>)
        -> (tensor<2x4x32x16xf32>, tensor<2x4x32xf32>)
    %o2, %lse2 = tg.attention %q, %k, %v sinks %s
        {causal, scale = 2.500000e-01 : f32, window = 8 : i64}
        : (tensor<2x4x32x16xf32>, tensor<2x2x32x16xf32>, tensor<2x2x32x16xf32>,
           tensor<4xf32>) -> (tensor<2x4x32x16xf32>, tensor<2x4x32xf32>)
    ```
  }];
  let arguments = (ins TG_FloatTensor:$q, TG_FloatTensor:$k, TG_FloatTensor:$v,
                   Optional<TG_FloatTensor>:$sinks,
                   UnitAttr:$causal, F32Attr:$scale,
                   OptionalAttr<I64Attr>:$window);
  let results = (outs TG_FloatTensor:$out, TG_FloatTensor:$lse);
  let assemblyFormat = "$q `,` $k `,` $v (`sinks` $sinks^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The sliding window: 0 (the attribute absent) for full causal.
    int64_t getWindowSize() {
      return getWindowAttr() ? getWindowAttr().getInt() : 0;
    }
  }];
}

def TG_AttentionGradOp : TG_Op<"attention_grad"> {
  let summary = "Adjoint of tg.attention";
  let description = [{
    With the forward's `sinks` it also returns their gradient `dsinks : [Hq]`,
    `dsinks[h] = -sum_{b,i} exp(sinks[h] - lse[b,h,i]) * (dout . out)[b,h,i]`
    (the sink column's softmax gradient, its dP being 0).
  }];
  let arguments = (ins TG_FloatTensor:$q, TG_FloatTensor:$k, TG_FloatTensor:$v,
                   TG_FloatTensor:$out, TG_FloatTensor:$lse, TG_FloatTensor:$dout,
                   Optional<TG_FloatTensor>:$sinks,
                   UnitAttr:$causal, F32Attr:$scale,
                   OptionalAttr<I64Attr>:$window);
  let results = (outs TG_FloatTensor:$dq, TG_FloatTensor:$dk, TG_FloatTensor:$dv,
                 Optional<TG_FloatTensor>:$dsinks);
  let assemblyFormat = "$q `,` $k `,` $v `,` $out `,` $lse `,` $dout (`sinks` $sinks^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The sliding window: 0 (the attribute absent) for full causal.
    int64_t getWindowSize() {
      return getWindowAttr() ? getWindowAttr().getInt() : 0;
    }
  }];
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

def TG_CrossEntropyOp : TG_DiffOp<"cross_entropy"> {
  let summary = "Summed cross-entropy of logits rows against labels";
  let description = [{
    `logits : [N, V]`, `labels : [N]`; rows whose label is `ignore_index`
    contribute nothing. Returns the sum; the mean's denominator is the
    global count of targets, which the trainer applies as the loss scale.
  }];
  let arguments = (ins TG_FloatTensor:$logits, TG_IndexTensor:$labels, I64Attr:$ignore_index);
  let results = (outs TG_Scalar:$loss_sum);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def TG_CrossEntropyGradOp : TG_Op<"cross_entropy_grad"> {
  let summary = "Adjoint of tg.cross_entropy";
  let arguments = (ins TG_FloatTensor:$logits, TG_IndexTensor:$labels, TG_Scalar:$dloss,
                   I64Attr:$ignore_index);
  let results = (outs TG_FloatTensor:$dlogits);
  let assemblyFormat = "$logits `,` $labels `,` $dloss attr-dict `:` functional-type(operands, results)";
}

def TG_LinearCrossEntropyOp : TG_DiffOp<"linear_cross_entropy"> {
  let summary = "Fused projection + cross-entropy, chunked over rows";
  let description = [{
    `sum_r CE(h[r] · W, labels[r])` for `h : [N, D]`, `W : [D, V]` (`[V, D]`
    with `transpose_w`). Logits are produced `chunk_rows` rows at a time and
    never exist as an `[N, V]` tensor; this is the form the causal-LM loss
    takes after `tg-fuse-linear-cross-entropy`.
  }];
  let arguments = (ins TG_FloatTensor:$h, TG_FloatTensor:$w, TG_IndexTensor:$labels,
                   UnitAttr:$transpose_w, I64Attr:$ignore_index, I64Attr:$chunk_rows);
  let results = (outs TG_Scalar:$loss_sum);
  let assemblyFormat = "$h `,` $w `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def TG_LinearCrossEntropyGradOp : TG_Op<"linear_cross_entropy_grad"> {
  let summary = "Adjoint of tg.linear_cross_entropy";
  let arguments = (ins TG_FloatTensor:$h, TG_FloatTensor:$w, TG_IndexTensor:$labels,
                   TG_Scalar:$dloss, UnitAttr:$transpose_w, I64Attr:$ignore_index,
                   I64Attr:$chunk_rows);
  let results = (outs TG_FloatTensor:$dh, TG_FloatTensor:$dw);
  let assemblyFormat = "$h `,` $w `,` $labels `,` $dloss attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Mixture of experts: routing and grouped products (TGExpertOps.cpp)
//===----------------------------------------------------------------------===//

def TG_TopKOp : TG_DiffOp<"top_k"> {
  let summary = "The k largest elements along the last axis and their positions";
  let description = [{
    `values[..., j]` is the j-th largest element of each row of `x` (last
    axis), in descending order; `indices[..., j]` (i64) its position (ties:
    the lower position first). The router of a mixture of experts. The
    gradient scatters the values' gradient back to the chosen positions;
    the indices have none.

    ```mlir
    %v, %i = tg.top_k %p {k = 2 : i64} : (tensor<64x4xf32>) -> (tensor<64x2xf32>, tensor<64x2xi64>)
    ```
  }];
  let arguments = (ins TG_FloatTensor:$x, I64Attr:$k);
  let results = (outs TG_FloatTensor:$values, TG_IndexTensor:$indices);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "int64_t":$k)>];
  let hasVerifier = 1;
}

def TG_TopKGradOp : TG_Op<"top_k_grad"> {
  let summary = "Adjoint of tg.top_k: scatters dvalues to the chosen positions";
  let description = [{
    `result[..., indices[..., j]] = dvalues[..., j]`, zero elsewhere; the
    result has the shape of tg.top_k's operand.
  }];
  let arguments = (ins TG_IndexTensor:$indices, TG_FloatTensor:$dvalues);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$dvalues `into` $indices attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def TG_ExpertMatmulOp : TG_DiffOp<"expert_matmul"> {
  let summary = "Row-wise product with a routed expert's matrix (grouped GEMM)";
  let description = [{
    `x : [N, K]`, `ids : [N]` (i64, in `[0, E)`), `w : [E, K, M]`
    (`[E, M, K]` with `transpose_w`); `result[n] = x[n] · op(w[ids[n]])`,
    `[N, M]`. One row per (token, slot) pair of a mixture of experts: what an
    exported `GatherND(experts, ids)` followed by a batched MatMul computes,
    without the `[N, K, M]` copy of the gathered matrices. Kernels sort the
    rows by expert (a counting sort, stable) and run one GEMM per expert.

    ```mlir
    %y = tg.expert_matmul %x, %w, %ids {transpose_w} : (tensor<128x64xf32>, tensor<4x96x64xf32>, tensor<128xi64>) -> tensor<128x96xf32>
    ```
  }];
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$w, TG_IndexTensor:$ids,
                   UnitAttr:$transpose_w);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x `,` $w `,` $ids attr-dict `:` functional-type(operands, results)";
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$w,
                                 "::mlir::Value":$ids, "bool":$transpose_w)>];
  let hasVerifier = 1;
}

def TG_ExpertMatmulWGradOp : TG_Op<"expert_matmul_wgrad"> {
  let summary = "Weight gradient of tg.expert_matmul, summed per expert";
  let description = [{
    `result[e] = sum over n with ids[n] == e of op(x[n]ᵀ · dy[n])`: `[E, K, M]`
    (`[E, M, K]`, i.e. `dy[n]ᵀ · x[n]`, with `transpose_w`), the type of the
    forward's `w`. An expert no row chose gets zeros. Rows are summed per
    expert in ascending row order.
  }];
  let arguments = (ins TG_FloatTensor:$x, TG_FloatTensor:$dy, TG_IndexTensor:$ids,
                   UnitAttr:$transpose_w);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$x `,` $dy `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient helpers
//===----------------------------------------------------------------------===//

def TG_UnaryGradOp : TG_Op<"unary_grad", [AllTypesMatch<["x", "dy", "result"]>]> {
  let summary = "dy * f'(x) for a tg.unary kind";
  let arguments = (ins TG_UnaryKind:$kind, TG_FloatTensor:$x, TG_FloatTensor:$dy);
  let results = (outs TG_FloatTensor:$result);
  let assemblyFormat = "$kind $x `,` $dy attr-dict `:` type($x)";
}

def TG_GatedActGradOp : TG_Op<"gated_act_grad",
    [AllTypesMatch<["gate", "up", "dy", "dgate", "dup"]>]> {
  let summary = "Both operand gradients of tg.gated_act";
  let description = [{
    `dgate = act'(gate) * (dy * up)` and `dup = dy * act(gate)`, the gradient
    of `tg.gated_act`: one op, so that its kernel reads `gate`, `up` and `dy`
    once and writes both gradients in the same pass (the composition of
    unary and binary ops it replaces read `gate` twice and wrote two
    temporaries). A result nothing reads is not computed.

    ```mlir
    %dg, %du = tg.gated_act_grad silu %gate, %up, %dy : tensor<2x32x176xf32>
    ```
  }];
  let arguments = (ins TG_UnaryKind:$act, TG_FloatTensor:$gate, TG_FloatTensor:$up,
                       TG_FloatTensor:$dy);
  let results = (outs TG_FloatTensor:$dgate, TG_FloatTensor:$dup);
  let assemblyFormat = "$act $gate `,` $up `,` $dy attr-dict `:` type($gate)";
}

def TG_BinaryGradOp : TG_Op<"binary_grad"> {
  let summary = "Both operand gradients of a tg.binary, reduced to their shapes";
  let arguments = (ins TG_BinaryKind:$kind, TG_FloatTensor:$lhs, TG_FloatTensor:$rhs,
                   TG_FloatTensor:$dy);
  let results = (outs TG_FloatTensor:$dlhs, TG_FloatTensor:$drhs);
  let assemblyFormat = "$kind $lhs `,` $rhs `,` $dy attr-dict `:` functional-type(operands, results)";
}

#endif // RONDO_TG_OPS
