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
    constant tables, into `tg.rotary %x, %cos, %sin` with `[T, D]` tables.
  }];
  let dependentDialects = ["rondo::tg::TGDialect"];
}

def TGFuseAttentionPass : Pass<"tg-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Recognise causal grouped-query attention";
  let description = [{
    Rewrites `softmax(q k^T * scale + causal_mask) v`, with the exporter's
    key/value head repetition (`reshape(broadcast(...))`), its split scaling
    of q and k, and its `select(is_nan(p), 0, p)` guard, into one
    `tg.attention {causal}` on the unrepeated key/value heads. The guard is
    dead for causal masks: every row attends to at least its own position.
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

def TGSelectTrainablePass : Pass<"tg-select-trainable", "mlir::ModuleOp"> {
  let summary = "Mark the parameters that receive gradients";
  let description = [{
    Every parameter argument (`tg.param`) that is floating point with rank
    >= 1 is trainable (`tg.trainable`), unless its name (ONNX initializer
    name or PyTorch name) matches `freeze`; when `trainable` is given, only
    names matching it are. Emits a remark per parameter when `report` is set.
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
