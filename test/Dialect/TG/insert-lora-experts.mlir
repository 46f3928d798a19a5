// RUN: rondo-opt %s --split-input-file --tg-insert-lora="rank=2 alpha=4" | FileCheck %s
// RUN: rondo-opt %s --split-input-file --tg-insert-lora="rank=2 alpha=4 targets=down+router" | FileCheck %s --check-prefix=DOWN
// RUN: rondo-opt %s --split-input-file --tg-insert-lora="rank=2 alpha=4 targets=experts" --tg-select-trainable \
// RUN:   | FileCheck %s --check-prefix=TRAIN

// tg-insert-lora on a mixture of experts: each stacked expert weight
// W [E, d1, d2] (read by tg.expert_matmul) gets A [E, d1, r] and
// B [E, r, d2] after it, PEFT's ParamWrapper adapters on the stored layout
// (W_e + s·A_e·B_e), named after the module that holds the parameter:
// gate_up_proj, wrapped first, under `.base_layer`, down_proj not. The
// low-rank term runs through the routed rows with the base product's ids;
// a base read transposed (x·W_e^T) gets (x·B_e^T)·A_e^T. all-linear covers
// the experts (gate/up and down roles); the router only when named.

// CHECK: func.func @main(%arg0: tensor<4x8xf32> {tg.param = "model.layers.0.mlp.gate.weight"},
// CHECK-SAME: %arg1: tensor<4x12x8xf32> {tg.param = "val_1", tg.torch_name = "model.layers.0.mlp.experts.gate_up_proj"},
// CHECK-SAME: %arg2: tensor<4x12x2xf32> {tg.lora_factor = "A", tg.lora_of = "val_1", tg.lora_parameter, tg.param = "model.layers.0.mlp.experts.base_layer.lora_A.weight", tg.torch_name = "model.layers.0.mlp.experts.base_layer.lora_A.weight"},
// CHECK-SAME: %arg3: tensor<4x2x8xf32> {tg.lora_factor = "B", tg.lora_of = "val_1", tg.lora_parameter, tg.param = "model.layers.0.mlp.experts.base_layer.lora_B.weight"
// CHECK-SAME: %arg4: tensor<4x8x6xf32> {tg.param = "val_2"
// CHECK-SAME: %arg5: tensor<4x8x2xf32> {tg.lora_factor = "A", tg.lora_of = "val_2", tg.lora_parameter, tg.param = "model.layers.0.mlp.experts.lora_A.weight"
// CHECK-SAME: %arg6: tensor<4x2x6xf32> {tg.lora_factor = "B", tg.lora_of = "val_2", tg.lora_parameter, tg.param = "model.layers.0.mlp.experts.lora_B.weight"
// CHECK-SAME: %arg7: tensor<3x8xf32>)
// CHECK: %[[S:.*]] = tg.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[R:.*]] = tg.matmul %arg7, %arg0 {transpose_b}
// CHECK-NEXT: tg.softmax %[[R]]
// CHECK: %[[IDS:.*]] = tg.reshape %indices
// CHECK: %[[X:.*]] = tg.reshape %{{.*}} : (tensor<3x2x8xf32>) -> tensor<6x8xf32>
// CHECK-NEXT: %[[H:.*]] = tg.expert_matmul %[[X]], %arg1, %[[IDS]] {transpose_w}
// CHECK-NEXT: %[[XB:.*]] = tg.expert_matmul %[[X]], %arg3, %[[IDS]] {transpose_w} : (tensor<6x8xf32>, tensor<4x2x8xf32>, tensor<6xi64>) -> tensor<6x2xf32>
// CHECK-NEXT: %[[XBA:.*]] = tg.expert_matmul %[[XB]], %arg2, %[[IDS]] {transpose_w} : (tensor<6x2xf32>, tensor<4x12x2xf32>, tensor<6xi64>) -> tensor<6x12xf32>
// CHECK-NEXT: %[[D:.*]] = tg.binary mul %[[XBA]], %[[S]]
// CHECK-NEXT: %[[H2:.*]] = tg.binary add %[[H]], %[[D]]
// CHECK-NEXT: tg.slice %[[H2]] [0, 0]
// CHECK: %[[ACT:.*]] = tg.gated_act silu
// CHECK-NEXT: %[[Y:.*]] = tg.expert_matmul %[[ACT]], %arg4, %[[IDS]] {transpose_w}
// CHECK-NEXT: %[[AB:.*]] = tg.expert_matmul %[[ACT]], %arg6, %[[IDS]] {transpose_w}
// CHECK-NEXT: %[[ABA:.*]] = tg.expert_matmul %[[AB]], %arg5, %[[IDS]] {transpose_w}
// CHECK-NEXT: %[[D2:.*]] = tg.binary mul %[[ABA]], %[[S]]
// CHECK-NEXT: %[[Y2:.*]] = tg.binary add %[[Y]], %[[D2]]
// CHECK-NEXT: return %[[Y2]]

// DOWN: %arg0: tensor<4x8xf32> {tg.param = "model.layers.0.mlp.gate.weight"}, %arg1: tensor<8x2xf32> {tg.lora_base_transposed, tg.lora_factor = "A", tg.lora_of = "model.layers.0.mlp.gate.weight", tg.lora_parameter, tg.param = "model.layers.0.mlp.gate.lora_A.weight"}, %arg2: tensor<2x4xf32> {{{.*}}tg.lora_parameter, tg.param = "model.layers.0.mlp.gate.lora_B.weight"}
// DOWN-NOT: tg.lora_of = "val_1"
// DOWN: %arg5: tensor<4x8x2xf32> {tg.lora_factor = "A", tg.lora_of = "val_2", tg.lora_parameter, tg.param = "model.layers.0.mlp.experts.lora_A.weight"

// TRAIN: %arg0: tensor<4x8xf32> {tg.param = "model.layers.0.mlp.gate.weight"}, %arg1: tensor<4x12x8xf32> {tg.param = "val_1", tg.torch_name = "model.layers.0.mlp.experts.gate_up_proj"}, %arg2: tensor<4x12x2xf32> {{{.*}}tg.trainable}
func.func @main(%arg0: tensor<4x8xf32> {tg.param = "model.layers.0.mlp.gate.weight"},
                %arg1: tensor<4x12x8xf32> {tg.param = "val_1", tg.torch_name = "model.layers.0.mlp.experts.gate_up_proj"},
                %arg2: tensor<4x8x6xf32> {tg.param = "val_2", tg.torch_name = "model.layers.0.mlp.experts.down_proj"},
                %arg3: tensor<3x8xf32>) -> tensor<6x8xf32> {
  %0 = tg.matmul %arg3, %arg0 {transpose_b} : (tensor<3x8xf32>, tensor<4x8xf32>) -> tensor<3x4xf32>
  %1 = tg.softmax %0 : tensor<3x4xf32>
  %values, %indices = tg.top_k %1 {k = 2 : i64} : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  %2 = tg.reshape %indices : (tensor<3x2xi64>) -> tensor<6xi64>
  %3 = tg.reshape %arg3 : (tensor<3x8xf32>) -> tensor<3x1x8xf32>
  %4 = tg.broadcast %3 : (tensor<3x1x8xf32>) -> tensor<3x2x8xf32>
  %5 = tg.reshape %4 : (tensor<3x2x8xf32>) -> tensor<6x8xf32>
  %6 = tg.expert_matmul %5, %arg1, %2 {transpose_w} : (tensor<6x8xf32>, tensor<4x12x8xf32>, tensor<6xi64>) -> tensor<6x12xf32>
  %7 = tg.slice %6 [0, 0] step [1, 1] : (tensor<6x12xf32>) -> tensor<6x6xf32>
  %8 = tg.slice %6 [0, 6] step [1, 1] : (tensor<6x12xf32>) -> tensor<6x6xf32>
  %9 = tg.gated_act silu %7, %8 : tensor<6x6xf32>
  %10 = tg.expert_matmul %9, %arg2, %2 {transpose_w} : (tensor<6x6xf32>, tensor<4x8x6xf32>, tensor<6xi64>) -> tensor<6x8xf32>
  return %10 : tensor<6x8xf32>
}

// -----

// Experts stored [E, in, out] (GPT-OSS) are read untransposed: (x·A_e)·B_e.
// Without PyTorch names the initializer names are the stems. TopK before
// the softmax still marks the router.
// CHECK: // {{-----}}
// CHECK: func.func @main(
// CHECK-SAME: %arg1: tensor<4x8x12xf32> {tg.param = "w1"}, %arg2: tensor<4x8x2xf32> {tg.lora_factor = "A", tg.lora_of = "w1", tg.lora_parameter, tg.param = "w1.lora_A.weight"}, %arg3: tensor<4x2x12xf32> {tg.lora_factor = "B", tg.lora_of = "w1", tg.lora_parameter, tg.param = "w1.lora_B.weight"}
// CHECK-SAME: %arg5: tensor<4x6x2xf32> {{{.*}}tg.lora_of = "w2"
// CHECK: %[[H:.*]] = tg.expert_matmul %[[X:.*]], %arg1, %[[IDS:.*]] : (tensor<6x8xf32>, tensor<4x8x12xf32>, tensor<6xi64>) -> tensor<6x12xf32>
// CHECK-NEXT: %[[XA:.*]] = tg.expert_matmul %[[X]], %arg2, %[[IDS]] : (tensor<6x8xf32>, tensor<4x8x2xf32>, tensor<6xi64>) -> tensor<6x2xf32>
// CHECK-NEXT: %[[XAB:.*]] = tg.expert_matmul %[[XA]], %arg3, %[[IDS]] : (tensor<6x2xf32>, tensor<4x2x12xf32>, tensor<6xi64>) -> tensor<6x12xf32>
// DOWN: // {{-----}}
// DOWN: func.func @main(
// DOWN-SAME: %arg1: tensor<8x2xf32> {tg.lora_factor = "A", tg.lora_of = "router", tg.lora_parameter, tg.param = "router.lora_A.weight"}
// DOWN-NOT: tg.lora_of = "w1"
// DOWN-SAME: tg.lora_of = "w2"
func.func @main(%arg0: tensor<8x4xf32> {tg.param = "router"},
                %arg1: tensor<4x8x12xf32> {tg.param = "w1"},
                %arg2: tensor<4x6x8xf32> {tg.param = "w2"},
                %arg3: tensor<3x8xf32>) -> tensor<6x8xf32> {
  %0 = tg.matmul %arg3, %arg0 : (tensor<3x8xf32>, tensor<8x4xf32>) -> tensor<3x4xf32>
  %values, %indices = tg.top_k %0 {k = 2 : i64} : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  %2 = tg.reshape %indices : (tensor<3x2xi64>) -> tensor<6xi64>
  %3 = tg.reshape %arg3 : (tensor<3x8xf32>) -> tensor<3x1x8xf32>
  %4 = tg.broadcast %3 : (tensor<3x1x8xf32>) -> tensor<3x2x8xf32>
  %5 = tg.reshape %4 : (tensor<3x2x8xf32>) -> tensor<6x8xf32>
  %6 = tg.expert_matmul %5, %arg1, %2 : (tensor<6x8xf32>, tensor<4x8x12xf32>, tensor<6xi64>) -> tensor<6x12xf32>
  %7 = tg.slice %6 [0, 0] step [1, 1] : (tensor<6x12xf32>) -> tensor<6x6xf32>
  %8 = tg.slice %6 [0, 6] step [1, 1] : (tensor<6x12xf32>) -> tensor<6x6xf32>
  %9 = tg.gated_act silu %7, %8 : tensor<6x6xf32>
  %10 = tg.expert_matmul %9, %arg2, %2 : (tensor<6x6xf32>, tensor<4x6x8xf32>, tensor<6xi64>) -> tensor<6x8xf32>
  return %10 : tensor<6x8xf32>
}
