// RUN: rondo-opt %s --exec-verify | FileCheck %s
// RUN: rondo-opt %s --exec-verify | rondo-opt --exec-verify | FileCheck %s

// A forward stage and the tail on two workers: every read follows its
// producer (stream order or an await), the tail's parameter upload and the
// gradient download wait for the previous step's optimizer, and the tail
// reads the activation only through the hand-off into its own buffer.
// CHECK-LABEL: exec.program @two_jobs
// CHECK: exec.launch @T job 1 mb 0
// CHECK: exec.yield
exec.program @two_jobs plan @plan_w2 workers 2 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0, @T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
^bb0(%prev: !exec.event):
  exec.buffer @params0 worker slots 1 bytes 64 offset 0
  exec.buffer @act_in worker slots 1 bytes 16 offset 64
  exec.buffer @act_out worker slots 1 bytes 16 offset 128
  exec.buffer @grads worker slots 1 bytes 64 offset 192
  exec.buffer @params host slots 2 bytes 64 offset -1
  exec.buffer @host_grads host slots 1 bytes 64 offset 0
  exec.stage @F0 forward layers 0 to 1 function @f {params = ["w0"], param_offsets = array<i64: 0>, param_sizes = array<i64: 64>, param_bytes = 64 : i64, grads = [], grad_offsets = array<i64>, grad_sizes = array<i64>, grad_bytes = 0 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  exec.stage @T tail layers 1 to 2 function @t {params = ["w1"], param_offsets = array<i64: 0>, param_sizes = array<i64: 64>, param_bytes = 64 : i64, grads = ["w1"], grad_offsets = array<i64: 0>, grad_sizes = array<i64: 64>, grad_bytes = 64 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  %0 = exec.copy param_upload <@params job -1 slot 0 offset 0 bytes 64> to <@params0 job 0 slot 0 offset 0 bytes 64> on param_upload job 0 mb -1
  %1 = exec.launch @F0 job 0 mb 0 inputs [#exec.ref<@params0 job 0 slot 0 offset 0 bytes 64>] outputs [#exec.ref<@act_out job 0 slot 0 offset 0 bytes 16>] accumulate [] await(%0)
  %2 = exec.copy param_upload <@params job -1 slot 1 offset 0 bytes 64> to <@params0 job 1 slot 0 offset 0 bytes 64> on param_upload job 1 mb -1 await(%prev)
  %3 = exec.fill_zero <@grads job 1 slot 0 offset 0 bytes 64> job 1
  %4 = exec.copy handoff <@act_out job 0 slot 0 offset 0 bytes 16> to <@act_in job 1 slot 0 offset 0 bytes 16> on act_upload job 1 mb 0 await(%1)
  %5 = exec.launch @T job 1 mb 0 inputs [#exec.ref<@act_in job 1 slot 0 offset 0 bytes 16>, #exec.ref<@params0 job 1 slot 0 offset 0 bytes 64>] outputs [] accumulate [#exec.ref<@grads job 1 slot 0 offset 0 bytes 64>] await(%2, %4)
  %6 = exec.copy grad_download <@grads job 1 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 1 mb -1 await(%5, %prev)
  %7 = exec.host_task optimizer await(%6)
  exec.barrier
  exec.yield %7
}

// A stale program (one-step-stale updates): the update of the previous
// step reads the gradients its stash task set aside and runs once this
// step's upload has read the weights; the next step's upload waits for the
// update, its download for the stash.
// CHECK-LABEL: exec.program @stale_one_job
// CHECK: exec.host_task stale_optimizer await
// CHECK-NEXT: exec.host_task stash_grads await
// CHECK: exec.yield
exec.program @stale_one_job plan @plan_w1 workers 1 microbatches 1 first_worker 0 optimizer "stale" jobs [@T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
^bb0(%update: !exec.event, %stash: !exec.event):
  exec.buffer @params0 worker slots 1 bytes 64 offset 0
  exec.buffer @grads worker slots 1 bytes 64 offset 64
  exec.buffer @params host slots 1 bytes 64 offset -1
  exec.buffer @host_grads host slots 1 bytes 64 offset 0
  exec.buffer @grad_stash host slots 1 bytes 64 offset 64
  exec.stage @T tail layers 0 to 1 function @t {params = ["w1"], param_offsets = array<i64: 0>, param_sizes = array<i64: 64>, param_bytes = 64 : i64, grads = ["w1"], grad_offsets = array<i64: 0>, grad_sizes = array<i64: 64>, grad_bytes = 64 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  %0 = exec.copy param_upload <@params job -1 slot 0 offset 0 bytes 64> to <@params0 job 0 slot 0 offset 0 bytes 64> on param_upload job 0 mb -1 await(%update)
  %1 = exec.fill_zero <@grads job 0 slot 0 offset 0 bytes 64> job 0
  %2 = exec.launch @T job 0 mb 0 inputs [#exec.ref<@params0 job 0 slot 0 offset 0 bytes 64>] outputs [] accumulate [#exec.ref<@grads job 0 slot 0 offset 0 bytes 64>] await(%0)
  %3 = exec.copy grad_download <@grads job 0 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 0 mb -1 await(%2, %stash)
  %4 = exec.host_task stale_optimizer await(%0, %stash)
  %5 = exec.host_task stash_grads await(%3)
  exec.barrier
  exec.yield %4, %5
}
