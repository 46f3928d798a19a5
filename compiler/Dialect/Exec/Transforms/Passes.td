//===- Passes.td - exec passes -----------------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_EXEC_PASSES
#define RONDO_EXEC_PASSES

include "mlir/Pass/PassBase.td"

def ExecVerifyPass : Pass<"exec-verify", "mlir::ModuleOp"> {
  let summary = "Prove exec programs race-free and workers stateless";
  let description = [{
    Unrolls each `exec.program` over enough steps for every alignment of
    jobs to workers to occur and checks, under happens-before (stream order
    per worker queue, awaits, carried events, barriers): every await follows
    its record in issue order; no range is read before its writer completes;
    no range is overwritten before its readers and previous writer complete;
    and a job reads worker memory only if the same stage-job wrote it.
    In a `stale` program the `stale_optimizer` task must be issued before
    the `stash_grads` task: it applies the previous step's gradients.

    ```
    error: 'exec.launch' op reads @params0 slot 0 on worker 1 in step 0
    before the op that writes it completes
    ```
  }];
}

#endif // RONDO_EXEC_PASSES
