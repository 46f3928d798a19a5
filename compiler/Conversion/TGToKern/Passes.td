//===- Passes.td - Conversions into kern --------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_CONVERSION_TGTOKERN_PASSES
#define RONDO_CONVERSION_TGTOKERN_PASSES

include "mlir/Pass/PassBase.td"

def ConvertTGToKernPass : Pass<"convert-tg-to-kern", "mlir::ModuleOp"> {
  let summary = "Lower the tg ops of stage functions to kernel calls";
  let description = [{
    Rewrites every function that carries `exec.stage` (the stage functions
    of `pipe-outline-stages`) from `tg` ops to `kern.call`s of the kernels
    in runtime/kernels/cpu/KernelList.def, with the patterns of
    compiler/Conversion/TGToKern (one file per op family). Storage ops
    stay: `tg.constant`, `tg.rotary_table`, `tg.reshape`.

    Afterwards it checks the kernel-call contract: an op that is neither a
    `kern.call` nor a storage op is an error naming the op, so a `tg` op
    without a kernel fails here, at compile time, not in the emitter.

    ```mlir
    %y = tg.rms_norm %x, %w {eps = 1.0e-06 : f32} : ...
    // becomes
    %y = kern.call @rmsNorm(%x, %w) args {eps = 1.0e-06 : f32} : ...
    ```
  }];
  let dependentDialects = ["::rondo::kern::KernDialect"];
}

#endif // RONDO_CONVERSION_TGTOKERN_PASSES
