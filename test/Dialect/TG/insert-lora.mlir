// RUN: rondo-opt %s --tg-insert-lora="rank=2 alpha=4" | FileCheck %s
// RUN: rondo-opt %s --tg-insert-lora="rank=2 alpha=4 targets=q+v" | FileCheck %s --check-prefix=ROLES
// RUN: rondo-opt %s --tg-insert-lora="rank=2 alpha=4 targets=lm_head" | FileCheck %s --check-prefix=HEAD
// RUN: rondo-opt %s --tg-insert-lora="rank=2 alpha=4 targets=o" --tg-select-trainable | FileCheck %s --check-prefix=TRAIN
// RUN: rondo-opt %s --tg-insert-lora="rank=2 alpha=4 targets=up+attn" \
// RUN:   --tg-select-trainable=freeze=v_proj | FileCheck %s --check-prefix=FREEZE
// RUN: not rondo-opt %s --tg-insert-lora="dropout=0.1" 2>&1 | FileCheck %s --check-prefix=DROPOUT
// RUN: not rondo-opt %s --tg-insert-lora="targets=(" 2>&1 | FileCheck %s --check-prefix=REGEX
// RUN: not rondo-opt %s --tg-insert-lora="targets=nothing" 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not rondo-opt %s --tg-insert-lora="rank=0" 2>&1 | FileCheck %s --check-prefix=RANK

// tg-insert-lora on a one-layer decoder: every linear with a recognised role
// (q, k, v, o from the attention, gate, up, down from the gated MLP) gets
// A [in, r] and B [r, out] right after its weight, named after the PyTorch
// module, and y = x·W + (alpha/r)·((x·A)·B). The LM head and the embedding
// have no role.

// CHECK: module attributes {tg.lora = #tg.lora<rank = 2, alpha = 4.000000e+00 : f64, dropout = 0.000000e+00 : f64, targets = "all-linear">}
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg0: tensor<16x8xf32> {tg.param = "model.embed_tokens.weight"},
// CHECK-SAME: %arg1: tensor<8x8xf32> {tg.param = "val_1", tg.torch_name = "model.layers.0.self_attn.q_proj.weight"},
// CHECK-SAME: %arg2: tensor<8x2xf32> {tg.lora_factor = "A", tg.lora_of = "val_1", tg.param = "model.layers.0.self_attn.q_proj.lora_A.weight", tg.torch_name = "model.layers.0.self_attn.q_proj.lora_A.weight"},
// CHECK-SAME: %arg3: tensor<2x8xf32> {tg.lora_factor = "B", tg.lora_of = "val_1", tg.param = "model.layers.0.self_attn.q_proj.lora_B.weight", tg.torch_name = "model.layers.0.self_attn.q_proj.lora_B.weight"},
// CHECK-SAME: %arg4: tensor<8x8xf32> {tg.param = "val_2"
// CHECK-SAME: tg.lora_of = "val_2", tg.param = "model.layers.0.self_attn.k_proj.lora_A.weight"
// CHECK-SAME: tg.lora_of = "val_3", tg.param = "model.layers.0.self_attn.v_proj.lora_A.weight"
// CHECK-SAME: tg.lora_of = "val_4", tg.param = "model.layers.0.self_attn.o_proj.lora_A.weight"
// CHECK-SAME: tg.lora_of = "val_5", tg.param = "model.layers.0.mlp.gate_proj.lora_A.weight"
// CHECK-SAME: tg.lora_of = "val_6", tg.param = "model.layers.0.mlp.up_proj.lora_A.weight"
// CHECK-SAME: %arg20: tensor<12x2xf32> {tg.lora_factor = "A", tg.lora_of = "val_7", tg.param = "model.layers.0.mlp.down_proj.lora_A.weight"
// CHECK-SAME: %arg21: tensor<2x8xf32> {tg.lora_factor = "B", tg.lora_of = "val_7"
// CHECK-SAME: %arg22: tensor<16x8xf32> {tg.param = "val_8", tg.torch_name = "lm_head.weight"},
// CHECK-SAME: %arg23: tensor<1x4xi64> {tg.input = "input_ids"}
// CHECK: %[[S:.*]] = tg.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[X:.*]] = tg.gather %arg0[%arg23]
// CHECK-NEXT: %[[Y:.*]] = tg.matmul %[[X]], %arg1 : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
// CHECK-NEXT: %[[XA:.*]] = tg.matmul %[[X]], %arg2 : (tensor<1x4x8xf32>, tensor<8x2xf32>) -> tensor<1x4x2xf32>
// CHECK-NEXT: %[[XAB:.*]] = tg.matmul %[[XA]], %arg3 : (tensor<1x4x2xf32>, tensor<2x8xf32>) -> tensor<1x4x8xf32>
// CHECK-NEXT: %[[D:.*]] = tg.binary mul %[[XAB]], %[[S]]
// CHECK-NEXT: %[[Q:.*]] = tg.binary add %[[Y]], %[[D]]
// CHECK: tg.reshape %[[Q]]
// CHECK: %[[M:.*]] = tg.gated_act silu
// CHECK-NEXT: %[[DOWN:.*]] = tg.matmul %[[M]], %arg19
// CHECK-NEXT: tg.matmul %[[M]], %arg20
// The head is left alone.
// CHECK: %[[H:.*]] = tg.matmul %{{.*}}, %arg22 {transpose_b}
// CHECK-NEXT: return %[[H]]

// ROLES: tg.lora_of = "val_1"
// ROLES-NOT: tg.lora_of = "val_2"
// ROLES: tg.lora_of = "val_3"
// ROLES-NOT: tg.lora_of = "val_{{[4-8]}}"
// ROLES-LABEL: tg.gather

// A regular expression names the head explicitly. It is stored [out, in]
// (read through transpose_b), which the adapters record; A and B are still
// [in, r] and [r, out] of the product.
// HEAD-NOT: tg.lora_of = "val_{{[1-7]}}"
// HEAD: %arg9: tensor<8x2xf32> {tg.lora_base_transposed, tg.lora_factor = "A", tg.lora_of = "val_8", tg.param = "lm_head.lora_A.weight", tg.torch_name = "lm_head.lora_A.weight"}, %arg10: tensor<2x16xf32> {tg.lora_base_transposed, tg.lora_factor = "B", tg.lora_of = "val_8", tg.param = "lm_head.lora_B.weight", tg.torch_name = "lm_head.lora_B.weight"}
// HEAD: %[[Y:.*]] = tg.matmul %[[H:.*]], %arg8 {transpose_b}
// HEAD-NEXT: %[[XA:.*]] = tg.matmul %[[H]], %arg9 : (tensor<1x4x8xf32>, tensor<8x2xf32>) -> tensor<1x4x2xf32>
// HEAD-NEXT: %[[XAB:.*]] = tg.matmul %[[XA]], %arg10 : (tensor<1x4x2xf32>, tensor<2x16xf32>) -> tensor<1x4x16xf32>
// HEAD-NEXT: %[[D:.*]] = tg.binary mul %[[XAB]]
// HEAD-NEXT: %[[L:.*]] = tg.binary add %[[Y]], %[[D]]
// HEAD-NEXT: return %[[L]]

// With adapters, only adapters train: every base weight, the norms and the
// embedding are frozen.
// TRAIN: %arg4: tensor<8x8xf32> {tg.param = "val_4", tg.torch_name = "model.layers.0.self_attn.o_proj.weight"}, %arg5: tensor<8x2xf32> {tg.lora_factor = "A", tg.lora_of = "val_4", tg.param = "model.layers.0.self_attn.o_proj.lora_A.weight", tg.torch_name = "model.layers.0.self_attn.o_proj.lora_A.weight", tg.trainable}, %arg6: tensor<2x8xf32> {tg.lora_factor = "B", tg.lora_of = "val_4", tg.param = "model.layers.0.self_attn.o_proj.lora_B.weight", tg.torch_name = "model.layers.0.self_attn.o_proj.lora_B.weight", tg.trainable}, %arg7
// TRAIN-NOT: tg.trainable
// TRAIN-LABEL: tg.gather

// --freeze chooses among the adapters.
// FREEZE: tg.lora_of = "val_1", tg.param = "model.layers.0.self_attn.q_proj.lora_A.weight", tg.torch_name = "model.layers.0.self_attn.q_proj.lora_A.weight", tg.trainable}
// FREEZE: tg.lora_of = "val_3", tg.param = "model.layers.0.self_attn.v_proj.lora_A.weight", tg.torch_name = "model.layers.0.self_attn.v_proj.lora_A.weight"},
// FREEZE: tg.lora_of = "val_3", tg.param = "model.layers.0.self_attn.v_proj.lora_B.weight", tg.torch_name = "model.layers.0.self_attn.v_proj.lora_B.weight"},
// FREEZE: tg.lora_of = "val_4", tg.param = "model.layers.0.self_attn.o_proj.lora_A.weight", tg.torch_name = "model.layers.0.self_attn.o_proj.lora_A.weight", tg.trainable}
// FREEZE: tg.lora_of = "val_6", tg.param = "model.layers.0.mlp.up_proj.lora_B.weight", tg.torch_name = "model.layers.0.mlp.up_proj.lora_B.weight", tg.trainable}
// FREEZE-NOT: tg.lora_of
// FREEZE-LABEL: tg.gather

// DROPOUT: error: --lora: dropout=1.000000e-01: LoRA dropout is not supported (the compiled step draws no random numbers); use dropout=0
// REGEX: error: --lora: targets: invalid regular expression '(': parentheses not balanced
// NOMATCH: error: --lora: targets=nothing matches no linear weight ({{.*}}); roles found in this graph: q+k+v+o+gate+up+down
// RANK: error: --lora: rank=0 must be positive

func.func @main(%emb: tensor<16x8xf32> {tg.param = "model.embed_tokens.weight"},
                %wq: tensor<8x8xf32> {tg.param = "val_1", tg.torch_name = "model.layers.0.self_attn.q_proj.weight"},
                %wk: tensor<8x8xf32> {tg.param = "val_2", tg.torch_name = "model.layers.0.self_attn.k_proj.weight"},
                %wv: tensor<8x8xf32> {tg.param = "val_3", tg.torch_name = "model.layers.0.self_attn.v_proj.weight"},
                %wo: tensor<8x8xf32> {tg.param = "val_4", tg.torch_name = "model.layers.0.self_attn.o_proj.weight"},
                %wg: tensor<8x12xf32> {tg.param = "val_5", tg.torch_name = "model.layers.0.mlp.gate_proj.weight"},
                %wu: tensor<8x12xf32> {tg.param = "val_6", tg.torch_name = "model.layers.0.mlp.up_proj.weight"},
                %wd: tensor<12x8xf32> {tg.param = "val_7", tg.torch_name = "model.layers.0.mlp.down_proj.weight"},
                %head: tensor<16x8xf32> {tg.param = "val_8", tg.torch_name = "lm_head.weight"},
                %ids: tensor<1x4xi64> {tg.input = "input_ids"}) -> (tensor<1x4x16xf32> {tg.result = "logits"}) {
  %x = tg.gather %emb[%ids] : (tensor<16x8xf32>, tensor<1x4xi64>) -> tensor<1x4x8xf32>
  %q = tg.matmul %x, %wq : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %k = tg.matmul %x, %wk : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %v = tg.matmul %x, %wv : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %q4 = tg.reshape %q : (tensor<1x4x8xf32>) -> tensor<1x4x1x8xf32>
  %k4 = tg.reshape %k : (tensor<1x4x8xf32>) -> tensor<1x4x1x8xf32>
  %v4 = tg.reshape %v : (tensor<1x4x8xf32>) -> tensor<1x4x1x8xf32>
  %qt = tg.transpose %q4 [0, 2, 1, 3] : (tensor<1x4x1x8xf32>) -> tensor<1x1x4x8xf32>
  %kt = tg.transpose %k4 [0, 2, 1, 3] : (tensor<1x4x1x8xf32>) -> tensor<1x1x4x8xf32>
  %vt = tg.transpose %v4 [0, 2, 1, 3] : (tensor<1x4x1x8xf32>) -> tensor<1x1x4x8xf32>
  %o, %lse = tg.attention %qt, %kt, %vt {causal, scale = 0.35 : f32} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4xf32>)
  %ot = tg.transpose %o [0, 2, 1, 3] : (tensor<1x1x4x8xf32>) -> tensor<1x4x1x8xf32>
  %o3 = tg.reshape %ot : (tensor<1x4x1x8xf32>) -> tensor<1x4x8xf32>
  %a = tg.matmul %o3, %wo : (tensor<1x4x8xf32>, tensor<8x8xf32>) -> tensor<1x4x8xf32>
  %h = tg.binary add %x, %a : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %g = tg.matmul %h, %wg : (tensor<1x4x8xf32>, tensor<8x12xf32>) -> tensor<1x4x12xf32>
  %u = tg.matmul %h, %wu : (tensor<1x4x8xf32>, tensor<8x12xf32>) -> tensor<1x4x12xf32>
  %m = tg.gated_act silu %g, %u : tensor<1x4x12xf32>
  %d = tg.matmul %m, %wd : (tensor<1x4x12xf32>, tensor<12x8xf32>) -> tensor<1x4x8xf32>
  %h2 = tg.binary add %h, %d : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %logits = tg.matmul %h2, %head {transpose_b} : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
  return %logits : tensor<1x4x16xf32>
}
