// RUN: rondo-opt %s --tg-autodiff --split-input-file | FileCheck %s

// Checks the backward of a small decoder step: the loss is seeded with the
// loss-scale argument; every trainable parameter gets one gradient result,
// in argument order; a weight shared by every batch row gets one GEMM over
// the flattened rows; the tied embedding/head weight sums both uses.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32> {tg.result = "loss_sum"}, tensor<16x8xf32> {tg.grad_of = "emb"}, tensor<8xf32> {tg.grad_of = "norm"}, tensor<8x8xf32> {tg.grad_of = "w"})
// CHECK: %[[LOSS:.*]] = tg.linear_cross_entropy
// CHECK: %[[DH:.*]], %[[DEMB_HEAD:.*]] = tg.linear_cross_entropy_grad %{{.*}}, %arg0, %{{.*}}, %arg5 {{.*}}transpose_w
// CHECK: tg.unary_grad silu
// CHECK: %[[A2:.*]] = tg.reshape %{{.*}} : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[C2:.*]] = tg.reshape %{{.*}} : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[DW:.*]] = tg.matmul %[[A2]], %[[C2]] {transpose_a} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[DX:.*]], %[[DN:.*]] = tg.rms_norm_grad
// CHECK: %[[DEMB_LOOKUP:.*]] = tg.gather_grad %{{.*}} into %arg3
// CHECK: %[[DEMB:.*]] = tg.binary add %[[DEMB_HEAD]], %[[DEMB_LOOKUP]]
// CHECK: return %[[LOSS]], %[[DEMB]], %[[DN]], %[[DW]]
func.func @main(%emb: tensor<16x8xf32> {tg.param = "emb", tg.trainable},
                %norm: tensor<8xf32> {tg.param = "norm", tg.trainable},
                %w: tensor<8x8xf32> {tg.param = "w", tg.trainable},
                %ids: tensor<2x4xi64> {tg.input = "input_ids"},
                %labels: tensor<8xi64> {tg.labels},
                %scale: tensor<f32> {tg.loss_scale}) -> tensor<f32> {
  %h = tg.gather %emb[%ids] : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %n = tg.rms_norm %h, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %p = tg.matmul %n, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %a = tg.unary silu %p : tensor<2x4x8xf32>
  %r = tg.reshape %a : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %l = tg.linear_cross_entropy %r, %emb, %labels {chunk_rows = 4, ignore_index = -100, transpose_w} : (tensor<8x8xf32>, tensor<16x8xf32>, tensor<8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Checks that frozen parameters get no gradient work: only the adapter-like
// %b is trainable, so no gradient flows into %w and no matmul computes one.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32> {tg.result = "loss_sum"}, tensor<4xf32> {tg.grad_of = "b"})
// CHECK-NOT: transpose_a
// CHECK: return
func.func @main(%w: tensor<4x4xf32> {tg.param = "w"}, %b: tensor<4xf32> {tg.param = "b", tg.trainable},
                %x: tensor<3x4xf32> {tg.input = "x"}) -> tensor<f32> {
  %y = tg.matmul %x, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %z = tg.binary add %y, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %s = tg.reduce sum %z {axes = array<i64: 0, 1>} : (tensor<3x4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Checks the attention and rotary backward: one attention_grad reading the
// saved output and log-sum-exp, then rotary_grad on the query gradient.
// CHECK-LABEL: func.func @main
// CHECK: %[[O:.*]], %[[LSE:.*]] = tg.attention
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = tg.attention_grad %{{.*}}, %arg1, %arg1, %[[O]], %[[LSE]], %{{.*}} {causal, scale = 2.500000e-01 : f32}
// CHECK: tg.rotary_grad %[[DQ]]
func.func @main(%q: tensor<1x2x4x8xf32> {tg.param = "q", tg.trainable}, %k: tensor<1x1x4x8xf32> {tg.param = "k", tg.trainable},
                %t: tensor<4x8xf32> {tg.input = "t"}) -> tensor<f32> {
  %c = tg.constant dense<0.5> : tensor<4x8xf32>
  %qr = tg.rotary %q, %c, %c : tensor<1x2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  %o, %lse = tg.attention %qr, %k, %k {causal, scale = 0.25 : f32} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %s = tg.reduce sum %o {axes = array<i64: 0, 1, 2, 3>} : (tensor<1x2x4x8xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Checks the gated activation's backward: one tg.gated_act_grad gives
// act'(gate) * (dy * up) for the gate and dy * act(gate) for the up
// projection (its kernels compute both in one pass).
// CHECK-LABEL: func.func @main
// CHECK: %[[DG:.*]], %[[DU:.*]] = tg.gated_act_grad silu %arg0, %arg1, %{{.*}} : tensor<4xf32>
// CHECK-NOT: tg.unary_grad
// CHECK: return %{{.*}}, %[[DG]], %[[DU]]
func.func @main(%g: tensor<4xf32> {tg.param = "g", tg.trainable}, %u: tensor<4xf32> {tg.param = "u", tg.trainable},
                %x: tensor<4xf32> {tg.input = "x"}) -> tensor<f32> {
  %h = tg.gated_act silu %g, %u : tensor<4xf32>
  %s = tg.reduce sum %h {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Checks the clamp's backward: the adjoint reads the forward's input and
// bounds (GPT-OSS's clamped SwiGLU).
// CHECK-LABEL: func.func @main
// CHECK: %[[C:.*]] = tg.clamp %arg0 {max = 7.000000e+00 : f32, min = -7.000000e+00 : f32}
// CHECK: %[[DC:.*]] = tg.clamp_grad %arg0, %{{.*}} {max = 7.000000e+00 : f32, min = -7.000000e+00 : f32}
// CHECK: return %{{.*}}, %[[DC]]
func.func @main(%g: tensor<4xf32> {tg.param = "g", tg.trainable},
                %x: tensor<4xf32> {tg.input = "x"}) -> tensor<f32> {
  %c = tg.clamp %g {min = -7.0 : f32, max = 7.0 : f32} : tensor<4xf32>
  %s = tg.reduce sum %c {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Checks a mixture of experts' backward: the router's top-k sends the
// values' gradient to the chosen positions (the ids get none); the grouped
// product's dx is the same grouped product with the other orientation of the
// expert matrices, its dW the per-expert sum (tg.expert_matmul_wgrad).
// CHECK-LABEL: func.func @main
// CHECK: %[[V:.*]], %[[I:.*]] = tg.top_k %arg1 {k = 2 : i64}
// CHECK: %[[IDS:.*]] = tg.reshape %[[I]] : (tensor<3x2xi64>) -> tensor<6xi64>
// CHECK: tg.expert_matmul %arg2, %arg0, %[[IDS]] {transpose_w}
// CHECK: %[[DX:.*]] = tg.expert_matmul %{{.*}}, %arg0, %[[IDS]] : (tensor<6x5xf32>, tensor<4x5x8xf32>, tensor<6xi64>) -> tensor<6x8xf32>
// CHECK: %[[DW:.*]] = tg.expert_matmul_wgrad %arg2, %{{.*}}, %[[IDS]] {transpose_w} : (tensor<6x8xf32>, tensor<6x5xf32>, tensor<6xi64>) -> tensor<4x5x8xf32>
// CHECK: %[[DP:.*]] = tg.top_k_grad %{{.*}} into %[[I]] : (tensor<3x2xi64>, tensor<3x2xf32>) -> tensor<3x4xf32>
// CHECK: return %{{.*}}, %[[DW]], %[[DP]], %[[DX]]
func.func @main(%w: tensor<4x5x8xf32> {tg.param = "w", tg.trainable},
                %p: tensor<3x4xf32> {tg.param = "p", tg.trainable},
                %x: tensor<6x8xf32> {tg.param = "x", tg.trainable}) -> tensor<f32> {
  %v, %i = tg.top_k %p {k = 2 : i64} : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  %ids = tg.reshape %i : (tensor<3x2xi64>) -> tensor<6xi64>
  %y = tg.expert_matmul %x, %w, %ids {transpose_w} : (tensor<6x8xf32>, tensor<4x5x8xf32>, tensor<6xi64>) -> tensor<6x5xf32>
  %vr = tg.reshape %v : (tensor<3x2xf32>) -> tensor<6x1xf32>
  %z = tg.binary mul %y, %vr : (tensor<6x5xf32>, tensor<6x1xf32>) -> tensor<6x5xf32>
  %s = tg.reduce sum %z {axes = array<i64: 0, 1>} : (tensor<6x5xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Checks attention with sinks: attention_grad also takes the sinks and its
// fourth result is the sinks' gradient, returned for the trainable sinks.
// CHECK-LABEL: func.func @main
// CHECK: %[[O:.*]], %[[LSE:.*]] = tg.attention %arg0, %arg1, %arg1 sinks %arg2
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]], %[[DS:.*]] = tg.attention_grad %arg0, %arg1, %arg1, %[[O]], %[[LSE]], %{{.*}} sinks %arg2 {causal, scale = 2.500000e-01 : f32, window = 2 : i64}
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %[[DS]]
func.func @main(%q: tensor<1x2x4x8xf32> {tg.param = "q", tg.trainable}, %k: tensor<1x1x4x8xf32> {tg.param = "k", tg.trainable},
                %s: tensor<2xf32> {tg.param = "sinks", tg.trainable}) -> tensor<f32> {
  %o, %lse = tg.attention %q, %k, %k sinks %s {causal, scale = 0.25 : f32, window = 2} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<2xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %sum = tg.reduce sum %o {axes = array<i64: 0, 1, 2, 3>} : (tensor<1x2x4x8xf32>) -> tensor<f32>
  return %sum : tensor<f32>
}
