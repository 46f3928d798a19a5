// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-linear-cross-entropy))' --split-input-file | FileCheck %s
// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-fuse-linear-cross-entropy))' --split-input-file | rondo-opt --split-input-file | FileCheck %s

// The tail stage's loss and its gradient: one call at the loss's place, with
// the gradient's scale (an argument) and the backward's results.
// CHECK-LABEL: func.func @tail
// CHECK: %[[F:.*]]:3 = kern.call @linearCrossEntropyWithGrad(%arg0, %arg1, %arg2, %arg3) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<f32>, tensor<64x32xf32>, tensor<128x32xf32>)
// CHECK-NOT: @linearCrossEntropy
// CHECK: %[[N:.*]] = kern.call @unary(%[[F]]#1)
// CHECK: return %[[F]]#0, %[[N]], %[[F]]#2
func.func @tail(%h: tensor<64x32xf32>, %w: tensor<128x32xf32>, %labels: tensor<64xi64>, %scale: tensor<f32>) -> (tensor<f32>, tensor<64x32xf32>, tensor<128x32xf32>) attributes {exec.stage} {
  %loss = kern.call @linearCrossEntropy(%h, %w, %labels) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>) -> tensor<f32>
  %dh, %dw = kern.call @linearCrossEntropyBackward(%h, %w, %labels, %scale) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<64x32xf32>, tensor<128x32xf32>)
  %n = kern.call @unary(%dh) args {kind = "Neg"} : (tensor<64x32xf32>) -> tensor<64x32xf32>
  return %loss, %n, %dw : tensor<f32>, tensor<64x32xf32>, tensor<128x32xf32>
}

// -----

// A frozen head: the backward skips dW (its result 1), the fused call skips
// its result 2.
// CHECK-LABEL: func.func @frozen_head
// CHECK: kern.call @linearCrossEntropyWithGrad(%arg0, %arg1, %arg2, %arg3) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = false} {skip = array<i64: 2>}
// CHECK-NOT: @linearCrossEntropy
func.func @frozen_head(%h: tensor<64x32xf32>, %w: tensor<32x128xf32>, %labels: tensor<64xi64>, %scale: tensor<f32>) -> (tensor<f32>, tensor<64x32xf32>) attributes {exec.stage} {
  %loss = kern.call @linearCrossEntropy(%h, %w, %labels) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = false} : (tensor<64x32xf32>, tensor<32x128xf32>, tensor<64xi64>) -> tensor<f32>
  %dh, %dw = kern.call @linearCrossEntropyBackward(%h, %w, %labels, %scale) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = false} {skip = array<i64: 1>} : (tensor<64x32xf32>, tensor<32x128xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<64x32xf32>, tensor<32x128xf32>)
  return %loss, %dh : tensor<f32>, tensor<64x32xf32>
}

// -----

// Calls that stay apart: another chunking, other hidden states, and a scale
// computed after the loss (it would not exist at the loss's place).
// CHECK-LABEL: func.func @stay_apart
// CHECK-NOT: @linearCrossEntropyWithGrad
// CHECK-COUNT-3: kern.call @linearCrossEntropyBackward
func.func @stay_apart(%h: tensor<64x32xf32>, %h2: tensor<64x32xf32>, %w: tensor<128x32xf32>, %labels: tensor<64xi64>, %scale: tensor<f32>) -> (tensor<f32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) attributes {exec.stage} {
  %loss = kern.call @linearCrossEntropy(%h, %w, %labels) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>) -> tensor<f32>
  %a, %aw = kern.call @linearCrossEntropyBackward(%h, %w, %labels, %scale) args {chunkRows = 32 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<64x32xf32>, tensor<128x32xf32>)
  %b, %bw = kern.call @linearCrossEntropyBackward(%h2, %w, %labels, %scale) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<64x32xf32>, tensor<128x32xf32>)
  %late = kern.call @unary(%scale) args {kind = "Neg"} : (tensor<f32>) -> tensor<f32>
  %c, %cw = kern.call @linearCrossEntropyBackward(%h, %w, %labels, %late) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<64x32xf32>, tensor<128x32xf32>)
  return %loss, %a, %b, %c : tensor<f32>, tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}

// -----

// Only stage functions are rewritten.
// CHECK-LABEL: func.func @not_a_stage
// CHECK: kern.call @linearCrossEntropy(
// CHECK: kern.call @linearCrossEntropyBackward
func.func @not_a_stage(%h: tensor<64x32xf32>, %w: tensor<128x32xf32>, %labels: tensor<64xi64>, %scale: tensor<f32>) -> (tensor<f32>, tensor<64x32xf32>) {
  %loss = kern.call @linearCrossEntropy(%h, %w, %labels) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>) -> tensor<f32>
  %dh, %dw = kern.call @linearCrossEntropyBackward(%h, %w, %labels, %scale) args {chunkRows = 16 : i64, ignoreIndex = -100 : i64, transW = true} : (tensor<64x32xf32>, tensor<128x32xf32>, tensor<64xi64>, tensor<f32>) -> (tensor<64x32xf32>, tensor<128x32xf32>)
  return %loss, %dh : tensor<f32>, tensor<64x32xf32>
}
