//===- Passes.td - Transformations of kernel calls ----------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_KERN_TRANSFORMS_PASSES
#define RONDO_KERN_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def KernBf16StoragePass : Pass<"kern-bf16-storage", "mlir::func::FuncOp"> {
  let summary = "Store the operands of matrix products in bf16";
  let description = [{
    Under bf16 precision a `matmul` rounds both fp32 operands to bf16 copies
    on every call, which on W1's shapes costs more than a third of its time
    (bench/gemm_storage.cu). This pass decides, inside each stage function
    (`exec.stage`), which values are stored in bf16 instead, and makes every
    product a `matmulBf16` of bf16 operands:

    - a value whose every use (through `tg.reshape`s) is an operand of a
      product, and whose producer has a bf16-result twin (`rmsNorm`,
      `binary`, `unaryBackward`, `transpose` -> `...ToBf16`), is produced in
      bf16 and never exists in fp32: half the bytes written, and half the
      memory while it is kept for the backward products (a twin stores in
      bf16 only its `BView` results: `rmsNormRotaryBackwardToBf16` keeps
      its weight gradient fp32);
    - any other value is rounded by one `toBf16` in front of its first
      product, shared by the products that follow within a few operations
      (a shared copy never lives much longer than the fp32 value; a weight
      read by the forward and, much later, the backward product gets one
      copy each).

    The twins round the fp32 result the fp32 kernel computes, and
    `matmulBf16` makes the GEMM calls `matmul` makes after rounding, so the
    function computes the same bits as before, with fewer passes over
    memory. Function arguments and results keep their types (the exec
    program's buffers are laid out before this pass).

    The experts' grouped products (`expertMatmul` of rows and an [E, K, M]
    expert weight stack, `expertMatmulWeightGrad` of two row operands)
    round both operands under bf16 precision too. Where the stack has the
    trainer's resident bf16 copy, an `expertMatmul` is a product (it becomes
    `expertMatmulBf16`, reading the copy and bf16 rows), and so are the
    weight gradients of the same routing ids
    (`expertMatmulWeightGradBf16`). A streamed stack keeps the fp32
    kernels, which round it as they load it: a `toBf16` of the whole stack
    at every microbatch would cost more than the bf16 kernels save.

    Then attention's results (below), and then activations: a product
    whose every reader (through reshapes) has a twin that takes that
    operand in bf16 (`gatedActToBf16` -> `gatedActBf16`,
    `gatedActBackwardToBf16` -> `gatedActBackwardBf16`, `transposeToBf16`
    -> `transposeBf16`, a same-shape `binary` Add -> `addBf16` with the
    product moved to its second operand, `rmsNormBackward` ->
    `rmsNormBackwardBf16`), each of whose bf16 operands is such a product,
    stores its result in bf16 (`matmulBf16ToBf16`, rounded once in
    cuBLAS's epilogue) and those readers read it as it is: the gate and up
    projections and the down projection's input gradient of a gated MLP,
    the value projection and the output projection's input gradient in
    front of attention's transposes, the output and down projections in
    front of their residual Adds, as PyTorch's autocast stores them. A
    chain of products accumulating into one another
    (kern-accumulate-products: the input gradients of q, k and v, or of
    gate and up, read by the norm's backward) is stored whole, each adding
    into its predecessor's bf16 result (`matmulBf16ToBf16 {accumulate =
    true}`) and rounding the sum, as autocast's bf16 gradients are summed.
    The
    decision depends on the stage function alone, not on which kernels
    later fuse, so every plan of a model rounds the same values.
    Where the reader rounded the product's fp32 result, the bits are those
    cuBLAS rounds; where it computed in fp32 first (gatedAct), they
    differ from the fp32-storage ones.

    Then attention's results: an `attentionBf16` whose output only the
    transpose in front of the output projection and the backward read
    stores it in bf16 (`attentionBf16ToBf16`, the transpose becoming
    `transposeBf16`), and its backward reads that output and a bf16 dO (the
    transpose in front of it stores bf16) and stores its gradients in bf16
    (`attentionBackwardBf16ToBf16`): `rmsNormRotaryBackward` reads the query
    and key gradients as they are (`rmsNormRotaryBackwardBf16`), the values'
    transpose moves them (`transposeBf16`), and any other reader gets one
    `fromBf16`. cuDNN reads and writes all of these in bf16 itself, so on it
    the bits stay those of the fp32 interface, without its conversions.

    ```mlir
    %n = kern.call @rmsNorm(%x, %w) args {eps = 1.0e-06 : f32}
        : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
    %y = kern.call @matmul(%n, %wq) args {accumulate = false,
        transA = false, transB = false}
        : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
    // becomes
    %n = kern.call @rmsNormToBf16(%x, %w) args {eps = 1.0e-06 : f32}
        : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xbf16>
    %wq16 = kern.call @toBf16(%wq)
        : (tensor<32x32xf32>) -> tensor<32x32xbf16>
    %y = kern.call @matmulBf16(%n, %wq16) args {accumulate = false,
        transA = false, transB = false}
        : (tensor<64x32xbf16>, tensor<32x32xbf16>) -> tensor<64x32xf32>
    ```
  }];
  let options = [
    Option<"shareWindow", "share-window", "unsigned", /*default=*/"16",
           "Products within this many operations after a toBf16 share it">,
  ];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

def KernAccumulateProductsPass
    : Pass<"kern-accumulate-products", "mlir::func::FuncOp"> {
  let summary = "Add products into the value they are summed with";
  let description = [{
    In each stage function (`exec.stage`), a `binary` Add of a product
    (`matmul` read by nothing else) and a computed value read by nothing
    else becomes the product accumulating into that value (`inits`,
    `accumulate = true`: cuBLAS adds it in its epilogue, beta = 1). The
    backward's input gradients of the projections that read one value (q, k
    and v of attention; gate and up of a gated MLP) are summed this way, so
    the two-operand adds over [tokens, hidden] in fp32 disappear. The sum
    is rounded once in the epilogue as the add rounded it, but cuBLAS may
    choose another algorithm with beta = 1, so the bits can differ; GPU
    trainers only (the host keeps the separate add its references were
    taken with).

    ```mlir
    %a = kern.call @matmul(%dq, %wq) args {accumulate = false,
        transA = false, transB = true} : ... -> tensor<64x32xf32>
    %b = kern.call @matmul(%dk, %wk) args {accumulate = false,
        transA = false, transB = true} : ... -> tensor<64x32xf32>
    %s = kern.call @binary(%a, %b) args {kind = "Add"} : ...
    // becomes
    %a = kern.call @matmul(%dq, %wq) args {accumulate = false,
        transA = false, transB = true} : ... -> tensor<64x32xf32>
    %s = kern.call @matmul(%dk, %wk) inits(%a) args {accumulate = true,
        transA = false, transB = true} : ... -> tensor<64x32xf32>
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

def KernFuseLinearCrossEntropyPass
    : Pass<"kern-fuse-linear-cross-entropy", "mlir::func::FuncOp"> {
  let summary = "Compute the LM head's loss and its gradient in one call";
  let description = [{
    In each stage function (`exec.stage`), a `linearCrossEntropyBackward`
    and the `linearCrossEntropy` before it in the same block with the same
    hidden states, weight, labels and chunking become one
    `linearCrossEntropyWithGrad` at the forward's place, when the gradient's
    scale is available there (an argument of the tail stage). The backward
    recomputed every chunk's logits, a [chunkRows, vocabulary] product that
    is the step's largest; the fused call computes each chunk's logits once,
    takes the rows' losses from the statistics their gradient is computed
    from, and gives the same bits as the two calls on every target. The
    gradients now live from the loss to their first use, which in the tail
    stage follow each other. A frozen head's skipped dW stays skipped.

    ```mlir
    %loss = kern.call @linearCrossEntropy(%h, %w, %labels)
        args {chunkRows = 1024 : i64, ignoreIndex = -100 : i64,
              transW = true} : ... -> tensor<f32>
    ...
    %dh, %dw = kern.call @linearCrossEntropyBackward(%h, %w, %labels,
        %scale) args {chunkRows = 1024 : i64, ignoreIndex = -100 : i64,
        transW = true} : ... -> (tensor<64x32xf32>, tensor<128x32xf32>)
    // becomes
    %loss, %dh, %dw = kern.call @linearCrossEntropyWithGrad(%h, %w, %labels,
        %scale) args {chunkRows = 1024 : i64, ignoreIndex = -100 : i64,
        transW = true} : ... -> (tensor<f32>, tensor<64x32xf32>,
                                 tensor<128x32xf32>)
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

def KernFuseNormRotaryPass
    : Pass<"kern-fuse-norm-rotary", "mlir::func::FuncOp"> {
  let summary = "Norm (if any), transpose and rotate query and key heads in one kernel";
  let description = [{
    In each stage function (`exec.stage`), the per-head query and key norm
    of Qwen3 and OLMo-2 reaches attention as `rmsNorm` over [B, T, H, D],
    a `transpose` to [B, H, T, D] and `rotary`, and its gradient as
    `rotaryBackward`, the transpose back and `rmsNormBackward`. When the
    intermediate tensors have no other reader, each chain becomes one call,
    `rmsNormRotary` or `rmsNormRotaryBackward`: one pass over the heads
    instead of three, and no intermediate buffers. Heads without a norm
    (Llama, Qwen2) reach attention through the transpose and `rotary`
    alone: `transposeRotary` and `transposeRotaryBackward`, one pass
    instead of two. The fused kernels keep the separate kernels'
    arithmetic; GPU trainers only (the host keeps the calls its references
    were taken with).

    ```mlir
    %n = kern.call @rmsNorm(%q, %w) args {eps = 1.0e-06 : f32}
        : (tensor<1x32x4x16xf32>, tensor<16xf32>) -> tensor<1x32x4x16xf32>
    %t = kern.call @transpose(%n) args {perm = array<i64: 0, 2, 1, 3>}
        : (tensor<1x32x4x16xf32>) -> tensor<1x4x32x16xf32>
    %r = kern.call @rotary(%t, %cos, %sin) : (tensor<1x4x32x16xf32>,
        tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
    // becomes
    %r = kern.call @rmsNormRotary(%q, %w, %cos, %sin)
        args {eps = 1.0e-06 : f32} : (tensor<1x32x4x16xf32>,
        tensor<16xf32>, tensor<32x16xf32>, tensor<32x16xf32>)
        -> tensor<1x4x32x16xf32>
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

def KernFuseResidualNormPass
    : Pass<"kern-fuse-residual-norm", "mlir::func::FuncOp"> {
  let summary = "Add the residual in the norm's pass over the rows";
  let description = [{
    In each stage function (`exec.stage`), a decoder's residual stream meets
    each norm twice: forward, `binary` Add of the stream and a block's
    output, then the norm of the sum; backward, the norm's `rmsNormBackward`
    and the Add of its dX to the stream's gradient, often followed by the
    `toBf16` copy the next products read. Each chain becomes one call that
    reads the rows once and writes the sum as it goes:

    - `binary` Add(a, b) read by `rmsNorm` / `rmsNormToBf16` becomes
      `addRmsNorm` / `addRmsNormToBf16`, whose first result is the sum
      (every other reader of the Add reads it) and second the norm's;
      `addBf16` (kern-bf16-storage's residual Add of a product stored in
      bf16) becomes `addRmsNormBf16` / `addRmsNormBf16ToBf16` the same way;
    - Add(r, dX) of an `rmsNormBackward` dX nothing else reads becomes
      `rmsNormBackwardAdd`, or `rmsNormBackwardAddWithBf16` when a `toBf16`
      copy of the sum exists (its readers read the fused call's bf16 result).

    The Adds must not broadcast. The fused kernels compute the sums and the
    norms with the separate kernels' arithmetic, so the bits are unchanged.
    Runs after kern-bf16-storage, on GPU trainers.

    ```mlir
    %s = kern.call @binary(%x, %h) args {kind = "Add"}
        : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %n = kern.call @rmsNormToBf16(%s, %w) args {eps = 1.0e-06 : f32}
        : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xbf16>
    // becomes
    %f:2 = kern.call @addRmsNormToBf16(%x, %h, %w) args {eps = 1.0e-06 : f32}
        : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>)
          -> (tensor<2x8x64xf32>, tensor<2x8x64xbf16>)
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

def KernFuseProductScalePass
    : Pass<"kern-fuse-product-scale", "mlir::func::FuncOp"> {
  let summary = "Scale a product in the GEMM's epilogue";
  let description = [{
    In each stage function (`exec.stage`), a `binary` Mul of a `matmulBf16`
    result that nothing else reads by a one-element fp32 constant becomes
    `matmulBf16Scaled` with that constant as `alpha`: cuBLAS multiplies the
    fp32 accumulators as it stores them, where the Mul kernel would read
    and write the whole product again. LoRA's delta, `((x A) B) * (alpha /
    rank)`, is such a product at every adapted projection. Runs after
    kern-bf16-storage (GPU trainers); the bits are the Mul's (one fp32
    product per element).

    The backward's scaled gradient, a `binaryToBf16` Mul of `x` by a
    power-of-two constant that only plain `matmulBf16` products read
    (through reshapes), is dropped when the function has `x` in bf16
    already: a `toBf16` of `x` or of what `x` reshapes (moved up to the
    Mul's place), or the bf16 value `x` widens (`fromBf16`, attention's dV
    after kern-fuse-attention-layout, which therefore runs first): the
    products read that copy as `matmulBf16Scaled` with the constant as
    `alpha`. For a
    power of two bf16(x c) is bf16(x) c and every fp32 partial sum scales
    exactly, so the bits are the Mul's; another scale is left alone.

    ```mlir
    %c = tg.constant dense<2.000000e+00> : tensor<f32>
    %p = kern.call @matmulBf16(%xa, %b) args {accumulate = false,
        transA = false, transB = false}
        : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
    %y = kern.call @binary(%p, %c) args {kind = "Mul"}
        : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf32>
    // becomes
    %y = kern.call @matmulBf16Scaled(%xa, %b) args {alpha = 2.000000e+00 : f32,
        transA = false, transB = false}
        : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

def KernFoldBf16CopiesPass
    : Pass<"kern-fold-bf16-copies", "mlir::func::FuncOp"> {
  let summary = "Store a value in bf16 where only its toBf16 copies read it";
  let description = [{
    In each stage function (`exec.stage`), a call whose fp32 results are read
    by nothing but `toBf16` copies becomes its bf16 twin (`<kernel>ToBf16`,
    KernelList.def's naming rule, as in kern-bf16-storage), and the copies'
    readers read the twin's result: several copies of one value become the
    one result. After kern-fuse-product-scale these are LoRA's values: the
    x·A products (copied for the B product and again for the B gradient's),
    and the gradients the scale Muls used to read (`gatedActBackward`'s
    dGate and dUp, the query and key heads' dX from
    `rmsNormRotaryBackwardBf16`).

    The call is replaced when the twin exists and takes the call's
    parameters, by name and kind, except fp32 results (FView) that it stores
    in bf16 (BView); the call has no inits (an accumulating product keeps
    its fp32 sum); and every reader of each result the twin stores in bf16
    is a `toBf16` of it (a result with no reader is fine; a function result
    or any other reader keeps the call as it is). Results the twin keeps in
    fp32 keep their readers (`rmsNormRotaryBackwardBf16ToBf16`'s dW).

    A twin rounds the fp32 value its kernel computes to bf16 (nearest even)
    as it stores it, which is what the copy did with the stored value, so
    the bits are the copies'. On the CPU, whose kernels define the twins,
    `matmulBf16ToBf16` runs `matmulBf16` into a zeroed fp32 temporary and
    stores it through `floatToBf16Bits`, `toBf16`'s rounding, and
    `gatedActBackwardToBf16` and `rmsNormRotaryBackwardBf16ToBf16` run their
    fp32 kernel into fp32 temporaries and store them the same way. On the
    GPU the element-wise twins store the rounding of the fp32 kernel's
    values, bit for bit (Bf16StorageTest's `expectRoundingOf`); cuBLAS rounds
    `matmulBf16ToBf16`'s fp32 accumulators in its epilogue, but may pick
    another kernel for a bf16 result, so the sums it rounds may differ from
    `matmulBf16`'s in their last bits (as for kern-bf16-storage's stored
    products). The fp32 result is written and read no more; the bf16 one
    lives from the call to its last reader, where the fp32 one lived to the
    last copy and each copy to its readers, so no point of the function
    holds more.

    Runs last on GPU trainers in bf16, after kern-fuse-product-scale has
    left the copies and after kern-fuse-residual-norm has matched the fp32
    kernels it fuses: the last layer's residual gradient Add, which only
    its copy reads, becomes `rmsNormBackwardAddWithBf16` with that copy
    rather than a `binaryToBf16` behind a separate norm backward.

    ```mlir
    %p = kern.call @matmulBf16(%x, %a) args {accumulate = false,
        transA = false, transB = false}
        : (tensor<64x32xbf16>, tensor<32x4xbf16>) -> tensor<64x4xf32>
    %c1 = kern.call @toBf16(%p) : (tensor<64x4xf32>) -> tensor<64x4xbf16>
    ...
    %c2 = kern.call @toBf16(%p) : (tensor<64x4xf32>) -> tensor<64x4xbf16>
    // becomes (the readers of %c1 and %c2 read %p)
    %p = kern.call @matmulBf16ToBf16(%x, %a) args {accumulate = false,
        transA = false, transB = false}
        : (tensor<64x32xbf16>, tensor<32x4xbf16>) -> tensor<64x4xbf16>
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

def KernFuseAttentionLayoutPass
    : Pass<"kern-fuse-attention-layout", "mlir::func::FuncOp"> {
  let summary = "Read v and dO, write the output and dV token-major";
  let description = [{
    In each stage function (`exec.stage`) of a bf16 plan, attention works on
    [B, H, T, D] heads-major tensors while the projections around it write
    and read [B, T, H, D]: v, the output, dO and dV each pass through a
    `transposeBf16` (four full passes over those tensors a layer). Where
    those transposes are the tensors' only movers (v read by the forward and
    its backwards alone, the output by one transpose and the backwards, dO
    by its backward alone, dV by transposes alone), the calls become
    `attentionBf16ToBf16Tokens` and `attentionBackwardBf16ToBf16Tokens`,
    which take v, out, dO and dV token-major (cuDNN reads and writes them
    through strides; elsewhere the kernel moves them itself). q and k stay
    heads-major: their norm-and-rotary kernels write them so. Runs after
    kern-bf16-storage (GPU trainers); the bits are the transposes' and
    attention's.

    ```mlir
    %vt = kern.call @transposeBf16(%v) args {perm = array<i64: 0, 2, 1, 3>}
        : (tensor<1x8x2x16xbf16>) -> tensor<1x2x8x16xbf16>
    %o:2 = kern.call @attentionBf16ToBf16(%q, %k, %vt) args {causal = true,
        scale = 2.500000e-01 : f32, window = 0 : i64} : (...)
        -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
    %ot = kern.call @transposeBf16(%o#0) args {perm = array<i64: 0, 2, 1, 3>}
        : (tensor<1x4x8x16xbf16>) -> tensor<1x8x4x16xbf16>
    // becomes
    %o:2 = kern.call @attentionBf16ToBf16Tokens(%q, %k, %v) args {...}
        : (...) -> (tensor<1x8x4x16xbf16>, tensor<1x4x8xf32>)
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

#endif // RONDO_KERN_TRANSFORMS_PASSES
