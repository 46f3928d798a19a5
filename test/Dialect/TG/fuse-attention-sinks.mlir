// RUN: rondo-opt %s --tg-fuse-attention --canonicalize --split-input-file | FileCheck %s

// GPT-OSS's attention with sinks as the exporter writes it: the masked
// scores concatenated with the head's sink logit broadcast to one more
// column, the max shift (x - ReduceMax(x), which the importer makes x - 0),
// the softmax over S + 1 columns, the sink column sliced off, times v. It
// becomes one tg.attention with the sinks reshaped to [H], its window kept;
// nothing of the [T, S + 1] scores is left.

// CHECK-LABEL: func.func @sinks_window
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[S:.*]]: tensor<1x4x1x1xf32>)
// CHECK: %[[H:.*]] = tg.reshape %[[S]] : (tensor<1x4x1x1xf32>) -> tensor<4xf32>
// CHECK: %[[O:.*]], %{{.*}} = tg.attention %[[Q]], %[[K]], %[[V]] sinks %[[H]] {causal, scale = 2.500000e-01 : f32, window = 3 : i64}
// CHECK-NEXT: return %[[O]]
func.func @sinks_window(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %sinks: tensor<1x4x1x1xf32>) -> tensor<2x4x8x16xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  %s = tg.matmul %q, %kT : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = tg.constant dense<0.25> : tensor<f32>
  %sc = tg.binary mul %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %m = tg.causal_mask {window = 3} : tensor<1x1x8x8xf32>
  %sm = tg.binary add %sc, %m : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %col = tg.broadcast %sinks : (tensor<1x4x1x1xf32>) -> tensor<2x4x8x1xf32>
  %cat = tg.concat %sm, %col {axis = 3 : i64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x1xf32>) -> tensor<2x4x8x9xf32>
  %zero = tg.constant dense<0.0> : tensor<2x4x8x1xf32>
  %shift = tg.binary sub %cat, %zero : (tensor<2x4x8x9xf32>, tensor<2x4x8x1xf32>) -> tensor<2x4x8x9xf32>
  %p = tg.softmax %shift : tensor<2x4x8x9xf32>
  %pk = tg.slice %p [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<2x4x8x9xf32>) -> tensor<2x4x8x8xf32>
  %o = tg.matmul %pk, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Full causal attention (GPT-OSS's other layers), grouped-query heads
// repeated from 2 to 4, sinks already [H] and broadcast from rank 1, no
// shift.
// CHECK-LABEL: func.func @sinks_gqa
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x6x8xf32>, %[[K:.*]]: tensor<1x2x6x8xf32>, %[[V:.*]]: tensor<1x2x6x8xf32>, %[[S:.*]]: tensor<4x1x1xf32>)
// CHECK: %[[H:.*]] = tg.reshape %[[S]] : (tensor<4x1x1xf32>) -> tensor<4xf32>
// CHECK: tg.attention %[[Q]], %[[K]], %[[V]] sinks %[[H]] {causal, scale = 1.000000e+00 : f32}
// CHECK-NOT: tg.softmax
// CHECK-NOT: tg.concat
func.func @sinks_gqa(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>, %v: tensor<1x2x6x8xf32>, %sinks: tensor<4x1x1xf32>) -> tensor<1x4x6x8xf32> {
  %ku = tg.reshape %k : (tensor<1x2x6x8xf32>) -> tensor<1x2x1x6x8xf32>
  %kb = tg.broadcast %ku : (tensor<1x2x1x6x8xf32>) -> tensor<1x2x2x6x8xf32>
  %kr = tg.reshape %kb : (tensor<1x2x2x6x8xf32>) -> tensor<1x4x6x8xf32>
  %vu = tg.reshape %v : (tensor<1x2x6x8xf32>) -> tensor<1x2x1x6x8xf32>
  %vb = tg.broadcast %vu : (tensor<1x2x1x6x8xf32>) -> tensor<1x2x2x6x8xf32>
  %vr = tg.reshape %vb : (tensor<1x2x2x6x8xf32>) -> tensor<1x4x6x8xf32>
  %kT = tg.transpose %kr [0, 1, 3, 2] : (tensor<1x4x6x8xf32>) -> tensor<1x4x8x6xf32>
  %s = tg.matmul %q, %kT : (tensor<1x4x6x8xf32>, tensor<1x4x8x6xf32>) -> tensor<1x4x6x6xf32>
  %m = tg.causal_mask : tensor<6x6xf32>
  %sm = tg.binary add %s, %m : (tensor<1x4x6x6xf32>, tensor<6x6xf32>) -> tensor<1x4x6x6xf32>
  %col = tg.broadcast %sinks : (tensor<4x1x1xf32>) -> tensor<1x4x6x1xf32>
  %cat = tg.concat %sm, %col {axis = -1 : i64} : (tensor<1x4x6x6xf32>, tensor<1x4x6x1xf32>) -> tensor<1x4x6x7xf32>
  %p = tg.softmax %cat : tensor<1x4x6x7xf32>
  %pk = tg.slice %p [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<1x4x6x7xf32>) -> tensor<1x4x6x6xf32>
  %o = tg.matmul %pk, %vr : (tensor<1x4x6x6xf32>, tensor<1x4x6x8xf32>) -> tensor<1x4x6x8xf32>
  return %o : tensor<1x4x6x8xf32>
}

// -----

// The exporter's max shift before a softmax without sinks is dropped too,
// and the attention fuses as before.
// CHECK-LABEL: func.func @shifted
// CHECK: tg.attention %arg0, %arg1, %arg2 {causal, scale = 1.000000e+00 : f32}
// CHECK-NOT: tg.softmax
func.func @shifted(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = tg.causal_mask : tensor<1x1x4x4xf32>
  %sm = tg.binary add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %zero = tg.constant dense<0.0> : tensor<1x2x4x1xf32>
  %shift = tg.binary sub %sm, %zero : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x4xf32>
  %p = tg.softmax %shift : tensor<1x2x4x4xf32>
  %o = tg.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
