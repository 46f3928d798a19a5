// RUN: not rondo-opt %s --tg-insert-lora="rank=2 alpha=4" 2>&1 | FileCheck %s
// RUN: not rondo-opt %s --tg-insert-lora="rank=2 alpha=4 targets=q" 2>&1 | FileCheck %s --check-prefix=NOMATCH

// tg-insert-lora's errors on a mixture of experts. An expert weight also
// read by something other than the routed products cannot be adapted
// there alone: the error names the weight and the reader. Roles the graph
// lacks list the ones it has, experts and router included.
// CHECK: insert-lora-experts-errors.mlir:20:8: error: --lora: targets match the experts' weights 'w1', which this 'tg.reduce' also reads, not only the routed products (tg.expert_matmul); LoRA adapts those only: narrow targets
// NOMATCH: error: --lora: targets=q matches no linear weight ({{.*}}); roles found in this graph: gate+up+experts+router
func.func @main(%arg0: tensor<8x4xf32> {tg.param = "router"},
                %arg1: tensor<4x8x12xf32> {tg.param = "w1"},
                %arg3: tensor<3x8xf32>) -> (tensor<6x12xf32>, tensor<8x12xf32>) {
  %0 = tg.matmul %arg3, %arg0 : (tensor<3x8xf32>, tensor<8x4xf32>) -> tensor<3x4xf32>
  %values, %indices = tg.top_k %0 {k = 2 : i64} : (tensor<3x4xf32>) -> (tensor<3x2xf32>, tensor<3x2xi64>)
  %2 = tg.reshape %indices : (tensor<3x2xi64>) -> tensor<6xi64>
  %3 = tg.reshape %arg3 : (tensor<3x8xf32>) -> tensor<3x1x8xf32>
  %4 = tg.broadcast %3 : (tensor<3x1x8xf32>) -> tensor<3x2x8xf32>
  %5 = tg.reshape %4 : (tensor<3x2x8xf32>) -> tensor<6x8xf32>
  %6 = tg.expert_matmul %5, %arg1, %2 : (tensor<6x8xf32>, tensor<4x8x12xf32>, tensor<6xi64>) -> tensor<6x12xf32>
  %7 = tg.reduce sum %arg1 {axes = array<i64: 0>} : (tensor<4x8x12xf32>) -> tensor<8x12xf32>
  return %6, %7 : tensor<6x12xf32>, tensor<8x12xf32>
}
