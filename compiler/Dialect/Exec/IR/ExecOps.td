//===- ExecOps.td - exec ops -------------------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_EXEC_OPS
#define RONDO_EXEC_OPS

include "Dialect/Exec/IR/ExecDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

class Exec_Op<string mnemonic, list<Trait> traits = []>
    : Op<Exec_Dialect, mnemonic, traits>;

def Exec_RefArrayAttr : TypedArrayAttrBase<Exec_RefAttr, "array of refs">;

def Exec_ProgramOp : Exec_Op<"program", [Symbol, SymbolTable, SingleBlock,
    IsolatedFromAbove, DeclareOpInterfaceMethods<RegionKindInterface>]> {
  let summary = "One training step of a plan, in issue order";
  let description = [{
    The body lists the memory plan (`exec.buffer`), the stages
    (`exec.stage`) and then every op of one step in the order the
    dispatcher issues it; it is a graph region so that issue order, not
    SSA dominance, is what `exec-verify` checks: an op may only await events
    recorded by ops issued before it. The block arguments are events of the
    previous step: argument k is operand k of the `exec.yield` one step
    earlier (already complete in step 0).

    `jobs` is the job order F0..T..Bj; job n of step s runs on worker
    `(first_worker + s * K + n) mod workers`. `optimizer` is `sync` (one
    optimizer task after the last gradient download), `overlap` (one task
    per stage as soon as the gradients it finalises are on the host) or
    `stale` (RoundPipe's one-step-stale update: a `stash_grads` task copies
    the step's gradients to `@grad_stash` once they have landed, and the
    next step's `stale_optimizer` task applies them once that step's
    parameter uploads have read the weights; the trainer's
    `--optimizer-mode=stale`). `predicted_step_seconds` is the plan's step
    in that mode.
    `replicas` (absent: 1) is the number of data-parallel replicas the plan
    was made for: each runs this program on its share of a global batch of
    `replicas` x `microbatches` x `rows_per_microbatch` rows.
    `frozen_bf16` (the plan's): the frozen parameters the trainer holds in
    bf16 alone in host memory; streamed ones are in their stages' images in
    bf16 (`exec.stage`'s `bf16_params`), device-resident ones are pushed to
    the worker from the bf16 copy.
    `predicted_worker_bytes` (the plan's `worker_peak`) is the memory the plan
    predicts a worker uses: its arena and the temporaries of its largest
    stage. The trainer keeps what it adds beyond them (the pools of stage
    functions recorded as CUDA graphs) within it.

    Example:
    ```mlir
    exec.program @exec_w2_sync plan @plan_w2 workers 2 microbatches 2
        first_worker 0 optimizer "sync" jobs [@F0, @T, @B1] {
    ^bb0(%prev: !exec.event):
      exec.buffer @act_in worker slots 2 bytes 4096 offset 0
      ...
      %0 = exec.host_task load_batch
      %1 = exec.copy param_upload #exec.ref<@params job -1 slot 0 offset 0 bytes 512>
          to #exec.ref<@params0 job 0 slot 0 offset 0 bytes 512>
          on param_upload job 0 mb -1 await(%prev)
      ...
      exec.barrier
      exec.yield %9
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       FlatSymbolRefAttr:$plan,
                       ConfinedAttr<I64Attr, [IntPositive]>:$workers,
                       ConfinedAttr<I64Attr, [IntPositive]>:$microbatches,
                       ConfinedAttr<I64Attr, [IntPositive]>:$rows_per_microbatch,
                       I64Attr:$first_worker,
                       StrAttr:$optimizer,
                       SymbolRefArrayAttr:$jobs,
                       F64Attr:$predicted_step_seconds,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$replicas,
                       OptionalAttr<StrArrayAttr>:$frozen_bf16,
                       OptionalAttr<F64Attr>:$predicted_worker_bytes);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `plan` $plan `workers` $workers `microbatches` $microbatches
    `first_worker` $first_worker `optimizer` $optimizer `jobs` $jobs
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getNumJobs() { return getJobs().size(); }
    /// The exec.stage that job `job` runs.
    StageOp getJobStage(int64_t job);
    /// The buffer a ref names (null when absent).
    BufferOp lookupBuffer(RefAttr ref);
  }];
}

def Exec_YieldOp : Exec_Op<"yield", [Terminator, HasParent<"ProgramOp">]> {
  let summary = "Events the next step waits for";
  let description = [{
    Operand k becomes block argument k of the program in the next step:
    typically the optimizer tasks that the next step's parameter uploads
    must wait for.
  }];
  let arguments = (ins Variadic<Exec_EventType>:$events);
  let assemblyFormat = "($events^)? attr-dict";
}

def Exec_BufferOp : Exec_Op<"buffer", [Symbol, HasParent<"ProgramOp">]> {
  let summary = "A buffer of the static memory plan";
  let description = [{
    `slots` slots of `bytes` bytes. A worker buffer exists on every worker
    at `offset` in its arena; a host buffer exists once at `offset` in the
    host pool. Offset -1 marks the trainer-owned master weights (`@params`,
    one slot per stage: the stage's parameter image).

    Example: `exec.buffer @act_in worker slots 4 bytes 8192 offset 16384`
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Exec_Space:$space,
                       ConfinedAttr<I64Attr, [IntPositive]>:$slots,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$bytes,
                       I64Attr:$offset);
  let assemblyFormat = [{
    $sym_name $space `slots` $slots `bytes` $bytes `offset` $offset attr-dict
  }];
}

def Exec_StageOp : Exec_Op<"stage", [Symbol, HasParent<"ProgramOp">]> {
  let summary = "A stage: its function, parameter image and gradient image";
  let description = [{
    Job-invariant facts of a stage. `params` are the parameters its function
    reads, laid out in the parameter image at `param_offsets` (bytes
    `param_sizes`); `grads` are the parameter-gradient parts it produces,
    laid out in its gradient image at `grad_offsets`, which is downloaded to
    `host_grad_offset` of the host gradient buffer. A parameter with parts
    in several stages (tied embedding and LM head) gets their sum in the
    order of the stages in `jobs`.

    Device-resident parameters (the plan's `resident_params`) are not in
    the images: `resident` lists those the stage reads (each lives once in
    the worker's `@resident` buffer, at its `exec.resident` offsets), and
    `resident_grads` the gradient parts it accumulates into
    `@resident_grads` at `resident_grad_offsets`, which nothing downloads:
    the optimizer task updates them where they are.

    `bf16_params` lists the parameters of `params` that the image holds in
    bf16 (two bytes an element; the plan's `frozen_bf16`): frozen weights
    that only matrix products read, which the trainer holds in bf16 alone
    and the stage function reads through its `param_bf16` argument. The
    fp32 argument they replace has the role `param_unbound` until
    kern-bf16-storage removes it; no launch binds it.

    Example:
    ```mlir
    exec.stage @T tail layers 3 to 4 function @plan_w2_T {
        params = ["norm.weight", "lm_head.weight"], param_offsets = array<i64: 0, 256>, ...}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Exec_StageKind:$kind,
                       I64Attr:$first_layer, I64Attr:$end_layer,
                       FlatSymbolRefAttr:$function,
                       StrArrayAttr:$params,
                       DenseI64ArrayAttr:$param_offsets,
                       DenseI64ArrayAttr:$param_sizes,
                       I64Attr:$param_bytes,
                       StrArrayAttr:$grads,
                       DenseI64ArrayAttr:$grad_offsets,
                       DenseI64ArrayAttr:$grad_sizes,
                       I64Attr:$grad_bytes,
                       I64Attr:$host_grad_offset,
                       F64Attr:$predicted_job_seconds,
                       OptionalAttr<StrArrayAttr>:$resident,
                       OptionalAttr<StrArrayAttr>:$resident_grads,
                       OptionalAttr<DenseI64ArrayAttr>:$resident_grad_offsets,
                       OptionalAttr<DenseI64ArrayAttr>:$resident_grad_sizes,
                       OptionalAttr<StrArrayAttr>:$bf16_params);
  let assemblyFormat = [{
    $sym_name $kind `layers` $first_layer `to` $end_layer `function` $function
    attr-dict
  }];
  let hasVerifier = 1;
}

def Exec_ResidentOp : Exec_Op<"resident", [HasParent<"ProgramOp">]> {
  let summary = "Where a device-resident parameter's state lives";
  let description = [{
    A parameter the plan keeps on the worker: its fp32 weights (`bytes`
    long) at `weights` in the worker's `@resident` buffer and, when it is
    trainable, its AdamW moments at `exp_avg` and `exp_avg_sq`; a parameter
    with gradient parts in several stages also has `sum` (the parts added in
    table order, which AdamW reads) and `norm_sum` (the same for the logged
    gradient norm). Offsets of what it does not have are -1. The trainer
    copies the weights and moments there before the first step and back
    before it reads them (checkpoints, exports).

    A weight that a bf16 plan reads only through matrix products also has
    `bf16`: a bf16 copy of its weights (`bytes / 2` long), which its stage
    functions read (the `param_bf16` argument) instead of rounding the fp32
    weights at every microbatch. The trainer writes it whenever the weights
    change: after they are copied to the worker and after every update.
    A frozen weight the plan holds in bf16 alone (`frozen_bf16`) has the
    copy only: `weights` is -1, and no fp32 form of it is on the worker.

    Example:
    `exec.resident "lm_head.weight" bytes 4096 weights 0 moments 4096, 8192 sums -1, -1 bf16 12288`
  }];
  let arguments = (ins StrAttr:$param,
                       ConfinedAttr<I64Attr, [IntPositive]>:$bytes,
                       I64Attr:$weights,
                       I64Attr:$exp_avg, I64Attr:$exp_avg_sq,
                       I64Attr:$sum, I64Attr:$norm_sum,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$bf16);
  let assemblyFormat = [{
    $param `bytes` $bytes `weights` $weights `moments` $exp_avg `,`
    $exp_avg_sq `sums` $sum `,` $norm_sum (`bf16` $bf16^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Exec_CopyOp : Exec_Op<"copy", []> {
  let summary = "An asynchronous copy between buffers";
  let description = [{
    Copies `src` to `dst` on stream `stream` of the worker of job `job` (the
    job that receives the data: a hand-off into job n+1 is issued on job
    n+1's activation-upload stream and belongs to it) once every awaited
    event completed and the previous op on that stream finished. `mb` is the
    microbatch, -1 when the copy serves all of them. Parameter uploads read
    the master weights (`@params`, slot = stage) in chunks.

    Example:
    ```mlir
    %3 = exec.copy handoff #exec.ref<@act_out job 0 slot 1 offset 0 bytes 4096>
        to #exec.ref<@act_in job 1 slot 1 offset 0 bytes 4096>
        on act_upload job 1 mb 1 await(%2)
    ```
  }];
  let arguments = (ins Exec_CopyKind:$kind, Exec_RefAttr:$src,
                       Exec_RefAttr:$dst, Exec_Stream:$stream, I64Attr:$job,
                       I64Attr:$mb, Variadic<Exec_EventType>:$awaits);
  let results = (outs Exec_EventType:$event);
  let assemblyFormat = [{
    $kind $src `to` $dst `on` $stream `job` $job `mb` $mb
    (`await` `(` $awaits^ `)`)? attr-dict
  }];
  let hasVerifier = 1;
}

def Exec_FillZeroOp : Exec_Op<"fill_zero", []> {
  let summary = "Zeroes a worker buffer on the compute stream";
  let description = [{
    Used to start a stage-job's gradient accumulation.

    Example: `%4 = exec.fill_zero #exec.ref<@grads job 2 slot 0 offset 0 bytes 1024> job 2`
  }];
  let arguments = (ins Exec_RefAttr:$dst, I64Attr:$job,
                       Variadic<Exec_EventType>:$awaits);
  let results = (outs Exec_EventType:$event);
  let assemblyFormat = [{
    $dst `job` $job (`await` `(` $awaits^ `)`)? attr-dict
  }];
}

def Exec_LaunchOp : Exec_Op<"launch", []> {
  let summary = "Runs a stage function for one microbatch";
  let description = [{
    Calls the function of `stage` on the compute stream of job `job`'s
    worker with pointers to `inputs` (its arguments), `outputs` (its
    results, overwritten) and `accumulate` (its parameter-gradient results,
    added into the buffer), in that order.

    Example:
    ```mlir
    %5 = exec.launch @F0 job 0 mb 0
        inputs [#exec.ref<@ids job 0 slot 0 offset 0 bytes 256>, ...]
        outputs [#exec.ref<@act_out job 0 slot 0 offset 0 bytes 4096>]
        accumulate [] await(%1, %4)
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$stage, I64Attr:$job, I64Attr:$mb,
                       Exec_RefArrayAttr:$inputs, Exec_RefArrayAttr:$outputs,
                       Exec_RefArrayAttr:$accumulate,
                       Variadic<Exec_EventType>:$awaits);
  let results = (outs Exec_EventType:$event);
  let assemblyFormat = [{
    $stage `job` $job `mb` $mb `inputs` $inputs `outputs` $outputs
    `accumulate` $accumulate (`await` `(` $awaits^ `)`)? attr-dict
  }];
}

def Exec_HostTaskOp : Exec_Op<"host_task", []> {
  let summary = "Host work on the host stream: batch loading, the optimizer";
  let description = [{
    `load_batch` fills the host `@ids` and `@labels` buffers with the step's
    microbatches. `optimizer` sums the gradient parts and runs AdamW on the
    parameters `stage` finalises (the parameters whose last gradient part it
    produces), or on all parameters when no stage is given (sync mode).

    The one-step-stale update (a `stale` program) takes two tasks, neither
    with a stage: `stash_grads` copies the whole `@host_grads` into
    `@grad_stash` (the step's gradients, set aside so that the next step's
    downloads need not wait for their update), and `stale_optimizer` is
    the update of the previous step: AdamW on every parameter with the
    gradients in `@grad_stash`, which the previous step's `stash_grads`
    wrote. `load_batch` runs on the host's data queue, the others in issue
    order on its optimizer queue.

    Example: `%9 = exec.host_task optimizer stage @B1 await(%8)`
  }];
  let arguments = (ins Exec_HostTaskKind:$kind,
                       OptionalAttr<FlatSymbolRefAttr>:$stage,
                       Variadic<Exec_EventType>:$awaits);
  let results = (outs Exec_EventType:$event);
  let assemblyFormat = [{
    $kind (`stage` $stage^)? (`await` `(` $awaits^ `)`)? attr-dict
  }];
}

def Exec_BarrierOp : Exec_Op<"barrier", []> {
  let summary = "Waits until every worker stream is idle";
  let description = [{
    The end of a step's device work: nothing a later op (of this or the
    next step) issues can overlap a copy or launch issued before the
    barrier. Host tasks keep running.
  }];
  let assemblyFormat = "attr-dict";
}

#endif // RONDO_EXEC_OPS
