#!/usr/bin/env python3
"""PyTorch SDPA beside Rondo's bf16 attention (bench/attention_gpu.sh).

Times torch.nn.functional.scaled_dot_product_attention (bf16, causal,
enable_gqa) on the flash backend (FlashAttention-2) and, where present, the
cuDNN backend, the latter also under torch.use_deterministic_algorithms
(sdpa_cudnn_det: what PyTorch asks of cuDNN when determinism is wanted):
the forward, and forward + backward (the backward alone is their
difference). CUDA events, median of REPS after warm-up. One JSON object a
line on stdout. Shapes: (B, T, D) with 16 query and 8 kv heads, W1's first.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

REPS = 20
SHAPES = [(2, 4096, 128), (1, 4096, 128), (1, 8192, 128), (1, 4096, 64)]
HQ, HKV = 16, 8


def median_ms(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]


def run(backend, name, B, T, D, deterministic=False):
    torch.manual_seed(0)
    q = torch.randn(B, HQ, T, D, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    k = torch.randn(B, HKV, T, D, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    v = torch.randn(B, HKV, T, D, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    g = torch.randn(B, HQ, T, D, device="cuda", dtype=torch.bfloat16)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=True)

    def fwd_bwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=True)
        o.backward(g)

    torch.use_deterministic_algorithms(deterministic)
    try:
        with sdpa_kernel([backend]):
            f = median_ms(fwd)
            fb = median_ms(fwd_bwd)
    finally:
        torch.use_deterministic_algorithms(False)
    flops = 4.0 * B * HQ * T * T * D / 2
    return {"backend": name, "B": B, "Hq": HQ, "Hkv": HKV, "T": T, "D": D,
            "fwd_ms": f, "fwd_bwd_ms": fb, "bwd_ms": fb - f,
            "fwd_tflops": flops / f / 1e9,
            "bwd_tflops": 2.5 * flops / (fb - f) / 1e9}


def main():
    print(json.dumps({"torch": torch.__version__,
                      "device": torch.cuda.get_device_name()}))
    backends = [(SDPBackend.FLASH_ATTENTION, "sdpa_flash", False)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append((SDPBackend.CUDNN_ATTENTION, "sdpa_cudnn", False))
        backends.append((SDPBackend.CUDNN_ATTENTION, "sdpa_cudnn_det", True))
    for B, T, D in SHAPES:
        for backend, name, det in backends:
            try:
                print(json.dumps(run(backend, name, B, T, D, det)), flush=True)
            except Exception as e:  # a backend that rejects the shape
                print(json.dumps({"backend": name, "B": B, "T": T, "D": D,
                                  "error": str(e)[:200]}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
