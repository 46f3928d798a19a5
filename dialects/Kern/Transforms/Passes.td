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
      memory while it is kept for the backward products;
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

#endif // RONDO_KERN_TRANSFORMS_PASSES
