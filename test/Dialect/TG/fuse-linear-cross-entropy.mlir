// RUN: rondo-opt %s --tg-fuse-linear-cross-entropy=chunk-rows=3 --canonicalize | FileCheck %s

// Checks that the LM head moves into the loss: the slice and reshape apply
// to the hidden states, the logits are never formed, and a transposed
// (tied) weight is read in place.
// CHECK-LABEL: func.func @head
// CHECK-SAME: (%[[H:.*]]: tensor<2x5x8xf32>, %[[W:.*]]: tensor<16x8xf32>, %[[Y:.*]]: tensor<8xi64>)
// CHECK: %[[S:.*]] = tg.slice %[[H]] [0, 0, 0] step [1, 1, 1] : (tensor<2x5x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[R:.*]] = tg.reshape %[[S]] : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: tg.linear_cross_entropy %[[R]], %[[W]], %[[Y]] {chunk_rows = 3 : i64, ignore_index = -100 : i64, transpose_w}
// CHECK-NOT: tg.matmul
func.func @head(%h: tensor<2x5x8xf32>, %w: tensor<16x8xf32>, %y: tensor<8xi64>) -> tensor<f32> {
  %wt = tg.transpose %w [1, 0] : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %l = tg.matmul %h, %wt : (tensor<2x5x8xf32>, tensor<8x16xf32>) -> tensor<2x5x16xf32>
  %s = tg.slice %l [0, 0, 0] step [1, 1, 1] : (tensor<2x5x16xf32>) -> tensor<2x4x16xf32>
  %f = tg.reshape %s : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
  %ce = tg.cross_entropy %f, %y {ignore_index = -100} : (tensor<8x16xf32>, tensor<8xi64>) -> tensor<f32>
  return %ce : tensor<f32>
}
