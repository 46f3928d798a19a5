// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-bf16-storage{share-window=4}))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-bf16-storage{share-window=4}))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// A norm read only by products (one through a reshape, as the backward's
// weight-gradient product reads it) is produced in bf16 and never in fp32;
// every product reads bf16 and becomes matmulBf16; a weight gets a copy in
// front of each of its products that lie far apart (here more than 4
// operations), and one shared copy for products close together.
// CHECK-LABEL: func.func @norm_feeds_products
// CHECK: %[[N:.*]] = kern.call @rmsNormToBf16(%arg0, %arg1) args {eps = 9.99999997E-7 : f32} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xbf16>
// CHECK-NOT: @rmsNorm(
// CHECK: %[[W1:.*]] = kern.call @toBf16(%arg2) : (tensor<16x32xf32>) -> tensor<16x32xbf16>
// CHECK: kern.call @matmulBf16(%[[N]], %[[W1]]) args {accumulate = false, transA = false, transB = false} : (tensor<2x8x16xbf16>, tensor<16x32xbf16>) -> tensor<2x8x32xf32>
// CHECK: kern.call @matmulBf16(%[[N]], %[[W1]])
// CHECK: kern.call @unary
// CHECK: kern.call @unary
// CHECK: kern.call @unary
// CHECK: kern.call @unary
// CHECK: kern.call @unary
// CHECK: %[[R:.*]] = tg.reshape %[[N]] : (tensor<2x8x16xbf16>) -> tensor<16x16xbf16>
// CHECK: %[[W2:.*]] = kern.call @toBf16(%arg2) : (tensor<16x32xf32>) -> tensor<16x32xbf16>
// CHECK: kern.call @matmulBf16(%[[R]], %[[W2]]) args {accumulate = false, transA = false, transB = false} : (tensor<16x16xbf16>, tensor<16x32xbf16>) -> tensor<16x32xf32>
// CHECK-NOT: kern.call @matmul(
func.func @norm_feeds_products(%x: tensor<2x8x16xf32>, %w: tensor<16xf32>, %wq: tensor<16x32xf32>, %s: tensor<2x2xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<16x32xf32>, tensor<2x2xf32>) attributes {exec.stage} {
  %n = kern.call @rmsNorm(%x, %w) args {eps = 1.0e-06 : f32} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %q = kern.call @matmul(%n, %wq) args {accumulate = false, transA = false, transB = false} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %k = kern.call @matmul(%n, %wq) args {accumulate = false, transA = false, transB = false} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %s1 = kern.call @unary(%s) args {kind = "Exp"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %s2 = kern.call @unary(%s1) args {kind = "Exp"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %s3 = kern.call @unary(%s2) args {kind = "Exp"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %s4 = kern.call @unary(%s3) args {kind = "Exp"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %s5 = kern.call @unary(%s4) args {kind = "Exp"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %r = tg.reshape %n : (tensor<2x8x16xf32>) -> tensor<16x16xf32>
  %v = kern.call @matmul(%r, %wq) args {accumulate = false, transA = false, transB = false} : (tensor<16x16xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
  return %q, %k, %v, %s5 : tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<16x32xf32>, tensor<2x2xf32>
}

// -----

// A value with another reader keeps its fp32 producer; one copy serves the
// products that follow it closely (the backward's dX and dW of one linear).
// The bf16 twins: binary, unaryBackward and transpose; a function result
// keeps its type (the exec buffers are laid out), so its producer stays.
// CHECK-LABEL: func.func @copies_and_twins
// CHECK: %[[G:.*]] = kern.call @binary(%arg0, %arg1) args {kind = "Add"}
// CHECK: %[[C:.*]] = kern.call @toBf16(%[[G]]) : (tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK: %[[W:.*]] = kern.call @toBf16(%arg2)
// CHECK: kern.call @matmulBf16(%[[C]], %[[W]]) args {accumulate = false, transA = false, transB = true}
// CHECK: %[[X:.*]] = kern.call @toBf16(%arg3)
// CHECK: kern.call @matmulBf16(%[[X]], %[[C]]) args {accumulate = false, transA = true, transB = false}
// CHECK: %[[M:.*]] = kern.call @binaryToBf16(%arg0, %arg1) args {kind = "Mul"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK: kern.call @matmulBf16(%[[M]], %[[M]])
// CHECK: %[[D:.*]] = kern.call @unaryBackwardToBf16(%arg0, %arg1) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK: kern.call @matmulBf16(%[[D]], %[[D]]) inits
// CHECK: %[[T:.*]] = kern.call @transposeToBf16(%arg0) args {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xbf16>
// CHECK: %[[A:.*]] = kern.call @toBf16(%arg0)
// CHECK: kern.call @matmulBf16(%[[T]], %[[A]]) inits
// CHECK: %[[K:.*]] = kern.call @transpose(%arg0) args {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
// CHECK: %[[KC:.*]] = kern.call @toBf16(%[[K]])
// CHECK: kern.call @matmulBf16(%[[KC]], %[[A]]) inits
// CHECK: return %[[G]]
func.func @copies_and_twins(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>, %w: tensor<4x16xf32>, %x: tensor<8x4xf32>) -> (tensor<8x16xf32>, tensor<8x4xf32>, tensor<4x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>) attributes {exec.stage} {
  %g = kern.call @binary(%a, %b) args {kind = "Add"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %dx = kern.call @matmul(%g, %w) args {accumulate = false, transA = false, transB = true} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
  %dw = kern.call @matmul(%x, %g) args {accumulate = false, transA = true, transB = false} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %m = kern.call @binary(%a, %b) args {kind = "Mul"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %p1 = kern.call @matmul(%m, %m) args {accumulate = false, transA = true, transB = false} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
  %d = kern.call @unaryBackward(%a, %b) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %p2 = kern.call @matmul(%d, %d) inits(%p1) args {accumulate = true, transA = true, transB = false} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %t = kern.call @transpose(%a) args {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %p3 = kern.call @matmul(%t, %a) inits(%p2) args {accumulate = true, transA = false, transB = false} : (tensor<16x8xf32>, tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %k = kern.call @transpose(%a) args {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %p4 = kern.call @matmul(%k, %a) inits(%p3) args {accumulate = true, transA = false, transB = false} : (tensor<16x8xf32>, tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %g, %dx, %dw, %p4, %k : tensor<8x16xf32>, tensor<8x4xf32>, tensor<4x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>
}

// -----

// Only stage functions are rewritten.
// CHECK-LABEL: func.func @not_a_stage
// CHECK: kern.call @matmul(%arg0, %arg1)
func.func @not_a_stage(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %p = kern.call @matmul(%a, %b) args {accumulate = false, transA = false, transB = false} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %p : tensor<4x4xf32>
}

// -----

// The gated activation and its gradient: results read only by products are
// produced in bf16, both of the gradient's (a skipped one stays skipped).
// CHECK-LABEL: func.func @gated
// CHECK: %[[H:.*]] = kern.call @gatedActToBf16(%arg0, %arg1) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK: kern.call @matmulBf16(%[[H]], %{{.*}})
// CHECK: %[[D:.*]]:2 = kern.call @gatedActBackwardToBf16(%arg0, %arg1, %arg2) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xbf16>, tensor<8x16xbf16>)
// CHECK: kern.call @matmulBf16(%[[D]]#0, %{{.*}})
// CHECK: kern.call @matmulBf16(%[[D]]#1, %{{.*}})
// CHECK: %[[S:.*]]:2 = kern.call @gatedActBackwardToBf16(%arg0, %arg1, %arg2) args {kind = "Silu"} {skip = array<i64: 1>}
// CHECK: kern.call @matmulBf16(%[[S]]#0, %{{.*}})
func.func @gated(%g: tensor<8x16xf32>, %u: tensor<8x16xf32>, %dy: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) attributes {exec.stage} {
  %h = kern.call @gatedAct(%g, %u) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %p = kern.call @matmul(%h, %w) args {accumulate = false, transA = false, transB = false} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %dg, %du = kern.call @gatedActBackward(%g, %u, %dy) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>)
  %p1 = kern.call @matmul(%dg, %w) args {accumulate = false, transA = false, transB = false} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %p2 = kern.call @matmul(%du, %w) args {accumulate = false, transA = false, transB = false} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %sg, %su = kern.call @gatedActBackward(%g, %u, %dy) args {kind = "Silu"} {skip = array<i64: 1>} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>)
  %p3 = kern.call @matmul(%sg, %w) args {accumulate = false, transA = false, transB = false} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %p, %p1, %p2, %p3 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// bf16 activations: the gate and up products and the down projection's input
// gradient are read only by the gated activation and its gradient, which
// take bf16 operands, so the products store bf16 and nothing is rounded in
// between. A product something else reads keeps fp32, and so does the
// reader of it (its other operand stays fp32 too: a reader converts whole).
// CHECK-LABEL: func.func @gated_operands
// CHECK: %[[G:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xbf16>
// CHECK: %[[U:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xbf16>
// CHECK: kern.call @gatedActBf16(%[[G]], %[[U]]) args {kind = "Silu"} : (tensor<8x16xbf16>, tensor<8x16xbf16>) -> tensor<8x16xbf16>
// CHECK: %[[D:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xbf16>, tensor<16x4xbf16>) -> tensor<8x16xbf16>
// CHECK: kern.call @gatedActBackwardBf16(%[[G]], %[[U]], %[[D]]) args {kind = "Silu"} : (tensor<8x16xbf16>, tensor<8x16xbf16>, tensor<8x16xbf16>) -> (tensor<8x16xbf16>, tensor<8x16xbf16>)
// CHECK: %[[G2:.*]] = kern.call @matmulBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xf32>
// CHECK: %[[U2:.*]] = kern.call @matmulBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xbf16>, tensor<4x16xbf16>) -> tensor<8x16xf32>
// CHECK: kern.call @gatedActToBf16(%[[G2]], %[[U2]]) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK: return
func.func @gated_operands(%x: tensor<8x4xf32>, %wg: tensor<4x16xf32>, %wu: tensor<4x16xf32>, %wd: tensor<16x4xf32>, %dy: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<8x16xf32>, tensor<8x4xf32>) attributes {exec.stage} {
  %g = kern.call @matmul(%x, %wg) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %u = kern.call @matmul(%x, %wu) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %h = kern.call @gatedAct(%g, %u) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = kern.call @matmul(%h, %wd) args {accumulate = false, transA = false, transB = false} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %dh = kern.call @matmul(%dy, %wd) args {accumulate = false, transA = false, transB = true} : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
  %dg, %du = kern.call @gatedActBackward(%g, %u, %dh) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>)
  %pg = kern.call @matmul(%x, %dg) args {accumulate = false, transA = true, transB = false} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %pu = kern.call @matmul(%dy, %du) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %g2 = kern.call @matmul(%x, %wg) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %u2 = kern.call @matmul(%x, %wu) args {accumulate = false, transA = false, transB = false} : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %h2 = kern.call @gatedAct(%g2, %u2) args {kind = "Silu"} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y2 = kern.call @matmul(%h2, %wd) args {accumulate = false, transA = false, transB = false} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %y, %pu, %pg, %g2, %y2 : tensor<8x4xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<8x16xf32>, tensor<8x4xf32>
}

// -----

// A device-resident weight whose bf16 copy the stage function also takes
// (the param_bf16 argument convert-pipe-to-exec adds) is read from that
// copy by every product, through reshapes too: no toBf16 of the weight.
// CHECK-LABEL: func.func @resident_weight_copy
// CHECK: %[[X:.*]] = kern.call @toBf16(%arg0) : (tensor<2x8x16xf32>) -> tensor<2x8x16xbf16>
// CHECK: kern.call @matmulBf16(%[[X]], %arg2) args {accumulate = false, transA = false, transB = false} : (tensor<2x8x16xbf16>, tensor<16x32xbf16>) -> tensor<2x8x32xf32>
// CHECK: %[[R:.*]] = tg.reshape %arg2 : (tensor<16x32xbf16>) -> tensor<1x16x32xbf16>
// CHECK: kern.call @matmulBf16(%{{.*}}, %[[R]]) args {accumulate = false, transA = false, transB = true}
// CHECK-NOT: @toBf16(%arg1)
func.func @resident_weight_copy(%x: tensor<2x8x16xf32> {exec.role = "activation"}, %w: tensor<16x32xf32> {exec.role = "param", tg.param = "w"}, %wb: tensor<16x32xbf16> {exec.role = "param_bf16", tg.param = "w"}, %dy: tensor<1x8x32xf32> {exec.role = "gradient"}) -> (tensor<2x8x32xf32>, tensor<1x8x16xf32>) attributes {exec.stage} {
  %y = kern.call @matmul(%x, %w) args {accumulate = false, transA = false, transB = false} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %r = tg.reshape %w : (tensor<16x32xf32>) -> tensor<1x16x32xf32>
  %dx = kern.call @matmul(%dy, %r) args {accumulate = false, transA = false, transB = true} : (tensor<1x8x32xf32>, tensor<1x16x32xf32>) -> tensor<1x8x16xf32>
  return %y, %dx : tensor<2x8x32xf32>, tensor<1x8x16xf32>
}

// -----

// The experts' grouped products are products where their expert weights
// have the trainer's resident bf16 copy: expertMatmul reads the copy and
// bf16 rows (here from the norm's bf16 twin), and the weight gradient of
// the same routing (ids) reads bf16 rows, one copied (%dy is also a
// result). An expertMatmul of streamed weights (%w2) keeps its fp32
// operands and kernel: no toBf16 of a whole weight stack a microbatch.
// CHECK-LABEL: func.func @expert_products
// CHECK: %[[X:.*]] = kern.call @rmsNormToBf16(%arg0, %arg1) args {eps = 9.99999997E-7 : f32} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xbf16>
// CHECK: kern.call @expertMatmulBf16(%[[X]], %arg4, %arg5) args {transW = false} : (tensor<8x16xbf16>, tensor<4x16x32xbf16>, tensor<8xi64>) -> tensor<8x32xf32>
// CHECK: kern.call @expertMatmul(%arg6, %arg2, %arg5) args {transW = false} : (tensor<8x32xf32>, tensor<4x32x16xf32>, tensor<8xi64>) -> tensor<8x16xf32>
// CHECK: %[[D:.*]] = kern.call @toBf16(%arg6) : (tensor<8x32xf32>) -> tensor<8x32xbf16>
// CHECK: kern.call @expertMatmulWeightGradBf16(%[[X]], %[[D]], %arg5) args {transW = false} : (tensor<8x16xbf16>, tensor<8x32xbf16>, tensor<8xi64>) -> tensor<4x16x32xf32>
// CHECK-NOT: @toBf16(%arg2)
// CHECK-NOT: @toBf16(%arg3)
// CHECK-NOT: @expertMatmulWeightGrad(
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %arg6
func.func @expert_products(%x: tensor<8x16xf32> {exec.role = "activation"}, %g: tensor<16xf32> {exec.role = "param", tg.param = "g"}, %w2: tensor<4x32x16xf32> {exec.role = "param", tg.param = "w2"}, %w: tensor<4x16x32xf32> {exec.role = "param", tg.param = "w"}, %wb: tensor<4x16x32xbf16> {exec.role = "param_bf16", tg.param = "w"}, %ids: tensor<8xi64> {exec.role = "activation"}, %dy: tensor<8x32xf32> {exec.role = "gradient"}) -> (tensor<8x32xf32>, tensor<8x16xf32>, tensor<4x16x32xf32>, tensor<8x32xf32>) attributes {exec.stage} {
  %n = kern.call @rmsNorm(%x, %g) args {eps = 1.0e-06 : f32} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %y = kern.call @expertMatmul(%n, %w, %ids) args {transW = false} : (tensor<8x16xf32>, tensor<4x16x32xf32>, tensor<8xi64>) -> tensor<8x32xf32>
  %dx = kern.call @expertMatmul(%dy, %w2, %ids) args {transW = false} : (tensor<8x32xf32>, tensor<4x32x16xf32>, tensor<8xi64>) -> tensor<8x16xf32>
  %dw = kern.call @expertMatmulWeightGrad(%n, %dy, %ids) args {transW = false} : (tensor<8x16xf32>, tensor<8x32xf32>, tensor<8xi64>) -> tensor<4x16x32xf32>
  return %y, %dx, %dw, %dy : tensor<8x32xf32>, tensor<8x16xf32>, tensor<4x16x32xf32>, tensor<8x32xf32>
}

// -----

// Attention reads q, k and v in bf16: the fused QK-norm and rotary stores
// the query and key heads in bf16 (rmsNormRotaryToBf16), the transpose the
// values (transposeToBf16), and the forward and the backward read them as
// they are (attentionBf16, attentionBackwardBf16); the output, lse and dO
// stay fp32. A value another kernel also reads keeps its fp32 producer and
// gets a copy in front of attention; attention with sinks reads fp32.
// CHECK-LABEL: func.func @attention_operands
// CHECK: %[[Q:.*]] = kern.call @rmsNormRotaryToBf16(%arg0, %arg1, %arg3, %arg4) args {eps = 9.99999997E-7 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xbf16>
// CHECK: %[[K:.*]] = kern.call @rmsNormRotaryToBf16(%arg2, %arg1, %arg3, %arg4)
// CHECK: %[[V:.*]] = kern.call @transposeToBf16(%arg2) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xbf16>
// CHECK: %[[O:.*]]:2 = kern.call @attentionBf16(%[[Q]], %[[K]], %[[V]]) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
// CHECK: kern.call @attentionBackwardBf16(%[[Q]], %[[K]], %[[V]], %[[O]]#0, %[[O]]#1, %arg5) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>)
// CHECK: %[[S:.*]] = kern.call @rmsNormRotary(%arg0, %arg1, %arg3, %arg4)
// CHECK: %[[SC:.*]] = kern.call @toBf16(%[[S]])
// CHECK: kern.call @attentionBf16(%[[SC]], %[[K]], %[[V]])
// CHECK: kern.call @attentionSinks(%[[S]],
// CHECK-NOT: @attention(
// CHECK-NOT: @attentionBackward(
func.func @attention_operands(%xq: tensor<1x8x4x16xf32>, %w: tensor<16xf32>, %xk: tensor<1x8x4x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %dy: tensor<1x4x8x16xf32>, %sinks: tensor<4xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) attributes {exec.stage} {
  %q = kern.call @rmsNormRotary(%xq, %w, %cos, %sin) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %k = kern.call @rmsNormRotary(%xk, %w, %cos, %sin) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %v = kern.call @transpose(%xk) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %o:2 = kern.call @attention(%q, %k, %v) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %g:3 = kern.call @attentionBackward(%q, %k, %v, %o#0, %o#1, %dy) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>)
  %s = kern.call @rmsNormRotary(%xq, %w, %cos, %sin) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %so:2 = kern.call @attention(%s, %k, %v) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %sk:2 = kern.call @attentionSinks(%s, %xq, %xq, %sinks) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>, tensor<1x8x4x16xf32>, tensor<4xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  return %o#0, %g#0, %g#1, %g#2, %so#0, %sk#0 : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>
}

// -----

// A frozen weight the plan holds in bf16 alone (a streamed LoRA base): its
// fp32 argument is `param_unbound`, bound to nothing. Its products read the
// bf16 argument, through reshapes too, and the fp32 argument goes, so the
// stage function takes (and the launch binds) the bf16 weight only.
// CHECK-LABEL: func.func @frozen_bf16_weight
// CHECK-SAME: (%arg0: tensor<2x8x16xf32> {exec.role = "activation"}, %arg1: tensor<1x8x32xf32> {exec.role = "gradient"}, %arg2: tensor<16x32xbf16> {exec.role = "param_bf16", tg.param = "w"})
// CHECK: kern.call @matmulBf16(%{{.*}}, %arg2) args {accumulate = false, transA = false, transB = false}
// CHECK: %[[R:.*]] = tg.reshape %arg2 : (tensor<16x32xbf16>) -> tensor<1x16x32xbf16>
// CHECK: kern.call @matmulBf16(%{{.*}}, %[[R]]) args {accumulate = false, transA = false, transB = true}
// CHECK-NOT: param_unbound
func.func @frozen_bf16_weight(%x: tensor<2x8x16xf32> {exec.role = "activation"}, %w: tensor<16x32xf32> {exec.role = "param_unbound", tg.param = "w"}, %dy: tensor<1x8x32xf32> {exec.role = "gradient"}, %wb: tensor<16x32xbf16> {exec.role = "param_bf16", tg.param = "w"}) -> (tensor<2x8x32xf32>, tensor<1x8x16xf32>) attributes {exec.stage} {
  %y = kern.call @matmul(%x, %w) args {accumulate = false, transA = false, transB = false} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %r = tg.reshape %w : (tensor<16x32xf32>) -> tensor<1x16x32xf32>
  %dx = kern.call @matmul(%dy, %r) args {accumulate = false, transA = false, transB = true} : (tensor<1x8x32xf32>, tensor<1x16x32xf32>) -> tensor<1x8x16xf32>
  return %y, %dx : tensor<2x8x32xf32>, tensor<1x8x16xf32>
}

// -----

// A streamed expert stack held in bf16 alone: the grouped product reads
// the bf16 stack with bf16 rows, no fp32-staged kernel.
// CHECK-LABEL: func.func @frozen_bf16_experts
// CHECK-SAME: (%arg0: tensor<8x16xf32> {exec.role = "activation"}, %arg1: tensor<8xi64> {exec.role = "activation"}, %arg2: tensor<4x16x32xbf16> {exec.role = "param_bf16", tg.param = "w"})
// CHECK: %[[X:.*]] = kern.call @toBf16(%arg0)
// CHECK: kern.call @expertMatmulBf16(%[[X]], %arg2, %arg1) args {transW = false}
func.func @frozen_bf16_experts(%x: tensor<8x16xf32> {exec.role = "activation"}, %w: tensor<4x16x32xf32> {exec.role = "param_unbound", tg.param = "w"}, %ids: tensor<8xi64> {exec.role = "activation"}, %wb: tensor<4x16x32xbf16> {exec.role = "param_bf16", tg.param = "w"}) -> tensor<8x32xf32> attributes {exec.stage} {
  %y = kern.call @expertMatmul(%x, %w, %ids) args {transW = false} : (tensor<8x16xf32>, tensor<4x16x32xf32>, tensor<8xi64>) -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}

// -----

// Attention's results in bf16: its output is read by the transpose in front
// of the output projection and by the backward, so it is stored in bf16
// (attentionBf16ToBf16) and moved as it is (transposeBf16); the backward
// reads it and a bf16 dO (the transpose in front stores bf16) and stores
// its gradients in bf16 (attentionBackwardBf16ToBf16): the query and key
// gradients' norm-and-rotary backward reads them as they are, the values'
// transpose moves them, and any other reader (here the function's result)
// gets one fromBf16. The product in front of dO's transpose is read only by
// it, so it stores bf16 itself (matmulBf16ToBf16) and the transpose moves
// bf16 (transposeBf16), through the reshape between them.
// CHECK-LABEL: func.func @attention_results
// CHECK: %[[Q:.*]] = kern.call @rmsNormRotaryToBf16(%arg0,
// CHECK: %[[K:.*]] = kern.call @rmsNormRotaryToBf16(%arg2,
// CHECK: %[[V:.*]] = kern.call @transposeToBf16(%arg2)
// CHECK: %[[O:.*]]:2 = kern.call @attentionBf16ToBf16(%[[Q]], %[[K]], %[[V]]) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>)
// CHECK: %[[OT:.*]] = kern.call @transposeBf16(%[[O]]#0) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xbf16>) -> tensor<1x8x4x16xbf16>
// CHECK: %[[DOR:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = true} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
// CHECK: %[[DOT:.*]] = tg.reshape %[[DOR]] : (tensor<8x64xbf16>) -> tensor<1x8x4x16xbf16>
// CHECK: %[[DO:.*]] = kern.call @transposeBf16(%[[DOT]]) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xbf16>) -> tensor<1x4x8x16xbf16>
// CHECK: %[[G:.*]]:3 = kern.call @attentionBackwardBf16ToBf16(%[[Q]], %[[K]], %[[V]], %[[O]]#0, %[[O]]#1, %[[DO]]) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>)
// CHECK: %[[GV:.*]] = kern.call @fromBf16(%[[G]]#2) : (tensor<1x4x8x16xbf16>) -> tensor<1x4x8x16xf32>
// CHECK: kern.call @rmsNormRotaryBackwardBf16(%arg0, %arg1, %arg3, %arg4, %[[G]]#0) args {eps = 9.99999997E-7 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x8x4x16xf32>, tensor<16xf32>)
// CHECK: kern.call @rmsNormRotaryBackwardBf16(%arg2, %arg1, %arg3, %arg4, %[[G]]#1)
// CHECK: kern.call @transposeBf16(%[[G]]#2)
// CHECK: return {{.*}}, %[[GV]] :
// CHECK-NOT: @attentionBf16(
// CHECK-NOT: @attentionBackwardBf16(
func.func @attention_results(%xq: tensor<1x8x4x16xf32>, %w: tensor<16xf32>, %xk: tensor<1x8x4x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %wo: tensor<64x64xf32>, %dy: tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<1x8x4x16xf32>, tensor<1x8x4x16xf32>, tensor<64x64xf32>, tensor<1x4x8x16xf32>) attributes {exec.stage} {
  %q = kern.call @rmsNormRotary(%xq, %w, %cos, %sin) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %k = kern.call @rmsNormRotary(%xk, %w, %cos, %sin) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %v = kern.call @transpose(%xk) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %o:2 = kern.call @attention(%q, %k, %v) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %ot = kern.call @transpose(%o#0) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %or = tg.reshape %ot : (tensor<1x8x4x16xf32>) -> tensor<8x64xf32>
  %y = kern.call @matmul(%or, %wo) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %dor = kern.call @matmul(%dy, %wo) args {accumulate = false, transA = false, transB = true} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %dot = tg.reshape %dor : (tensor<8x64xf32>) -> tensor<1x8x4x16xf32>
  %do = kern.call @transpose(%dot) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %g:3 = kern.call @attentionBackward(%q, %k, %v, %o#0, %o#1, %do) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>)
  %gq:2 = kern.call @rmsNormRotaryBackward(%xq, %w, %cos, %sin, %g#0) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<16xf32>)
  %gk:2 = kern.call @rmsNormRotaryBackward(%xk, %w, %cos, %sin, %g#1) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<16xf32>)
  %gv = kern.call @transpose(%g#2) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %gvr = tg.reshape %gv : (tensor<1x8x4x16xf32>) -> tensor<8x64xf32>
  %dwv = kern.call @matmul(%gvr, %dy) args {accumulate = false, transA = true, transB = false} : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<64x64xf32>
  return %y, %gq#0, %gk#0, %dwv, %g#2 : tensor<8x64xf32>, tensor<1x8x4x16xf32>, tensor<1x8x4x16xf32>, tensor<64x64xf32>, tensor<1x4x8x16xf32>
}

// -----

// A twin may keep some results in fp32: the query norm-and-rotary backward's
// dX, read only by the projection's products, is stored in bf16
// (rmsNormRotaryBackwardToBf16) while its weight gradient stays fp32 for the
// function's result.
// CHECK-LABEL: func.func @partial_twin
// CHECK: %[[G:.*]]:2 = kern.call @rmsNormRotaryBackwardToBf16(%arg0, %arg1, %arg2, %arg3, %arg4) args {eps = 9.99999997E-7 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x8x4x16xbf16>, tensor<16xf32>)
// CHECK: %[[R:.*]] = tg.reshape %[[G]]#0 : (tensor<1x8x4x16xbf16>) -> tensor<8x64xbf16>
// CHECK: kern.call @matmulBf16(%[[R]], %{{.*}}) args {accumulate = false, transA = false, transB = true}
// CHECK: return %{{.*}}, %[[G]]#1
func.func @partial_twin(%x: tensor<1x8x4x16xf32>, %w: tensor<16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %dy: tensor<1x4x8x16xf32>, %wq: tensor<64x64xf32>) -> (tensor<8x64xf32>, tensor<16xf32>) attributes {exec.stage} {
  %g:2 = kern.call @rmsNormRotaryBackward(%x, %w, %cos, %sin, %dy) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<16xf32>)
  %r = tg.reshape %g#0 : (tensor<1x8x4x16xf32>) -> tensor<8x64xf32>
  %d = kern.call @matmul(%r, %wq) args {accumulate = false, transA = false, transB = true} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  return %d, %g#1 : tensor<8x64xf32>, tensor<16xf32>
}

// -----

// A residual Add of a product that only the Add reads: the product stores
// bf16 and the Add widens it (addBf16), whichever operand it was; a product
// something else also reads keeps fp32, and so does its Add (whose product
// operand still moves second: the same bits).
// CHECK-LABEL: func.func @residual_add
// CHECK: %[[P:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
// CHECK: %[[S:.*]] = kern.call @addBf16(%arg0, %[[P]]) : (tensor<8x64xf32>, tensor<8x64xbf16>) -> tensor<8x64xf32>
// CHECK: %[[Q:.*]] = kern.call @matmulBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xf32>
// CHECK: %[[T:.*]] = kern.call @binary(%[[S]], %[[Q]]) args {kind = "Add"}
// CHECK: return %[[T]], %[[Q]]
func.func @residual_add(%x: tensor<8x64xf32>, %h: tensor<8x64xf32>, %wo: tensor<64x64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>) attributes {exec.stage} {
  %p = kern.call @matmul(%h, %wo) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %s = kern.call @binary(%p, %x) args {kind = "Add"} : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %q = kern.call @matmul(%h, %wo) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %t = kern.call @binary(%q, %s) args {kind = "Add"} : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %t, %q : tensor<8x64xf32>, tensor<8x64xf32>
}

// -----

// The input gradients of three projections that read one norm, summed by
// accumulating products (kern-accumulate-products), read only by the norm's
// backward: the whole chain stores bf16, each product adding into its
// predecessor's bf16 result, and the backward reads the sum in bf16
// (rmsNormBackwardBf16). A chain something else also reads keeps fp32.
// CHECK-LABEL: func.func @gradient_sum
// CHECK: %[[V:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = true} : (tensor<8x32xbf16>, tensor<64x32xbf16>) -> tensor<8x64xbf16>
// CHECK: %[[K:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) inits(%[[V]]) args {accumulate = true, transA = false, transB = true} : (tensor<8x32xbf16>, tensor<64x32xbf16>, tensor<8x64xbf16>) -> tensor<8x64xbf16>
// CHECK: %[[Q:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) inits(%[[K]]) args {accumulate = true, transA = false, transB = true} : (tensor<8x64xbf16>, tensor<64x64xbf16>, tensor<8x64xbf16>) -> tensor<8x64xbf16>
// CHECK: %[[G:.*]]:2 = kern.call @rmsNormBackwardBf16(%arg0, %arg1, %[[Q]]) args {eps = 9.99999997E-7 : f32} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xbf16>) -> (tensor<8x64xf32>, tensor<64xf32>)
// CHECK: %[[P:.*]] = kern.call @matmulBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = true} : (tensor<8x32xbf16>, tensor<64x32xbf16>) -> tensor<8x64xf32>
// CHECK: %[[S:.*]] = kern.call @matmulBf16(%{{.*}}, %{{.*}}) inits(%[[P]]) args {accumulate = true, transA = false, transB = true} : (tensor<8x32xbf16>, tensor<64x32xbf16>, tensor<8x64xf32>) -> tensor<8x64xf32>
// CHECK: %[[H:.*]]:2 = kern.call @rmsNormBackward(%arg0, %arg1, %[[S]])
// CHECK: return %[[G]]#0, %[[G]]#1, %[[H]]#0, %[[S]]
func.func @gradient_sum(%x: tensor<8x64xf32>, %w: tensor<64xf32>, %dq: tensor<8x64xf32>, %dk: tensor<8x32xf32>, %dv: tensor<8x32xf32>, %wq: tensor<64x64xf32>, %wk: tensor<64x32xf32>, %wv: tensor<64x32xf32>) -> (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>, tensor<8x64xf32>) attributes {exec.stage} {
  %v = kern.call @matmul(%dv, %wv) args {accumulate = false, transA = false, transB = true} : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  %k = kern.call @matmul(%dk, %wk) inits(%v) args {accumulate = true, transA = false, transB = true} : (tensor<8x32xf32>, tensor<64x32xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %q = kern.call @matmul(%dq, %wq) inits(%k) args {accumulate = true, transA = false, transB = true} : (tensor<8x64xf32>, tensor<64x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %g:2 = kern.call @rmsNormBackward(%x, %w, %q) args {eps = 1.0e-06 : f32} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
  %p = kern.call @matmul(%dk, %wk) args {accumulate = false, transA = false, transB = true} : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  %s = kern.call @matmul(%dv, %wv) inits(%p) args {accumulate = true, transA = false, transB = true} : (tensor<8x32xf32>, tensor<64x32xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %h:2 = kern.call @rmsNormBackward(%x, %w, %s) args {eps = 1.0e-06 : f32} {skip = array<i64: 1>} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
  return %g#0, %g#1, %h#0, %s : tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>, tensor<8x64xf32>
}

// -----

// A query or key projection read only by its heads' norm-and-rotary, forward
// and backward (attention's bf16 interface in place): the product stores
// bf16 and both read it as it is.
// CHECK-LABEL: func.func @head_projection
// CHECK: %[[P:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
// CHECK: %[[R:.*]] = tg.reshape %[[P]] : (tensor<8x64xbf16>) -> tensor<1x8x4x16xbf16>
// CHECK: %[[Q:.*]] = kern.call @rmsNormRotaryBf16ToBf16(%[[R]], %arg2, %arg3, %arg4) args {eps = 9.99999997E-7 : f32} : (tensor<1x8x4x16xbf16>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xbf16>
// CHECK: %[[G:.*]]:2 = kern.call @rmsNormRotaryBf16BackwardBf16ToBf16(%{{.*}}, %arg2, %arg3, %arg4, %arg5) args {eps = 9.99999997E-7 : f32} : (tensor<1x8x4x16xbf16>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x8x4x16xbf16>, tensor<16xf32>)
// CHECK: return %[[Q]], %[[G]]#0, %[[G]]#1
func.func @head_projection(%h: tensor<8x64xf32>, %wq: tensor<64x64xf32>, %w: tensor<16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %dy: tensor<1x4x8x16xbf16>) -> (tensor<1x4x8x16xbf16>, tensor<1x8x4x16xbf16>, tensor<16xf32>) attributes {exec.stage} {
  %p = kern.call @matmul(%h, %wq) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %x = tg.reshape %p : (tensor<8x64xf32>) -> tensor<1x8x4x16xf32>
  %q = kern.call @rmsNormRotaryToBf16(%x, %w, %cos, %sin) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xbf16>
  %g:2 = kern.call @rmsNormRotaryBackwardBf16ToBf16(%x, %w, %cos, %sin, %dy) args {eps = 1.0e-06 : f32} : (tensor<1x8x4x16xf32>, tensor<16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<1x4x8x16xbf16>) -> (tensor<1x8x4x16xbf16>, tensor<16xf32>)
  return %q, %g#0, %g#1 : tensor<1x4x8x16xbf16>, tensor<1x8x4x16xbf16>, tensor<16xf32>
}

// -----

// The fused LM head reads a resident weight's bf16 copy
// (linearCrossEntropyWithGradBf16W); the tied embedding's gather keeps the
// fp32 weights.
// CHECK-LABEL: func.func @lm_head_copy
// CHECK: kern.call @gatherRows(%arg1, %arg0)
// CHECK: kern.call @linearCrossEntropyWithGradBf16W(%arg3, %arg2, %arg4, %arg5) args {chunkRows = 4 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<8x16xf32>, tensor<32x16xbf16>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x16xf32>, tensor<32x16xf32>)
func.func @lm_head_copy(%ids: tensor<8xi64> {exec.role = "input_ids"}, %w: tensor<32x16xf32> {exec.role = "param", tg.param = "w"}, %wb: tensor<32x16xbf16> {exec.role = "param_bf16", tg.param = "w"}, %h: tensor<8x16xf32> {exec.role = "activation"}, %labels: tensor<8xi64> {exec.role = "labels"}, %scale: tensor<f32> {exec.role = "loss_scale"}) -> (tensor<8x16xf32>, tensor<f32>, tensor<8x16xf32>, tensor<32x16xf32>) attributes {exec.stage} {
  %e = kern.call @gatherRows(%w, %ids) : (tensor<32x16xf32>, tensor<8xi64>) -> tensor<8x16xf32>
  %l:3 = kern.call @linearCrossEntropyWithGrad(%h, %w, %labels, %scale) args {chunkRows = 4 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<8xi64>, tensor<f32>) -> (tensor<f32>, tensor<8x16xf32>, tensor<32x16xf32>)
  return %e, %l#0, %l#1, %l#2 : tensor<8x16xf32>, tensor<f32>, tensor<8x16xf32>, tensor<32x16xf32>
}

// -----

// Heads without a norm (Llama's, Qwen2's): the projections are read only by
// their transpose-and-rotary, which attention reads in bf16, so each product
// stores bf16 (matmulBf16ToBf16) and the fused kernel reads and writes bf16
// (transposeRotaryBf16ToBf16); backward, attention's bf16 query gradient
// goes through transposeRotaryBackwardBf16ToBf16 straight to the products.
// CHECK-LABEL: func.func @plain_heads
// CHECK: %[[P:.*]] = kern.call @matmulBf16ToBf16(%{{.*}}, %{{.*}}) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
// CHECK: %[[R:.*]] = tg.reshape %[[P]] : (tensor<8x64xbf16>) -> tensor<1x8x4x16xbf16>
// CHECK: %[[Q:.*]] = kern.call @transposeRotaryBf16ToBf16(%[[R]], %arg4, %arg5) : (tensor<1x8x4x16xbf16>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xbf16>
// CHECK: %[[K:.*]] = kern.call @transposeRotaryBf16ToBf16(
// CHECK: %[[O:.*]]:2 = kern.call @attentionBf16ToBf16(%[[Q]], %[[K]],
// CHECK: %[[G:.*]]:3 = kern.call @attentionBackwardBf16ToBf16(%[[Q]], %[[K]],
// CHECK: %[[GQ:.*]] = kern.call @transposeRotaryBackwardBf16ToBf16(%[[G]]#0, %arg4, %arg5) : (tensor<1x4x8x16xbf16>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x8x4x16xbf16>
// CHECK: %[[GR:.*]] = tg.reshape %[[GQ]] : (tensor<1x8x4x16xbf16>) -> tensor<8x64xbf16>
// CHECK: kern.call @matmulBf16(%[[GR]], %{{.*}}) args {accumulate = false, transA = false, transB = true}
// CHECK-NOT: @transposeRotary(
// CHECK-NOT: @transposeRotaryBackward(
func.func @plain_heads(%h: tensor<8x64xf32>, %wq: tensor<64x64xf32>, %wk: tensor<64x64xf32>, %wo: tensor<64x64xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %v: tensor<1x4x8x16xf32>, %do: tensor<1x4x8x16xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<64x64xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) attributes {exec.stage} {
  %pq = kern.call @matmul(%h, %wq) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %xq = tg.reshape %pq : (tensor<8x64xf32>) -> tensor<1x8x4x16xf32>
  %q = kern.call @transposeRotary(%xq, %cos, %sin) : (tensor<1x8x4x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %pk = kern.call @matmul(%h, %wk) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %xk = tg.reshape %pk : (tensor<8x64xf32>) -> tensor<1x8x4x16xf32>
  %k = kern.call @transposeRotary(%xk, %cos, %sin) : (tensor<1x8x4x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %o:2 = kern.call @attention(%q, %k, %v) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %ot = kern.call @transpose(%o#0) args {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  %or = tg.reshape %ot : (tensor<1x8x4x16xf32>) -> tensor<8x64xf32>
  %y = kern.call @matmul(%or, %wo) args {accumulate = false, transA = false, transB = false} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %g:3 = kern.call @attentionBackward(%q, %k, %v, %o#0, %o#1, %do) args {causal = true, scale = 2.500000e-01 : f32, window = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>)
  %gq = kern.call @transposeRotaryBackward(%g#0, %cos, %sin) : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x8x4x16xf32>
  %gqr = tg.reshape %gq : (tensor<1x8x4x16xf32>) -> tensor<8x64xf32>
  %dh = kern.call @matmul(%gqr, %wq) args {accumulate = false, transA = false, transB = true} : (tensor<8x64xf32>, tensor<64x64xf32>) -> tensor<8x64xf32>
  %dwq = kern.call @matmul(%h, %gqr) args {accumulate = false, transA = true, transB = false} : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<64x64xf32>
  return %y, %dh, %dwq, %g#1, %g#2 : tensor<8x64xf32>, tensor<8x64xf32>, tensor<64x64xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>
}
