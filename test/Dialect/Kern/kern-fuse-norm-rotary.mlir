// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-norm-rotary))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-norm-rotary))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// A query head norm on its way to attention and its gradient on the way back:
// one call each, the intermediates gone.
// CHECK-LABEL: func.func @query_heads
// CHECK: %[[R:.*]] = kern.call @rmsNormRotary(%arg0, %arg1, %arg2, %arg3) args {eps = 9.99999997E-7 : f32} : (tensor<1x32x4x16xf32>, tensor<16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
// CHECK: %[[G:.*]]:2 = kern.call @rmsNormRotaryBackward(%arg0, %arg1, %arg2, %arg3, %arg4) args {eps = 9.99999997E-7 : f32} : (tensor<1x32x4x16xf32>, tensor<16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<1x4x32x16xf32>) -> (tensor<1x32x4x16xf32>, tensor<16xf32>)
// CHECK-NOT: @rmsNorm(
// CHECK-NOT: @transpose
// CHECK-NOT: @rotary
// CHECK: return %[[R]], %[[G]]#0, %[[G]]#1
func.func @query_heads(%q: tensor<1x32x4x16xf32>, %w: tensor<16xf32>, %cos: tensor<32x16xf32>, %sin: tensor<32x16xf32>, %dr: tensor<1x4x32x16xf32>) -> (tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<16xf32>) attributes {exec.stage} {
  %n = kern.call @rmsNorm(%q, %w) args {eps = 1.0e-06 : f32} : (tensor<1x32x4x16xf32>, tensor<16xf32>) -> tensor<1x32x4x16xf32>
  %t = kern.call @transpose(%n) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x4x16xf32>) -> tensor<1x4x32x16xf32>
  %r = kern.call @rotary(%t, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dt = kern.call @rotaryBackward(%dr, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dn = kern.call @transpose(%dt) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x32x16xf32>) -> tensor<1x32x4x16xf32>
  %dq, %dw = kern.call @rmsNormBackward(%q, %w, %dn) args {eps = 1.0e-06 : f32} : (tensor<1x32x4x16xf32>, tensor<16xf32>, tensor<1x32x4x16xf32>) -> (tensor<1x32x4x16xf32>, tensor<16xf32>)
  return %r, %dq, %dw : tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<16xf32>
}

// -----

// A frozen norm weight: the skipped dW stays skipped.
// CHECK-LABEL: func.func @frozen_norm
// CHECK: kern.call @rmsNormRotaryBackward(%arg0, %arg1, %arg2, %arg3, %arg4) args {eps = 9.99999997E-7 : f32} {skip = array<i64: 1>}
func.func @frozen_norm(%q: tensor<1x32x4x16xf32>, %w: tensor<16xf32>, %cos: tensor<32x16xf32>, %sin: tensor<32x16xf32>, %dr: tensor<1x4x32x16xf32>) -> tensor<1x32x4x16xf32> attributes {exec.stage} {
  %dt = kern.call @rotaryBackward(%dr, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dn = kern.call @transpose(%dt) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x32x16xf32>) -> tensor<1x32x4x16xf32>
  %dq, %dw = kern.call @rmsNormBackward(%q, %w, %dn) args {eps = 1.0e-06 : f32} {skip = array<i64: 1>} : (tensor<1x32x4x16xf32>, tensor<16xf32>, tensor<1x32x4x16xf32>) -> (tensor<1x32x4x16xf32>, tensor<16xf32>)
  return %dq : tensor<1x32x4x16xf32>
}

// -----

// Chains that stay: the normed heads read by something else (the transpose
// and rotary after them still fuse), another permutation, and the
// transposed gradient read twice (its rotary backward still fuses).
// CHECK-LABEL: func.func @stays
// CHECK-NOT: @rmsNormRotary
// CHECK: %[[N:.*]] = kern.call @rmsNorm(%arg0, %arg1)
// CHECK: kern.call @transposeRotary(%[[N]], %arg2, %arg3)
// CHECK: kern.call @rotary(
// CHECK: %[[DN:.*]] = kern.call @transposeRotaryBackward(%arg4, %arg2, %arg3)
// CHECK: kern.call @rmsNormBackward(%arg0, %arg1, %[[DN]])
func.func @stays(%q: tensor<1x32x4x16xf32>, %w: tensor<16xf32>, %cos: tensor<32x16xf32>, %sin: tensor<32x16xf32>, %dr: tensor<1x4x32x16xf32>, %cos4: tensor<4x16xf32>, %sin4: tensor<4x16xf32>) -> (tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<32x1x4x16xf32>, tensor<1x32x4x16xf32>, tensor<1x32x4x16xf32>) attributes {exec.stage} {
  %n = kern.call @rmsNorm(%q, %w) args {eps = 1.0e-06 : f32} : (tensor<1x32x4x16xf32>, tensor<16xf32>) -> tensor<1x32x4x16xf32>
  %t = kern.call @transpose(%n) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x4x16xf32>) -> tensor<1x4x32x16xf32>
  %r = kern.call @rotary(%t, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %n2 = kern.call @rmsNorm(%q, %w) args {eps = 1.0e-06 : f32} : (tensor<1x32x4x16xf32>, tensor<16xf32>) -> tensor<1x32x4x16xf32>
  %t2 = kern.call @transpose(%n2) args {perm = array<i64: 1, 0, 2, 3>} : (tensor<1x32x4x16xf32>) -> tensor<32x1x4x16xf32>
  %r2 = kern.call @rotary(%t2, %cos4, %sin4) : (tensor<32x1x4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<32x1x4x16xf32>
  %dt = kern.call @rotaryBackward(%dr, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dn = kern.call @transpose(%dt) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x32x16xf32>) -> tensor<1x32x4x16xf32>
  %dq, %dw = kern.call @rmsNormBackward(%q, %w, %dn) args {eps = 1.0e-06 : f32} : (tensor<1x32x4x16xf32>, tensor<16xf32>, tensor<1x32x4x16xf32>) -> (tensor<1x32x4x16xf32>, tensor<16xf32>)
  return %r, %n, %r2, %dq, %dn : tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<32x1x4x16xf32>, tensor<1x32x4x16xf32>, tensor<1x32x4x16xf32>
}

// -----

// Heads without a norm (Llama's, Qwen2's): the transpose and rotary become
// one call each way; a transpose read by something else stays.
// CHECK-LABEL: func.func @plain_heads
// CHECK: %[[R:.*]] = kern.call @transposeRotary(%arg0, %arg1, %arg2) : (tensor<1x32x4x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
// CHECK: %[[G:.*]] = kern.call @transposeRotaryBackward(%arg3, %arg1, %arg2) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x32x4x16xf32>
// CHECK: %[[T:.*]] = kern.call @transpose(%arg0)
// CHECK: %[[S:.*]] = kern.call @rotary(%[[T]], %arg1, %arg2)
// CHECK: %[[DT:.*]] = kern.call @rotaryBackward(%arg3, %arg1, %arg2)
// CHECK: %[[DN:.*]] = kern.call @transpose(%[[DT]])
// CHECK: return %[[R]], %[[G]], %[[S]], %[[T]], %[[DN]], %[[DT]]
func.func @plain_heads(%k: tensor<1x32x4x16xf32>, %cos: tensor<32x16xf32>, %sin: tensor<32x16xf32>, %dr: tensor<1x4x32x16xf32>) -> (tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<1x4x32x16xf32>) attributes {exec.stage} {
  %t = kern.call @transpose(%k) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x4x16xf32>) -> tensor<1x4x32x16xf32>
  %r = kern.call @rotary(%t, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dt = kern.call @rotaryBackward(%dr, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dn = kern.call @transpose(%dt) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x32x16xf32>) -> tensor<1x32x4x16xf32>
  %t2 = kern.call @transpose(%k) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x4x16xf32>) -> tensor<1x4x32x16xf32>
  %s = kern.call @rotary(%t2, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dt2 = kern.call @rotaryBackward(%dr, %cos, %sin) : (tensor<1x4x32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>) -> tensor<1x4x32x16xf32>
  %dn2 = kern.call @transpose(%dt2) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x32x16xf32>) -> tensor<1x32x4x16xf32>
  return %r, %dn, %s, %t2, %dn2, %dt2 : tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<1x32x4x16xf32>, tensor<1x4x32x16xf32>
}
