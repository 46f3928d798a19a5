// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-accumulate-products))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-accumulate-products))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// The input gradients of q, k and v, summed: the second and third products
// accumulate into the running sum (the first product's buffer), no add left.
// CHECK-LABEL: func.func @qkv_input_gradient
// CHECK: %[[Q:.*]] = kern.call @matmul(%arg0, %arg3) args {accumulate = false, transA = false, transB = true}
// CHECK: %[[K:.*]] = kern.call @matmul(%arg1, %arg4) inits(%[[Q]]) args {accumulate = true, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[V:.*]] = kern.call @matmul(%arg2, %arg5) inits(%[[K]]) args {accumulate = true, transA = false, transB = true}
// CHECK-NOT: @binary
// CHECK: return %[[V]]
func.func @qkv_input_gradient(%dq: tensor<8x4xf32>, %dk: tensor<8x4xf32>, %dv: tensor<8x4xf32>, %wq: tensor<16x4xf32>, %wk: tensor<16x4xf32>, %wv: tensor<16x4xf32>) -> tensor<8x16xf32> attributes {exec.stage} {
  %q = kern.call @matmul(%dq, %wq) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %k = kern.call @matmul(%dk, %wk) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %s = kern.call @binary(%q, %k) args {kind = "Add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %v = kern.call @matmul(%dv, %wv) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %t = kern.call @binary(%s, %v) args {kind = "Add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %t : tensor<8x16xf32>
}

// -----

// Adds that stay: the accumulator is an argument (its buffer is the exec
// program's), a value something else reads, a product something else reads,
// or the add broadcasts.
// CHECK-LABEL: func.func @stays
// CHECK-COUNT-4: kern.call @binary
func.func @stays(%x: tensor<8x16xf32>, %a: tensor<8x4xf32>, %w: tensor<16x4xf32>, %row: tensor<16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) attributes {exec.stage} {
  %p1 = kern.call @matmul(%a, %w) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %s1 = kern.call @binary(%x, %p1) args {kind = "Add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %u = kern.call @unary(%x) args {kind = "Exp"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %p2 = kern.call @matmul(%a, %w) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %s2 = kern.call @binary(%u, %p2) args {kind = "Add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %u2 = kern.call @unary(%x) args {kind = "Exp"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %p3 = kern.call @matmul(%a, %w) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %s3 = kern.call @binary(%u2, %p3) args {kind = "Add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %p4 = kern.call @matmul(%a, %w) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %s4 = kern.call @binary(%p4, %row) args {kind = "Add"} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  return %s1, %s2, %u, %s3, %p3, %s4 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// Only stage functions are rewritten.
// CHECK-LABEL: func.func @not_a_stage
// CHECK: kern.call @binary
func.func @not_a_stage(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %p = kern.call @matmul(%a, %b) args {accumulate = false, transA = false, transB = false} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %q = kern.call @matmul(%a, %b) args {accumulate = false, transA = false, transB = false} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %s = kern.call @binary(%p, %q) args {kind = "Add"} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %s : tensor<4x4xf32>
}
