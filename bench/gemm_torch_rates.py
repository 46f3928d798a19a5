#!/usr/bin/env python3
"""PyTorch's own rate on W1's (Qwen3-1.7B) layer products, in PyTorch's
layout (nn.Linear's [out, in] weight: forward x W^T, input gradient dY W,
weight gradient dY^T x), bf16 operands and outputs, at 8,192 and 16,384
tokens: the bar bench/gemm_forms.cu's table is read against (same GPU, same
cuBLAS when PyTorch loads the system's). Uniform data in [-0.05, 0.05);
the median of 30 calls after 10 warm-ups. Prints a table; writes JSON to
argv[1] when given.

    python3 bench/gemm_torch_rates.py [gemm_torch_rates.json]
"""
import json
import sys

import torch


def median_ms(f):
    for _ in range(10):
        f()
    times = []
    for _ in range(30):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    print("torch", torch.__version__)
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for tokens in (8192, 16384):
        for name, fan_in, fan_out in (("gate/up", 2048, 6144), ("down", 6144, 2048),
                                      ("q/o", 2048, 2048)):
            def uniform(*shape):
                return ((torch.rand(*shape, device="cuda", generator=g) - 0.5)
                        * 0.1).to(torch.bfloat16)
            x, dy, w = uniform(tokens, fan_in), uniform(tokens, fan_out), uniform(fan_out, fan_in)
            flop = 2 * tokens * fan_in * fan_out
            ms = {"forward": median_ms(lambda: x @ w.t()),
                  "input-grad": median_ms(lambda: dy @ w),
                  "weight-grad": median_ms(lambda: dy.t() @ x)}
            print(f"{name:8s} {tokens:6d} " + "  ".join(
                f"{k} {v * 1e3:7.1f}us {flop / v / 1e9:5.0f} TFLOP/s" for k, v in ms.items()))
            rows.append(dict(linear=name, tokens=tokens, fan_in=fan_in, fan_out=fan_out,
                             ms=ms))
    if len(sys.argv) > 1:
        json.dump(dict(torch=torch.__version__, rows=rows), open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
