// RUN: rondo-opt %s | rondo-opt | FileCheck %s

// #pipe.bound and #pipe.search round-trip through the printer and the
// parser, numbers exactly and in decimal (--explain prints more digits
// than the plan's six significant ones); parameters at their default (0,
// "", false) are left out.
func.func private @plan_facts() attributes {
  // CHECK: bound = #pipe.bound<kind = single_layer, stage = "T", layer = "lm_head", slowest_seconds = 0.12345678901234566, fastest_seconds = 0.001, compute_seconds = 0.025, param_bytes = 1.748e+09, link_bandwidth = 2.5e+10, worker_arena_bytes = 71234567890.12, worker_budget_bytes = 8.0e+10, step_seconds = 0.3333333333333333, bubble = 0.1, sync_bubble = 0.25, balanced_unfit = "worker memory">
  bound = #pipe.bound<kind = single_layer, stage = "T", layer = "lm_head",
      slowest_seconds = 0.12345678901234566, fastest_seconds = 0.001,
      compute_seconds = 0.025, param_bytes = 1748000000.0,
      link_bandwidth = 2.5e10,
      worker_arena_bytes = 71234567890.12, worker_budget_bytes = 8.0e10,
      step_seconds = 0.33333333333333331, bubble = 0.1, sync_bubble = 0.25,
      balanced_unfit = "worker memory">,
  // CHECK-SAME: search = #pipe.search<candidates = 8, microbatch_counts = [8, 16], auto_microbatches = true>
  search = #pipe.search<candidates = 8, microbatch_counts = [8, 16],
      auto_microbatches = true, exact_optimum = false>,
  // CHECK-SAME: upload = #pipe.bound<kind = upload, stage = "B1", balanced_forward = [8, 7, 7, 7], balanced_step_seconds = 0.92976>
  upload = #pipe.bound<kind = upload, stage = "B1",
      balanced_forward = [8, 7, 7, 7], balanced_step_seconds = 0.92976>
}
