//===- KernDialect.td - Kernel calls on storage tensors -----*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_KERN_DIALECT
#define RONDO_KERN_DIALECT

include "mlir/IR/OpBase.td"

def Kern_Dialect : Dialect {
  let name = "kern";
  let cppNamespace = "::rondo::kern";
  let summary = "Calls of the runtime's kernels: what a stage function runs";
  let description = [{
    `kern` is the last IR of a stage function before C++: every computing op
    is a `kern.call` of one kernel of runtime/kernels/cpu/KernelList.def, the
    list that the CPU and CUDA kernel libraries, the C++ emitter and the
    interpreter all derive from. `convert-tg-to-kern` lowers `tg` to it; the
    decisions that depend on the kernels (which kernel, compositions such as
    a gated activation's two calls, a zeroed destination that a scatter adds
    into) are made there, in patterns, and the emitter only prints.

    Values are tensors whose element type is the storage type of the buffer
    the call reads or writes (f32 today; integer tensors hold ids, labels
    and masks). Besides `kern.call`, a kernel-level function keeps the ops
    that are storage rather than computation: `tg.constant` (data in the
    program), `tg.rotary_table` (filled at start-up) and `tg.reshape` (an
    alias of its operand's buffer).
  }];
}

#endif // RONDO_KERN_DIALECT
