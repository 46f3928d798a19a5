// RUN: rondo-opt %s --tg-fuse-norms --canonicalize | FileCheck %s

// Checks that the exporter's RMSNorm (pow, mean, add eps, sqrt, reciprocal,
// two muls) becomes one tg.rms_norm with the epsilon carried over.
// CHECK-LABEL: func.func @rms_reciprocal_sqrt
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[Y:.*]] = tg.rms_norm %[[X]], %[[W]] {eps = 9.99999997E-7 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @rms_reciprocal_sqrt(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %two = tg.constant dense<2.0> : tensor<f32>
  %eps = tg.constant dense<1.0e-6> : tensor<f32>
  %p = tg.binary pow %x, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %m = tg.reduce mean %p {axes = array<i64: 2>, keepdims} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %a = tg.binary add %m, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %s = tg.unary sqrt %a : tensor<2x4x1xf32>
  %r = tg.unary reciprocal %s : tensor<2x4x1xf32>
  %n = tg.binary mul %x, %r : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %y = tg.binary mul %w, %n : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// Checks the x * x and rsqrt spelling, weight on the right.
// CHECK-LABEL: func.func @rms_rsqrt
// CHECK: tg.rms_norm %{{.*}}, %{{.*}} {eps = 9.99999974E-6 : f32}
// CHECK-NOT: tg.reduce
func.func @rms_rsqrt(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %eps = tg.constant dense<1.0e-5> : tensor<f32>
  %p = tg.binary mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = tg.reduce mean %p {axes = array<i64: 1>, keepdims} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %a = tg.binary add %m, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r = tg.unary rsqrt %a : tensor<4x1xf32>
  %n = tg.binary mul %x, %r : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = tg.binary mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// Checks that a mean over another axis is not mistaken for RMSNorm.
// CHECK-LABEL: func.func @not_last_axis
// CHECK-NOT: tg.rms_norm
// CHECK: tg.reduce mean
func.func @not_last_axis(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %eps = tg.constant dense<1.0e-5> : tensor<f32>
  %p = tg.binary mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = tg.reduce mean %p {axes = array<i64: 0>, keepdims} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %a = tg.binary add %m, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %r = tg.unary rsqrt %a : tensor<1x8xf32>
  %n = tg.binary mul %x, %r : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %y = tg.binary mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
