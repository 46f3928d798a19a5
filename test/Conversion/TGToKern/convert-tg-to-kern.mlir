// RUN: rondo-opt %s --convert-tg-to-kern --split-input-file | FileCheck %s
// RUN: rondo-opt %s --convert-tg-to-kern --split-input-file | rondo-opt --split-input-file | FileCheck %s

// Elementwise: one call each (a gated activation and its gradient too, both
// results of the gradient in one call, a result nothing reads skipped); a
// mean is sumToShape, scale and a reshape to the result shape.
// CHECK-LABEL: func.func @elementwise
// CHECK: %[[U:.*]] = kern.call @unary(%arg0) args {kind = "Silu"}
// CHECK: %[[B:.*]] = kern.call @binary(%[[U]], %arg1) args {kind = "Add"}
// CHECK: %[[G:.*]] = kern.call @gatedAct(%arg0, %arg1) args {kind = "GeluTanh"} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[S:.*]] = kern.call @sumToShape(%[[G]]) : (tensor<2x4xf32>) -> tensor<2x1xf32>
// CHECK: %[[M:.*]] = kern.call @scale(%[[S]]) args {factor = 2.500000e-01 : f32}
// CHECK: %[[R:.*]] = tg.reshape %[[M]] : (tensor<2x1xf32>) -> tensor<2xf32>
// CHECK: kern.call @binaryBackward(%arg0, %arg1, %[[B]]) args {kind = "Mul"} : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK: %[[N:.*]] = kern.call @isNan(%arg0) : (tensor<2x4xf32>) -> tensor<2x4xi1>
// CHECK: kern.call @select(%[[N]], %arg0, %arg1)
// CHECK: %[[C:.*]] = kern.call @clamp(%arg0) args {hi = 7.000000e+00 : f32, lo = -7.000000e+00 : f32}
// CHECK: kern.call @clampBackward(%arg0, %[[C]]) args {hi = 7.000000e+00 : f32, lo = -7.000000e+00 : f32} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NOT: tg.unary
func.func @elementwise(%x: tensor<2x4xf32>, %y: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) attributes {exec.stage} {
  %u = tg.unary silu %x : tensor<2x4xf32>
  %b = tg.binary add %u, %y : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %g = tg.gated_act gelu_tanh %x, %y : tensor<2x4xf32>
  %m = tg.reduce mean %g {axes = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2xf32>
  %dl, %dr = tg.binary_grad mul %x, %y, %b : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
  %n = tg.is_nan %x : (tensor<2x4xf32>) -> tensor<2x4xi1>
  %s = tg.select %n, %x, %y : (tensor<2x4xi1>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %c = tg.clamp %x {min = -7.0 : f32, max = 7.0 : f32} : tensor<2x4xf32>
  %dc = tg.clamp_grad %x, %c {min = -7.0 : f32, max = 7.0 : f32} : tensor<2x4xf32>
  return %b, %m, %dl, %dr, %s, %dc : tensor<2x4xf32>, tensor<2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// The gated activation's gradient: both results in one call; a result
// nothing reads (a frozen up projection's) is skipped.
// CHECK-LABEL: func.func @gated_grad
// CHECK: kern.call @gatedActBackward(%arg0, %arg1, %arg2) args {kind = "Silu"} : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK: kern.call @gatedActBackward(%arg0, %arg1, %arg2) args {kind = "Silu"} {skip = array<i64: 1>}
func.func @gated_grad(%g: tensor<2x4xf32>, %u: tensor<2x4xf32>, %dy: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) attributes {exec.stage} {
  %dg, %du = tg.gated_act_grad silu %g, %u, %dy : tensor<2x4xf32>
  %dg2, %du2 = tg.gated_act_grad silu %g, %u, %dy : tensor<2x4xf32>
  return %dg, %du, %dg2 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Data movement: integer tensors use the *Ints kernels; a negative concat
// axis is normalised; the embedding gradient zeroes a table that the scatter
// accumulates into (inits).
// CHECK-LABEL: func.func @movement
// CHECK: kern.call @transpose(%arg0) args {perm = array<i64: 1, 0>}
// CHECK: kern.call @transposeInts(%arg1) args {perm = array<i64: 1, 0>}
// CHECK: kern.call @sliceInts(%arg1) args {starts = array<i64: 0, 1>, steps = array<i64: 1, 1>}
// CHECK: kern.call @concat(%arg0, %arg0) args {axis = 1 : i32}
// CHECK: kern.call @gatherRows(%arg2, %arg1)
// CHECK: %[[Z:.*]] = kern.call @fill() args {value = 0.000000e+00 : f32} : () -> tensor<8x3xf32>
// CHECK: kern.call @gatherRowsBackward(%arg1, %{{.*}}) inits(%[[Z]])
// CHECK: kern.call @causalMask() args {window = 0 : i64} : () -> tensor<1x1x4x4xf32>
func.func @movement(%x: tensor<2x3xf32>, %ids: tensor<2x3xi64>, %table: tensor<8x3xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>, tensor<2x2xi64>, tensor<2x6xf32>, tensor<8x3xf32>, tensor<1x1x4x4xf32>) attributes {exec.stage} {
  %t = tg.transpose %x [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %ti = tg.transpose %ids [1, 0] : (tensor<2x3xi64>) -> tensor<3x2xi64>
  %si = tg.slice %ids [0, 1] step [1, 1] : (tensor<2x3xi64>) -> tensor<2x2xi64>
  %c = tg.concat %x, %x {axis = -1} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  %g = tg.gather %table[%ids] : (tensor<8x3xf32>, tensor<2x3xi64>) -> tensor<2x3x3xf32>
  %dt = tg.gather_grad %g into %ids : (tensor<2x3xi64>, tensor<2x3x3xf32>) -> tensor<8x3xf32>
  %mask = tg.causal_mask : tensor<1x1x4x4xf32>
  return %t, %ti, %si, %c, %dt, %mask : tensor<3x2xf32>, tensor<3x2xi64>, tensor<2x2xi64>, tensor<2x6xf32>, tensor<8x3xf32>, tensor<1x1x4x4xf32>
}

// -----

// A parameter gradient nothing reads is skipped; the loss backward's scale
// is its last input, not an attribute.
// CHECK-LABEL: func.func @structures
// CHECK: kern.call @rmsNormBackward(%arg0, %arg1, %arg2) args {eps = 9.99999997E-7 : f32} {skip = array<i64: 1>}
// CHECK: kern.call @linearCrossEntropy(%arg0, %arg3, %arg4) args {chunkRows = 1024 : i64, ignoreIndex = -100 : i64, transW = true}
// CHECK: kern.call @linearCrossEntropyBackward(%arg0, %arg3, %arg4, %arg5) args {chunkRows = 1024 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<4xi64>, tensor<f32>) -> (tensor<4x8xf32>, tensor<16x8xf32>)
// CHECK-NOT: skip
func.func @structures(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %dy: tensor<4x8xf32>, %head: tensor<16x8xf32>, %labels: tensor<4xi64>, %scale: tensor<f32>) -> (tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>, tensor<16x8xf32>) attributes {exec.stage} {
  %dx, %dw = tg.rms_norm_grad %x, %w, %dy {eps = 1.0e-06 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  %loss = tg.linear_cross_entropy %x, %head, %labels {transpose_w, ignore_index = -100, chunk_rows = 1024} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<4xi64>) -> tensor<f32>
  %dh, %dhead = tg.linear_cross_entropy_grad %x, %head, %labels, %scale {transpose_w, ignore_index = -100, chunk_rows = 1024} : (tensor<4x8xf32>, tensor<16x8xf32>, tensor<4xi64>, tensor<f32>) -> (tensor<4x8xf32>, tensor<16x8xf32>)
  return %dx, %loss, %dh, %dhead : tensor<4x8xf32>, tensor<f32>, tensor<4x8xf32>, tensor<16x8xf32>
}

// -----

// Only stage functions are lowered.
// CHECK-LABEL: func.func @not_a_stage
// CHECK: tg.unary
func.func @not_a_stage(%x: tensor<2xf32>) -> tensor<2xf32> {
  %u = tg.unary exp %x : tensor<2xf32>
  return %u : tensor<2xf32>
}

// -----

// Mixture of experts: one kernel per op; the expert layout is an argument.
// CHECK-LABEL: func.func @experts
// CHECK: kern.call @topK(%{{.*}}) : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
// CHECK: kern.call @topKBackward(%{{.*}}, %{{.*}}) : (tensor<6x2xi64>, tensor<6x2xf32>) -> tensor<6x4xf32>
// CHECK: kern.call @expertMatmul(%{{.*}}, %{{.*}}, %{{.*}}) args {transW = true} : (tensor<12x8xf32>, tensor<4x5x8xf32>, tensor<12xi64>) -> tensor<12x5xf32>
// CHECK: kern.call @expertMatmulWeightGrad(%{{.*}}, %{{.*}}, %{{.*}}) args {transW = true} : (tensor<12x8xf32>, tensor<12x5xf32>, tensor<12xi64>) -> tensor<4x5x8xf32>
func.func @experts(%p: tensor<6x4xf32>, %x: tensor<12x8xf32>, %w: tensor<4x5x8xf32>, %ids: tensor<12xi64>) -> (tensor<6x4xf32>, tensor<4x5x8xf32>) attributes {exec.stage} {
  %v, %i = tg.top_k %p {k = 2 : i64} : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %dp = tg.top_k_grad %v into %i : (tensor<6x2xi64>, tensor<6x2xf32>) -> tensor<6x4xf32>
  %y = tg.expert_matmul %x, %w, %ids {transpose_w} : (tensor<12x8xf32>, tensor<4x5x8xf32>, tensor<12xi64>) -> tensor<12x5xf32>
  %dw = tg.expert_matmul_wgrad %x, %y, %ids {transpose_w} : (tensor<12x8xf32>, tensor<12x5xf32>, tensor<12xi64>) -> tensor<4x5x8xf32>
  return %dp, %dw : tensor<6x4xf32>, tensor<4x5x8xf32>
}

// Attention with sinks: attentionSinks with the sinks after v, and
// attentionSinksBackward with the sinks after v; a dsinks nothing reads
// (frozen sinks) is skipped.
// CHECK-LABEL: func.func @attention_sinks
// CHECK: %[[O:.*]]:2 = kern.call @attentionSinks(%arg0, %arg1, %arg1, %arg2) args {causal = true, scale = 5.000000e-01 : f32, window = 2 : i64}
// CHECK: kern.call @attentionSinksBackward(%arg0, %arg1, %arg1, %arg2, %[[O]]#0, %[[O]]#1, %arg0) args {causal = true, scale = 5.000000e-01 : f32, window = 2 : i64} : ({{.*}}) -> ({{.*}}, tensor<2xf32>)
// CHECK: kern.call @attentionSinksBackward(%arg0, %arg1, %arg1, %arg2, %[[O]]#0, %[[O]]#1, %arg0) args {causal = true, scale = 5.000000e-01 : f32, window = 2 : i64} {skip = array<i64: 3>}
func.func @attention_sinks(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>, %s: tensor<2xf32>) -> (tensor<1x2x4x8xf32>, tensor<2xf32>) attributes {exec.stage} {
  %o, %lse = tg.attention %q, %k, %k sinks %s {causal, scale = 0.5 : f32, window = 2} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<2xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %dq, %dk, %dv, %ds = tg.attention_grad %q, %k, %k, %o, %lse, %q sinks %s {causal, scale = 0.5 : f32, window = 2} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>, tensor<2xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<2xf32>)
  %fq, %fk, %fv, %fs = tg.attention_grad %q, %k, %k, %o, %lse, %q sinks %s {causal, scale = 0.5 : f32, window = 2} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>, tensor<2xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<2xf32>)
  %sum = tg.binary add %dq, %fq : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %sum, %ds : tensor<1x2x4x8xf32>, tensor<2xf32>
}
