// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-attention-layout))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-attention-layout))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// The four moves around a layer's attention (v and the output forward, dO
// and dV backward) go: attention reads v and dO and writes the output and
// dV token-major, q and k stay heads-major.
// CHECK-LABEL: func.func @moves
// CHECK: %[[O:.*]]:2 = kern.call @attentionBf16ToBf16Tokens(%arg0, %arg1, %arg2) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x8x2x16xbf16>) -> (tensor<1x8x4x16xbf16>, tensor<1x4x8xf32>)
// CHECK: %[[G:.*]]:3 = kern.call @attentionBackwardBf16ToBf16Tokens(%arg0, %arg1, %arg2, %[[O]]#0, %[[O]]#1, %arg3) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x8x2x16xbf16>, tensor<1x8x4x16xbf16>, tensor<1x4x8xf32>, tensor<1x8x4x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x8x2x16xbf16>)
// CHECK-NOT: @transposeBf16
// CHECK: return %[[O]]#0, %[[G]]#0, %[[G]]#1, %[[G]]#2
func.func @moves(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x8x2x16xbf16>, %g: tensor<1x8x4x16xbf16>) -> (tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x8x2x16xbf16>) attributes {exec.stage} {
  %vt = kern.call @transposeBf16(%v) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xbf16>) -> tensor<1x2x8x16xbf16>
  %o:2 = kern.call @attentionBf16ToBf16(%q, %k, %vt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
  %ot = kern.call @transposeBf16(%o#0) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xbf16>) -> tensor<1x8x4x16xbf16>
  %gt = kern.call @transposeBf16(%g) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xbf16>) -> tensor<1x4x8x16xbf16>
  %d:3 = kern.call @attentionBackwardBf16ToBf16(%q, %k, %vt, %o#0, %o#1, %gt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
  %dv = kern.call @transposeBf16(%d#2) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x16xbf16>) -> tensor<1x8x2x16xbf16>
  return %ot, %d#0, %d#1, %dv : tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x8x2x16xbf16>
}

// -----

// v an fp32 sum (Qwen2's bias) rounded as it was moved, and dV widened and
// moved back for the bias gradient in fp32: a toBf16 and a fromBf16 of the
// token-major tensors take their place.
// CHECK-LABEL: func.func @biased_values
// CHECK: %[[V:.*]] = kern.call @toBf16(%arg2) : (tensor<1x8x2x16xf32>) -> tensor<1x8x2x16xbf16>
// CHECK: %[[O:.*]]:2 = kern.call @attentionBf16ToBf16Tokens(%arg0, %arg1, %[[V]])
// CHECK: %[[G:.*]]:3 = kern.call @attentionBackwardBf16ToBf16Tokens(%arg0, %arg1, %[[V]], %[[O]]#0, %[[O]]#1, %arg3)
// CHECK: %[[W:.*]] = kern.call @fromBf16(%[[G]]#2) : (tensor<1x8x2x16xbf16>) -> tensor<1x8x2x16xf32>
// CHECK-NOT: @transpose
// CHECK: return %[[O]]#0, %[[G]]#0, %[[G]]#1, %[[W]]
func.func @biased_values(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x8x2x16xf32>, %g: tensor<1x8x4x16xbf16>) -> (tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x8x2x16xf32>) attributes {exec.stage} {
  %vt = kern.call @transposeToBf16(%v) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x8x16xbf16>
  %o:2 = kern.call @attentionBf16ToBf16(%q, %k, %vt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
  %ot = kern.call @transposeBf16(%o#0) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xbf16>) -> tensor<1x8x4x16xbf16>
  %gt = kern.call @transposeBf16(%g) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xbf16>) -> tensor<1x4x8x16xbf16>
  %d:3 = kern.call @attentionBackwardBf16ToBf16(%q, %k, %vt, %o#0, %o#1, %gt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
  %dw = kern.call @fromBf16(%d#2) : (tensor<1x2x8x16xbf16>) -> tensor<1x2x8x16xf32>
  %dv = kern.call @transpose(%dw) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x16xf32>) -> tensor<1x8x2x16xf32>
  return %ot, %d#0, %d#1, %dv : tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x8x2x16xf32>
}

// -----

// The output read by something other than its move and the backward: every
// move stays, the forward and the backward keep their heads-major kernels.
// CHECK-LABEL: func.func @output_read_elsewhere
// CHECK-NOT: Tokens
// CHECK: kern.call @transposeBf16
// CHECK-NOT: Tokens
// CHECK: kern.call @attentionBf16ToBf16(
// CHECK-NOT: Tokens
// CHECK: kern.call @transposeBf16
// CHECK: kern.call @transposeBf16
// CHECK-NOT: Tokens
// CHECK: kern.call @attentionBackwardBf16ToBf16(
// CHECK-NOT: Tokens
// CHECK: return
func.func @output_read_elsewhere(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x8x2x16xbf16>, %g: tensor<1x8x4x16xbf16>) -> (tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>) attributes {exec.stage} {
  %vt = kern.call @transposeBf16(%v) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xbf16>) -> tensor<1x2x8x16xbf16>
  %o:2 = kern.call @attentionBf16ToBf16(%q, %k, %vt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
  %ot = kern.call @transposeBf16(%o#0) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xbf16>) -> tensor<1x8x4x16xbf16>
  %gt = kern.call @transposeBf16(%g) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xbf16>) -> tensor<1x4x8x16xbf16>
  %d:3 = kern.call @attentionBackwardBf16ToBf16(%q, %k, %vt, %o#0, %o#1, %gt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
  return %ot, %d#0, %o#0 : tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>
}

// -----

// A backward that reads v but another output than this forward's (%o2, say
// a recomputed forward's kept elsewhere): the layouts would disagree, so
// nothing changes.
// CHECK-LABEL: func.func @backward_of_another_output
// CHECK-NOT: Tokens
// CHECK: kern.call @attentionBf16ToBf16(
// CHECK-NOT: Tokens
// CHECK: kern.call @attentionBackwardBf16ToBf16(
// CHECK-NOT: Tokens
// CHECK: return
func.func @backward_of_another_output(%q: tensor<1x4x8x16xbf16>, %k: tensor<1x2x8x16xbf16>, %v: tensor<1x8x2x16xbf16>, %g: tensor<1x8x4x16xbf16>, %o2: tensor<1x4x8x16xbf16>) -> (tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x8x2x16xbf16>) attributes {exec.stage} {
  %vt = kern.call @transposeBf16(%v) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x16xbf16>) -> tensor<1x2x8x16xbf16>
  %o:2 = kern.call @attentionBf16ToBf16(%q, %k, %vt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
  %ot = kern.call @transposeBf16(%o#0) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xbf16>) -> tensor<1x8x4x16xbf16>
  %gt = kern.call @transposeBf16(%g) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xbf16>) -> tensor<1x4x8x16xbf16>
  %d:3 = kern.call @attentionBackwardBf16ToBf16(%q, %k, %vt, %o2, %o#1, %gt) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>)
  %dv = kern.call @transposeBf16(%d#2) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x16xbf16>) -> tensor<1x8x2x16xbf16>
  return %ot, %d#0, %dv : tensor<1x8x4x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x8x2x16xbf16>
}
