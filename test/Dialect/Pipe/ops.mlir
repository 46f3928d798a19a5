// RUN: rondo-opt %s | rondo-opt | FileCheck %s
// RUN: rondo-opt %s --pipe-verify-plan -o /dev/null

// A plan round-trips through the printer and the parser, and is valid as a
// whole.
// CHECK: pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes
// CHECK: pipe.layer 0 prefix {
// CHECK: pipe.layer 3 tail {
// CHECK: pipe.stage @F0 forward layers 0 to 2 checkpoints [0, 1] {
// CHECK: pipe.stage @T tail layers 2 to 4 {
// CHECK: pipe.stage @B1 backward layers 1 to 2 {
// CHECK: pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0, 1] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}
