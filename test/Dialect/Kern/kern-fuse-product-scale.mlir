// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-product-scale))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-product-scale))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// LoRA's delta: the B product scaled by alpha / rank, then the base product
// added into it. The scale moves into the product's epilogue; the scalar
// may be either operand of the Mul.
// CHECK-LABEL: func.func @lora_delta
// CHECK: %[[D:.*]] = kern.call @matmulBf16Scaled(%arg1, %arg2) args {alpha = 2.000000e+00 : f32, transA = false, transB = false} : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
// CHECK-NOT: @binary
// CHECK: kern.call @matmulBf16(%arg0, %arg3) inits(%[[D]])
// CHECK: %[[E:.*]] = kern.call @matmulBf16Scaled(%arg1, %arg2) args {alpha = 5.000000e-01 : f32, transA = false, transB = true}
// CHECK: return {{.*}}, %[[E]]
func.func @lora_delta(%x: tensor<64x16xbf16>, %xa: tensor<64x4xbf16>, %b: tensor<4x32xbf16>, %w: tensor<16x32xbf16>) -> (tensor<64x32xf32>, tensor<64x32xf32>) attributes {exec.stage} {
  %c = tg.constant dense<2.000000e+00> : tensor<f32>
  %p = kern.call @matmulBf16(%xa, %b) args {accumulate = false, transA = false, transB = false} : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
  %d = kern.call @binary(%p, %c) args {kind = "Mul"} : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf32>
  %y = kern.call @matmulBf16(%x, %w) inits(%d) args {accumulate = true, transA = false, transB = false} : (tensor<64x16xbf16>, tensor<16x32xbf16>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %h = tg.constant dense<5.000000e-01> : tensor<1xf32>
  %q = kern.call @matmulBf16(%xa, %b) args {accumulate = false, transA = false, transB = true} : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
  %e = kern.call @binary(%h, %q) args {kind = "Mul"} : (tensor<1xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  return %y, %e : tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// Kept: a product something else reads, a product that accumulates, a
// scale that is not a constant, and an Add.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: matmulBf16Scaled
// CHECK-COUNT-4: kern.call @binary
func.func @kept(%xa: tensor<64x4xbf16>, %b: tensor<4x32xbf16>, %s: tensor<f32>, %i: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) attributes {exec.stage} {
  %c = tg.constant dense<2.000000e+00> : tensor<f32>
  %p = kern.call @matmulBf16(%xa, %b) args {accumulate = false, transA = false, transB = false} : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
  %d = kern.call @binary(%p, %c) args {kind = "Mul"} : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf32>
  %a = kern.call @matmulBf16(%xa, %b) inits(%i) args {accumulate = true, transA = false, transB = false} : (tensor<64x4xbf16>, tensor<4x32xbf16>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %e = kern.call @binary(%a, %c) args {kind = "Mul"} : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf32>
  %q = kern.call @matmulBf16(%xa, %b) args {accumulate = false, transA = false, transB = false} : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
  %f = kern.call @binary(%q, %s) args {kind = "Mul"} : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf32>
  %r = kern.call @matmulBf16(%xa, %b) args {accumulate = false, transA = false, transB = false} : (tensor<64x4xbf16>, tensor<4x32xbf16>) -> tensor<64x32xf32>
  %g = kern.call @binary(%r, %c) args {kind = "Add"} : (tensor<64x32xf32>, tensor<f32>) -> tensor<64x32xf32>
  return %p, %d, %e, %f, %g : tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}
