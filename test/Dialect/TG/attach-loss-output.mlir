// RUN: rondo-opt %s --tg-attach-loss=kind=output:loss | FileCheck %s
// RUN: rondo-opt %s --tg-attach-loss=kind=output:nope --verify-diagnostics --split-input-file

// Checks --loss=output:NAME: a graph that computes its own scalar loss keeps
// only that result.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32> {tg.result = "loss"})
// CHECK-NEXT: %[[S:.*]] = tg.reduce sum
// CHECK-NEXT: return %[[S]]
// expected-error @+1 {{--loss=output:nope: the model has no output of that name}}
func.func @main(%x: tensor<4xf32> {tg.param = "x"}) -> (tensor<4xf32> {tg.result = "y"}, tensor<f32> {tg.result = "loss"}) {
  %s = tg.reduce sum %x {axes = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %x, %s : tensor<4xf32>, tensor<f32>
}
