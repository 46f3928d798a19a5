// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-residual-norm))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-residual-norm))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// Forward: the residual Add and the norm of its sum become one call, whose
// first result is the sum every other reader reads (here the second block's
// Add and the function's result) and second the norm's (bf16 here).
// CHECK-LABEL: func.func @forward
// CHECK: %[[F:.*]]:2 = kern.call @addRmsNormToBf16(%arg0, %arg1, %arg2) args {eps = 9.99999997E-7 : f32} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xbf16>)
// CHECK: %[[G:.*]]:2 = kern.call @addRmsNorm(%[[F]]#0, %arg1, %arg2) args {eps = 9.99999997E-7 : f32} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>)
// CHECK-NOT: @binary
// CHECK-NOT: @rmsNorm
// CHECK: return %[[F]]#1, %[[G]]#1, %[[G]]#0
func.func @forward(%x: tensor<2x8x64xf32>, %h: tensor<2x8x64xf32>, %w: tensor<64xf32>) -> (tensor<2x8x64xbf16>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) attributes {exec.stage} {
  %s = kern.call @binary(%x, %h) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %n = kern.call @rmsNormToBf16(%s, %w) args {eps = 1.0e-06 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xbf16>
  %t = kern.call @binary(%s, %h) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %m = kern.call @rmsNorm(%t, %w) args {eps = 1.0e-06 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return %n, %m, %t : tensor<2x8x64xbf16>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// -----

// A residual Add of a product stored in bf16 (kern-bf16-storage's addBf16)
// fuses the same way, into addRmsNormBf16[ToBf16].
// CHECK-LABEL: func.func @bf16_product
// CHECK: %[[F:.*]]:2 = kern.call @addRmsNormBf16ToBf16(%arg0, %arg1, %arg2) args {eps = 9.99999997E-7 : f32} : (tensor<16x64xf32>, tensor<16x64xbf16>, tensor<64xf32>) -> (tensor<16x64xf32>, tensor<16x64xbf16>)
// CHECK: kern.call @addRmsNormBf16(%[[F]]#0, %arg1, %arg2) args {eps = 9.99999997E-7 : f32} : (tensor<16x64xf32>, tensor<16x64xbf16>, tensor<64xf32>) -> (tensor<16x64xf32>, tensor<16x64xf32>)
// CHECK-NOT: @addBf16
func.func @bf16_product(%x: tensor<16x64xf32>, %p: tensor<16x64xbf16>, %w: tensor<64xf32>) -> (tensor<16x64xbf16>, tensor<16x64xf32>) attributes {exec.stage} {
  %s = kern.call @addBf16(%x, %p) : (tensor<16x64xf32>, tensor<16x64xbf16>) -> tensor<16x64xf32>
  %n = kern.call @rmsNormToBf16(%s, %w) args {eps = 1.0e-06 : f32} : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xbf16>
  %t = kern.call @addBf16(%s, %p) : (tensor<16x64xf32>, tensor<16x64xbf16>) -> tensor<16x64xf32>
  %m = kern.call @rmsNorm(%t, %w) args {eps = 1.0e-06 : f32} : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  return %n, %m : tensor<16x64xbf16>, tensor<16x64xf32>
}

// -----

// Backward: the norm's dX added to the stream's gradient, in either order,
// becomes rmsNormBackwardAdd; with a toBf16 copy of the sum,
// rmsNormBackwardAddWithBf16, whose bf16 result the copy's readers read.
// The weight gradient keeps its place last, and its skip.
// CHECK-LABEL: func.func @backward
// CHECK: %[[A:.*]]:3 = kern.call @rmsNormBackwardAddWithBf16(%arg0, %arg1, %arg2, %arg3) args {eps = 9.99999997E-7 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xbf16>, tensor<64xf32>)
// CHECK: %[[B:.*]]:2 = kern.call @rmsNormBackwardAdd(%arg0, %arg1, %arg2, %[[A]]#0) args {eps = 9.99999997E-7 : f32} {skip = array<i64: 1>} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
// CHECK-NOT: @binary
// CHECK-NOT: @toBf16
// CHECK: return %[[A]]#1, %[[A]]#2, %[[B]]#0
func.func @backward(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %dy: tensor<2x8x64xf32>, %r: tensor<2x8x64xf32>) -> (tensor<2x8x64xbf16>, tensor<64xf32>, tensor<2x8x64xf32>) attributes {exec.stage} {
  %g:2 = kern.call @rmsNormBackward(%x, %w, %dy) args {eps = 1.0e-06 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  %s = kern.call @binary(%r, %g#0) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %c = kern.call @toBf16(%s) : (tensor<2x8x64xf32>) -> tensor<2x8x64xbf16>
  %h:2 = kern.call @rmsNormBackward(%x, %w, %dy) args {eps = 1.0e-06 : f32} {skip = array<i64: 1>} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  %t = kern.call @binary(%h#0, %s) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %c, %g#1, %t : tensor<2x8x64xbf16>, tensor<64xf32>, tensor<2x8x64xf32>
}

// -----

// The norm's backward reading its dY in bf16 (kern-bf16-storage):
// rmsNormBackwardBf16Add[WithBf16].
// CHECK-LABEL: func.func @backward_bf16_dy
// CHECK: %[[A:.*]]:3 = kern.call @rmsNormBackwardBf16AddWithBf16(%arg0, %arg1, %arg2, %arg3) args {eps = 9.99999997E-7 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xbf16>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xbf16>, tensor<64xf32>)
// CHECK: %[[B:.*]]:2 = kern.call @rmsNormBackwardBf16Add(%arg0, %arg1, %arg2, %[[A]]#0) args {eps = 9.99999997E-7 : f32} {skip = array<i64: 1>} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xbf16>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
// CHECK-NOT: @binary
// CHECK: return %[[A]]#1, %[[A]]#2, %[[B]]#0
func.func @backward_bf16_dy(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %dy: tensor<2x8x64xbf16>, %r: tensor<2x8x64xf32>) -> (tensor<2x8x64xbf16>, tensor<64xf32>, tensor<2x8x64xf32>) attributes {exec.stage} {
  %g:2 = kern.call @rmsNormBackwardBf16(%x, %w, %dy) args {eps = 1.0e-06 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xbf16>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  %s = kern.call @binary(%r, %g#0) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %c = kern.call @toBf16(%s) : (tensor<2x8x64xf32>) -> tensor<2x8x64xbf16>
  %h:2 = kern.call @rmsNormBackwardBf16(%x, %w, %dy) args {eps = 1.0e-06 : f32} {skip = array<i64: 1>} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xbf16>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  %t = kern.call @binary(%h#0, %s) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %c, %g#1, %t : tensor<2x8x64xbf16>, tensor<64xf32>, tensor<2x8x64xf32>
}

// -----

// Left alone: a broadcasting Add, a dX another kernel also reads, and a norm
// whose weight is computed after the Add.
// CHECK-LABEL: func.func @unfused
// CHECK-COUNT-3: kern.call @binary
// CHECK-NOT: @addRmsNorm
// CHECK-NOT: @rmsNormBackwardAdd
func.func @unfused(%x: tensor<2x8x64xf32>, %b: tensor<64xf32>, %w: tensor<64xf32>, %dy: tensor<2x8x64xf32>, %r: tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) attributes {exec.stage} {
  %s = kern.call @binary(%x, %b) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %n = kern.call @rmsNorm(%s, %w) args {eps = 1.0e-06 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %g:2 = kern.call @rmsNormBackward(%x, %w, %dy) args {eps = 1.0e-06 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  %t = kern.call @binary(%r, %g#0) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %u = kern.call @binary(%x, %r) args {kind = "Add"} : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %w2 = kern.call @unary(%w) args {kind = "Neg"} : (tensor<64xf32>) -> tensor<64xf32>
  %m = kern.call @rmsNorm(%u, %w2) args {eps = 1.0e-06 : f32} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  return %n, %g#0, %t, %m : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
}
