// RUN: rondo-opt %s --tg-fuse-attention --split-input-file --verify-diagnostics

// An attention-sinks softmax (softmax over the scores and a one-wide sink
// column) that does not match the exporter's structure is an error naming
// what differs, at the softmax: fusing nothing would materialise the
// [T, S + 1] scores.

func.func @not_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %sinks: tensor<1x2x1x1xf32>) -> tensor<1x2x4x8xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %col = tg.broadcast %sinks : (tensor<1x2x1x1xf32>) -> tensor<1x2x4x1xf32>
  %cat = tg.concat %s, %col {axis = 3 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x5xf32>
  // expected-error @+1 {{attention sinks (softmax over the scores and a sink column) not recognised: the scores before the sink column must be masked by the causal mask (scores + tg.causal_mask)}}
  %p = tg.softmax %cat : tensor<1x2x4x5xf32>
  %pk = tg.slice %p [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<1x2x4x5xf32>) -> tensor<1x2x4x4xf32>
  %o = tg.matmul %pk, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

func.func @wrong_slice(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x5x8xf32>, %sinks: tensor<1x2x1x1xf32>) -> tensor<1x2x4x8xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = tg.causal_mask : tensor<1x1x4x4xf32>
  %sm = tg.binary add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %col = tg.broadcast %sinks : (tensor<1x2x1x1xf32>) -> tensor<1x2x4x1xf32>
  %cat = tg.concat %sm, %col {axis = 3 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x5xf32>
  // expected-error @+1 {{the slice after the softmax must drop exactly the sink column}}
  %p = tg.softmax %cat : tensor<1x2x4x5xf32>
  %pk = tg.slice %p [0, 0, 0, 1] step [1, 1, 1, 1] : (tensor<1x2x4x5xf32>) -> tensor<1x2x4x4xf32>
  %o = tg.matmul %pk, %k : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

func.func @sink_per_row(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %sinks: tensor<1x1x4x1xf32>) -> tensor<1x2x4x8xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = tg.causal_mask : tensor<1x1x4x4xf32>
  %sm = tg.binary add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %col = tg.broadcast %sinks : (tensor<1x1x4x1xf32>) -> tensor<1x2x4x1xf32>
  %cat = tg.concat %sm, %col {axis = 3 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x5xf32>
  // expected-error @+1 {{the sink column must be one logit per head ([1, H, 1, 1]) broadcast over batch and query rows}}
  %p = tg.softmax %cat : tensor<1x2x4x5xf32>
  %pk = tg.slice %p [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<1x2x4x5xf32>) -> tensor<1x2x4x4xf32>
  %o = tg.matmul %pk, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// The sink structure matches, but the softmax is not multiplied by v.
func.func @no_value_product(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %sinks: tensor<1x2x1x1xf32>) -> tensor<1x2x4x4xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = tg.causal_mask : tensor<1x1x4x4xf32>
  %sm = tg.binary add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %col = tg.broadcast %sinks : (tensor<1x2x1x1xf32>) -> tensor<1x2x4x1xf32>
  %cat = tg.concat %sm, %col {axis = 3 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x5xf32>
  // expected-error @+1 {{the softmax must be sliced back to the keys and multiplied by v}}
  %p = tg.softmax %cat : tensor<1x2x4x5xf32>
  %pk = tg.slice %p [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<1x2x4x5xf32>) -> tensor<1x2x4x4xf32>
  return %pk : tensor<1x2x4x4xf32>
}

// -----

// The softmax of the scores and the sink column returned as it is.
func.func @returned(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %sinks: tensor<1x2x1x1xf32>) -> tensor<1x2x4x5xf32> {
  %kT = tg.transpose %k [0, 1, 3, 2] : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %s = tg.matmul %q, %kT : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = tg.causal_mask : tensor<1x1x4x4xf32>
  %sm = tg.binary add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %col = tg.broadcast %sinks : (tensor<1x2x1x1xf32>) -> tensor<1x2x4x1xf32>
  %cat = tg.concat %sm, %col {axis = 3 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) -> tensor<1x2x4x5xf32>
  // expected-error @+1 {{the softmax must be sliced back to the keys and multiplied by v}}
  %p = tg.softmax %cat : tensor<1x2x4x5xf32>
  return %p : tensor<1x2x4x5xf32>
}
