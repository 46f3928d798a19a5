//===- Passes.td - pipe passes -----------------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_PIPE_PASSES
#define RONDO_PIPE_PASSES

include "mlir/Pass/PassBase.td"

def PipeLayerizePass : Pass<"pipe-layerize", "mlir::ModuleOp"> {
  let summary = "Cut the forward function into layers at narrow waists";
  let description = [{
    Runs on `@main` after the loss is attached and before `tg-autodiff`.
    Values are classified as *activations* (they depend on both a parameter
    and the data), *weight-side* (parameters only: transposes, casts) or
    *side data* (data and constants only: masks, positions, labels). A cut
    between two activation ops is a *narrow waist* when exactly one
    activation crosses it: the hidden state. The segments between waists are
    grouped into layers: the longest run of periodically repeating segments
    (equal ops, attributes and types) gives the blocks, what precedes them
    the prefix (embedding), what follows them the tail (final norm, LM head,
    loss). Every activation op gets `pipe.layer = i`, weight-side ops the
    layer of their first user; side-data ops stay untagged, since every
    stage can recompute them. `@main` gets `pipe.layer_kinds`.

    ```mlir
    %h = tg.gather %wte, %ids {pipe.layer = 0 : i64}
    %n = tg.rms_norm %h, %w1 {pipe.layer = 1 : i64, ...}
    ```
  }];
  let dependentDialects = ["rondo::pipe::PipeDialect"];
}

def PipePartitionPass : Pass<"pipe-partition", "mlir::ModuleOp"> {
  let summary = "Choose stages, microbatches and the job order";
  let description = [{
    Builds the layer table of `@main` with the cost model for the chosen
    device, then for each worker count in `workers` chooses the number of
    microbatches M (at least N+1 unless `microbatches` fixes it; M divides
    the batch) and the stages, and adds one `pipe.plan` per worker count.

    Strategies: `exact` (default) minimises RoundPipe's objective
    max(K, N) * (slowest stage-job) over every partition that fits the
    worker and host budgets, with uploads, hand-offs and activation memory
    in the stage costs; `greedy` reproduces RoundPipe's candidate sweep
    with greedy packing; `stages` forces a partition given as layer counts
    in job order, e.g. `fwd:8+8,tail:4,bwd:4+4+4+4`. For `exact`, the pass
    also takes the exact optima with a floor of N..4N jobs (RoundPipe's
    min_stages), since finer stages can balance better; among all
    candidates (every M, every floor) the plan with the smallest simulated
    steady-state step time wins. Ops that canonicalization created after
    `pipe-layerize` get the layer of their users first.

    The device spec and the precision come from the module's `rondo.target`
    (which rondo-compile records, and the C++ emitter reads too); only a
    module without one takes them from the `device` and `precision` options,
    resolved by the same rule (compiler/Target/Target.h).

    Frozen storage (`frozen-storage`): in a bf16 plan, every frozen weight
    that only matrix products read is held in bf16 alone (the plan's
    `frozen_bf16`), which the costs count at two bytes per element in host
    memory, stage images and uploads.

    Residency (`residency`): with one worker, the planner also weighs
    keeping every parameter's state on the worker (`device`: no uploads,
    no gradient downloads, AdamW on the worker) and keeping the last layers
    that fit there (`mixed`), prices each with the same simulator, and takes
    the fastest that fits the budgets; `streamed` and `device` force one.
    Plans of several workers stream.

    Layouts (`gpus`): instead of `workers`, the pass weighs every way to
    spread G GPUs over R data-parallel replicas of an N-worker pipeline
    (R N = G; R divides the batch), each replica training batch / R rows
    of every global batch, with the replicas' gradient sums (over the
    spec's GPU links) and their sharded optimizer in the predicted step.
    Each layout is searched like a worker count (microbatches, residency,
    stages); one plan per layout that fits, the fastest first and marked
    `layout_chosen`. Under `gpus`, `microbatches` counts the global batch's
    microbatches (a layout of R replicas runs 1/R of them per replica).

    An impossible budget is an error that states the numbers and the
    smallest configuration that fits.
  }];
  let options = [
    ListOption<"workers", "workers", "int64_t",
               "worker counts to plan for">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"0",
           "number of microbatches (0: chosen by the planner)">,
    Option<"device", "device", "std::string", /*default=*/"\"host\"",
           "h100 | h200 | rtx4090 | host | a device spec JSON file">,
    Option<"precision", "precision", "std::string", /*default=*/"\"\"",
           "fp32 | bf16 (default: bf16 on GPUs, fp32 on the host)">,
    Option<"strategy", "strategy", "std::string", /*default=*/"\"exact\"",
           "exact | greedy">,
    Option<"stages", "stages", "std::string", /*default=*/"\"\"",
           "force a partition: fwd:A+B+...,tail:T,bwd:C+D+... (layer counts "
           "in job order)">,
    Option<"workerMemoryGB", "worker-memory-gb", "double", /*default=*/"0",
           "device memory budget per worker in GB (0: 90% of the device's)">,
    Option<"hostMemoryGB", "host-memory-gb", "double", /*default=*/"0",
           "host memory budget in GB (0: the device spec's host memory)">,
    Option<"replicas", "replicas", "int64_t", /*default=*/"1",
           "data-parallel replicas the plan is for (trainer --replicas): "
           "their gradient sums are costed and --explain shows the scaling">,
    Option<"replicaLinkGBps", "replica-link-gbps", "double",
           /*default=*/"25",
           "bandwidth between replicas, GB/s per replica (default 25: a "
           "200 Gb/s network)">,
    Option<"shardOptimizer", "shard-optimizer", "bool", /*default=*/"true",
           "the replicas shard the optimizer (trainer --shard-optimizer, on "
           "by default): reduce-scatter, 1/R of AdamW, all-gather">,
    Option<"replicasPerHost", "replicas-per-host", "int64_t",
           /*default=*/"1",
           "replicas that share one host's cores for the optimizer">,
    Option<"optimizerMode", "optimizer-mode", "std::string",
           /*default=*/"\"overlap\"",
           "overlap | sync | stale: the trainer's optimizer mode, whose "
           "predicted step the plans minimise (the trainer's default mode)">,
    Option<"gpus", "gpus", "int64_t", /*default=*/"0",
           "plan for this many GPUs of one machine (host workers x processes "
           "on the host): every layout of R replicas x N workers with R N = "
           "gpus at the global batch, one plan each, the fastest chosen">,
    ListOption<"layouts", "layouts", "std::string",
               "with gpus: only these layouts (RxN)">,
    Option<"residency", "residency", "std::string", /*default=*/"\"auto\"",
           "auto | device | streamed: where parameters, gradients and "
           "AdamW moments live (auto: the planner weighs streamed, "
           "device-resident and mixed, and takes the fastest that fits)">,
    Option<"frozenStorage", "frozen-storage", "std::string",
           /*default=*/"\"\"",
           "bf16 | fp32: how a bf16 plan holds frozen weights that only "
           "matrix products read (default bf16: on the host and in stage "
           "images, half the bytes, the same bits; fp32 keeps fp32 master "
           "copies); bf16 is an error for an fp32 plan">,
  ];
  let dependentDialects = ["rondo::pipe::PipeDialect"];
}

def PipeVerifyPlanPass : Pass<"pipe-verify-plan", "mlir::ModuleOp"> {
  let summary = "Check the invariants of whole plans";
  let description = [{
    For every `pipe.plan`: layers are numbered 0..L-1 and match the
    training function's `pipe.layer_kinds`; the function's layers meet at
    narrow waists (at most one activation and one activation gradient cross
    each boundary; a backward op reads forward values of its own layer or
    the activation entering it, its checkpoint); the forward stages and the tail
    cover every layer contiguously in ascending order, and so do the tail
    and the backward stages (deepest first); the tail is last; every
    backward stage's first layer is checkpointed by the forward stage that
    computes it (layer 0's input is the token data); the predicted worker
    and host peaks, recomputed from the stages, respect the budgets.
  }];
}


def PipeOutlineStagesPass : Pass<"pipe-outline-stages", "mlir::ModuleOp"> {
  let summary = "Outline one function per stage of every plan";
  let description = [{
    For every `pipe.plan`, builds `@<plan>_<stage>`: a function that runs
    the stage for one microbatch, cut out of the layer-tagged `@main` (built
    at the microbatch shape). Forward stages take the activation entering
    their first layer and return the one leaving their last, plus the
    checkpoints of backward stages that start inside them; the tail takes
    its input activation and returns the loss sum, the gradient handed back
    and its parameter-gradient parts; backward stages take their checkpoint
    and the incoming gradient, recompute their forward, and return the
    outgoing gradient and their parameter-gradient parts. Values computed
    from arguments and constants only (masks, rotary tables, shifted labels,
    weight transposes) are recomputed by every stage that needs them.
    Gradient sums that @main forms across layers (tied weights) are left to
    the host. Arguments and results carry `exec.role`.

    ```mlir
    func.func @plan_w2_B1(%x: tensor<1x16x64xf32> {exec.role = "activation"},
                          %dy: tensor<1x16x64xf32> {exec.role = "gradient"},
                          %w: tensor<64xf32> {exec.role = "param", tg.param = "..."})
        -> (tensor<1x16x64xf32> {exec.role = "gradient"},
            tensor<64xf32> {exec.role = "param_grad", tg.grad_of = "..."})
        attributes {exec.stage = @plan_w2::@B1}
    ```
  }];
  let dependentDialects = ["mlir::func::FuncDialect"];
}

#endif // RONDO_PIPE_PASSES
