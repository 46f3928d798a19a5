// RUN: rondo-opt %s --tg-attach-loss --split-input-file --verify-diagnostics | FileCheck %s

// Checks the Hugging Face causal-LM loss: logits[:, :-1] against
// labels[:, 1:], flattened, summed cross-entropy with ignore index -100; the
// function gains labels and loss-scale arguments.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[IDS:[^:]*]]: tensor<2x5xi64> {tg.input = "input_ids"}
// CHECK-SAME: %[[LABELS:[^:]*]]: tensor<2x5xi64> {tg.labels}
// CHECK-SAME: %{{[^:]*}}: tensor<f32> {tg.loss_scale}
// CHECK-SAME: -> (tensor<f32> {tg.result = "loss_sum"})
// CHECK: %[[LOGITS:.*]] = tg.matmul
// CHECK: %[[SL:.*]] = tg.slice %[[LOGITS]] [0, 0, 0] step [1, 1, 1] : (tensor<2x5x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[FL:.*]] = tg.reshape %[[SL]] : (tensor<2x4x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[ST:.*]] = tg.slice %[[LABELS]] [0, 1] step [1, 1] : (tensor<2x5xi64>) -> tensor<2x4xi64>
// CHECK: %[[FT:.*]] = tg.reshape %[[ST]] : (tensor<2x4xi64>) -> tensor<8xi64>
// CHECK: %[[L:.*]] = tg.cross_entropy %[[FL]], %[[FT]] {ignore_index = -100 : i64}
// CHECK: return %[[L]]
module {
  func.func @main(%emb: tensor<16x8xf32> {tg.param = "emb"}, %head: tensor<8x16xf32> {tg.param = "head"},
                  %ids: tensor<2x5xi64> {tg.input = "input_ids"}) -> (tensor<2x5x16xf32> {tg.result = "logits"}) {
    %h = tg.gather %emb[%ids] : (tensor<16x8xf32>, tensor<2x5xi64>) -> tensor<2x5x8xf32>
    %l = tg.matmul %h, %head : (tensor<2x5x8xf32>, tensor<8x16xf32>) -> tensor<2x5x16xf32>
    return %l : tensor<2x5x16xf32>
  }
}

// -----

// Checks that a model without [batch, seq, vocab] output is refused.
// expected-error @+1 {{causal-lm loss: the model has no [batch, seq, vocab] float output}}
func.func @main(%x: tensor<2x5xf32> {tg.param = "x"}, %ids: tensor<2x5xi64> {tg.input = "input_ids"}) -> tensor<2x5xf32> {
  return %x : tensor<2x5xf32>
}
