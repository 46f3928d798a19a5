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
// frozen-storage: in a bf16 plan, the frozen LoRA bases that only matrix
// products read are held in bf16 (frozen_bf16), at two bytes an element
// of host memory (92,160 elements: 184,320 bytes less than fp32 storage).
// RUN: rondo-compile %models/qwen3-tiny.onnx --batch 4 --seq-len 8 --lora=rank=4 --emit=train -o %t.lora.mlir
// RUN: rondo-opt %t.lora.mlir --pipe-partition="workers=1 device=h100 precision=bf16" --pipe-verify-plan | FileCheck %s --check-prefix=FROZEN
// FROZEN: frozen_bf16 = ["val_92", "val_103", "val_114", "val_222", "val_227", "val_229", "val_230", "val_235", "val_246", "val_257", "val_360", "val_365", "val_367", "val_368"], host_fixed_bytes = 5.975040e+05
// RUN: rondo-opt %t.lora.mlir --pipe-partition="workers=1 device=h100 precision=bf16 frozen-storage=fp32" | FileCheck %s --check-prefix=FROZEN-FP32
// FROZEN-FP32-NOT: frozen_bf16
// FROZEN-FP32: host_fixed_bytes = 7.818240e+05
// FROZEN-FP32-NOT: frozen_bf16
// RUN: not rondo-opt %t.lora.mlir --pipe-partition="workers=1 device=host frozen-storage=bf16" 2>&1 | FileCheck %s --check-prefix=FROZEN-ERR
// RUN: not rondo-opt %t.lora.mlir --pipe-partition="workers=1 device=h100 frozen-storage=half" 2>&1 | FileCheck %s --check-prefix=FROZEN-VALUE
// FROZEN-ERR: error: --frozen-storage=bf16 needs a bf16 plan, but this one computes in fp32, so its frozen weights stay fp32; drop the option or plan in bf16 (precision=bf16 on a GPU device)
// FROZEN-VALUE: error: --frozen-storage=half is not one of bf16, fp32
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
