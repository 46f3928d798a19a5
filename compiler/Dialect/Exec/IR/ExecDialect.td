//===- ExecDialect.td - Explicit transfers, events and launches -*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_EXEC_DIALECT
#define RONDO_EXEC_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Exec_Dialect : Dialect {
  let name = "exec";
  let cppNamespace = "::rondo::exec";
  let summary = "One training step as buffers, copies, launches and events";
  let description = [{
    `exec` is the program the runtime runs: for one `pipe.plan` and one
    optimizer mode, an `exec.program` lists every operation of ONE training
    step in issue order. Each op is one call of the runtime C API
    (runtime/include/rondo/runtime/Exec.h): it is enqueued on a stream of
    the worker that runs its job and completes an `!exec.event`; other ops
    wait for it by naming the event in their `await` list. Ops on the same
    stream of the same worker also run in issue order, which is why an await
    that stream order already implies is elided.

    Buffers come from a static memory plan (`exec.buffer`): every worker has
    the same arena layout; host buffers live once in the host pool (pinned on
    GPUs). A `#exec.ref` names a byte range of a buffer on the worker of a
    job (job -1: a host buffer).

    Job n of step s runs on worker `(first_worker + s * K + n) mod N`, so the
    same program runs every step while the rotation continues. Events
    carried from the previous step are the block arguments of the program
    (the operands of its `exec.yield`, one step earlier); `exec.barrier`
    ends the step's device work.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // The `exec.` discardable attributes of stage functions (ExecOps.h).
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
}

def Exec_Space : I32EnumAttr<"Space", "where a buffer lives", [
    I32EnumAttrCase<"worker", 0>, I32EnumAttrCase<"host", 1>]> {
  let cppNamespace = "::rondo::exec";
}

def Exec_Stream : I32EnumAttr<"Stream", "stream of a worker, by role", [
    I32EnumAttrCase<"compute", 0>, I32EnumAttrCase<"param_upload", 1>,
    I32EnumAttrCase<"act_upload", 2>, I32EnumAttrCase<"download", 3>,
    I32EnumAttrCase<"host", 4>]> {
  let cppNamespace = "::rondo::exec";
}

def Exec_CopyKind : I32EnumAttr<"CopyKind", "what a copy moves", [
    I32EnumAttrCase<"param_upload", 0>, I32EnumAttrCase<"input_upload", 1>,
    I32EnumAttrCase<"handoff", 2>, I32EnumAttrCase<"checkpoint", 3>,
    I32EnumAttrCase<"reload", 4>, I32EnumAttrCase<"grad_download", 5>,
    I32EnumAttrCase<"loss_download", 6>]> {
  let cppNamespace = "::rondo::exec";
}

def Exec_HostTaskKind : I32EnumAttr<"HostTaskKind", "host work", [
    I32EnumAttrCase<"load_batch", 0>, I32EnumAttrCase<"optimizer", 1>,
    I32EnumAttrCase<"stash_grads", 2>, I32EnumAttrCase<"stale_optimizer", 3>]> {
  let cppNamespace = "::rondo::exec";
}

def Exec_StageKind : I32EnumAttr<"StageKind", "kind of a stage", [
    I32EnumAttrCase<"forward", 0>, I32EnumAttrCase<"tail", 1>,
    I32EnumAttrCase<"backward", 2>]> {
  let cppNamespace = "::rondo::exec";
}

def Exec_EventType : TypeDef<Exec_Dialect, "Event"> {
  let mnemonic = "event";
  let summary = "Completion of one enqueued op in the current step";
  let description = [{
    Binary CUDA-event semantics: recorded once per step by the op that
    defines it, waited for by the ops that await it.
  }];
}

def Exec_RefAttr : AttrDef<Exec_Dialect, "Ref"> {
  let mnemonic = "ref";
  let summary = "A byte range of a buffer on the worker of a job";
  let description = [{
    `#exec.ref<@act_in job 1 slot 0 offset 0 bytes 4096>` is bytes [0, 4096)
    of slot 0 of buffer `@act_in` on the worker that runs job 1. Host
    buffers use job -1. The slot of `@params` (the trainer's master
    weights) is a stage index: the range is a range of that stage's
    parameter image.
  }];
  let parameters = (ins "::mlir::FlatSymbolRefAttr":$buffer, "int64_t":$job,
                        "int64_t":$slot, "int64_t":$offset, "int64_t":$bytes);
  let assemblyFormat = [{
    `<` $buffer `job` $job `slot` $slot `offset` $offset `bytes` $bytes `>`
  }];
}

#endif // RONDO_EXEC_DIALECT
