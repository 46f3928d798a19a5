// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fold-bf16-copies))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fold-bf16-copies))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// LoRA's x·A product, read by a copy for the B product and, later, by
// another for the B gradient's product (through a reshape): it is stored in
// bf16 once and both readers read it.
// CHECK-LABEL: func.func @product_two_copies
// CHECK-NOT: @toBf16
// CHECK: %[[P:.*]] = kern.call @matmulBf16ToBf16(%arg0, %arg1) args {accumulate = false, transA = false, transB = false} : (tensor<64x32xbf16>, tensor<32x4xbf16>) -> tensor<64x4xbf16>
// CHECK-NEXT: %[[Y:.*]] = kern.call @matmulBf16Scaled(%[[P]], %arg2)
// CHECK-NEXT: %[[R:.*]] = tg.reshape %[[P]] : (tensor<64x4xbf16>) -> tensor<2x32x4xbf16>
// CHECK-NEXT: %[[DB:.*]] = kern.call @matmulBf16Scaled(%[[R]], %arg3) args {alpha = 2.000000e+00 : f32, transA = true, transB = false}
// CHECK-NEXT: return %[[Y]], %[[DB]]
func.func @product_two_copies(%x: tensor<64x32xbf16>, %a: tensor<32x4xbf16>, %b: tensor<4x16xbf16>, %dy: tensor<2x32x16xbf16>) -> (tensor<64x16xf32>, tensor<2x4x16xf32>) attributes {exec.stage} {
  %p = kern.call @matmulBf16(%x, %a) args {accumulate = false, transA = false, transB = false} : (tensor<64x32xbf16>, tensor<32x4xbf16>) -> tensor<64x4xf32>
  %c1 = kern.call @toBf16(%p) : (tensor<64x4xf32>) -> tensor<64x4xbf16>
  %y = kern.call @matmulBf16Scaled(%c1, %b) args {alpha = 2.000000e+00 : f32, transA = false, transB = false} : (tensor<64x4xbf16>, tensor<4x16xbf16>) -> tensor<64x16xf32>
  %c2 = kern.call @toBf16(%p) : (tensor<64x4xf32>) -> tensor<64x4xbf16>
  %r = tg.reshape %c2 : (tensor<64x4xbf16>) -> tensor<2x32x4xbf16>
  %db = kern.call @matmulBf16Scaled(%r, %dy) args {alpha = 2.000000e+00 : f32, transA = true, transB = false} : (tensor<2x32x4xbf16>, tensor<2x32x16xbf16>) -> tensor<2x4x16xf32>
  return %y, %db : tensor<64x16xf32>, tensor<2x4x16xf32>
}

// -----

// The gated MLP's gradients, each read only by its copy (the scale Muls
// that also read them are gone into the products' alpha): both stored in
// bf16 by gatedActBackwardToBf16. A skipped result stays skipped.
// CHECK-LABEL: func.func @gated_backward
// CHECK-NOT: @toBf16
// CHECK: %[[G:.*]]:2 = kern.call @gatedActBackwardToBf16(%arg0, %arg1, %arg2) args {kind = "Silu"} : (tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>) -> (tensor<64x16xbf16>, tensor<64x16xbf16>)
// CHECK-NEXT: %[[DU:.*]] = kern.call @matmulBf16(%[[G]]#1, %arg3)
// CHECK-NEXT: %[[DG:.*]] = kern.call @matmulBf16(%[[G]]#0, %arg3)
// CHECK-NEXT: %[[S:.*]]:2 = kern.call @gatedActBackwardToBf16(%arg0, %arg1, %arg2) args {kind = "Silu"} {skip = array<i64: 1>} : (tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>) -> (tensor<64x16xbf16>, tensor<64x16xbf16>)
// CHECK-NEXT: %[[DS:.*]] = kern.call @matmulBf16(%[[S]]#0, %arg3)
// CHECK-NEXT: return %[[DU]], %[[DG]], %[[DS]]
func.func @gated_backward(%gate: tensor<64x16xf32>, %up: tensor<64x16xf32>, %dout: tensor<64x16xf32>, %w: tensor<16x8xbf16>) -> (tensor<64x8xf32>, tensor<64x8xf32>, tensor<64x8xf32>) attributes {exec.stage} {
  %g:2 = kern.call @gatedActBackward(%gate, %up, %dout) args {kind = "Silu"} : (tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>)
  %u16 = kern.call @toBf16(%g#1) : (tensor<64x16xf32>) -> tensor<64x16xbf16>
  %du = kern.call @matmulBf16(%u16, %w) args {accumulate = false, transA = false, transB = false} : (tensor<64x16xbf16>, tensor<16x8xbf16>) -> tensor<64x8xf32>
  %g16 = kern.call @toBf16(%g#0) : (tensor<64x16xf32>) -> tensor<64x16xbf16>
  %dg = kern.call @matmulBf16(%g16, %w) args {accumulate = false, transA = false, transB = false} : (tensor<64x16xbf16>, tensor<16x8xbf16>) -> tensor<64x8xf32>
  %s:2 = kern.call @gatedActBackward(%gate, %up, %dout) args {kind = "Silu"} {skip = array<i64: 1>} : (tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>)
  %s16 = kern.call @toBf16(%s#0) : (tensor<64x16xf32>) -> tensor<64x16xbf16>
  %ds = kern.call @matmulBf16(%s16, %w) args {accumulate = false, transA = false, transB = false} : (tensor<64x16xbf16>, tensor<16x8xbf16>) -> tensor<64x8xf32>
  return %du, %dg, %ds : tensor<64x8xf32>, tensor<64x8xf32>, tensor<64x8xf32>
}

// -----

// A query head's gradient from its norm-and-rotary backward, read only by
// its copy: dX is stored in bf16, the norm weight's gradient, which the
// twin keeps in fp32, keeps its reader.
// CHECK-LABEL: func.func @norm_rotary_backward
// CHECK-NOT: @toBf16
// CHECK: %[[N:.*]]:2 = kern.call @rmsNormRotaryBackwardBf16ToBf16(%arg0, %arg1, %arg2, %arg3, %arg4) args {eps = 9.99999997E-7 : f32} : {{.*}} -> (tensor<1x8x2x16xbf16>, tensor<16xf32>)
// CHECK-NEXT: %[[R:.*]] = tg.reshape %[[N]]#0 : (tensor<1x8x2x16xbf16>) -> tensor<1x8x32xbf16>
// CHECK-NEXT: %[[DX:.*]] = kern.call @matmulBf16(%[[R]], %arg5)
// CHECK-NEXT: return %[[DX]], %[[N]]#1
func.func @norm_rotary_backward(%x: tensor<1x8x2x16xf32>, %w: tensor<16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %dy: tensor<1x2x8x16xbf16>, %wq: tensor<32x32xbf16>) -> (tensor<1x8x32xf32>, tensor<16xf32>) attributes {exec.stage} {
  %n:2 = kern.call @rmsNormRotaryBackwardBf16(%x, %w, %cos, %sin, %dy) args {eps = 9.99999997E-7 : f32} : (tensor<1x8x2x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x2x8x16xbf16>) -> (tensor<1x8x2x16xf32>, tensor<16xf32>)
  %c = kern.call @toBf16(%n#0) : (tensor<1x8x2x16xf32>) -> tensor<1x8x2x16xbf16>
  %r = tg.reshape %c : (tensor<1x8x2x16xbf16>) -> tensor<1x8x32xbf16>
  %dx = kern.call @matmulBf16(%r, %wq) args {accumulate = false, transA = false, transB = true} : (tensor<1x8x32xbf16>, tensor<32x32xbf16>) -> tensor<1x8x32xf32>
  return %dx, %n#1 : tensor<1x8x32xf32>, tensor<16xf32>
}

// -----

// Kept in fp32: a product another reader takes in fp32 (here the
// function's result), a product that accumulates into its init (its sum is
// fp32), a gatedActBackward one of whose results has a reader other than a
// copy, attention's backward, whose twin also reads out and dO in bf16, and
// a call nothing reads.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: ToBf16
// CHECK-COUNT-4: kern.call @toBf16
// CHECK-NOT: ToBf16
func.func @kept(%x: tensor<64x32xbf16>, %a: tensor<32x4xbf16>, %i: tensor<64x4xf32>, %gate: tensor<64x16xf32>, %up: tensor<64x16xf32>, %dout: tensor<64x16xf32>, %q: tensor<1x2x8x16xbf16>, %o: tensor<1x2x8x16xf32>, %lse: tensor<1x2x8xf32>) -> (tensor<64x4xf32>, tensor<64x4xbf16>, tensor<64x4xbf16>, tensor<64x16xbf16>, tensor<64x16xf32>, tensor<1x2x8x16xbf16>) attributes {exec.stage} {
  %p = kern.call @matmulBf16(%x, %a) args {accumulate = false, transA = false, transB = false} : (tensor<64x32xbf16>, tensor<32x4xbf16>) -> tensor<64x4xf32>
  %c = kern.call @toBf16(%p) : (tensor<64x4xf32>) -> tensor<64x4xbf16>
  %s = kern.call @matmulBf16(%x, %a) inits(%i) args {accumulate = true, transA = false, transB = false} : (tensor<64x32xbf16>, tensor<32x4xbf16>, tensor<64x4xf32>) -> tensor<64x4xf32>
  %sc = kern.call @toBf16(%s) : (tensor<64x4xf32>) -> tensor<64x4xbf16>
  %g:2 = kern.call @gatedActBackward(%gate, %up, %dout) args {kind = "Silu"} : (tensor<64x16xf32>, tensor<64x16xf32>, tensor<64x16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>)
  %gc = kern.call @toBf16(%g#0) : (tensor<64x16xf32>) -> tensor<64x16xbf16>
  %u = kern.call @binary(%g#1, %gate) args {kind = "Mul"} : (tensor<64x16xf32>, tensor<64x16xf32>) -> tensor<64x16xf32>
  %d:3 = kern.call @attentionBackwardBf16(%q, %q, %q, %o, %lse, %o) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} {skip = array<i64: 1, 2>} : (tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xbf16>, tensor<1x2x8x16xf32>, tensor<1x2x8xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
  %dc = kern.call @toBf16(%d#0) : (tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xbf16>
  %n = kern.call @matmulBf16(%x, %a) args {accumulate = false, transA = false, transB = false} : (tensor<64x32xbf16>, tensor<32x4xbf16>) -> tensor<64x4xf32>
  return %p, %c, %sc, %gc, %u, %dc : tensor<64x4xf32>, tensor<64x4xbf16>, tensor<64x4xbf16>, tensor<64x16xbf16>, tensor<64x16xf32>, tensor<1x2x8x16xbf16>
}
