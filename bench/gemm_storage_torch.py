#!/usr/bin/env python3
"""PyTorch's own cuBLAS rate on W1's GEMM shapes (bf16 operands and output),
the bar of issue 21's GEMM item, for bench/gemm_storage.cu's table.
Weight-gradient rows accumulate into an fp32 tensor as PyTorch's autograd
does for fp32 master weights under autocast (bf16 product, then an fp32 add)."""
import json, sys, torch

def time_ms(f, reps=20):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]

rows = []
for M in (4096, 8192):
    shapes = [("q/o fwd", M, 2048, 2048, 0, 0, 0), ("k/v fwd", M, 1024, 2048, 0, 0, 0),
              ("gate/up fwd", M, 6144, 2048, 0, 0, 0), ("down fwd", M, 2048, 6144, 0, 0, 0),
              ("q/o dX", M, 2048, 2048, 0, 1, 0), ("k/v dX", M, 2048, 1024, 0, 1, 0),
              ("gate/up dX", M, 2048, 6144, 0, 1, 0), ("down dX", M, 6144, 2048, 0, 1, 0),
              ("q/o dW", 2048, 2048, M, 1, 0, 1), ("k/v dW", 2048, 1024, M, 1, 0, 1),
              ("gate/up dW", 2048, 6144, M, 1, 0, 1), ("down dW", 6144, 2048, M, 1, 0, 1)]
    for use, m, n, k, ta, tb, acc in shapes:
        a = torch.randn(k, m, device="cuda", dtype=torch.bfloat16).t() if ta else \
            torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if tb else \
            torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c32 = torch.zeros(m, n, device="cuda")
        ms = time_ms(lambda: torch.matmul(a, b))
        ms_acc = time_ms(lambda: c32.add_(torch.matmul(a, b))) if acc else None
        tf = 2 * m * n * k / (ms * 1e-3) / 1e12
        print(f"{use:12s} {m:6d} {n:6d} {k:6d} {'tA' if ta else '  '}{'tB' if tb else '  '} | "
              f"torch bf16 {tf:6.0f} TFLOP/s" +
              (f", + fp32 add {2*m*n*k/(ms_acc*1e-3)/1e12:6.0f}" if acc else ""))
        rows.append(dict(use=use, M=m, N=n, K=k, transA=bool(ta), transB=bool(tb),
                         torch_bf16_ms=ms, torch_bf16_then_fp32_add_ms=ms_acc))
json.dump(dict(torch=torch.__version__, rows=rows), open(sys.argv[1] if len(sys.argv) > 1 else "gemm_storage_torch.json", "w"), indent=1)
