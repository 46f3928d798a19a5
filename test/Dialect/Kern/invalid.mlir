// RUN: rondo-opt %s --split-input-file --verify-diagnostics

func.func @unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{calls 'gelu', which is not a kernel of KernelList.def}}
  %0 = kern.call @gelu(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @missing_input(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{parameter 'b' of kernel 'binary' has no input}}
  %0 = kern.call @binary(%x) args {kind = "Add"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @extra_input(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{passes 2 inputs to 'softmax', which takes 1}}
  %0 = kern.call @softmax(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @int_for_float(%x: tensor<4xi64>) -> tensor<4xf32> {
  // expected-error @+1 {{parameter 'x' of kernel 'softmax' needs an f32 tensor}}
  %0 = kern.call @softmax(%x) : (tensor<4xi64>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @missing_arg(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{parameter 'kind' of kernel 'unary' needs an `args` entry}}
  %0 = kern.call @unary(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @bad_enumerator(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{parameter 'kind' of kernel 'unary' has an `args` entry of the wrong kind}}
  %0 = kern.call @unary(%x) args {kind = "Swish"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unknown_arg(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{has an `args` entry 'alpha' that no parameter of 'softmax' takes}}
  %0 = kern.call @softmax(%x) args {alpha = 1.0 : f32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @no_scale(%l: tensor<4x8xf32>, %y: tensor<4xi64>) -> tensor<4x8xf32> {
  // expected-error @+1 {{parameter 'gradScale' of kernel 'crossEntropyBackward' needs an `args` entry or a one-element f32 input}}
  %0 = kern.call @crossEntropyBackward(%l, %y) args {ignoreIndex = -100 : i64} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @loss_not_scalar(%l: tensor<4x8xf32>, %y: tensor<4xi64>) -> tensor<2xf32> {
  // expected-error @+1 {{parameter 'lossSum' of kernel 'crossEntropy' needs a one-element f32 result}}
  %0 = kern.call @crossEntropy(%l, %y) args {ignoreIndex = -100 : i64} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @too_many_results(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{has 2 results, 'softmax' produces 1}}
  %0:2 = kern.call @softmax(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %0#0 : tensor<4xf32>
}

// -----

func.func @skip_used(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{skips result 1, which does not exist or is used}}
  %0:2 = kern.call @rmsNormBackward(%x, %w, %x) args {eps = 1.0e-06 : f32} {skip = array<i64: 1>} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  return %0#1 : tensor<8xf32>
}

// -----

func.func @skip_int_output(%x: tensor<4xf32>) -> () {
  // expected-error @+1 {{parameter 'out' of kernel 'isNan' cannot be skipped}}
  %0 = kern.call @isNan(%x) {skip = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xi1>
  return
}

// -----

func.func @shared_init(%ids: tensor<3xi64>, %dy: tensor<3x2xf32>) -> (tensor<8x2xf32>, tensor<8x2xf32>) {
  %z = kern.call @fill() args {value = 0.0 : f32} : () -> tensor<8x2xf32>
  // expected-error @+1 {{init 0 has other uses}}
  %0 = kern.call @gatherRowsBackward(%ids, %dy) inits(%z) : (tensor<3xi64>, tensor<3x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>
  return %0, %z : tensor<8x2xf32>, tensor<8x2xf32>
}
