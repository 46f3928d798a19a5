//===- PipeDialect.td - The pipeline plan dialect ----------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_PIPE_DIALECT
#define RONDO_PIPE_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def Pipe_Dialect : Dialect {
  let name = "pipe";
  let cppNamespace = "::rondo::pipe";
  let summary = "The RoundPipe schedule, decided at compile time";
  let description = [{
    `pipe` holds the plan that the partitioner chose for a training
    function: its layers with their costs, the stages (forward, the fused
    tail, backward), the recompute points, the microbatch split and the
    round-robin job order. One `pipe.plan` exists per planned worker count;
    all of them refer to the same `tg` training function, whose ops carry
    the layer they belong to in a `pipe.layer` attribute (set by
    `pipe-layerize` and propagated to gradient ops by `tg-autodiff`).

    Schedule semantics (research/roundpipe.md section 1): a stage-job runs
    one stage for all M microbatches on one worker; jobs are issued in the
    order F0..F(k-1), T, B1..Bj and job n of step s runs on worker
    `(first_worker + s * K + n) mod N` for K jobs, so the rotation continues
    across steps. Workers are stateless: a stage-job uploads its parameters,
    downloads its gradients, and keeps nothing.
  }];
  let useDefaultAttributePrinterParser = 1;
  // `pipe.layer` and `pipe.layer_kinds` (PipeOps.h) are checked where they
  // sit; no `pipe.` key belongs on a function argument or result.
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
}

def Pipe_LayerKind : I32EnumAttr<"LayerKind", "role of a layer", [
    I32EnumAttrCase<"prefix", 0>, I32EnumAttrCase<"block", 1>,
    I32EnumAttrCase<"tail", 2>]> {
  let cppNamespace = "::rondo::pipe";
}

def Pipe_StageKind : I32EnumAttr<"StageKind", "kind of a pipeline stage", [
    I32EnumAttrCase<"forward", 0>, I32EnumAttrCase<"tail", 1>,
    I32EnumAttrCase<"backward", 2>]> {
  let cppNamespace = "::rondo::pipe";
}

def Pipe_BoundKind : I32EnumAttr<"BoundKind",
    "the constraint that limited a plan", [
    I32EnumAttrCase<"upload", 0>, I32EnumAttrCase<"download", 1>,
    I32EnumAttrCase<"single_layer", 2>, I32EnumAttrCase<"balance", 3>]> {
  let cppNamespace = "::rondo::pipe";
  let genSpecializedAttr = 0;
}

#endif // RONDO_PIPE_DIALECT
