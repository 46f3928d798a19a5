#!/usr/bin/env python3
"""Measures what Rondo's cost model assumes about a GPU and writes a device
spec JSON that `rondo-compile --device=FILE` reads.

Measured with PyTorch (bf16 inputs, fp32 accumulation) at the shapes of the
Qwen3-1.7B decoder (hidden 2048, MLP 6144, 16 query / 8 KV heads of 128):

- GEMM throughput for 256..65536 tokens per microbatch, fitted to the cost
  model's curve eff(rows) = e / (1 + (r_half / rows)^k);
- causal GQA attention (PyTorch SDPA, whatever backend it picks) forward and
  forward+backward at sequence 4096, as a fraction of the bf16 peak with the
  cost model's FLOP count (forward 2*B*H*T*T*D, backward 2.5x that);
- pinned host<->device copies (each direction alone and both at once) and a
  device-to-device copy (HBM bandwidth);
- PyTorch's fused CPU AdamW (parameters per second on all cores), the host
  optimizer rate.

Prints a table, writes OUT/device-measurements.json (every sample) and
OUT/<name>-measured.json (the spec: "base" plus the measured fields).

    python3 bench/measure_device.py --out DIR [--base h100] [--peak-bf16 989e12]
"""
import argparse
import json
import os
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --refit needs no GPU and no PyTorch
    torch = None


def cuda_time(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def measure_gemms(peak):
    hidden, mlp, kv = 2048, 6144, 1024
    # (k, n) of the decoder's linear layers, with how often each occurs.
    shapes = [(hidden, hidden, 2), (hidden, kv, 2), (hidden, mlp, 2),
              (mlp, hidden, 1)]
    rows_list = [256, 512, 1024, 2048, 4096, 8192, 16384, 65536]
    samples = []
    for rows in rows_list:
        flops = seconds = 0.0
        for k, n, count in shapes:
            a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            t = cuda_time(lambda: a @ b)
            flops += count * 2.0 * rows * k * n
            seconds += count * t
        eff = flops / seconds / peak
        samples.append({"rows": rows, "tflops": flops / seconds / 1e12,
                        "efficiency": eff})
    return samples, *fit_gemm_curve(samples)


def fit_gemm_curve(samples):
    """The cost model's curve e / (1 + (r_half / rows)^k): e is the plateau
    (the mean efficiency from 8192 rows up); r_half and k minimise the
    squared relative error over the smaller GEMMs, on a grid."""
    plateau = [s["efficiency"] for s in samples if s["rows"] >= 8192]
    e = sum(plateau) / len(plateau)
    best = None
    for k in [1 + 0.125 * i for i in range(17)]:
        for r in range(8, 8193, 8):
            err = sum(((e / (1 + (r / s["rows"]) ** k)) / s["efficiency"] - 1)
                      ** 2 for s in samples if s["rows"] < 8192)
            if best is None or err < best[0]:
                best = (err, r, k)
    return min(e, 1.0), float(best[1]), best[2]


def measure_attention(peak):
    batch, heads, kv_heads, seq, dim = 4, 16, 8, 4096, 128
    q = torch.randn(batch, heads, seq, dim, device="cuda",
                    dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(batch, kv_heads, seq, dim, device="cuda",
                    dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    kwargs = {"is_causal": True}
    try:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
        kwargs["enable_gqa"] = True
        kk, vv = k, v
    except TypeError:  # older PyTorch: repeat the KV heads
        kk = k.repeat_interleave(heads // kv_heads, dim=1)
        vv = v.repeat_interleave(heads // kv_heads, dim=1)
    forward_flops = 2.0 * batch * heads * seq * seq * dim  # causal half
    with torch.no_grad():
        t_fwd = cuda_time(lambda: F.scaled_dot_product_attention(q, kk, vv, **kwargs))
    grad = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)

    def fwd_bwd():
        out = F.scaled_dot_product_attention(q, kk, vv, **kwargs)
        torch.autograd.grad(out, (q, k, v), grad)

    t_both = cuda_time(fwd_bwd)
    t_bwd = max(t_both - t_fwd, 1e-9)
    return {
        "forward_seconds": t_fwd,
        "backward_seconds": t_bwd,
        "forward_efficiency": forward_flops / t_fwd / peak,
        "backward_efficiency": 2.5 * forward_flops / t_bwd / peak,
    }


def measure_copies():
    size = 1 << 30
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    host2 = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    dev2 = torch.empty(size, dtype=torch.uint8, device="cuda")
    h2d = size / cuda_time(lambda: dev.copy_(host, non_blocking=True), 1, 5)
    d2h = size / cuda_time(lambda: host.copy_(dev, non_blocking=True), 1, 5)
    up, down = torch.cuda.Stream(), torch.cuda.Stream()

    def both():
        with torch.cuda.stream(up):
            dev.copy_(host, non_blocking=True)
        with torch.cuda.stream(down):
            host2.copy_(dev2, non_blocking=True)
        torch.cuda.current_stream().wait_stream(up)
        torch.cuda.current_stream().wait_stream(down)

    duplex = size / cuda_time(both, 1, 5)
    d2d = 2 * size / cuda_time(lambda: dev2.copy_(dev), 2, 10)
    return {"h2d": h2d, "d2h": d2h, "duplex_each": duplex, "d2d": d2d}


def measure_adamw():
    numel = 256 * 1024 * 1024
    params = [torch.zeros(numel, dtype=torch.float32)]
    params[0].grad = torch.full_like(params[0], 1e-3)
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
    opt.step()
    start = time.perf_counter()
    reps = 3
    for _ in range(reps):
        opt.step()
    return numel * reps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--base", default="h100")
    parser.add_argument("--peak-bf16", type=float, default=989e12)
    parser.add_argument("--refit", metavar="MEASUREMENTS.json",
                        help="no GPU: rebuild the spec from saved samples")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.refit:
        with open(args.refit) as f:
            saved = json.load(f)
        report(args, saved["device"], saved["gemms"],
               *fit_gemm_curve(saved["gemms"]), saved["attention"],
               saved["copies"], saved["adamw_params_per_second"],
               saved.get("torch"), saved.get("cudnn"))
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    name = torch.cuda.get_device_name()
    print(f"device: {name}, torch {torch.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}")

    gemms, eff, r_half, k = measure_gemms(args.peak_bf16)
    attention = measure_attention(args.peak_bf16)
    copies = measure_copies()
    try:
        adamw = measure_adamw()
    except (RuntimeError, TypeError) as e:  # no fused CPU AdamW
        print(f"(host AdamW not measured: {e})")
        adamw = None
    report(args, name, gemms, eff, r_half, k, attention, copies, adamw,
           torch.__version__, torch.backends.cudnn.version())


def report(args, name, gemms, eff, r_half, k, attention, copies, adamw,
           torch_version, cudnn_version):
    print("\nbf16 GEMMs of the Qwen3-1.7B decoder (per microbatch rows)")
    print(f"{'rows':>8} {'TFLOP/s':>9} {'of peak':>8} {'model':>8}")
    for s in gemms:
        model = eff / (1 + (r_half / s["rows"]) ** k)
        print(f"{s['rows']:>8} {s['tflops']:>9.1f} {s['efficiency']:>8.3f} "
              f"{model:>8.3f}")
    print(f"fit: matmul_efficiency {eff:.3f}, rows_for_half_efficiency "
          f"{r_half:.0f}, rows_curve_exponent {k:.3f}")
    print("\ncausal GQA attention, 4 x 16 heads x 4096 x 128 (SDPA)")
    print(f"  forward  {attention['forward_seconds'] * 1e3:8.3f} ms, "
          f"{attention['forward_efficiency']:.3f} of peak")
    print(f"  backward {attention['backward_seconds'] * 1e3:8.3f} ms, "
          f"{attention['backward_efficiency']:.3f} of peak")
    att_eff = (3.5 / (1 / attention["forward_efficiency"] +
                      2.5 / attention["backward_efficiency"]))
    print(f"  forward+backward as one efficiency: {att_eff:.3f}")
    print("\ncopies (GB/s)")
    for key, value in copies.items():
        print(f"  {key:12} {value / 1e9:8.1f}")
    if adamw:
        print(f"\nhost fused AdamW: {adamw / 1e9:.2f} Gparam/s")

    spec = {
        "name": f"{args.base}-measured",
        "base": args.base,
        "matmul_efficiency": round(eff, 4),
        "rows_for_half_efficiency": round(r_half, 1),
        "rows_curve_exponent": k,
        "attention_efficiency": round(min(att_eff, 1.0), 4),
        "memory_bandwidth": round(copies["d2d"], -9),
        "memory_efficiency": 1.0,
        # While all workers copy, each gets about the duplex rate; the
        # per-worker figure is what one copy alone reaches.
        "host_link_bandwidth": round(min(copies["h2d"], copies["d2h"]), -8),
    }
    if adamw:
        spec["optimizer_params_per_second"] = round(adamw, -7)
    with open(os.path.join(args.out, f"{args.base}-measured.json"), "w") as f:
        json.dump(spec, f, indent=2)
    with open(os.path.join(args.out, "device-measurements.json"), "w") as f:
        json.dump({"device": name, "torch": torch_version,
                   "cudnn": cudnn_version,
                   "gemms": gemms, "attention": attention,
                   "copies": copies, "adamw_params_per_second": adamw,
                   "spec": spec}, f, indent=2)
    print(f"\nspec written to {args.out}/{args.base}-measured.json")


if __name__ == "__main__":
    main()
