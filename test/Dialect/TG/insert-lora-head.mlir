// RUN: rondo-opt %s --split-input-file --verify-diagnostics \
// RUN:   --tg-insert-lora="rank=2 alpha=2 targets=lm_head" | FileCheck %s

// The fused head never materialises its logits, so its adapter is merged
// into the weight it reads: W + (alpha/r)·(A·B), transposed for a weight
// stored [vocab, hidden] (transpose_w). A is still [in, r], B [r, out].
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg0: tensor<16x8xf32> {tg.param = "lm_head.weight"}, %arg1: tensor<8x2xf32> {tg.lora_base_transposed, tg.lora_factor = "A", tg.lora_of = "lm_head.weight", tg.param = "lm_head.lora_A.weight"}, %arg2: tensor<2x16xf32> {tg.lora_base_transposed, tg.lora_factor = "B", tg.lora_of = "lm_head.weight", tg.param = "lm_head.lora_B.weight"},
// CHECK: %[[S:.*]] = tg.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[BA:.*]] = tg.matmul %arg2, %arg1 {transpose_a, transpose_b} : (tensor<2x16xf32>, tensor<8x2xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[D:.*]] = tg.binary mul %[[BA]], %[[S]]
// CHECK-NEXT: %[[W:.*]] = tg.binary add %arg0, %[[D]]
// CHECK-NEXT: tg.linear_cross_entropy %arg3, %[[W]], %arg4 {chunk_rows = 4 : i64, ignore_index = -100 : i64, transpose_w}
func.func @main(%w: tensor<16x8xf32> {tg.param = "lm_head.weight"},
                %h: tensor<6x8xf32> {tg.input = "h"},
                %labels: tensor<6xi64> {tg.labels}) -> (tensor<f32> {tg.result = "loss"}) {
  %l = tg.linear_cross_entropy %h, %w, %labels {chunk_rows = 4 : i64, ignore_index = -100 : i64, transpose_w} : (tensor<6x8xf32>, tensor<16x8xf32>, tensor<6xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Stored [hidden, vocab]: W + (alpha/r)·A·B.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg1: tensor<8x2xf32> {tg.lora_factor = "A", tg.lora_of = "val_9", tg.param = "lm_head.lora_A.weight", tg.torch_name = "lm_head.lora_A.weight"}
// CHECK: %[[AB:.*]] = tg.matmul %arg1, %arg2 : (tensor<8x2xf32>, tensor<2x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %[[D:.*]] = tg.binary mul %[[AB]]
// CHECK-NEXT: %[[W:.*]] = tg.binary add %arg0, %[[D]]
// CHECK-NEXT: tg.linear_cross_entropy %arg3, %[[W]], %arg4 {chunk_rows = 4 : i64, ignore_index = -100 : i64}
func.func @main(%w: tensor<8x16xf32> {tg.param = "val_9", tg.torch_name = "lm_head.weight"},
                %h: tensor<6x8xf32> {tg.input = "h"},
                %labels: tensor<6xi64> {tg.labels}) -> (tensor<f32> {tg.result = "loss"}) {
  %l = tg.linear_cross_entropy %h, %w, %labels {chunk_rows = 4 : i64, ignore_index = -100 : i64} : (tensor<6x8xf32>, tensor<8x16xf32>, tensor<6xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A tied embedding is read by the gather too: an adapter on the head alone
// is no merged weight, so it is refused.
// expected-error @+1 {{--lora: targets match 'lm_head.weight', which is also read by 'tg.gather', not only as a linear weight (a tied embedding?); LoRA adapts linear weights only: narrow targets}}
func.func @main(%w: tensor<16x8xf32> {tg.param = "lm_head.weight"},
                %ids: tensor<6xi64> {tg.input = "input_ids"},
                %labels: tensor<6xi64> {tg.labels}) -> (tensor<f32> {tg.result = "loss"}) {
  %h = tg.gather %w[%ids] : (tensor<16x8xf32>, tensor<6xi64>) -> tensor<6x8xf32>
  %l = tg.linear_cross_entropy %h, %w, %labels {chunk_rows = 4 : i64, ignore_index = -100 : i64, transpose_w} : (tensor<6x8xf32>, tensor<16x8xf32>, tensor<6xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
