// RUN: rondo-opt %s --tg-fuse-activations --canonicalize | FileCheck %s

// Checks that x * sigmoid(x) becomes silu, in either operand order.
// CHECK-LABEL: func.func @silu
// CHECK-NEXT: %[[A:.*]] = tg.unary silu %arg0
// CHECK-NEXT: %[[B:.*]] = tg.unary silu %arg0
func.func @silu(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = tg.unary sigmoid %x : tensor<4x8xf32>
  %a = tg.binary mul %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %b = tg.binary mul %s, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
}

// Checks GPT-2's tanh GELU polynomial.
// CHECK-LABEL: func.func @gelu_tanh
// CHECK-NEXT: %[[G:.*]] = tg.unary gelu_tanh %arg0
// CHECK-NEXT: return %[[G]]
func.func @gelu_tanh(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = tg.constant dense<0.5> : tensor<f32>
  %three = tg.constant dense<3.0> : tensor<f32>
  %c = tg.constant dense<0.044715> : tensor<f32>
  %k = tg.constant dense<0.7978845608> : tensor<f32>
  %one = tg.constant dense<1.0> : tensor<f32>
  %h = tg.binary mul %half, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = tg.binary pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %q = tg.binary mul %c, %p : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %s = tg.binary add %x, %q : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %u = tg.binary mul %k, %s : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = tg.unary tanh %u : tensor<4x8xf32>
  %v = tg.binary add %one, %t : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = tg.binary mul %h, %v : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// Checks that sigmoid of a different value is left alone.
// CHECK-LABEL: func.func @not_silu
// CHECK: tg.unary sigmoid
// CHECK-NOT: silu
func.func @not_silu(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %s = tg.unary sigmoid %y : tensor<4xf32>
  %a = tg.binary mul %x, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// Checks the gated MLP core: silu(gate) * up becomes one tg.gated_act.
// CHECK-LABEL: func.func @swiglu
// CHECK-NEXT: %[[G:.*]] = tg.gated_act silu %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @swiglu(%gate: tensor<4x8xf32>, %up: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = tg.unary sigmoid %gate : tensor<4x8xf32>
  %a = tg.binary mul %gate, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = tg.binary mul %a, %up : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
