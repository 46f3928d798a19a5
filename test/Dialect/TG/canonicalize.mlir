// RUN: rondo-opt %s --canonicalize --split-input-file | FileCheck %s

// Checks that reshape -> transpose -> reshape that only moves whole
// dimensions collapses into one transpose.
// CHECK-LABEL: func.func @layout_chain
// CHECK-NEXT: %[[T:.*]] = tg.transpose %arg0 [0, 1, 3, 2] : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
// CHECK-NEXT: return %[[T]]
func.func @layout_chain(%x: tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32> {
  %a = tg.reshape %x : (tensor<2x4x8x16xf32>) -> tensor<8x8x16xf32>
  %b = tg.transpose %a [0, 2, 1] : (tensor<8x8x16xf32>) -> tensor<8x16x8xf32>
  %c = tg.reshape %b : (tensor<8x16x8xf32>) -> tensor<2x4x16x8xf32>
  return %c : tensor<2x4x16x8xf32>
}

// -----

// Checks that a reshape that really reorders data is kept.
// CHECK-LABEL: func.func @real_reshape
// CHECK: tg.transpose
// CHECK: tg.reshape
func.func @real_reshape(%x: tensor<4x6xf32>) -> tensor<24xf32> {
  %t = tg.transpose %x [1, 0] : (tensor<4x6xf32>) -> tensor<6x4xf32>
  %r = tg.reshape %t : (tensor<6x4xf32>) -> tensor<24xf32>
  return %r : tensor<24xf32>
}

// -----

// Checks the folds: identity transpose, reshape of reshape, transpose of
// transpose.
// CHECK-LABEL: func.func @folds
// CHECK-NEXT: %[[R:.*]] = tg.reshape %arg0 : (tensor<2x3x4xf32>) -> tensor<24xf32>
// CHECK-NEXT: return %[[R]], %arg0
func.func @folds(%x: tensor<2x3x4xf32>) -> (tensor<24xf32>, tensor<2x3x4xf32>) {
  %i = tg.transpose %x [0, 1, 2] : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %a = tg.reshape %i : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %b = tg.reshape %a : (tensor<6x4xf32>) -> tensor<24xf32>
  %t1 = tg.transpose %x [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %t2 = tg.transpose %t1 [1, 2, 0] : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
  return %b, %t2 : tensor<24xf32>, tensor<2x3x4xf32>
}
