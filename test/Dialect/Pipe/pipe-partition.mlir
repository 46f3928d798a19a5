// The training function of qwen3-tiny (4 layers: embedding, two decoder
// blocks, final norm + LM head + loss) at 4 rows x 8 tokens, planned on the
// host device.
// RUN: rondo-compile %models/qwen3-tiny.onnx --batch 4 --seq-len 8 --emit=train -o %t.train.mlir
// RUN: rondo-opt %t.train.mlir --pipe-partition="workers=1,2 device=host" --pipe-verify-plan | FileCheck %s
// RUN: rondo-opt %t.train.mlir --pipe-partition="workers=2 device=host strategy=greedy" --pipe-verify-plan | FileCheck %s --check-prefix=GREEDY
// RUN: rondo-opt %t.train.mlir --pipe-partition="workers=2 device=h100 microbatches=2" --pipe-verify-plan | FileCheck %s --check-prefix=FIXED
// RUN: rondo-opt %t.train.mlir --pipe-partition="workers=2 stages=fwd:1+2,tail:1,bwd:1+1+1" --pipe-verify-plan | FileCheck %s --check-prefix=FORCED
// Layouts of 2 GPUs at the global batch of 4 rows in 4 microbatches: two
// replicas of one worker (2 microbatches each) and one pipeline of two, the
// predicted faster first and marked chosen.
// RUN: rondo-opt %t.train.mlir --pipe-partition="gpus=2 device=host microbatches=4" --pipe-verify-plan | FileCheck %s --check-prefix=LAYOUTS
// LAYOUTS: pipe.plan @plan_r2_w1 for @main workers 1 microbatches 2 attributes {batch = 2 : i64,
// LAYOUTS-SAME: layout_chosen, layout_gpus = 2 : i64,
// LAYOUTS-SAME: replicas = 2 : i64,
// LAYOUTS: pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {batch = 4 : i64,
// LAYOUTS-SAME: layout_gpus = 2 : i64,

// Ops created by canonicalization after tg-autodiff get the layer of their
// users; only side data (labels) stays untagged.
// CHECK: tg.slice %arg{{[0-9]+}} [0, 1] step [1, 1] : (tensor<4x8xi64>) -> tensor<4x7xi64>
// CHECK-NOT: = tg.{{[a-z_]+}} {{[^{]*}}: {{.*}}xf32>
// CHECK: return

// One worker: everything is the fused tail (no recompute, the activations
// of 1 row fit easily); two workers: one forward stage, a two-layer tail,
// one backward stage, and M = 4 >= N + 1 microbatches. Both plans use the
// same M (the one both counts can use), so they train to the same bits.
// CHECK: pipe.plan @plan_w1 for @main workers 1 microbatches 4 attributes {batch = 4 : i64
// CHECK-SAME: strategy = "exact"
// CHECK: pipe.layer 0 prefix
// CHECK: pipe.layer 1 block
// CHECK: pipe.layer 2 block
// CHECK: pipe.layer 3 tail
// CHECK: pipe.stage @T tail layers 0 to 4 {
// CHECK: pipe.schedule first_worker 0 jobs [@T]
// CHECK: pipe.plan @plan_w2 for @main workers 2 microbatches 4 attributes {
// CHECK-SAME: rows_per_microbatch = 1 : i64
// CHECK: pipe.stage @F0 forward layers 0 to 2 checkpoints [0] {
// CHECK: pipe.stage @T tail layers 2 to 4 {
// CHECK: pipe.stage @B1 backward layers 0 to 2 {
// CHECK: pipe.schedule first_worker 0 jobs [@F0, @T, @B1]

// RoundPipe's greedy packing: caps within 1.1x the heaviest layer, the tail
// carved from the top.
// GREEDY: pipe.plan @plan_w2 for @main workers 2 microbatches 4
// GREEDY-SAME: strategy = "greedy"
// GREEDY: pipe.stage @F0 forward layers 0 to 3 checkpoints [0, 2] {
// GREEDY: pipe.stage @T tail layers 3 to 4 {
// GREEDY: pipe.stage @B1 backward layers 2 to 3 {
// GREEDY: pipe.stage @B2 backward layers 0 to 2 {
// GREEDY: pipe.schedule first_worker 0 jobs [@F0, @T, @B1, @B2]

// A fixed M; bf16 on a GPU device by default.
// FIXED: pipe.plan @plan_w2 for @main workers 2 microbatches 2 attributes
// FIXED-SAME: device = "h100"
// FIXED-SAME: precision = "bf16"
// FIXED-SAME: rows_per_microbatch = 2 : i64

// A forced partition: F1 checkpoints its own input (for B2) and the input
// of layer 2 (for B1).
// FORCED: strategy = "forced"
// FORCED: pipe.stage @F0 forward layers 0 to 1 checkpoints [0] {
// FORCED: pipe.stage @F1 forward layers 1 to 3 checkpoints [1, 2] {
// FORCED: pipe.stage @T tail layers 3 to 4 {
// FORCED: pipe.stage @B1 backward layers 2 to 3 {
// FORCED: pipe.stage @B2 backward layers 1 to 2 {
// FORCED: pipe.stage @B3 backward layers 0 to 1 {
// FORCED: pipe.schedule first_worker 0 jobs [@F0, @F1, @T, @B1, @B2, @B3]
