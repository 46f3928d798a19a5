// RUN: rondo-opt %s --tg-fuse-rotary --canonicalize | FileCheck %s

// Checks that x*cos + rotate_half(x)*sin with constant [1,1,T,D] tables
// becomes tg.rotary with [T, D] tables.
// CHECK-LABEL: func.func @rotary
// CHECK-DAG: %[[C:.*]] = tg.constant dense<{{.*}}> : tensor<2x4xf32>
// CHECK-DAG: %[[S:.*]] = tg.constant dense<{{.*}}> : tensor<2x4xf32>
// CHECK: %[[R:.*]] = tg.rotary %arg0, %[[C]], %[[S]] : tensor<1x2x2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
// CHECK-NEXT: return %[[R]]
func.func @rotary(%x: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %cos = tg.constant dense<[[[[1.0, 1.0, 1.0, 1.0], [0.5, 0.9, 0.5, 0.9]]]]> : tensor<1x1x2x4xf32>
  %sin = tg.constant dense<[[[[0.0, 0.0, 0.0, 0.0], [0.8, 0.1, 0.8, 0.1]]]]> : tensor<1x1x2x4xf32>
  %a = tg.binary mul %x, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %lo = tg.slice %x [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %hi = tg.slice %x [0, 0, 0, 2] step [1, 1, 1, 1] : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %n = tg.unary neg %hi : tensor<1x2x2x2xf32>
  %rot = tg.concat %n, %lo {axis = -1} : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %b = tg.binary mul %rot, %sin : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = tg.binary add %a, %b : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %y : tensor<1x2x2x4xf32>
}

// Checks that halves swapped the wrong way are not rotary.
// CHECK-LABEL: func.func @wrong_halves
// CHECK-NOT: tg.rotary
func.func @wrong_halves(%x: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %cos = tg.constant dense<0.5> : tensor<1x1x2x4xf32>
  %a = tg.binary mul %x, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %lo = tg.slice %x [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %hi = tg.slice %x [0, 0, 0, 2] step [1, 1, 1, 1] : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %n = tg.unary neg %lo : tensor<1x2x2x2xf32>
  %rot = tg.concat %n, %hi {axis = 3} : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %b = tg.binary mul %rot, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = tg.binary add %a, %b : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %y : tensor<1x2x2x4xf32>
}

// Checks that computed tables (tg.rotary_table) are rebuilt as [T, D]
// tables like constants.
// CHECK-LABEL: func.func @computed_tables
// CHECK-DAG: %[[C:.*]] = tg.rotary_table cos freqs [1.000000e+00, 1.000000e-02, 1.000000e+00, 1.000000e-02] scale 1.000000e+00 : tensor<2x4xf32>
// CHECK-DAG: %[[S:.*]] = tg.rotary_table sin freqs [1.000000e+00, 1.000000e-02, 1.000000e+00, 1.000000e-02] scale 1.000000e+00 : tensor<2x4xf32>
// CHECK: tg.rotary %arg0, %[[C]], %[[S]] : tensor<1x2x2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
func.func @computed_tables(%x: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  %cos = tg.rotary_table cos freqs [1.0, 0.01, 1.0, 0.01] scale 1.0 : tensor<1x1x2x4xf32>
  %sin = tg.rotary_table sin freqs [1.0, 0.01, 1.0, 0.01] scale 1.0 : tensor<1x1x2x4xf32>
  %a = tg.binary mul %x, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %lo = tg.slice %x [0, 0, 0, 0] step [1, 1, 1, 1] : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %hi = tg.slice %x [0, 0, 0, 2] step [1, 1, 1, 1] : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x2xf32>
  %n = tg.unary neg %hi : tensor<1x2x2x2xf32>
  %rot = tg.concat %n, %lo {axis = -1} : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %b = tg.binary mul %rot, %sin : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = tg.binary add %a, %b : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %y : tensor<1x2x2x4xf32>
}
