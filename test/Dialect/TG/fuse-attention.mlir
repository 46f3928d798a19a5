// RUN: rondo-opt %s --tg-fuse-attention --canonicalize | FileCheck %s

// Checks the exporter's grouped-query attention: keys and values repeated
// from 2 to 4 heads (reshape, broadcast, reshape), keys transposed through
// reshape/transpose/reshape, q and k each scaled by D^-1/4, the causal mask
// added, softmax and its IsNaN/Where guard. It becomes one tg.attention on
// the unrepeated key/value heads with scale D^-1/2.
// CHECK-LABEL: func.func @gqa
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x2x8x16xf32>, %[[V:.*]]: tensor<2x2x8x16xf32>)
// CHECK: %[[O:.*]], %{{.*}} = tg.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f32}
// CHECK-NEXT: return %[[O]]
func.func @gqa(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %k5 = tg.reshape %k : (tensor<2x2x8x16xf32>) -> tensor<2x2x1x8x16xf32>
  %kb = tg.broadcast %k5 : (tensor<2x2x1x8x16xf32>) -> tensor<2x2x2x8x16xf32>
  %kf = tg.reshape %kb : (tensor<2x2x2x8x16xf32>) -> tensor<8x8x16xf32>
  %kt = tg.transpose %kf [0, 2, 1] : (tensor<8x8x16xf32>) -> tensor<8x16x8xf32>
  %kT = tg.reshape %kt : (tensor<8x16x8xf32>) -> tensor<2x4x16x8xf32>
  %v5 = tg.reshape %v : (tensor<2x2x8x16xf32>) -> tensor<2x2x1x8x16xf32>
  %vb = tg.broadcast %v5 : (tensor<2x2x1x8x16xf32>) -> tensor<2x2x2x8x16xf32>
  %vr = tg.reshape %vb : (tensor<2x2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  %c = tg.constant dense<0.5> : tensor<f32>
  %qs = tg.binary mul %q, %c : (tensor<2x4x8x16xf32>, tensor<f32>) -> tensor<2x4x8x16xf32>
  %ks = tg.binary mul %kT, %c : (tensor<2x4x16x8xf32>, tensor<f32>) -> tensor<2x4x16x8xf32>
  %s = tg.matmul %qs, %ks : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %m = tg.causal_mask : tensor<1x1x8x8xf32>
  %sm = tg.binary add %s, %m : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = tg.softmax %sm : tensor<2x4x8x8xf32>
  %nan = tg.is_nan %p : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %zero = tg.constant dense<0.0> : tensor<f32>
  %pg = tg.select %nan, %zero, %p : (tensor<2x4x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = tg.matmul %pg, %vr : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// The same with a sliding window of 3 on the mask: the window moves to
// the fused attention (Gemma-3's and GPT-OSS's local layers).
// CHECK-LABEL: func.func @gqa_window
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x2x8x16xf32>, %[[V:.*]]: tensor<2x2x8x16xf32>)
// CHECK: %[[O:.*]], %{{.*}} = tg.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f32, window = 3 : i64}
// CHECK-NEXT: return %[[O]]
func.func @gqa_window(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %k5 = tg.reshape %k : (tensor<2x2x8x16xf32>) -> tensor<2x2x1x8x16xf32>
  %kb = tg.broadcast %k5 : (tensor<2x2x1x8x16xf32>) -> tensor<2x2x2x8x16xf32>
  %kf = tg.reshape %kb : (tensor<2x2x2x8x16xf32>) -> tensor<8x8x16xf32>
  %kt = tg.transpose %kf [0, 2, 1] : (tensor<8x8x16xf32>) -> tensor<8x16x8xf32>
  %kT = tg.reshape %kt : (tensor<8x16x8xf32>) -> tensor<2x4x16x8xf32>
  %v5 = tg.reshape %v : (tensor<2x2x8x16xf32>) -> tensor<2x2x1x8x16xf32>
  %vb = tg.broadcast %v5 : (tensor<2x2x1x8x16xf32>) -> tensor<2x2x2x8x16xf32>
  %vr = tg.reshape %vb : (tensor<2x2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  %c = tg.constant dense<0.5> : tensor<f32>
  %qs = tg.binary mul %q, %c : (tensor<2x4x8x16xf32>, tensor<f32>) -> tensor<2x4x8x16xf32>
  %ks = tg.binary mul %kT, %c : (tensor<2x4x16x8xf32>, tensor<f32>) -> tensor<2x4x16x8xf32>
  %s = tg.matmul %qs, %ks : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %m = tg.causal_mask {window = 3} : tensor<1x1x8x8xf32>
  %sm = tg.binary add %s, %m : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = tg.softmax %sm : tensor<2x4x8x8xf32>
  %nan = tg.is_nan %p : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %zero = tg.constant dense<0.0> : tensor<f32>
  %pg = tg.select %nan, %zero, %p : (tensor<2x4x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = tg.matmul %pg, %vr : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// Checks plain multi-head attention with the scale applied after the
// product and k^T as one transpose.
// CHECK-LABEL: func.func @mha
// CHECK: tg.attention %arg0, %arg1, %arg2 {causal, scale = 1.250000e-01 : f32}
func.func @mha(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = tg.constant dense<8.0> : tensor<f32>
  %sc = tg.binary div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = tg.causal_mask : tensor<1x1x4x4xf32>
  %sm = tg.binary add %sc, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tg.softmax %sm : tensor<1x2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// Checks that attention without a causal mask is not fused (only causal
// attention is claimed).
// CHECK-LABEL: func.func @not_causal
// CHECK-NOT: tg.attention
// CHECK: tg.softmax
func.func @not_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tg.softmax %s : tensor<1x2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
