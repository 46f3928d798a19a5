// RUN: rondo-opt %s --pipe-layerize --split-input-file --verify-diagnostics | FileCheck %s

// A residual network: an embedding, three identical blocks and a loss. Each
// block has a waist in the middle (after the first residual add), so it is
// two different segments; the segments repeat with a period of two and the
// blocks become layers 1..3. The embedding is the prefix; the final norm and
// the loss are the tail. The transpose of a weight depends on a parameter
// only and goes with its user; the label reshape is side data: no layer.
// CHECK-LABEL: func.func @main
// CHECK-SAME: pipe.layer_kinds = ["prefix", "block", "block", "block", "tail"]
// CHECK: tg.gather {{.*}}pipe.layer = 0
// CHECK: tg.reshape %arg4 : (tensor<2x4xi64>) -> tensor<8xi64>
// CHECK: tg.transpose %arg2 {{.*}}pipe.layer = 1
// CHECK: tg.rms_norm {{.*}}pipe.layer = 1
// CHECK: tg.matmul {{.*}}pipe.layer = 1
// CHECK: tg.binary add {{.*}}pipe.layer = 1
// CHECK: tg.rms_norm {{.*}}pipe.layer = 1
// CHECK: tg.matmul {{.*}}pipe.layer = 1
// CHECK: tg.unary silu {{.*}}pipe.layer = 1
// CHECK: tg.binary add {{.*}}pipe.layer = 1
// CHECK: tg.rms_norm {{.*}}pipe.layer = 2
// CHECK: tg.matmul {{.*}}pipe.layer = 2
// CHECK: tg.binary add {{.*}}pipe.layer = 2
// CHECK: tg.rms_norm {{.*}}pipe.layer = 2
// CHECK: tg.matmul {{.*}}pipe.layer = 2
// CHECK: tg.unary silu {{.*}}pipe.layer = 2
// CHECK: tg.binary add {{.*}}pipe.layer = 2
// CHECK: tg.rms_norm {{.*}}pipe.layer = 3
// CHECK: tg.matmul {{.*}}pipe.layer = 3
// CHECK: tg.binary add {{.*}}pipe.layer = 3
// CHECK: tg.rms_norm {{.*}}pipe.layer = 3
// CHECK: tg.matmul {{.*}}pipe.layer = 3
// CHECK: tg.unary silu {{.*}}pipe.layer = 3
// CHECK: tg.binary add {{.*}}pipe.layer = 3
// CHECK: tg.rms_norm {{.*}}pipe.layer = 4
// CHECK: tg.linear_cross_entropy {{.*}}pipe.layer = 4
func.func @main(%emb: tensor<16x8xf32> {tg.param = "emb", tg.trainable},
                %norm: tensor<8xf32> {tg.param = "norm", tg.trainable},
                %w: tensor<8x8xf32> {tg.param = "w", tg.trainable},
                %ids: tensor<2x4xi64> {tg.input = "input_ids"},
                %labels: tensor<2x4xi64> {tg.labels},
                %scale: tensor<f32> {tg.loss_scale}) -> tensor<f32> {
  %h0 = tg.gather %emb[%ids] : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %lab = tg.reshape %labels : (tensor<2x4xi64>) -> tensor<8xi64>
  %wt = tg.transpose %w [1, 0] : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %n1 = tg.rms_norm %h0, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %p1 = tg.matmul %n1, %wt : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h1 = tg.binary add %h0, %p1 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %m1 = tg.rms_norm %h1, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %q1 = tg.matmul %m1, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %s1 = tg.unary silu %q1 : tensor<2x4x8xf32>
  %g1 = tg.binary add %h1, %s1 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %n2 = tg.rms_norm %g1, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %p2 = tg.matmul %n2, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h2 = tg.binary add %g1, %p2 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %m2 = tg.rms_norm %h2, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %q2 = tg.matmul %m2, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %s2 = tg.unary silu %q2 : tensor<2x4x8xf32>
  %g2 = tg.binary add %h2, %s2 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %n3 = tg.rms_norm %g2, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %p3 = tg.matmul %n3, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h3 = tg.binary add %g2, %p3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %m3 = tg.rms_norm %h3, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %q3 = tg.matmul %m3, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %s3 = tg.unary silu %q3 : tensor<2x4x8xf32>
  %g3 = tg.binary add %h3, %s3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %f = tg.rms_norm %g3, %norm {eps = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %r = tg.reshape %f : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %l = tg.linear_cross_entropy %r, %emb, %lab {chunk_rows = 4, ignore_index = -100, transpose_w} : (tensor<8x8xf32>, tensor<16x8xf32>, tensor<8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// No repeated structure: every segment is a layer of its own.
// CHECK-LABEL: func.func @main
// CHECK-SAME: pipe.layer_kinds = ["prefix", "block", "tail"]
// CHECK: tg.matmul {{.*}}pipe.layer = 0
// CHECK: tg.unary tanh {{.*}}pipe.layer = 1
// CHECK: tg.reduce sum {{.*}}pipe.layer = 2
func.func @main(%w: tensor<4x4xf32> {tg.param = "w", tg.trainable},
                %x: tensor<3x4xf32> {tg.input = "x"}) -> tensor<f32> {
  %y = tg.matmul %x, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  %z = tg.unary tanh %y : tensor<3x4xf32>
  %t = tg.reduce sum %z {axes = array<i64: 0, 1>} : (tensor<3x4xf32>) -> tensor<f32>
  return %t : tensor<f32>
}

// -----

// Nothing mixes parameters with data: one layer, the tail.
// CHECK-LABEL: func.func @main
// CHECK-SAME: pipe.layer_kinds = ["tail"]
// CHECK: tg.binary mul %arg0, %arg0 {pipe.layer = 0 : i64}
// CHECK: tg.reduce sum {{.*}}pipe.layer = 0
func.func @main(%w: tensor<4xf32> {tg.param = "w", tg.trainable}, %x: tensor<3x4xf32> {tg.input = "x"}) -> tensor<f32> {
  %ww = tg.binary mul %w, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %u = tg.reduce sum %ww {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %u : tensor<f32>
}
