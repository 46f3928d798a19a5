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

// -----

// The backward: the delta's gradient scaled into a bf16 copy that only the
// A and B gradients' products read (one through a reshape), beside the
// plain bf16 copy the base product reads. With a power-of-two scale the
// products read the plain copy, made where the scaled one was, and scale in
// their epilogue.
// CHECK-LABEL: func.func @lora_delta_grad
// CHECK-NOT: @binaryToBf16
// CHECK: %[[R:.*]] = kern.call @toBf16(%arg0) : (tensor<2x8x32xf32>) -> tensor<2x8x32xbf16>
// CHECK-NEXT: %[[DA:.*]] = kern.call @matmulBf16Scaled(%[[R]], %arg1) args {alpha = 2.000000e+00 : f32, transA = false, transB = true}
// CHECK-NEXT: %[[RS:.*]] = tg.reshape %[[R]] : (tensor<2x8x32xbf16>) -> tensor<16x32xbf16>
// CHECK-NEXT: %[[DB:.*]] = kern.call @matmulBf16Scaled(%arg2, %[[RS]]) args {alpha = 2.000000e+00 : f32, transA = true, transB = false}
// CHECK-NEXT: %[[DX:.*]] = kern.call @matmulBf16(%[[R]], %arg3)
// CHECK-NEXT: return %[[DA]], %[[DB]], %[[DX]]
func.func @lora_delta_grad(%dy: tensor<2x8x32xf32>, %b: tensor<4x32xbf16>, %xa: tensor<16x4xbf16>, %w: tensor<16x32xbf16>) -> (tensor<2x8x4xf32>, tensor<4x32xf32>, tensor<2x8x16xf32>) attributes {exec.stage} {
  %c = tg.constant dense<2.000000e+00> : tensor<f32>
  %s = kern.call @binaryToBf16(%dy, %c) args {kind = "Mul"} : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xbf16>
  %da = kern.call @matmulBf16(%s, %b) args {accumulate = false, transA = false, transB = true} : (tensor<2x8x32xbf16>, tensor<4x32xbf16>) -> tensor<2x8x4xf32>
  %sr = tg.reshape %s : (tensor<2x8x32xbf16>) -> tensor<16x32xbf16>
  %db = kern.call @matmulBf16(%xa, %sr) args {accumulate = false, transA = true, transB = false} : (tensor<16x4xbf16>, tensor<16x32xbf16>) -> tensor<4x32xf32>
  %r = kern.call @toBf16(%dy) : (tensor<2x8x32xf32>) -> tensor<2x8x32xbf16>
  %dx = kern.call @matmulBf16(%r, %w) args {accumulate = false, transA = false, transB = true} : (tensor<2x8x32xbf16>, tensor<16x32xbf16>) -> tensor<2x8x16xf32>
  return %da, %db, %dx : tensor<2x8x4xf32>, tensor<4x32xf32>, tensor<2x8x16xf32>
}

// -----

// Kept: a scale that is not a power of two (bf16(x c) is not bf16(x) c),
// no plain bf16 copy of x to read, a reader that is not a product, and a
// product that accumulates.
// CHECK-LABEL: func.func @grad_kept
// CHECK-NOT: matmulBf16Scaled
// CHECK-COUNT-4: kern.call @binaryToBf16
func.func @grad_kept(%dy: tensor<2x8x32xf32>, %b: tensor<4x32xbf16>, %i: tensor<2x8x4xf32>, %j: tensor<2x8x4xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x32xbf16>, tensor<2x8x4xf32>, tensor<2x8x32xbf16>) attributes {exec.stage} {
  %c3 = tg.constant dense<3.000000e+00> : tensor<f32>
  %c = tg.constant dense<2.000000e+00> : tensor<f32>
  %r = kern.call @toBf16(%dy) : (tensor<2x8x32xf32>) -> tensor<2x8x32xbf16>
  %s3 = kern.call @binaryToBf16(%dy, %c3) args {kind = "Mul"} : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xbf16>
  %p3 = kern.call @matmulBf16(%s3, %b) args {accumulate = false, transA = false, transB = true} : (tensor<2x8x32xbf16>, tensor<4x32xbf16>) -> tensor<2x8x4xf32>
  %o = kern.call @binaryToBf16(%i, %c) args {kind = "Mul"} : (tensor<2x8x4xf32>, tensor<f32>) -> tensor<2x8x4xbf16>
  %po = kern.call @matmulBf16(%o, %b) args {accumulate = false, transA = false, transB = false} : (tensor<2x8x4xbf16>, tensor<4x32xbf16>) -> tensor<2x8x32xf32>
  %sr = kern.call @binaryToBf16(%dy, %c) args {kind = "Mul"} : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xbf16>
  %pr = kern.call @matmulBf16(%sr, %b) args {accumulate = false, transA = false, transB = true} : (tensor<2x8x32xbf16>, tensor<4x32xbf16>) -> tensor<2x8x4xf32>
  %sa = kern.call @binaryToBf16(%dy, %c) args {kind = "Mul"} : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xbf16>
  %pa = kern.call @matmulBf16(%sa, %b) inits(%j) args {accumulate = true, transA = false, transB = true} : (tensor<2x8x32xbf16>, tensor<4x32xbf16>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %use = kern.call @toBf16(%po) : (tensor<2x8x32xf32>) -> tensor<2x8x32xbf16>
  return %p3, %pr, %sr, %pa, %r : tensor<2x8x4xf32>, tensor<2x8x4xf32>, tensor<2x8x32xbf16>, tensor<2x8x4xf32>, tensor<2x8x32xbf16>
}

// -----

// The rounded copy found where the gradient comes from: a toBf16 of the
// value the scaled operand reshapes (the query gradient out of its norm's
// backward, rounded for the base product), and attention's bf16 dV that
// was widened only for the Mul (the widening goes with it).
// CHECK-LABEL: func.func @rounded_elsewhere
// CHECK-NOT: @binaryToBf16
// CHECK-NOT: @fromBf16
// CHECK: %[[Q:.*]] = kern.call @toBf16(%arg0) : (tensor<1x8x2x16xf32>) -> tensor<1x8x2x16xbf16>
// CHECK-NEXT: %[[QR:.*]] = tg.reshape %[[Q]] : (tensor<1x8x2x16xbf16>) -> tensor<1x8x32xbf16>
// CHECK-NEXT: kern.call @matmulBf16Scaled(%[[QR]], %arg2) args {alpha = 5.000000e-01 : f32
// CHECK: %[[VR:.*]] = tg.reshape %arg1 : (tensor<1x8x2x16xbf16>) -> tensor<1x8x32xbf16>
// CHECK-NEXT: kern.call @matmulBf16Scaled(%[[VR]], %arg2) args {alpha = 5.000000e-01 : f32
func.func @rounded_elsewhere(%dq: tensor<1x8x2x16xf32>, %dv16: tensor<1x8x2x16xbf16>, %b: tensor<4x32xbf16>, %w: tensor<16x32xbf16>) -> (tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x8x16xf32>) attributes {exec.stage} {
  %c = tg.constant dense<5.000000e-01> : tensor<f32>
  %q = tg.reshape %dq : (tensor<1x8x2x16xf32>) -> tensor<1x8x32xf32>
  %qs = kern.call @binaryToBf16(%q, %c) args {kind = "Mul"} : (tensor<1x8x32xf32>, tensor<f32>) -> tensor<1x8x32xbf16>
  %pq = kern.call @matmulBf16(%qs, %b) args {accumulate = false, transA = false, transB = true} : (tensor<1x8x32xbf16>, tensor<4x32xbf16>) -> tensor<1x8x4xf32>
  %dv = kern.call @fromBf16(%dv16) : (tensor<1x8x2x16xbf16>) -> tensor<1x8x2x16xf32>
  %v = tg.reshape %dv : (tensor<1x8x2x16xf32>) -> tensor<1x8x32xf32>
  %vs = kern.call @binaryToBf16(%v, %c) args {kind = "Mul"} : (tensor<1x8x32xf32>, tensor<f32>) -> tensor<1x8x32xbf16>
  %pv = kern.call @matmulBf16(%vs, %b) args {accumulate = false, transA = false, transB = true} : (tensor<1x8x32xbf16>, tensor<4x32xbf16>) -> tensor<1x8x4xf32>
  %r = kern.call @toBf16(%dq) : (tensor<1x8x2x16xf32>) -> tensor<1x8x2x16xbf16>
  %rr = tg.reshape %r : (tensor<1x8x2x16xbf16>) -> tensor<1x8x32xbf16>
  %dx = kern.call @matmulBf16(%rr, %w) args {accumulate = false, transA = false, transB = true} : (tensor<1x8x32xbf16>, tensor<16x32xbf16>) -> tensor<1x8x16xf32>
  return %pq, %pv, %dx : tensor<1x8x4xf32>, tensor<1x8x4xf32>, tensor<1x8x16xf32>
}
