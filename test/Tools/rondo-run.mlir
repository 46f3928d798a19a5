// rondo-run executes @main with the CPU kernels, one kernel call per op, the
// same mapping as the trainer emitter. Each result below was worked out by
// hand; both the imported IR as given and after the tg pipeline must agree.
//
// RUN: %python -c "import numpy as np; np.save('%t.x.npy', np.array([[1, -2, 3], [-4, 5, -6]], np.float32)); np.save('%t.ids.npy', np.array([[2, 0, -1]], np.int64)); np.save('%t.table.npy', np.arange(8, dtype=np.float64).reshape(4, 2))"
// RUN: rondo-run %s --pipeline=none --input x=%t.x.npy --input ids=%t.ids.npy --input embed.weight=%t.table.npy | FileCheck %s
// RUN: rondo-run %s --input x=%t.x.npy --input ids=%t.ids.npy --input embed.weight=%t.table.npy | FileCheck %s
//
// --output-dir writes one .npy per result, named after tg.result:
// RUN: rm -rf %t.out
// RUN: rondo-run %s --input x=%t.x.npy --input ids=%t.ids.npy --input embed.weight=%t.table.npy --output-dir %t.out
// RUN: %python -c "import numpy as np; a = np.load('%t.out/bias_add.npy'); print(a.dtype, a.shape, a.tolist()); b = np.load('%t.out/ids_concat.npy'); print(b.dtype, b.tolist()); c = np.load('%t.out/nan_mask.npy'); print(c.dtype, c.tolist())" | FileCheck %s --check-prefix=NPY
// NPY: float32 (6,) [11.0, 18.0, 33.0, 6.0, 25.0, 24.0]
// NPY: int64 {{\[\[}}2, 0, -1], [2, 0, -1]]
// NPY: bool {{\[\[}}False, True, False], [True, False, True]]

func.func @main(%table: tensor<4x2xf32> {tg.param = "embed.weight"},
                %x: tensor<2x3xf32> {tg.input = "x"},
                %ids: tensor<1x3xi64> {tg.input = "ids"})
    -> (tensor<6xf32> {tg.result = "bias_add"},
        tensor<2x3xf32> {tg.result = "relu"},
        tensor<2xf32> {tg.result = "row_mean"},
        tensor<2x2xf32> {tg.result = "gram"},
        tensor<1x3x2xf32> {tg.result = "embedded"},
        tensor<2x3xf32> {tg.result = "masked_softmax"},
        tensor<2x3xi1> {tg.result = "nan_mask"},
        tensor<2x3xf32> {tg.result = "safe_log"},
        tensor<3x1xi64> {tg.result = "ids_t"},
        tensor<1x2xi64> {tg.result = "ids_tail"},
        tensor<2x3xi64> {tg.result = "ids_concat"},
        tensor<3xf32> {tg.result = "col_sum"}) {
  // Broadcast add of a constant row, then a reshape (an alias).
  %bias = tg.constant dense<[10.0, 20.0, 30.0]> : tensor<3xf32>
  %sum = tg.binary add %x, %bias : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %flat = tg.reshape %sum : (tensor<2x3xf32>) -> tensor<6xf32>
  %relu = tg.unary relu %x : tensor<2x3xf32>
  %mean = tg.reduce mean %x {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
  %gram = tg.matmul %x, %x {transpose_b} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2xf32>
  // Negative ids count from the end of the table.
  %emb = tg.gather %table[%ids] : (tensor<4x2xf32>, tensor<1x3xi64>) -> tensor<1x3x2xf32>
  // The mask's diagonal is bottom-right aligned: row 0 sees keys 0..1.
  %mask = tg.causal_mask : tensor<2x3xf32>
  %scores = tg.binary add %x, %mask : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %soft = tg.softmax %scores : tensor<2x3xf32>
  %log = tg.unary log %x : tensor<2x3xf32>
  %nan = tg.is_nan %log : (tensor<2x3xf32>) -> tensor<2x3xi1>
  %zero = tg.constant dense<0.0> : tensor<f32>
  %safe = tg.select %nan, %zero, %log : (tensor<2x3xi1>, tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // Integer layout ops have no kernels; the interpreter moves them itself.
  %idsT = tg.transpose %ids [1, 0] : (tensor<1x3xi64>) -> tensor<3x1xi64>
  %tail = tg.slice %ids [0, 1] step [1, 1] : (tensor<1x3xi64>) -> tensor<1x2xi64>
  %cat = tg.concat %ids, %ids {axis = 0 : i64} : (tensor<1x3xi64>, tensor<1x3xi64>) -> tensor<2x3xi64>
  %cols = tg.sum_to_shape %x : (tensor<2x3xf32>) -> tensor<3xf32>
  return %flat, %relu, %mean, %gram, %emb, %soft, %nan, %safe, %idsT, %tail, %cat, %cols
      : tensor<6xf32>, tensor<2x3xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<1x3x2xf32>,
        tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xf32>, tensor<3x1xi64>, tensor<1x2xi64>,
        tensor<2x3xi64>, tensor<3xf32>
}

// CHECK-LABEL: bias_add: f32[6]
// CHECK-NEXT:  [11, 18, 33, 6, 25, 24]
// CHECK-LABEL: relu: f32[2, 3]
// CHECK-NEXT:  {{\[\[}}1, 0, 3],
// CHECK-NEXT:  [0, 5, 0]]
// CHECK-LABEL: row_mean: f32[2]
// CHECK-NEXT:  [0.666667, -1.66667]
// CHECK-LABEL: gram: f32[2, 2]
// CHECK-NEXT:  {{\[\[}}14, -32],
// CHECK-NEXT:  [-32, 77]]
// CHECK-LABEL: embedded: f32[1, 3, 2]
// CHECK-NEXT:  {{\[\[\[}}4, 5],
// CHECK-NEXT:  [0, 1],
// CHECK-NEXT:  [6, 7]]]
// CHECK-LABEL: masked_softmax: f32[2, 3]
// CHECK-NEXT:  {{\[\[}}0.952574, 0.0474259, 0],
// CHECK-NEXT:  [0.000123393, 0.99986, 1.66994e-05]]
// CHECK-LABEL: nan_mask: i1[2, 3]
// CHECK-NEXT:  {{\[\[}}false, true, false],
// CHECK-NEXT:  [true, false, true]]
// CHECK-LABEL: safe_log: f32[2, 3]
// CHECK-NEXT:  {{\[\[}}0, 0, 1.09861],
// CHECK-NEXT:  [0, 1.60944, 0]]
// CHECK-LABEL: ids_t: i64[3, 1]
// CHECK-NEXT:  {{\[\[}}2],
// CHECK-NEXT:  [0],
// CHECK-NEXT:  [-1]]
// CHECK-LABEL: ids_tail: i64[1, 2]
// CHECK-NEXT:  {{\[\[}}0, -1]]
// CHECK-LABEL: ids_concat: i64[2, 3]
// CHECK-NEXT:  {{\[\[}}2, 0, -1],
// CHECK-NEXT:  [2, 0, -1]]
// CHECK-LABEL: col_sum: f32[3]
// CHECK-NEXT:  [-3, 3, -3]
