// RUN: rondo-opt %s --exec-verify --split-input-file --verify-diagnostics

// Local verifiers: refs stay inside their buffers, copies on their stream.
exec.program @bad_ref plan @p workers 1 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
  exec.buffer @act worker slots 1 bytes 16 offset 0
  exec.buffer @host host slots 1 bytes 16 offset 0
  exec.stage @F0 forward layers 0 to 1 function @f {params = [], param_offsets = array<i64>, param_sizes = array<i64>, param_bytes = 0 : i64, grads = [], grad_offsets = array<i64>, grad_sizes = array<i64>, grad_bytes = 0 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  // expected-error @+1 {{destination @act bytes [8, 24) exceed its slot of 16 bytes}}
  %0 = exec.copy input_upload <@host job -1 slot 0 offset 0 bytes 16> to <@act job 0 slot 0 offset 8 bytes 16> on act_upload job 0 mb 0
  exec.yield
}

// -----

// A stage holds in bf16 only what its image holds.
exec.program @bf16_not_in_image plan @p workers 1 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
  // expected-error @+1 {{holds "w1" in bf16 (bf16_params) but not in its image}}
  exec.stage @F0 forward layers 0 to 1 function @f {bf16_params = ["w1"], params = ["w0"], param_offsets = array<i64: 0>, param_sizes = array<i64: 32>, param_bytes = 64 : i64, grads = [], grad_offsets = array<i64>, grad_sizes = array<i64>, grad_bytes = 0 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  exec.yield
}

// -----

// A resident weight without fp32 weights is a frozen one held in bf16: it
// has its bf16 copy and nothing to update.
exec.program @bf16_alone_without_copy plan @p workers 1 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
  exec.stage @F0 forward layers 0 to 1 function @f {params = [], param_offsets = array<i64>, param_sizes = array<i64>, param_bytes = 0 : i64, grads = [], grad_offsets = array<i64>, grad_sizes = array<i64>, grad_bytes = 0 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  // expected-error @+1 {{has no fp32 weights but no bf16 copy either}}
  exec.resident "w" bytes 64 weights -1 moments -1, -1 sums -1, -1
  exec.yield
}

// -----

exec.program @bf16_alone_trains plan @p workers 1 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
  exec.stage @F0 forward layers 0 to 1 function @f {params = [], param_offsets = array<i64>, param_sizes = array<i64>, param_bytes = 0 : i64, grads = [], grad_offsets = array<i64>, grad_sizes = array<i64>, grad_bytes = 0 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  // expected-error @+1 {{has no fp32 weights but trains}}
  exec.resident "w" bytes 64 weights -1 moments 0, 64 sums -1, -1 bf16 128
  exec.yield
}

// -----

exec.program @bad_stream plan @p workers 1 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
  exec.buffer @act worker slots 1 bytes 16 offset 0
  exec.buffer @host host slots 1 bytes 16 offset 0
  exec.stage @F0 forward layers 0 to 1 function @f {params = [], param_offsets = array<i64>, param_sizes = array<i64>, param_bytes = 0 : i64, grads = [], grad_offsets = array<i64>, grad_sizes = array<i64>, grad_bytes = 0 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  // expected-error @+1 {{a checkpoint copy runs on the download stream, not act_upload}}
  %0 = exec.copy checkpoint <@act job 0 slot 0 offset 0 bytes 16> to <@host job -1 slot 0 offset 0 bytes 16> on act_upload job 0 mb 0
  exec.yield
}

// -----

// A wait before its record: the upload waits for the gradient download, which is
// issued later.
exec.program @wait_before_record plan @plan_w2 workers 2 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0, @T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
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
  // expected-error @+1 {{waits for an event before the op that records it is issued}}
  %2 = exec.copy param_upload <@params job -1 slot 1 offset 0 bytes 64> to <@params0 job 1 slot 0 offset 0 bytes 64> on param_upload job 1 mb -1 await(%prev, %6)
  %3 = exec.fill_zero <@grads job 1 slot 0 offset 0 bytes 64> job 1
  %4 = exec.copy handoff <@act_out job 0 slot 0 offset 0 bytes 16> to <@act_in job 1 slot 0 offset 0 bytes 16> on act_upload job 1 mb 0 await(%1)
  %5 = exec.launch @T job 1 mb 0 inputs [#exec.ref<@act_in job 1 slot 0 offset 0 bytes 16>, #exec.ref<@params0 job 1 slot 0 offset 0 bytes 64>] outputs [] accumulate [#exec.ref<@grads job 1 slot 0 offset 0 bytes 64>] await(%2, %4)
  %6 = exec.copy grad_download <@grads job 1 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 1 mb -1 await(%5, %prev)
  %7 = exec.host_task optimizer await(%6)
  exec.barrier
  exec.yield %7
}

// -----

// A kernel reading parameters before their upload completes: the tail's
// launch does not wait for its parameter upload (another stream).
exec.program @read_before_upload plan @plan_w2 workers 2 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0, @T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
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
  // expected-note @+1 {{the conflicting exec.copy (step 0)}}
  %2 = exec.copy param_upload <@params job -1 slot 1 offset 0 bytes 64> to <@params0 job 1 slot 0 offset 0 bytes 64> on param_upload job 1 mb -1 await(%prev)
  %3 = exec.fill_zero <@grads job 1 slot 0 offset 0 bytes 64> job 1
  %4 = exec.copy handoff <@act_out job 0 slot 0 offset 0 bytes 16> to <@act_in job 1 slot 0 offset 0 bytes 16> on act_upload job 1 mb 0 await(%1)
  // expected-error @+1 {{reads @params0 slot 0 on worker 1 in step 0 before the op that writes it completes}}
  %5 = exec.launch @T job 1 mb 0 inputs [#exec.ref<@act_in job 1 slot 0 offset 0 bytes 16>, #exec.ref<@params0 job 1 slot 0 offset 0 bytes 64>] outputs [] accumulate [#exec.ref<@grads job 1 slot 0 offset 0 bytes 64>] await(%4)
  %6 = exec.copy grad_download <@grads job 1 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 1 mb -1 await(%5, %prev)
  %7 = exec.host_task optimizer await(%6)
  exec.barrier
  exec.yield %7
}

// -----

// A gradient buffer reused before the optimizer consumed it: the memory plan
// gives B1's gradient image the host range of T's, and B1's download does not
// wait for T's optimizer task, which still reads it.
exec.program @grads_reused plan @plan_w2 workers 2 microbatches 1 first_worker 0 optimizer "overlap" jobs [@T, @B1] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
^bb0(%prev_t: !exec.event, %prev_b: !exec.event):
  exec.buffer @grads worker slots 1 bytes 64 offset 0
  exec.buffer @host_grads host slots 1 bytes 64 offset 0
  exec.stage @T tail layers 1 to 2 function @t {params = [], param_offsets = array<i64>, param_sizes = array<i64>, param_bytes = 0 : i64, grads = ["w1"], grad_offsets = array<i64: 0>, grad_sizes = array<i64: 64>, grad_bytes = 64 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  exec.stage @B1 backward layers 0 to 1 function @b {params = [], param_offsets = array<i64>, param_sizes = array<i64>, param_bytes = 0 : i64, grads = ["w0"], grad_offsets = array<i64: 0>, grad_sizes = array<i64: 64>, grad_bytes = 64 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  %0 = exec.fill_zero <@grads job 0 slot 0 offset 0 bytes 64> job 0
  %1 = exec.launch @T job 0 mb 0 inputs [] outputs [] accumulate [#exec.ref<@grads job 0 slot 0 offset 0 bytes 64>]
  %2 = exec.copy grad_download <@grads job 0 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 0 mb -1 await(%1, %prev_t, %prev_b)
  // expected-note @+1 {{the conflicting exec.host_task (step 0)}}
  %3 = exec.host_task optimizer stage @T await(%2)
  %4 = exec.fill_zero <@grads job 1 slot 0 offset 0 bytes 64> job 1
  %5 = exec.launch @B1 job 1 mb 0 inputs [] outputs [] accumulate [#exec.ref<@grads job 1 slot 0 offset 0 bytes 64>]
  // expected-error @+1 {{overwrites @host_grads slot 0 in step 0 before its reader finishes}}
  %6 = exec.copy grad_download <@grads job 1 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 1 mb -1 await(%5, %2)
  %7 = exec.host_task optimizer stage @B1 await(%6)
  exec.barrier
  exec.yield %3, %7
}

// -----

// A value carried across stage-jobs on a worker: with one worker the tail
// reads the forward job's output buffer directly instead of through a
// transfer into its own.
exec.program @carried_state plan @plan_w2 workers 1 microbatches 1 first_worker 0 optimizer "sync" jobs [@F0, @T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
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
  %2 = exec.copy param_upload <@params job -1 slot 1 offset 0 bytes 64> to <@params0 job 1 slot 0 offset 0 bytes 64> on param_upload job 1 mb -1 await(%prev, %1)
  %3 = exec.fill_zero <@grads job 1 slot 0 offset 0 bytes 64> job 1
  %4 = exec.copy handoff <@act_out job 0 slot 0 offset 0 bytes 16> to <@act_in job 1 slot 0 offset 0 bytes 16> on act_upload job 1 mb 0 await(%1)
  // expected-error @+1 {{job 1 reads @act_out slot 0 on worker 0 in step 0, written by job 0 of step 0: workers are stateless}}
  %5 = exec.launch @T job 1 mb 0 inputs [#exec.ref<@act_out job 0 slot 0 offset 0 bytes 16>, #exec.ref<@params0 job 1 slot 0 offset 0 bytes 64>] outputs [] accumulate [#exec.ref<@grads job 1 slot 0 offset 0 bytes 64>] await(%2, %4)
  %6 = exec.copy grad_download <@grads job 1 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 1 mb -1 await(%5, %prev)
  %7 = exec.host_task optimizer await(%6)
  exec.barrier
  exec.yield %7
}

// -----

// The dialect verifies the discardable attributes of stage functions
// (ExecOps.h).

// expected-error @+1 {{'exec.role' of a function argument must be one of "activation", "gradient", "param", "param_bf16", "param_unbound", "input_ids", "labels", "loss_scale", "data"}}
func.func private @arg_role(tensor<f32> {exec.role = "checkpoint"})

// -----

// expected-error @+1 {{'exec.role' of a function result must be one of "activation", "checkpoint", "loss_sum", "gradient", "param_grad"}}
func.func private @result_role() -> (tensor<f32> {exec.role = "param"})

// -----

// expected-error @+1 {{'exec.layer' must be a non-negative i64}}
func.func private @layer() -> (tensor<f32> {exec.role = "checkpoint", exec.layer = "2"})

// -----

// expected-error @+1 {{'exec.layer' does not belong on a function argument}}
func.func private @layer_on_arg(tensor<f32> {exec.layer = 2 : i64})

// -----

// expected-error @+1 {{'exec.stage' must be a symbol reference (@plan::@stage) or unit}}
func.func private @stage() attributes {exec.stage = "F0"}

// -----

// expected-error @+1 {{'exec.stage' belongs on a function}}
module attributes {exec.stage} {}

// -----

// expected-error @+1 {{'exec.stage' does not belong on a function result}}
func.func private @stage_on_result() -> (tensor<f32> {exec.stage})

// -----

// expected-error @+1 {{'exec.role' belongs on a function argument or result}}
func.func private @role_on_func() attributes {exec.role = "param"}

// -----

// expected-error @+1 {{unknown attribute 'exec.roles'}}
func.func private @unknown(tensor<f32> {exec.roles = "param"})

// -----

// A stale program whose update follows its stash: it would apply this
// step's gradients (a synchronous update), which the race rules accept.
exec.program @stale_update_after_stash plan @plan_w1 workers 1 microbatches 1 first_worker 0 optimizer "stale" jobs [@T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
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
  // expected-note @+1 {{the stash_grads task}}
  %4 = exec.host_task stash_grads await(%3)
  // expected-error @+1 {{is issued after the stash_grads task of its step, so it would apply this step's gradients}}
  %5 = exec.host_task stale_optimizer await(%0, %4)
  exec.barrier
  exec.yield %5, %4
}

// -----

// The next step's parameter upload does not wait for the stale update
// that writes the weights it reads.
exec.program @stale_upload_races_update plan @plan_w1 workers 1 microbatches 1 first_worker 0 optimizer "stale" jobs [@T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
^bb0(%update: !exec.event, %stash: !exec.event):
  exec.buffer @params0 worker slots 1 bytes 64 offset 0
  exec.buffer @grads worker slots 1 bytes 64 offset 64
  exec.buffer @params host slots 1 bytes 64 offset -1
  exec.buffer @host_grads host slots 1 bytes 64 offset 0
  exec.buffer @grad_stash host slots 1 bytes 64 offset 64
  exec.stage @T tail layers 0 to 1 function @t {params = ["w1"], param_offsets = array<i64: 0>, param_sizes = array<i64: 64>, param_bytes = 64 : i64, grads = ["w1"], grad_offsets = array<i64: 0>, grad_sizes = array<i64: 64>, grad_bytes = 64 : i64, host_grad_offset = 0 : i64, predicted_job_seconds = 0.0 : f64}
  // expected-error @+1 {{reads @params (w1) in step 1 before the op that writes it completes}}
  %0 = exec.copy param_upload <@params job -1 slot 0 offset 0 bytes 64> to <@params0 job 0 slot 0 offset 0 bytes 64> on param_upload job 0 mb -1
  %1 = exec.fill_zero <@grads job 0 slot 0 offset 0 bytes 64> job 0
  %2 = exec.launch @T job 0 mb 0 inputs [#exec.ref<@params0 job 0 slot 0 offset 0 bytes 64>] outputs [] accumulate [#exec.ref<@grads job 0 slot 0 offset 0 bytes 64>] await(%0)
  %3 = exec.copy grad_download <@grads job 0 slot 0 offset 0 bytes 64> to <@host_grads job -1 slot 0 offset 0 bytes 64> on download job 0 mb -1 await(%2, %stash)
  // expected-note @+1 {{the conflicting exec.host_task (step 0)}}
  %4 = exec.host_task stale_optimizer await(%0, %stash)
  %5 = exec.host_task stash_grads await(%3)
  exec.barrier
  exec.yield %4, %5
}

// -----

// The stale tasks belong to stale programs.
exec.program @stale_task_in_sync plan @plan_w1 workers 1 microbatches 1 first_worker 0 optimizer "sync" jobs [@T] attributes {predicted_step_seconds = 0.0 : f64, rows_per_microbatch = 1 : i64} {
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
  // expected-error @+1 {{a stale_optimizer task belongs to a stale program, not a sync one}}
  %4 = exec.host_task stale_optimizer await(%0, %stash)
  %5 = exec.host_task stash_grads await(%3)
  exec.barrier
  exec.yield %4, %5
}
