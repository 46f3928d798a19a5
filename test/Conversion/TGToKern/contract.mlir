// RUN: rondo-opt %s --convert-tg-to-kern --split-input-file --verify-diagnostics --allow-unregistered-dialect

// The kernel-call contract: what no pattern lowers is an error at the op.
func.func @stage(%x: tensor<4xf32>) -> tensor<4xf32> attributes {exec.stage} {
  // expected-error @+1 {{no kernel implements 'test.mystery' (runtime/kernels/cpu/KernelList.def): the kernel-call layer (convert-tg-to-kern) cannot lower it}}
  %0 = "test.mystery"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Kernels store f32: a bf16 op has no kernel yet.
func.func @stage(%x: tensor<4xbf16>) -> tensor<4xbf16> attributes {exec.stage} {
  // expected-error @+1 {{parameter 'x' of kernel 'unary' needs an f32 tensor}}
  %0 = tg.unary exp %x : tensor<4xbf16>
  return %0 : tensor<4xbf16>
}
