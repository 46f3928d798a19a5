// RUN: rondo-opt %s --tg-select-trainable | FileCheck %s --check-prefix=DEFAULT
// RUN: rondo-opt %s --tg-select-trainable=freeze=norm | FileCheck %s --check-prefix=FREEZE
// RUN: rondo-opt %s --tg-select-trainable=trainable=q_proj | FileCheck %s --check-prefix=ONLY

// Float parameters of rank >= 1 train by default; --freeze and --trainable
// match the ONNX name or the PyTorch name.
// DEFAULT: %arg0: tensor<8x8xf32> {tg.param = "val_1", tg.torch_name = "model.q_proj.weight", tg.trainable}
// DEFAULT: %arg1: tensor<8xf32> {tg.param = "model.norm.weight", tg.trainable}
// DEFAULT: %arg2: tensor<2x3xi64> {tg.input = "input_ids"}
// FREEZE: %arg0: tensor<8x8xf32> {tg.param = "val_1", tg.torch_name = "model.q_proj.weight", tg.trainable}
// FREEZE: %arg1: tensor<8xf32> {tg.param = "model.norm.weight"}
// ONLY: %arg0: tensor<8x8xf32> {tg.param = "val_1", tg.torch_name = "model.q_proj.weight", tg.trainable}
// ONLY: %arg1: tensor<8xf32> {tg.param = "model.norm.weight"}
func.func @main(%w: tensor<8x8xf32> {tg.param = "val_1", tg.torch_name = "model.q_proj.weight"},
                %n: tensor<8xf32> {tg.param = "model.norm.weight"},
                %ids: tensor<2x3xi64> {tg.input = "input_ids"}) {
  return
}
