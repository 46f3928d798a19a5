// RUN: rondo-opt %s --split-input-file --verify-diagnostics


// -----

func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    // expected-error@+1 {{has an empty layer range [2, 2)}}
    pipe.stage @F0 forward layers 2 to 2 checkpoints [0, 1] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0, 1] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    // expected-error@+1 {{only forward stages take checkpoints}}
    pipe.stage @T tail layers 2 to 4 checkpoints [2] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    // expected-error@+1 {{checkpoints the input of layer 3, which is outside its layers [0, 2)}}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0, 3] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

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
    // expected-error@+1 {{job order must be forward stages, one tail, then backward stages; @T is out of place}}
    pipe.schedule first_worker 0 jobs [@F0, @B1, @T, @B2]
}

// -----

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
    // expected-error@+1 {{stage @B2 is never issued}}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1]
}

// -----

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
    // expected-error@+1 {{job @B9 is not a stage of the plan}}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B9]
}

// -----

func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
// expected-error@+1 {{splits a batch of 8 rows into 3 microbatches of 2 rows}}
pipe.plan @plan_w2 for @main workers 2 microbatches 3 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
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

func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 1 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0, 1] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    // expected-error@+1 {{memory_bytes 1.000000e+07 is not param + grad + activation bytes (1.100000e+07)}}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.0e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", tokens_per_step = 64 : i64} {
    pipe.layer 0 prefix {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    // expected-error@+1 {{bwd_flops must be a non-negative number}}
    pipe.layer 1 block {bwd_flops = -2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 2 block {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.layer 3 tail {bwd_flops = 2.0e+09 : f64, bwd_seconds = 2.0e-03 : f64, fwd_flops = 1.0e+09 : f64, fwd_seconds = 1.0e-03 : f64, grad_bytes = 4.0e+06 : f64, input_bytes = 1.0e+06 : f64, param_bytes = 2.0e+06 : f64, trainable_params = 1.0e+06 : f64, workspace_bytes = 3.0e+06 : f64}
    pipe.stage @F0 forward layers 0 to 2 checkpoints [0, 1] {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 0.0e+00 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 7.0e+06 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @T tail layers 2 to 4 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B1 backward layers 1 to 2 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.stage @B2 backward layers 0 to 1 {activation_bytes = 5.0e+06 : f64, compute_seconds = 1.0e-03 : f64, download_seconds = 0.0 : f64, grad_bytes = 4.0e+06 : f64, hop_seconds = 0.0 : f64, job_seconds = 4.0e-03 : f64, memory_bytes = 1.1e+07 : f64, param_bytes = 2.0e+06 : f64, upload_seconds = 1.0e-03 : f64}
    pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]
}

// -----

func.func @main() attributes {pipe.layer_kinds = ["prefix", "block", "block", "tail"]} {
  return
}
// expected-error@+1 {{'pipe.plan' op shared_params entry 0 names fewer than two layers}}
pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {memory = #pipe.memory<worker_budget = 1.0e+10, host_budget = 1.0e+10, worker_peak = 1.3e+07, host_peak = 1.2e+08>, prediction = #pipe.prediction<step = 1.0e-02, bubble = 0.1, sync_step = 1.2e-02, sync_bubble = 0.2>, batch = 8 : i64, bound = #pipe.bound<kind = balance, stage = "F0">, search = #pipe.search<candidates = 1, microbatch_counts = [4]>, device = "host", host_fixed_bytes = 1.0e+08 : f64, link_bandwidth = 1.0e+10 : f64, optimizer_params_per_second = 1.0e+09 : f64, peer_bandwidth = 0.0 : f64, precision = "fp32", rows_per_microbatch = 2 : i64, strategy = "exact", shared_params = [{grad_bytes = 4.0e+06 : f64, layers = array<i64: 0>, param_bytes = 2.0e+06 : f64}], tokens_per_step = 64 : i64} {
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

// The dialect verifies its discardable attributes (PipeOps.h).

func.func @layer_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pipe.layer' must be a non-negative i64}}
  %0 = tg.unary neg %x {pipe.layer = -1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{'pipe.layer' belongs on an op of a function body}}
func.func private @layer_on_func() attributes {pipe.layer = 0 : i64}

// -----

// expected-error @+1 {{'pipe.layer_kinds' must be an array of "prefix", "block" or "tail"}}
func.func private @layer_kinds() attributes {pipe.layer_kinds = ["prefix", "body"]}

// -----

// expected-error @+1 {{'pipe.layer_kinds' belongs on a function}}
module attributes {pipe.layer_kinds = ["tail"]} {}

// -----

// expected-error @+1 {{'pipe.layer' does not belong on a function argument}}
func.func private @layer_on_arg(tensor<f32> {pipe.layer = 0 : i64})

// -----

// expected-error @+1 {{'pipe.layer' does not belong on a function result}}
func.func private @layer_on_result() -> (tensor<f32> {pipe.layer = 0 : i64})

// -----

// expected-error @+1 {{unknown attribute 'pipe.stage'}}
func.func private @unknown() attributes {pipe.stage = 0 : i64}
