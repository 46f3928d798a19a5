// RUN: rondo-opt %s --split-input-file --verify-diagnostics

// Each op's verifier rejects malformed IR with a message naming the problem.

func.func @binary_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{operand shapes do not broadcast}}
  %0 = tg.binary add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{contraction sizes differ: 3 vs 4}}
  %0 = tg.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @matmul_rank(%a: tensor<3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @+1 {{operands must have rank >= 2}}
  %0 = tg.matmul %a, %b : (tensor<3xf32>, tensor<3x5xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @reduce_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduction axis 2 out of range for rank 2}}
  %0 = tg.reduce sum %a {axes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @reshape_count(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{element count changes}}
  %0 = tg.reshape %a : (tensor<2x3xf32>) -> tensor<7xf32>
  return
}

// -----

func.func @transpose_repeat(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{permutation repeats dimension 0}}
  %0 = tg.transpose %a [0, 0] : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @broadcast_bad(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{does not broadcast to}}
  %0 = tg.broadcast %a : (tensor<2x3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @sum_to_shape_bad(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{does not broadcast to operand}}
  %0 = tg.sum_to_shape %a : (tensor<2x3xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @slice_oob(%a: tensor<4xf32>) {
  // expected-error @+1 {{dimension 0 reads [2, 5] outside [0, 4)}}
  %0 = tg.slice %a [2] step [1] : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @slice_zero_step(%a: tensor<4xf32>) {
  // expected-error @+1 {{step of dimension 0 is zero}}
  %0 = tg.slice %a [0] step [0] : (tensor<4xf32>) -> tensor<1xf32>
  return
}

// -----

func.func @concat_mismatch(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // expected-error @+1 {{inputs differ in dimension 0}}
  %0 = tg.concat %a, %b {axis = 1} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  return
}

// -----

func.func @gather_rank(%t: tensor<4x2x2xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{table must be rank 2}}
  %0 = tg.gather %t[%i] : (tensor<4x2x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>
  return
}

// -----

func.func @rms_weight(%x: tensor<2x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{weight must be rank 1 of the last dimension}}
  %0 = tg.rms_norm %x, %w {eps = 1.0e-6 : f32} : (tensor<2x8xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_bias(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<2xf32>) {
  // expected-error @+1 {{bias must be rank 1 of the last dimension}}
  %0 = tg.layer_norm %x, %w, %b {eps = 1.0e-5 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<2xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @rotary_table(%x: tensor<1x2x4x8xf32>, %c: tensor<4x6xf32>) {
  // expected-error @+1 {{cos/sin tables must both be [T, D] = [4, 8]}}
  %0 = tg.rotary %x, %c, %c : tensor<1x2x4x8xf32>, tensor<4x6xf32>, tensor<4x6xf32>
  return
}

// -----

func.func @attention_heads(%q: tensor<1x3x4x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{query heads (3) must be a multiple of key/value heads (2)}}
  %o, %l = tg.attention %q, %k, %k {causal, scale = 1.0 : f32} : (tensor<1x3x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x3x4x8xf32>, tensor<1x3x4xf32>)
  return
}

// -----

func.func @attention_kv(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x5x8xf32>) {
  // expected-error @+1 {{k and v types differ}}
  %o, %l = tg.attention %q, %k, %v {scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x5x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @mask_rank() {
  // expected-error @+1 {{mask must have rank >= 2}}
  %0 = tg.causal_mask : tensor<4xf32>
  return
}

// -----

func.func @ce_shapes(%l: tensor<4x10xf32>, %y: tensor<3xi64>) {
  // expected-error @+1 {{expects logits [N, V] and labels [N]}}
  %0 = tg.cross_entropy %l, %y {ignore_index = -100} : (tensor<4x10xf32>, tensor<3xi64>) -> tensor<f32>
  return
}

// -----

func.func @lce_hidden(%h: tensor<4x8xf32>, %w: tensor<6x10xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{hidden size 8 does not match w}}
  %0 = tg.linear_cross_entropy %h, %w, %y {chunk_rows = 2, ignore_index = -100} : (tensor<4x8xf32>, tensor<6x10xf32>, tensor<4xi64>) -> tensor<f32>
  return
}

// -----

func.func @lce_chunk(%h: tensor<4x8xf32>, %w: tensor<8x10xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{chunk_rows must be positive}}
  %0 = tg.linear_cross_entropy %h, %w, %y {chunk_rows = 0, ignore_index = -100} : (tensor<4x8xf32>, tensor<8x10xf32>, tensor<4xi64>) -> tensor<f32>
  return
}

// -----

func.func @gated_act_kind(%a: tensor<4xf32>) {
  // expected-error @+1 {{gate activation must be silu, gelu_tanh, gelu_erf, sigmoid or relu}}
  %0 = tg.gated_act exp %a, %a : tensor<4xf32>
  return
}

// -----

func.func @rotary_table_kind() {
  // expected-error @+1 {{kind must be cos or sin, got exp}}
  %0 = tg.rotary_table exp freqs [1.0, 0.5] scale 1.0 : tensor<4x2xf32>
  return
}

// -----

func.func @rotary_table_dim() {
  // expected-error @+1 {{table must be [..., T, D] with D = 2 frequencies, got 'tensor<4x3xf32>'}}
  %0 = tg.rotary_table cos freqs [1.0, 0.5] scale 1.0 : tensor<4x3xf32>
  return
}

// -----

func.func @rotary_table_type() {
  // expected-error @+1 {{table must be f32, got 'tensor<4x2xbf16>'}}
  %0 = tg.rotary_table cos freqs [1.0, 0.5] scale 1.0 : tensor<4x2xbf16>
  return
}

// -----

func.func @clamp_bounds(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{needs min <= max, got [7.000000e+00, -7.000000e+00]}}
  %0 = tg.clamp %x {min = 7.0 : f32, max = -7.0 : f32} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @clamp_grad_nan(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{needs min <= max, got [nan, 1.000000e+00]}}
  %0 = tg.clamp_grad %x, %x {min = 0x7FC00000 : f32, max = 1.0 : f32} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The dialect verifies its discardable attributes (TGDialect.h): each key's
// type and where it sits; any other tg. key is an error.

// expected-error @+1 {{'tg.param' must be a non-empty string}}
func.func private @arg_param(tensor<4xf32> {tg.param = ""})

// -----

// expected-error @+1 {{'tg.trainable' must be a unit attribute}}
func.func private @arg_trainable(tensor<4xf32> {tg.trainable = true})

// -----

// expected-error @+1 {{'tg.external_f32' must be a unit attribute}}
func.func private @arg_external_f32(tensor<4xf32> {tg.external_f32 = 1 : i64})

// -----

// expected-error @+1 {{'tg.torch_name' must be a non-empty string}}
func.func private @arg_torch_name(tensor<4xf32> {tg.torch_name = 3 : i64})

// -----

// expected-error @+1 {{'tg.torch_aliases' must be an array of non-empty strings}}
func.func private @arg_torch_aliases(tensor<4xf32> {tg.torch_aliases = ["a", 1 : i64]})

// -----

// expected-error @+1 {{'tg.torch_transposed' must be a unit attribute}}
func.func private @arg_torch_transposed(tensor<4xf32> {tg.torch_transposed = "yes"})

// -----

// expected-error @+1 {{'tg.input' must be a non-empty string}}
func.func private @arg_input(tensor<4xf32> {tg.input})

// -----

// expected-error @+1 {{'tg.labels' must be a unit attribute}}
func.func private @arg_labels(tensor<4xf32> {tg.labels = "labels"})

// -----

// expected-error @+1 {{'tg.loss_scale' must be a unit attribute}}
func.func private @arg_loss_scale(tensor<4xf32> {tg.loss_scale = 1.0 : f32})

// -----

// expected-error @+1 {{'tg.lora_of' must be a non-empty string}}
func.func private @arg_lora_of(tensor<4xf32> {tg.lora_of = ""})

// -----

// expected-error @+1 {{'tg.lora_factor' must be "A" or "B"}}
func.func private @arg_lora_factor(tensor<4xf32> {tg.lora_factor = "C"})

// -----

// expected-error @+1 {{'tg.lora_base_transposed' must be a unit attribute}}
func.func private @arg_lora_base_transposed(tensor<4xf32> {tg.lora_base_transposed = 0 : i64})

// -----

// expected-error @+1 {{'tg.result' must be a non-empty string}}
func.func private @result_name() -> (tensor<f32> {tg.result = 1 : i64})

// -----

// expected-error @+1 {{'tg.grad_of' must be a non-empty string}}
func.func private @grad_of() -> (tensor<f32> {tg.grad_of})

// -----

// expected-error @+1 {{'tg.param' belongs on a function argument, not on a function result}}
func.func private @param_on_result() -> (tensor<f32> {tg.param = "w"})

// -----

// expected-error @+1 {{'tg.grad_of' belongs on a function result, not on a function argument}}
func.func private @grad_of_on_arg(tensor<f32> {tg.grad_of = "w"})

// -----

// expected-error @+1 {{unknown attribute 'tg.parameter'}}
func.func private @unknown_arg(tensor<f32> {tg.parameter = "w"})

// -----

// expected-error @+1 {{unknown attribute 'tg.results'}}
func.func private @unknown_result() -> (tensor<f32> {tg.results = "loss"})

// -----

// expected-error @+1 {{'tg.lora' must be a #tg.lora attribute}}
module attributes {tg.lora = {rank = 2 : i64, alpha = 4.0 : f64, dropout = 0.0 : f64, targets = "all-linear"}} {}

// -----

// expected-error @+1 {{LoRA rank must be positive, got 0}}
module attributes {tg.lora = #tg.lora<rank = 0, alpha = 4.0 : f64, dropout = 0.0 : f64, targets = "all-linear">} {}

// -----

// expected-error @+1 {{LoRA targets must not be empty}}
module attributes {tg.lora = #tg.lora<rank = 2, alpha = 4.0 : f64, dropout = 0.0 : f64, targets = "">} {}

// -----

// expected-error @+1 {{'tg.loss' must be "output" or "causal-lm"}}
module attributes {tg.loss = "mse"} {}

// -----

// expected-error @+1 {{'tg.source' must be a non-empty string}}
module attributes {tg.source = ["model.onnx"]} {}

// -----

// expected-error @+1 {{'tg.loss' belongs on the module, not on an operation}}
func.func private @loss_on_func() attributes {tg.loss = "output"}

// -----

// expected-error @+1 {{'tg.trainable' belongs on a function argument, not on the module}}
module attributes {tg.trainable} {}

// -----

// expected-error @+1 {{unknown attribute 'tg.frozen'}}
module attributes {tg.frozen} {}

// -----

func.func @window_not_causal(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{a window needs causal attention}}
  %o, %l = tg.attention %q, %q, %q {scale = 1.0 : f32, window = 2} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @window_negative(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{window must be non-negative, got -1}}
  %o, %l = tg.attention %q, %q, %q {causal, scale = 1.0 : f32, window = -1} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @top_k_too_many(%p: tensor<6x4xf32>) {
  // expected-error @+1 {{k = 5 must be in [1, 4] (the last dimension of 'tensor<6x4xf32>')}}
  %v, %i = tg.top_k %p {k = 5 : i64} : (tensor<6x4xf32>) -> (tensor<6x5xf32>, tensor<6x5xi64>)
}

// -----

func.func @sinks_not_per_head(%q: tensor<1x2x4x8xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{sinks must be [Hq] = [2], one per query head, got 'tensor<4xf32>'}}
  %o, %l = tg.attention %q, %q, %q sinks %s {causal, scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<4xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @top_k_indices_i32(%p: tensor<6x4xf32>) {
  // expected-error @+1 {{indices must be i64 of the values' shape, got 'tensor<6x2xi32>'}}
  %v, %i = tg.top_k %p {k = 2 : i64} : (tensor<6x4xf32>) -> (tensor<6x2xf32>, tensor<6x2xi32>)
}

// -----

func.func @sinks_rank(%q: tensor<1x2x4x8xf32>, %s: tensor<1x2x1x1xf32>) {
  // expected-error @+1 {{sinks must be [Hq] = [2], one per query head, got 'tensor<1x2x1x1xf32>'}}
  %o, %l = tg.attention %q, %q, %q sinks %s {causal, scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x1x1xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  return
}

// -----

func.func @expert_matmul_contraction(%x: tensor<12x8xf32>, %w: tensor<4x5x8xf32>, %ids: tensor<12xi64>) {
  // expected-error @+1 {{the rows of x have 8 elements but each expert's matrix contracts 5}}
  %y = tg.expert_matmul %x, %w, %ids : (tensor<12x8xf32>, tensor<4x5x8xf32>, tensor<12xi64>) -> tensor<12x8xf32>
  return
}

// -----

func.func @expert_matmul_ids(%x: tensor<12x8xf32>, %w: tensor<4x5x8xf32>, %ids: tensor<6xi64>) {
  // expected-error @+1 {{ids must have one entry per row of x}}
  %y = tg.expert_matmul %x, %w, %ids {transpose_w} : (tensor<12x8xf32>, tensor<4x5x8xf32>, tensor<6xi64>) -> tensor<12x5xf32>
  return
}

// -----

func.func @expert_matmul_wgrad_dy(%x: tensor<12x8xf32>, %dy: tensor<12x4xf32>, %ids: tensor<12xi64>) {
  // expected-error @+1 {{dy must be [12, 5], got 'tensor<12x4xf32>'}}
  %dw = tg.expert_matmul_wgrad %x, %dy, %ids {transpose_w} : (tensor<12x8xf32>, tensor<12x4xf32>, tensor<12xi64>) -> tensor<4x5x8xf32>
}

// -----

func.func @sinks_grad_without_dsinks(%q: tensor<1x2x4x8xf32>, %l: tensor<1x2x4xf32>, %s: tensor<2xf32>) {
  // expected-error @+1 {{has sinks but no dsinks result, or the reverse}}
  %dq, %dk, %dv = tg.attention_grad %q, %q, %q, %q, %l, %q sinks %s {causal, scale = 1.0 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>, tensor<2xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)
  return
}
