//===- Passes.td - Lowering pipe plans to exec programs ----*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_CONVERSION_PIPETOEXEC_PASSES
#define RONDO_CONVERSION_PIPETOEXEC_PASSES

include "mlir/Pass/PassBase.td"

def ConvertPipeToExecPass : Pass<"convert-pipe-to-exec", "mlir::ModuleOp"> {
  let summary = "Lower each pipe.plan to exec.programs";
  let description = [{
    For every `pipe.plan` whose stage functions exist (pipe-outline-stages),
    builds `exec.program @exec_wN_<mode>` for each optimizer mode:

    - a static memory plan: per worker two parameter slots (the running
      stage-job's and the prefetched one: job n uses slot (n / N) mod 2),
      a gradient image, per-microbatch activation, gradient and checkpoint
      buffers, token buffers; on the host the token and loss buffers, the
      gradient images of all stages and the checkpoints;
    - per stage-job: its parameter image uploaded once, in up to
      `param-chunks` balanced chunks, chunk c placed behind the activation
      input of microbatch c of the job the worker is still running
      (activations first); per microbatch the hand-off of the activation
      (or activation gradient) from the previous job's worker, or the reload
      of the checkpoint for backward stages (device-to-device, or staged
      through host memory with `peer-handoff=false`), the token uploads, the launch,
      and the checkpoint copies to the host; the gradient image downloaded
      once; the tail's loss sums downloaded once;
    - host tasks: loading the batch, and AdamW either once after the last
      download (`sync`) or per stage as soon as the gradients it finalises
      are on the host (`overlap`, SPipe-style eager updates: exact, since
      no update reads a gradient of the same step twice), or, in a `stale`
      program (RoundPipe's one-step-stale update; not for plans with
      device-resident state or replicas), the previous step's update
      (`stale_optimizer`, reading `@grad_stash`) once this step's
      parameter uploads have read the weights, then `stash_grads`, which
      copies this step's gradients to `@grad_stash` once they have landed;
      the next step's uploads await the update, its downloads the stash;
    - every await derived from the accesses (RAW, WAR, WAW), minus those
      implied by stream order or by another await; events of the previous
      step's optimizer tasks come in as block arguments.

    ```mlir
    %4 = exec.copy param_upload #exec.ref<@params job -1 slot 1 offset 0 bytes 8192>
        to #exec.ref<@params0 job 1 slot 0 offset 0 bytes 8192>
        on param_upload job 1 mb -1 await(%arg0)
    %7 = exec.launch @T job 1 mb 0 inputs [...] outputs [...] accumulate [...]
        await(%4, %6)
    ```
  }];
  let options = [
    ListOption<"optimizerModes", "optimizer", "std::string",
               "Optimizer modes to build programs for (sync, overlap, stale; "
               "default: all three, stale only where the plan allows it)">,
    Option<"paramChunks", "param-chunks", "int64_t", "4",
           "Most chunks a stage's parameter upload is split into">,
    Option<"peerHandoff", "peer-handoff", "bool", "true",
           "Hand activations device-to-device (true) or through host "
           "memory: a download on the sender, an upload on the receiver">,
  ];
  let dependentDialects = ["rondo::exec::ExecDialect"];
}

#endif // RONDO_CONVERSION_PIPETOEXEC_PASSES
