// RUN: rondo-opt %s --pass-pipeline='builtin.module(func.func(kern-bf16-storage))' --split-input-file --verify-diagnostics

// A weight held in bf16 alone has no fp32 form: a kernel other than a
// product reading it is an error naming the weight and the kernel (the plan
// chose bf16 storage from @main's uses, so this means a lowering changed
// how the weight is read).
// expected-error @+1 {{holds 'w' in bf16 alone (a frozen weight of a bf16 plan), but kernel 'rmsNorm' reads it in fp32}}
func.func @frozen_bf16_read_by_norm(%x: tensor<8x16xf32> {exec.role = "activation"}, %w: tensor<16xf32> {exec.role = "param_unbound", tg.param = "w"}, %wb: tensor<16xbf16> {exec.role = "param_bf16", tg.param = "w"}) -> tensor<8x16xf32> attributes {exec.stage} {
  %y = kern.call @rmsNorm(%x, %w) args {eps = 1.0e-06 : f32} : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
