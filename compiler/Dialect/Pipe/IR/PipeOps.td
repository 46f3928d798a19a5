//===- PipeOps.td - pipe ops -------------------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_PIPE_OPS
#define RONDO_PIPE_OPS

include "Dialect/Pipe/IR/PipeDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

include "mlir/IR/AttrTypeBase.td"

/// An f64 kept exactly (the printer round-trips it), 0 when left out:
/// --explain prints these with more digits than the plan's six significant
/// ones.
class Pipe_Exact<string desc> : APFloatParameter<desc> {
  let defaultValue = "::llvm::APFloat(0.0)";
  let printer = [{
    $_printer.getStream() << ::rondo::pipe::formatExact($_self.convertToDouble());
  }];
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double value;
    if ($_parser.parseFloat(value))
      return ::mlir::failure();
    return ::llvm::APFloat(value);
  }() }];
}

class Pipe_Flag<string desc> : DefaultValuedParameter<"bool", "false", desc> {
  let parser = [{ [&]() -> ::mlir::FailureOr<bool> {
    if (succeeded($_parser.parseOptionalKeyword("true")))
      return true;
    if ($_parser.parseKeyword("false"))
      return ::mlir::failure();
    return false;
  }() }];
}

def Pipe_BoundAttr : AttrDef<Pipe_Dialect, "Bound"> {
  let mnemonic = "bound";
  let summary = "Which constraint limited a plan, and its numbers";
  let description = [{
    What `--explain` says under "Why:", as facts: `kind` is what the
    slowest stage-job `stage` waits for: uploading its `param_bytes` at
    `link_bandwidth` (`upload_seconds`), downloading its gradients
    (`download_seconds`), both longer than its compute (`compute_seconds`
    for all microbatches), the single layer `layer` it holds
    (`single_layer`), or the balance of the stages (`balance`). Stage-jobs
    take `fastest_seconds` to `slowest_seconds`; `worker_arena_bytes` of
    `worker_budget_bytes` are used; AdamW takes `optimizer_seconds` per
    overlapped step of `step_seconds` with bubble `bubble`, of which
    `exposed_update_seconds` wait for the last update (what the stale mode
    hides); `sync_bubble` is the synchronous optimizer's bubble. With fewer
    forward stages than workers, `balanced_forward` gives the layer counts
    of N balanced forward stages and `balanced_step_seconds` their
    simulated step, or `balanced_unfit` why they do not fit.
  }];
  let parameters = (ins EnumParameter<Pipe_BoundKind>:$kind,
      StringRefParameter<"slowest stage-job">:$stage,
      StringRefParameter<"its one layer (single_layer)", "\"\"">:$layer,
      Pipe_Exact<"">:$slowest_seconds, Pipe_Exact<"">:$fastest_seconds,
      Pipe_Exact<"">:$compute_seconds, Pipe_Exact<"">:$upload_seconds,
      Pipe_Exact<"">:$download_seconds, Pipe_Exact<"">:$param_bytes,
      Pipe_Exact<"">:$link_bandwidth, Pipe_Exact<"">:$worker_arena_bytes,
      Pipe_Exact<"">:$worker_budget_bytes,
      Pipe_Exact<"">:$optimizer_seconds, Pipe_Exact<"">:$step_seconds,
      Pipe_Exact<"">:$bubble, Pipe_Exact<"">:$exposed_update_seconds,
      Pipe_Exact<"">:$sync_bubble,
      OptionalParameter<"::mlir::DenseI64ArrayAttr">:$balanced_forward,
      Pipe_Exact<"">:$balanced_step_seconds,
      StringRefParameter<"the planner's reason", "\"\"">:$balanced_unfit);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Pipe_SearchAttr : AttrDef<Pipe_Dialect, "Search"> {
  let mnemonic = "search";
  let summary = "How the partitioner chose the plan";
  let description = [{
    `candidates` plans simulated over the microbatch counts
    `microbatch_counts`; `auto_microbatches` when the pass chose M (no
    --microbatches); `exact_optimum` when the kept plan is also the exact
    optimum of max(K, N) * slowest stage-job (strategy exact). The plans
    compete on the predicted step of `optimizer_mode` (overlap, sync or
    stale: the trainer's default mode); `shared_microbatches` when M was
    chosen once for every compiled worker count, so that they train to the
    same bits.

    Example: `#pipe.search<candidates = 6, microbatch_counts = [4, 8],
    auto_microbatches = true, optimizer_mode = "overlap",
    shared_microbatches = true>`
  }];
  let parameters = (ins "int64_t":$candidates,
      "::mlir::DenseI64ArrayAttr":$microbatch_counts,
      Pipe_Flag<"">:$auto_microbatches, Pipe_Flag<"">:$exact_optimum,
      StringRefParameter<"the optimizer mode the plans compete on",
                         "\"overlap\"">:$optimizer_mode,
      Pipe_Flag<"">:$shared_microbatches);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Pipe_MemoryAttr : AttrDef<Pipe_Dialect, "Memory"> {
  let mnemonic = "memory";
  let summary = "A plan's memory budgets and its predicted peaks, in bytes";
  let description = [{
    `worker_budget` and `host_budget` are the budgets the plan was searched
    within (one worker's memory, the host's); `worker_peak` is the largest
    worker arena the plan needs and `host_peak` the host memory the trainer
    allocates for it (weights, moments, gradients, upload copies, staging).

    Example: `#pipe.memory<worker_budget = 7.2e+10, host_budget = 1.2e+11,
    worker_peak = 5.8e+10, host_peak = 2.1e+10>`
  }];
  let parameters = (ins Pipe_Exact<"">:$worker_budget,
      Pipe_Exact<"">:$host_budget, Pipe_Exact<"">:$worker_peak,
      Pipe_Exact<"">:$host_peak);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Pipe_PredictionAttr : AttrDef<Pipe_Dialect, "Prediction"> {
  let mnemonic = "prediction";
  let summary = "A plan's predicted step, per optimizer mode";
  let description = [{
    The steady-state step the simulator predicts, in seconds, and the
    fraction of it the workers idle: `step` and `bubble` under the
    trainer's default `--optimizer-mode=overlap`, `sync_step` and
    `sync_bubble` under `sync`, and `stale_step` under RoundPipe's
    one-step-stale `stale` (0 where the plan has no stale program: it keeps
    state on the worker).

    Example: `#pipe.prediction<step = 1.97, bubble = 0.016, sync_step =
    2.01, sync_bubble = 0.02, stale_step = 1.95>`
  }];
  let parameters = (ins Pipe_Exact<"">:$step, Pipe_Exact<"">:$bubble,
      Pipe_Exact<"">:$sync_step, Pipe_Exact<"">:$sync_bubble,
      Pipe_Exact<"">:$stale_step);
  let assemblyFormat = "`<` struct(params) `>`";
}

class Pipe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Pipe_Dialect, mnemonic, traits>;

def Pipe_PlanOp : Pipe_Op<"plan", [Symbol, SymbolTable, NoTerminator,
    SingleBlock, IsolatedFromAbove, NoRegionArguments]> {
  let summary = "A training step planned for N workers";
  let description = [{
    The plan of one training step of `function` on `workers` workers: the
    batch of `batch` rows is cut into `microbatches` microbatches of
    `rows_per_microbatch` rows; every stage accumulates its parameter
    gradients over the M microbatches on its worker and downloads them once
    per stage-job, and the host sums the partial gradients of parameters
    used by several stages (tied embeddings).

    The body holds one `pipe.layer` per layer, one `pipe.stage` per stage and
    one `pipe.schedule`. Attributes record the device the costs were
    computed for, `memory`, the budgets and the predicted peaks
    (`#pipe.memory`), `prediction`, the predicted step and bubble fraction
    of each optimizer mode (`#pipe.prediction`), `bound`, the constraint that limited the plan
    with its numbers (`#pipe.bound`), and `search`, how it was chosen
    (`#pipe.search`); `--explain` words them. `max_seq_len` is the longest sequence (tokens of one
    row, one row per microbatch) that a plan of these workers holds within
    the same budgets: long-context planning, with the table scaled to that
    length and one layer per stage, so that one layer's activations at a
    time bound it. `shared_params` lists the parameters several layers read
    (a tied embedding and LM head: `{param_bytes, grad_bytes, layers}`,
    and `resident_bytes` as a layer's);
    every layer's `param_bytes` counts them, and a stage holding several of
    those layers holds them once. Whole-plan invariants are checked by `pipe-verify-plan`.

    Residency: `resident_layers` are the layers whose parameters stay in the
    worker's memory for the whole run, and `resident_params` the parameters
    that follow (those whose every layer is resident): their weights,
    gradients and AdamW moments live on the worker, nothing uploads or
    downloads them, and the worker updates them. Absent: every parameter
    streams from the host (RoundPipe's regime). `residency_alternatives`
    maps each residency the planner weighed (`streamed`, `device`, `mixed`)
    to the step it predicted for it, for `--explain`;
    `device_optimizer_params_per_second` is the rate at which the worker
    updates resident parameters (the fused AdamW), and
    `replica_host_crossing_bandwidth` the rate at which a GPU trainer's
    replicas move host-held gradients and weights to their GPUs and back
    for the replica sum, and `host_memory_bandwidth` the host memory
    bandwidth that the host optimizer, the trainer's end-of-step gradient
    pass and every worker's host copies share, with
    `step_end_pass_bandwidth` the rate of that end-of-step pass alone;
    `pipe-verify-plan` and `--explain` simulate with them.

    `shared_cores` (calibrated host specs): the cores the host workers and
    the host optimizer share; the predicted step is at least their CPU work
    spread over them.

    Layouts (`rondo-compile --gpus G`): `layout_gpus` is the G this plan is
    one layout of (`replicas` x `workers` = G; `batch` is then one
    replica's share of the global batch), `layout_chosen` marks the layout
    the planner chose (the fastest predicted step; the trainer's default),
    and the chosen plan's `layouts_unfit` names the layouts (`RxN`) that had
    no plan within the budgets.

    `frozen_bf16` (bf16 plans, `--frozen-storage=bf16`, the default): the
    frozen parameters that only matrix products read, which the trainer
    holds in bf16 alone, on the host and in stage images (half the bytes
    of host memory, images and uploads); every use rounds them to bf16
    anyway, so the bits of training do not change. Device-resident ones
    are pushed to the worker from that bf16 copy.

    `local_copy_bandwidth`: the rate of a copy within one worker's memory,
    at which a one-worker plan hands activations from one stage-job to the
    next (the executor copies between its own buffers; a plan of several
    workers stages hand-offs through the host or copies them peer to peer).

    Example:
    ```mlir
    pipe.plan @plan_w2 for @main workers 2 microbatches 4 {
        batch = 8 : i64, rows_per_microbatch = 2 : i64, ...} {
      pipe.layer 0 prefix {...}
      ...
      pipe.stage @F0 forward layers 0 to 5 checkpoints [0, 3] {...}
      pipe.stage @T tail layers 5 to 8 {...}
      pipe.stage @B1 backward layers 3 to 5 {...}
      pipe.stage @B2 backward layers 0 to 3 {...}
      pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       FlatSymbolRefAttr:$function,
                       ConfinedAttr<I64Attr, [IntPositive]>:$workers,
                       ConfinedAttr<I64Attr, [IntPositive]>:$microbatches,
                       ConfinedAttr<I64Attr, [IntPositive]>:$batch,
                       ConfinedAttr<I64Attr, [IntPositive]>:$rows_per_microbatch,
                       I64Attr:$tokens_per_step,
                       StrAttr:$device,
                       StrAttr:$precision,
                       StrAttr:$strategy,
                       Pipe_MemoryAttr:$memory,
                       Pipe_PredictionAttr:$prediction,
                       F64Attr:$link_bandwidth,
                       F64Attr:$peer_bandwidth,
                       F64Attr:$optimizer_params_per_second,
                       F64Attr:$host_fixed_bytes,
                       Pipe_BoundAttr:$bound,
                       Pipe_SearchAttr:$search,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$replicas,
                       OptionalAttr<F64Attr>:$replica_link_bandwidth,
                       OptionalAttr<DenseF64ArrayAttr>:$replica_scaling,
                       OptionalAttr<DenseF64ArrayAttr>:$replica_scaling_other_mode,
                       OptionalAttr<BoolAttr>:$shard_optimizer,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$replicas_per_host,
                       OptionalAttr<I64Attr>:$max_seq_len,
                       OptionalAttr<F64Attr>:$mapped_weight_bytes,
                       OptionalAttr<DictArrayAttr>:$shared_params,
                       OptionalAttr<DenseI64ArrayAttr>:$resident_layers,
                       OptionalAttr<StrArrayAttr>:$resident_params,
                       OptionalAttr<DictionaryAttr>:$residency_alternatives,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$shared_cores,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$layout_gpus,
                       OptionalAttr<UnitAttr>:$layout_chosen,
                       OptionalAttr<StrArrayAttr>:$layouts_unfit,
                       OptionalAttr<F64Attr>:$local_copy_bandwidth,
                       OptionalAttr<StrArrayAttr>:$frozen_bf16,
                       OptionalAttr<F64Attr>:$device_optimizer_params_per_second,
                       OptionalAttr<F64Attr>:$replica_host_crossing_bandwidth,
                       OptionalAttr<F64Attr>:$host_memory_bandwidth,
                       OptionalAttr<F64Attr>:$step_end_pass_bandwidth);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `for` $function `workers` $workers `microbatches` $microbatches
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Layers, stages (in body order) and the schedule of the plan.
    std::vector<class LayerOp> getLayers();
    std::vector<class StageOp> getStages();
    class ScheduleOp getSchedule();
    /// The planner's view of this plan, rebuilt from the IR: the problem
    /// (layer table, budgets, bandwidths) and the partition.
    ::rondo::planner::PlanProblem buildProblem();
    ::rondo::planner::Plan buildPlan();
  }];
}

def Pipe_LayerOp : Pipe_Op<"layer", [HasParent<"PlanOp">]> {
  let summary = "One layer of the training function and its costs";
  let description = [{
    Layer `index` of the training function: the ops tagged
    `pipe.layer = index`. Layers are cut at narrow waists (only the hidden
    state and broadcast side data cross). Costs are for one microbatch on
    one worker of the plan's device: FLOPs and predicted seconds of the
    forward and of the backward (without recompute), device bytes of the
    parameters read and of the gradients produced, bytes of the activation
    entering the layer (its checkpoint) and of the activations its backward
    keeps from its forward; `trainable_params` counts the trainable
    parameters whose optimizer step this layer owns. `resident_bytes`, when
    present, is what the parameters take on a worker that keeps them
    (device residency) where that differs from `param_bytes`: under bf16
    the fp32 master weights and the bf16 copies of those read only by
    products (`exec.resident`'s `bf16`). `no_backward` marks a
    layer whose backward computes nothing (frozen below every trainable
    parameter, as LoRA's embedding): backward stages neither upload nor
    recompute it.

    ```mlir
    pipe.layer 3 block {fwd_flops = 1.2e12, fwd_seconds = 2.1e-3, ...}
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$index,
                       Pipe_LayerKind:$kind,
                       F64Attr:$fwd_flops, F64Attr:$bwd_flops,
                       F64Attr:$fwd_seconds, F64Attr:$bwd_seconds,
                       F64Attr:$param_bytes, F64Attr:$grad_bytes,
                       F64Attr:$input_bytes, F64Attr:$workspace_bytes,
                       F64Attr:$trainable_params, UnitAttr:$no_backward,
                       OptionalAttr<F64Attr>:$resident_bytes);
  let assemblyFormat = "$index $kind attr-dict";
  let hasVerifier = 1;
}

def Pipe_StageOp : Pipe_Op<"stage", [Symbol, HasParent<"PlanOp">]> {
  let summary = "A contiguous range of layers run as one stage-job";
  let description = [{
    Layers `[first, end)` as one stage:
    - `forward`: the forward of the layers for each microbatch, keeping no
      autograd state; `checkpoints` lists the layers whose input it saves to
      host memory for the backward stages that recompute from there;
    - `tail`: the last layers, the LM head and the loss, forward and
      backward for each microbatch without recompute;
    - `backward`: recompute of the layers from the checkpoint of layer
      `first`, then their backward, for each microbatch.
    Costs: `compute_seconds` per microbatch, `hop_seconds` for the
    activation hand-off into one microbatch, `upload_seconds` and
    `download_seconds` once per stage-job, `job_seconds` the stage-job's
    time on its worker; device bytes of the parameters, gradients and
    activations, and `memory_bytes`, their sum.

    ```mlir
    pipe.stage @F0 forward layers 0 to 12 checkpoints [0, 4, 8] {...}
    pipe.stage @B1 backward layers 8 to 12 {...}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       Pipe_StageKind:$kind,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$first,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$end,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{}">:$checkpoints,
                       F64Attr:$compute_seconds, F64Attr:$hop_seconds,
                       F64Attr:$upload_seconds, F64Attr:$download_seconds,
                       F64Attr:$job_seconds,
                       F64Attr:$param_bytes, F64Attr:$grad_bytes,
                       F64Attr:$activation_bytes, F64Attr:$memory_bytes);
  let assemblyFormat = [{
    $sym_name $kind `layers` $first `to` $end
    (`checkpoints` $checkpoints^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Pipe_ScheduleOp : Pipe_Op<"schedule", [HasParent<"PlanOp">]> {
  let summary = "The round-robin job order of one step";
  let description = [{
    The stages of one step in issue order: the forward stages in ascending
    layer order, the tail, then the backward stages deepest first. Job n of
    step s runs on worker `(first_worker + s * K + n) mod workers`, K being
    the number of jobs, so the rotation continues across steps.

    ```mlir
    pipe.schedule first_worker 0 jobs [@F0, @F1, @T, @B1, @B2, @B3]
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$first_worker,
                       SymbolRefArrayAttr:$jobs);
  let assemblyFormat = "`first_worker` $first_worker `jobs` $jobs attr-dict";
  let hasVerifier = 1;
}

#endif // RONDO_PIPE_OPS
