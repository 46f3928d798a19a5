// RUN: rondo-opt %s | rondo-opt | FileCheck %s
// RUN: rondo-opt %s --mlir-print-op-generic | rondo-opt | FileCheck %s

// Every tg op parses, verifies and prints back to the same form.

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %c: tensor<2x8xi1>) -> tensor<2x8xf32> {
  // CHECK: tg.constant dense<2.000000e+00> : tensor<f32>
  %two = tg.constant dense<2.0> : tensor<f32>
  // CHECK: tg.unary silu %{{.*}} : tensor<2x8xf32>
  %a = tg.unary silu %x : tensor<2x8xf32>
  // CHECK: tg.binary pow %{{.*}}, %{{.*}} : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %b = tg.binary pow %a, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  // CHECK: tg.binary mul %{{.*}}, %{{.*}} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %d = tg.binary mul %b, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK: tg.clamp %{{.*}} {max = 7.000000e+00 : f32, min = -7.000000e+00 : f32} : tensor<2x8xf32>
  %cl = tg.clamp %d {min = -7.0 : f32, max = 7.0 : f32} : tensor<2x8xf32>
  // CHECK: tg.clamp_grad %{{.*}}, %{{.*}} {max = 0x7F800000 : f32, min = 0.000000e+00 : f32} : tensor<2x8xf32>
  %cg = tg.clamp_grad %cl, %d {min = 0.0 : f32, max = 0x7F800000 : f32} : tensor<2x8xf32>
  // CHECK: tg.is_nan
  %n = tg.is_nan %d : (tensor<2x8xf32>) -> tensor<2x8xi1>
  // CHECK: tg.select
  %s = tg.select %c, %d, %two : (tensor<2x8xi1>, tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  // CHECK: tg.unary_grad gelu_tanh
  %g = tg.unary_grad gelu_tanh %s, %d : tensor<2x8xf32>
  // CHECK: tg.gated_act gelu_tanh
  %ga = tg.gated_act gelu_tanh %x, %x : tensor<2x8xf32>
  // CHECK: tg.binary_grad div
  %gl, %gr = tg.binary_grad div %g, %w, %d : (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>)
  return %gl : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @layout
func.func @layout(%x: tensor<2x3x4xf32>, %ids: tensor<2x3xi64>, %t: tensor<16x4xf32>) -> tensor<2x3x4xf32> {
  // CHECK: tg.reshape %{{.*}} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %r = tg.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // CHECK: tg.transpose %{{.*}} [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %t1 = tg.transpose %r [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  // CHECK: tg.slice %{{.*}} [0, 1] step [1, 2] : (tensor<4x6xf32>) -> tensor<4x3xf32>
  %s = tg.slice %t1 [0, 1] step [1, 2] : (tensor<4x6xf32>) -> tensor<4x3xf32>
  // CHECK: tg.slice_grad
  %sg = tg.slice_grad %s [0, 1] step [1, 2] : (tensor<4x3xf32>) -> tensor<4x6xf32>
  // CHECK: tg.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  %c = tg.concat %sg, %t1 {axis = 1} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x12xf32>
  // CHECK: tg.broadcast %{{.*}} : (tensor<4x12xf32>) -> tensor<2x4x12xf32>
  %b = tg.broadcast %c : (tensor<4x12xf32>) -> tensor<2x4x12xf32>
  // CHECK: tg.sum_to_shape %{{.*}} : (tensor<2x4x12xf32>) -> tensor<4x12xf32>
  %st = tg.sum_to_shape %b : (tensor<2x4x12xf32>) -> tensor<4x12xf32>
  // CHECK: tg.reduce sum %{{.*}} {axes = array<i64: 1>, keepdims} : (tensor<4x12xf32>) -> tensor<4x1xf32>
  %red = tg.reduce sum %st {axes = array<i64: 1>, keepdims} : (tensor<4x12xf32>) -> tensor<4x1xf32>
  // CHECK: tg.gather %{{.*}}[%{{.*}}] : (tensor<16x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %e = tg.gather %t[%ids] : (tensor<16x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  // CHECK: tg.gather_grad %{{.*}} into %{{.*}} :
  %eg = tg.gather_grad %e into %ids : (tensor<2x3xi64>, tensor<2x3x4xf32>) -> tensor<16x4xf32>
  return %e : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @structures
func.func @structures(%x: tensor<2x8x4x16xf32>, %w: tensor<16xf32>, %k: tensor<2x2x4x16xf32>,
                      %cos: tensor<4x16xf32>, %ids: tensor<6xi64>, %h: tensor<6x16xf32>,
                      %lm: tensor<16x32xf32>, %s: tensor<f32>) -> tensor<f32> {
  // CHECK: tg.rms_norm %{{.*}}, %{{.*}} {eps = 9.99999997E-7 : f32}
  %n = tg.rms_norm %x, %w {eps = 1.0e-6 : f32} : (tensor<2x8x4x16xf32>, tensor<16xf32>) -> tensor<2x8x4x16xf32>
  // CHECK: tg.rms_norm_grad
  %dx, %dw = tg.rms_norm_grad %x, %w, %n {eps = 1.0e-6 : f32} : (tensor<2x8x4x16xf32>, tensor<16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<16xf32>)
  // CHECK: tg.layer_norm
  %ln = tg.layer_norm %x, %w, %w {eps = 1.0e-5 : f32} : (tensor<2x8x4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x4x16xf32>
  // CHECK: tg.rotary %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
  %r = tg.rotary %n, %cos, %cos : tensor<2x8x4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
  // CHECK: tg.rotary_grad
  %rg = tg.rotary_grad %r, %cos, %cos : tensor<2x8x4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
  // CHECK: tg.rotary_table sin freqs [1.000000e+00, 1.000000e-02] scale 1.000000e+00 : tensor<1x1x4x2xf32>
  %tab = tg.rotary_table sin freqs [1.0, 0.01] scale 1.0 : tensor<1x1x4x2xf32>
  // CHECK: tg.causal_mask : tensor<1x1x4x4xf32>
  %m = tg.causal_mask : tensor<1x1x4x4xf32>
  // CHECK: tg.causal_mask {window = 2 : i64} : tensor<1x1x4x4xf32>
  %mw = tg.causal_mask {window = 2} : tensor<1x1x4x4xf32>
  // CHECK: tg.softmax %{{.*}} : tensor<1x1x4x4xf32>
  %p = tg.softmax %m : tensor<1x1x4x4xf32>
  // CHECK: tg.softmax_grad
  %pg = tg.softmax_grad %p, %p : tensor<1x1x4x4xf32>
  // CHECK: tg.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f32}
  %o, %lse = tg.attention %r, %k, %k {causal, scale = 0.25 : f32} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>)
  // CHECK: tg.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, scale = 2.500000e-01 : f32, window = 3 : i64}
  %ow, %lsew = tg.attention %r, %k, %k {causal, scale = 0.25 : f32, window = 3} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>)
  // CHECK: tg.attention_grad
  %dq, %dk, %dv = tg.attention_grad %r, %k, %k, %o, %lse, %o {causal, scale = 0.25 : f32} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  // CHECK: tg.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}} {chunk_rows = 4 : i64, ignore_index = -100 : i64}
  %l = tg.linear_cross_entropy %h, %lm, %ids {chunk_rows = 4, ignore_index = -100} : (tensor<6x16xf32>, tensor<16x32xf32>, tensor<6xi64>) -> tensor<f32>
  // CHECK: tg.linear_cross_entropy_grad
  %dh, %dlm = tg.linear_cross_entropy_grad %h, %lm, %ids, %s {chunk_rows = 4, ignore_index = -100} : (tensor<6x16xf32>, tensor<16x32xf32>, tensor<6xi64>, tensor<f32>) -> (tensor<6x16xf32>, tensor<16x32xf32>)
  %logits = tg.matmul %h, %lm : (tensor<6x16xf32>, tensor<16x32xf32>) -> tensor<6x32xf32>
  // CHECK: tg.cross_entropy
  %ce = tg.cross_entropy %logits, %ids {ignore_index = -100} : (tensor<6x32xf32>, tensor<6xi64>) -> tensor<f32>
  // CHECK: tg.cross_entropy_grad
  %dl = tg.cross_entropy_grad %logits, %ids, %s {ignore_index = -100} : (tensor<6x32xf32>, tensor<6xi64>, tensor<f32>) -> tensor<6x32xf32>
  return %l : tensor<f32>
}

// Mixture of experts: the router's choice and the grouped expert products.
// CHECK-LABEL: func.func @experts
func.func @experts(%p: tensor<6x4xf32>, %x: tensor<12x8xf32>, %w: tensor<4x5x8xf32>, %ids: tensor<12xi64>, %dy: tensor<12x5xf32>) -> tensor<4x5x8xf32> {
  // CHECK: tg.top_k %{{.*}} {k = 2 : i64} : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %v, %i = tg.top_k %p {k = 2 : i64} : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  // CHECK: tg.top_k_grad %{{.*}} into %{{.*}} : (tensor<6x2xi64>, tensor<6x2xf32>) -> tensor<6x4xf32>
  %dp = tg.top_k_grad %v into %i : (tensor<6x2xi64>, tensor<6x2xf32>) -> tensor<6x4xf32>
  // CHECK: tg.expert_matmul %{{.*}}, %{{.*}}, %{{.*}} {transpose_w} : (tensor<12x8xf32>, tensor<4x5x8xf32>, tensor<12xi64>) -> tensor<12x5xf32>
  %y = tg.expert_matmul %x, %w, %ids {transpose_w} : (tensor<12x8xf32>, tensor<4x5x8xf32>, tensor<12xi64>) -> tensor<12x5xf32>
  // CHECK: tg.expert_matmul %{{.*}}, %{{.*}}, %{{.*}} : (tensor<12x5xf32>, tensor<4x5x8xf32>, tensor<12xi64>) -> tensor<12x8xf32>
  %dx = tg.expert_matmul %dy, %w, %ids : (tensor<12x5xf32>, tensor<4x5x8xf32>, tensor<12xi64>) -> tensor<12x8xf32>
  // CHECK: tg.expert_matmul_wgrad %{{.*}}, %{{.*}}, %{{.*}} {transpose_w} : (tensor<12x8xf32>, tensor<12x5xf32>, tensor<12xi64>) -> tensor<4x5x8xf32>
  %dw = tg.expert_matmul_wgrad %x, %dy, %ids {transpose_w} : (tensor<12x8xf32>, tensor<12x5xf32>, tensor<12xi64>) -> tensor<4x5x8xf32>
  return %dw : tensor<4x5x8xf32>
}

// Attention sinks: one logit per query head on tg.attention, their gradient
// as tg.attention_grad's fourth result.
// CHECK-LABEL: func.func @attention_sinks
func.func @attention_sinks(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %s: tensor<8xf32>) -> tensor<8xf32> {
  // CHECK: tg.attention %{{.*}}, %{{.*}}, %{{.*}} sinks %{{.*}} {causal, scale = 2.500000e-01 : f32, window = 3 : i64} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>)
  %o, %lse = tg.attention %q, %k, %k sinks %s {causal, scale = 0.25 : f32, window = 3} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>)
  // CHECK: tg.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} sinks %{{.*}} {causal, scale = 2.500000e-01 : f32} : ({{.*}}, tensor<8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<8xf32>)
  %dq, %dk, %dv, %ds = tg.attention_grad %q, %k, %k, %o, %lse, %o sinks %s {causal, scale = 0.25 : f32} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4x16xf32>, tensor<8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<8xf32>)
  return %ds : tensor<8xf32>
}
