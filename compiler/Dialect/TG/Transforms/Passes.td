//===- Passes.td - tg passes -------------------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TG_PASSES
#define RONDO_TG_PASSES

include "mlir/Pass/PassBase.td"

def TGFuseNormsPass : Pass<"tg-fuse-norms", "mlir::func::FuncOp"> {
  let summary = "Recognise RMSNorm written as primitives";
  let description = [{
    Rewrites the exporter's decomposed RMSNorm,
    `w * (x * reciprocal(sqrt(mean(x^2) + eps)))` (also with `rsqrt`, a
    division, or `x * x`), into `tg.rms_norm`, which has one kernel and one
    gradient rule.

    ```mlir
    %p = tg.binary pow %x, %two
    %m = tg.reduce mean %p {axes = array<i64: 2>, keepdims}
    %a = tg.binary add %m, %eps
    %s = tg.unary sqrt %a
    %r = tg.unary reciprocal %s
    %n = tg.binary mul %x, %r
    %y = tg.binary mul %w, %n
    // becomes
    %y = tg.rms_norm %x, %w {eps = ...}
    ```
  }];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGFuseActivationsPass : Pass<"tg-fuse-activations", "mlir::func::FuncOp"> {
  let summary = "Recognise SiLU and GELU written as primitives";
  let description = [{
    `x * sigmoid(x)` becomes `tg.unary silu`; the tanh-polynomial GELU
    (`0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, GPT-2's "gelu_new")
    becomes `tg.unary gelu_tanh`; `act(gate) * up`, the core of a gated
    MLP, becomes `tg.gated_act act %gate, %up`.
  }];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGFuseRotaryPass : Pass<"tg-fuse-rotary", "mlir::func::FuncOp"> {
  let summary = "Recognise rotary position embeddings";
  let description = [{
    Rewrites `x * cos + concat(-x[..., D/2:], x[..., :D/2]) * sin`, with
    f32 tables that are constants or `tg.rotary_table`s, into
    `tg.rotary %x, %cos, %sin` with `[T, D]` tables.
  }];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGFuseAttentionPass : Pass<"tg-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Recognise causal grouped-query attention";
  let description = [{
    Rewrites `softmax(q k^T * scale + causal_mask) v`, with the exporter's
    key/value head repetition (`reshape(broadcast(...))`), its split scaling
    of q and k, and its `select(is_nan(p), 0, p)` guard, into one
    `tg.attention {causal}` on the unrepeated key/value heads; a windowed
    `tg.causal_mask {window}` (sliding-window attention) gives
    `tg.attention {causal, window}`. The guard is dead for causal masks,
    windowed or not: every row attends to at least its own position.
  }];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGAttachLossPass : Pass<"tg-attach-loss", "mlir::ModuleOp"> {
  let summary = "Turn the forward function into a function returning the loss";
  let description = [{
    With `kind=causal-lm` (the default), the single `[B, T, V]` result of
    `@main` is scored against labels: `logits[:, :-1]` against
    `labels[:, 1:]`, ignore index -100, as Hugging Face computes it. The
    function gains a `%labels` argument (`tg.labels`) and a `%loss_scale`
    scalar (`tg.loss_scale`, 1 / global target count, applied by the
    gradient seed), and returns the summed loss. With `kind=output:NAME` the
    named scalar result is the loss.
  }];
  let options = [
    Option<"kind", "kind", "std::string", "\"causal-lm\"",
           "causal-lm or output:NAME">,
  ];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGFuseLinearCrossEntropyPass
    : Pass<"tg-fuse-linear-cross-entropy", "mlir::func::FuncOp"> {
  let summary = "Fuse the LM head into the cross-entropy";
  let description = [{
    `cross_entropy(reshape(slice(matmul(h, W))), labels)` becomes
    `linear_cross_entropy(reshape(slice(h)), W, labels)`, so the `[tokens x
    vocab]` logits are never materialised: the fused op processes
    `chunk-rows` rows at a time.
  }];
  let options = [
    Option<"chunkRows", "chunk-rows", "int64_t", "1024", "rows of logits per chunk">,
  ];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGInsertLoraPass : Pass<"tg-insert-lora", "mlir::ModuleOp"> {
  let summary = "Add low-rank adapters to linear weights (LoRA)";
  let description = [{
    For every linear of `@main` whose weight is a parameter (`tg.param`, a
    rank-2 function argument read by `tg.matmul` or by the fused head
    `tg.linear_cross_entropy`) and that `targets` selects, adds two parameter
    arguments right after the weight, `A : [in, r]` and `B : [r, out]`
    (`in` is the contraction dimension of the product as computed), and
    rewrites `y = x·W` into `y = x·W + (alpha/r)·((x·A)·B)`, PEFT's
    formulation. The fused head reads the merged weight
    `W + (alpha/r)·A·B` instead, so its logits are still never
    materialised.

    `targets` is either roles joined by `+` -- `q`, `k`, `v`, `o` (attention
    projections), `gate`, `up`, `down` (MLP), `attn`, `mlp`, `all-linear`
    (all seven) -- recognised from the graph (what the output feeds: the
    attention's q/k/v, a gated activation's gate/up input, an activation
    before another linear; what the input is: the attention output, the
    MLP activation), or else one regular expression searched in the
    initializer name and in the PyTorch name. The LM head and the embedding
    have no role: only a regular expression that names them selects them,
    and a weight also read by something other than a linear (a tied
    embedding) is rejected.

    Adapters are named `<module>.lora_A.weight` and `<module>.lora_B.weight`
    after the base weight's PyTorch name without `.weight` (or its
    initializer name), which is the PEFT state-dict name under
    `base_model.model.`; they carry `tg.lora_of` (the base's `tg.param`),
    `tg.lora_factor` (`"A"` or `"B"`) and, for a base stored `[out, in]`,
    `tg.lora_base_transposed`. The module gets `tg.lora = {rank, alpha,
    dropout, targets}`. With adapters present, `tg-select-trainable` trains
    only them. Dropout must be 0: the compiled step has no random stream
    to redraw a mask when a backward stage recomputes its forward.

    ```mlir
    %y = tg.matmul %x, %w : (tensor<2x8x64xf32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
    // with rank=4,alpha=8 becomes, with new arguments %a : tensor<64x4xf32>
    // and %b : tensor<4x32xf32>,
    %y = tg.matmul %x, %w : (tensor<2x8x64xf32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
    %s = tg.constant dense<2.000000e+00> : tensor<f32>
    %xa = tg.matmul %x, %a : (tensor<2x8x64xf32>, tensor<64x4xf32>) -> tensor<2x8x4xf32>
    %xab = tg.matmul %xa, %b : (tensor<2x8x4xf32>, tensor<4x32xf32>) -> tensor<2x8x32xf32>
    %d = tg.binary mul %xab, %s : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
    %y2 = tg.binary add %y, %d : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    ```
  }];
  let options = [
    Option<"rank", "rank", "int64_t", "8", "adapter rank r">,
    Option<"alpha", "alpha", "double", "8.0", "scale numerator: alpha / r">,
    Option<"dropout", "dropout", "double", "0.0",
           "dropout on the adapter input (only 0 is supported)">,
    Option<"targets", "targets", "std::string", "\"all-linear\"",
           "roles joined by '+' (q, k, v, o, gate, up, down, attn, mlp, "
           "all-linear) or a regex on parameter names">,
  ];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGSelectTrainablePass : Pass<"tg-select-trainable", "mlir::ModuleOp"> {
  let summary = "Mark the parameters that receive gradients";
  let description = [{
    Every parameter argument (`tg.param`) that is floating point with rank
    >= 1 is trainable (`tg.trainable`), unless its name (ONNX initializer
    name or PyTorch name) matches `freeze`; when `trainable` is given, only
    names matching it are. When the function has LoRA adapters
    (`tg.lora_of`, from `tg-insert-lora`), only adapters are candidates:
    every other parameter is frozen, and `trainable`/`freeze` choose among
    the adapters. Emits a remark per parameter when `report` is set.
  }];
  let options = [
    Option<"trainable", "trainable", "std::string", "\"\"", "regex of trainable names">,
    Option<"freeze", "freeze", "std::string", "\"\"", "regex of frozen names">,
  ];
}

def TGAutodiffPass : Pass<"tg-autodiff", "mlir::ModuleOp"> {
  let summary = "Build the gradient function by reverse-mode differentiation";
  let description = [{
    Turns `@main(params..., inputs...) -> loss` into a function that returns
    the loss followed by the gradient of every trainable parameter, in
    argument order. The seed is the `tg.loss_scale` argument when present,
    else 1. Gradients of a parameter used more than once are summed; ops that
    do not lead to the loss from a trainable parameter get no gradient work.
  }];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

#endif // RONDO_TG_PASSES
