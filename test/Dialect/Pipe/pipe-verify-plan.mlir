// RUN: rondo-opt %s --pipe-verify-plan --split-input-file --verify-diagnostics -o /dev/null


// -----

// A gap in the forward coverage.
func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 1 checkpoints [0] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    // expected-error@+1 {{starts at layer 2 but the forward pass has covered layers [0, 1): a gap or overlap in layer coverage}}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

// A gap in the backward coverage: layer 1 gets no gradient.
func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    // expected-error@+1 {{ends at layer 1 but the backward pass needs layers up to 2 next: a gap or overlap in layer coverage}}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B2]
}

// -----

// A backward stage without its checkpoint.
func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    // expected-error@+1 {{recomputes from the input of layer 1, but no forward stage checkpoints it}}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

// A plan over the worker budget. Peaks are recomputed from the layers: the
// tail runs with 4 MB of parameters, 8 MB of gradients and 10 MB of
// activations (input and its gradient for two microbatches in flight, 6 MB
// of workspace); a 4 MB parameter slot is prefetched beside it: 26 MB.
func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
// expected-error@+1 {{needs 0.026 GB per worker, over the budget of 0.001 GB}}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+06, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
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

// -----

// The tail must end at the last layer.
func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0, 1] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    // expected-error@+1 {{ends at layer 3 but the model has 4 layers: the tail must end the forward pass}}
    pipe.stage @T tail layers 2 to 3 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

// Two activations cross from layer 0 to layer 1: not a narrow waist.
func.func @main(%w: tensor<4x4xf32> {tg.param = "w", tg.trainable}, %x: tensor<2x4xf32> {tg.input = "x"}) attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  %a = tg.matmul %x, %w {pipe.layer = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // expected-error@+1 {{'tg.unary' op is one of 2 activations crossing from layer 0 to layer 1; layers must meet at a narrow waist (one hidden state)}}
  %b = tg.unary tanh %a {pipe.layer = 0 : i64} : tensor<2x4xf32>
  %c = tg.binary add %a, %b {pipe.layer = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %d = tg.matmul %c, %w {pipe.layer = 2 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %e = tg.unary tanh %d {pipe.layer = 3 : i64} : tensor<2x4xf32>
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

// -----

// A layer reads a forward value of a later layer.
func.func @main(%w: tensor<4x4xf32> {tg.param = "w", tg.trainable}, %x: tensor<2x4xf32> {tg.input = "x"}) attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  %a = tg.matmul %x, %w {pipe.layer = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %b = tg.unary tanh %a {pipe.layer = 2 : i64} : tensor<2x4xf32>
  // expected-error@+1 {{'tg.binary' op in layer 1 reads a forward value of the later layer 2}}
  %c = tg.binary add %a, %b {pipe.layer = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %e = tg.unary tanh %c {pipe.layer = 3 : i64} : tensor<2x4xf32>
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

// -----

// A backward op reads a forward value of an earlier layer that is not
// that layer's checkpoint: a backward stage could not recompute it.
func.func @main(%w: tensor<4x4xf32> {tg.param = "w", tg.trainable}, %x: tensor<2x4xf32> {tg.input = "x"}, %s: tensor<f32> {tg.loss_scale}) attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  %a = tg.matmul %x, %w {pipe.layer = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %b = tg.unary tanh %a {pipe.layer = 0 : i64} : tensor<2x4xf32>
  %c = tg.unary tanh %b {pipe.layer = 1 : i64} : tensor<2x4xf32>
  %d = tg.unary tanh %c {pipe.layer = 2 : i64} : tensor<2x4xf32>
  %e = tg.unary tanh %d {pipe.layer = 3 : i64} : tensor<2x4xf32>
  // expected-error@+1 {{'tg.binary' op in the backward of layer 1 reads a forward value of layer 0 that is not the activation entering layer 1 (its checkpoint)}}
  %g = tg.binary mul %a, %s {pipe.layer = 1 : i64} : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
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

// -----

// Only a frozen weight that products alone read may be held in bf16 alone:
// a trainable one needs fp32 master weights.
func.func @main(%w: tensor<4x4xf32> {tg.param = "w", tg.trainable}) attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
// expected-error@+1 {{holds "w" in bf16 alone (frozen_bf16), but it is not a frozen parameter of @main that only matrix products read}}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "h100", frozen_bf16 = ["w"], host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "bf16", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
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

// -----

// An fp32 plan computes its products in fp32: nothing may be held in bf16.
func.func @main(%w: tensor<4x4xf32> {tg.param = "w"}) attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
// expected-error@+1 {{holds frozen weights in bf16 (frozen_bf16) but computes in fp32}}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "h100", frozen_bf16 = ["w"], host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
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
