#!/usr/bin/env python3
"""Long context and LoRA on one GPU, Rondo beside PyTorch in one run.

1. PyTorch's longest trainable sequence for a Qwen3 shape (--torch-preset,
   batch 1): Hugging Face Qwen3ForCausalLM, random weights, fp32 parameters,
   autocast bf16, SDPA attention, fused AdamW; one full step (forward,
   backward, optimizer) per length, binary search over multiples of 1024
   until it runs out of GPU memory. With --torch-checkpointing also with
   Hugging Face's gradient checkpointing (one recompute per layer).
2. Rondo trainers (--rondo NAME=TRAINER:SEQ:STEPS[:PREDICTED_MAX]): each one
   trains STEPS steps of one row of SEQ random tokens (--init=random);
   tokens/s over the steps after the first, the trainer's own GPU memory
   account, nvidia-smi's peak. PREDICTED_MAX is the longest sequence
   rondo-compile --explain reported for that model and device.

3. PyTorch LoRA (--torch-lora PRESET:SEQ:RANK:ALPHA[:STEPS]): a bf16 base
   with adapters on every linear of the decoder layers, autocast bf16,
   fused AdamW on the adapters, at SEQ tokens, without and with gradient
   checkpointing: tokens/s over the steps after the first and peak memory,
   or out of memory.

Prints a table and writes OUT/long-context-<machine>.json.

    python3 bench/long_context.py --machine h100x1 --out OUT \\
        --torch-preset qwen3-1.7b --rondo lora8b=build-gpu/lora8b.trainer:16384:3
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from w1 import GpuMemoryPoller  # noqa: E402

def load_presets():
    """The Qwen3 shapes scripts/export-hf-onnx.py exports, so that PyTorch
    measures the same models the Rondo trainers were compiled from."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                        "export-hf-onnx.py")
    spec = importlib.util.spec_from_file_location("export_hf_onnx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    common = {k: v for k, v in module.QWEN3_COMMON.items() if k != "model_type"}
    # Long enough for any sequence the search tries.
    common["max_position_embeddings"] = 1 << 20
    return module.PRESETS, common


PRESETS, COMMON = load_presets()

TORCH_PROBE = r'''
import sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
fields, seq, ckpt = eval(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
torch.manual_seed(0)
cfg = Qwen3Config(**fields); cfg._attn_implementation = "sdpa"; cfg.use_cache = False
with torch.device("cuda"):
    model = Qwen3ForCausalLM(cfg)
if ckpt:
    model.gradient_checkpointing_enable()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
ids = torch.randint(0, 8192, (1, seq), device="cuda")
try:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); torch.cuda.synchronize()
    print("OK %.4f %.2f" % (loss.item(), torch.cuda.max_memory_allocated() / 2**30))
except torch.OutOfMemoryError:
    print("OOM")
'''


TORCH_LORA_PROBE = r'''
import sys, time, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
fields, seq, ckpt, rank, alpha, steps = eval(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", \
    int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
torch.manual_seed(0)
cfg = Qwen3Config(**fields); cfg._attn_implementation = "sdpa"; cfg.use_cache = False
with torch.device("cuda"):
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
model.requires_grad_(False)

class Lora(torch.nn.Module):
    """PEFT's LoRA on one linear: base(x) + (alpha/r) * B(A(x)), A random, B zero."""
    def __init__(self, base):
        super().__init__()
        self.base = base
        self.a = torch.nn.Parameter(torch.randn(rank, base.in_features, device="cuda") / rank)
        self.b = torch.nn.Parameter(torch.zeros(base.out_features, rank, device="cuda"))
    def forward(self, x):
        return self.base(x) + (alpha / rank) * ((x @ self.a.t().to(x.dtype)) @ self.b.t().to(x.dtype))

for layer in model.model.layers:
    for parent in (layer.self_attn, layer.mlp):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(parent, name, Lora(child))
if ckpt:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
ids = torch.randint(0, 8192, (1, seq), device="cuda")
try:
    times = []
    for step in range(steps):
        torch.cuda.synchronize(); t0 = time.time()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward(); opt.step(); opt.zero_grad(); torch.cuda.synchronize()
        times.append(time.time() - t0)
    print("OK %.1f %.2f %d" % (seq / (sum(times[1:]) / len(times[1:])),
                                torch.cuda.max_memory_allocated() / 2**30, sum(p.numel() for p in params)))
except torch.OutOfMemoryError:
    print("OOM")
'''


def run_probe(script, *args):
    """Runs a PyTorch probe in its own process (a fresh CUDA context per
    attempt) and returns the fields of its last line after OK, or None when
    it ran out of memory (or failed: then its stderr is shown)."""
    out = subprocess.run([sys.executable, "-c", script] + [str(a) for a in args],
                         capture_output=True, text=True)
    line = (out.stdout.strip().splitlines() or ["?"])[-1]
    if line.startswith("OK"):
        return line.split()[1:]
    if line != "OOM":
        sys.stderr.write(out.stderr[-2000:])
    return None


def torch_lora(fields, seq, ckpt, rank, alpha, steps):
    ok = run_probe(TORCH_LORA_PROBE, repr(fields), seq, "1" if ckpt else "0", rank, alpha, steps)
    if not ok:
        return {"fits": False}
    tokps, peak, trainable = ok
    return {"fits": True, "tokens_per_s": float(tokps), "peak_gib": float(peak),
            "trainable": int(trainable)}


def torch_fits(fields, seq, ckpt):
    ok = run_probe(TORCH_PROBE, repr(fields), seq, "1" if ckpt else "0")
    return (True, float(ok[1])) if ok else (False, None)


def torch_max(fields, ckpt, hi_limit, bracket=None):
    lo, hi, peak = 0, hi_limit // 1024 + 1, None   # lo fits (0: none), hi does not
    probe = 8
    if bracket:
        # A bracket from an earlier run, checked here: the search goes on
        # from it wherever LO and HI actually land.
        b_lo, b_hi = (int(x) // 1024 for x in bracket.split(":"))
        ok, mem = torch_fits(fields, b_lo * 1024, ckpt)
        print("  pytorch seq %6d: %s" % (b_lo * 1024, "fits, %.1f GiB" % mem if ok else "OOM"),
              flush=True)
        if ok:
            lo, peak = b_lo, mem
            ok_hi, mem_hi = torch_fits(fields, b_hi * 1024, ckpt)
            print("  pytorch seq %6d: %s" % (b_hi * 1024, "fits" if ok_hi else "OOM"), flush=True)
            if ok_hi:
                lo, peak, probe = b_hi, mem_hi, b_hi * 2
            else:
                hi, probe = b_hi, b_hi
    while probe < hi:                     # grow until it fails
        ok, mem = torch_fits(fields, probe * 1024, ckpt)
        print("  pytorch%s seq %6d: %s" % (" +ckpt" if ckpt else "", probe * 1024,
                                          "fits, %.1f GiB" % mem if ok else "OOM"), flush=True)
        if not ok:
            hi = probe
            break
        lo, peak, probe = probe, mem, probe * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, mem = torch_fits(fields, mid * 1024, ckpt)
        print("  pytorch%s seq %6d: %s" % (" +ckpt" if ckpt else "", mid * 1024,
                                          "fits, %.1f GiB" % mem if ok else "OOM"), flush=True)
        if ok:
            lo, peak = mid, mem
        else:
            hi = mid
    return lo * 1024, peak


def run_rondo(name, trainer, seq, steps, out):
    import numpy as np
    ids = os.path.join(out, "ids-%s.npy" % name)
    np.save(ids, np.random.default_rng(0).integers(0, 8192, size=(steps, seq)).astype(np.int64))
    log = os.path.join(out, "log-%s.jsonl" % name)
    t0 = time.time()
    with GpuMemoryPoller() as poller:
        proc = subprocess.run([trainer, "--data", ids, "--steps", str(steps), "--init=random",
                               "--gpus", "0", "--log-json", log], capture_output=True, text=True)
    wall = time.time() - t0
    os.remove(ids)
    text = proc.stdout + proc.stderr
    print(text[-3000:])
    records = [json.loads(l) for l in open(log)] if os.path.exists(log) else []
    steps_ = [r for r in records if "loss" in r and "step" in r]
    timed = [r["seconds"] for r in steps_[1:] if "seconds" in r]
    memory = {}
    for line in text.splitlines():
        m = re.search(r"GPU (\d+) memory: arena ([\d.]+) GB.*temporaries peak ([\d.]+) GB", line)
        if m:
            memory = {"arena_gb": float(m.group(2)), "temporaries_peak_gb": float(m.group(3))}
    return {
        "returncode": proc.returncode, "seq": seq, "steps": steps, "wall_s": wall,
        "losses": [r["loss"] for r in steps_],
        "tokens_per_s": seq / (sum(timed) / len(timed)) if timed else None,
        "step_seconds": timed, "trainer_memory": memory,
        "nvidia_smi_peak_gib": max(poller.peak.values()) / 1024 if poller.peak else None,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--machine", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--torch-preset", choices=sorted(PRESETS))
    p.add_argument("--torch-checkpointing", action="store_true")
    p.add_argument("--torch-limit", type=int, default=1 << 19)
    p.add_argument("--torch-bracket", metavar="LO:HI",
                   help="sequence lengths (multiples of 1024) known to fit and not to fit; "
                        "both are checked, then the search bisects between them")
    p.add_argument("--torch-lora", metavar="PRESET:SEQ:RANK:ALPHA[:STEPS]", action="append",
                   default=[],
                   help="PyTorch LoRA (bf16 base, adapters on every linear of the layers, "
                        "autocast bf16, fused AdamW) at SEQ tokens, without and with "
                        "Hugging Face's gradient checkpointing: tokens/s or OOM; repeatable")
    p.add_argument("--torch-lora-checkpointing-only", action="store_true",
                   help="run --torch-lora with gradient checkpointing only")
    p.add_argument("--rondo", action="append", default=[],
                   help="NAME=TRAINER:SEQ:STEPS[:PREDICTED_MAX]")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    result = {"machine": a.machine, "pytorch": {}, "rondo": {}}
    if a.torch_preset:
        fields = dict(COMMON, **PRESETS[a.torch_preset])
        for ckpt in ([False, True] if a.torch_checkpointing else [False]):
            longest, peak = torch_max(fields, ckpt, a.torch_limit,
                                      None if ckpt else a.torch_bracket)
            result["pytorch"]["%s%s" % (a.torch_preset, "+checkpointing" if ckpt else "")] = {
                "max_seq": longest, "peak_gib_at_max": peak}
    for spec in a.torch_lora:
        parts = spec.split(":")
        preset, seq, rank, alpha = parts[0], int(parts[1]), int(parts[2]), float(parts[3])
        steps = int(parts[4]) if len(parts) > 4 else 3
        fields = dict(COMMON, **PRESETS[preset])
        for ckpt in ((True,) if a.torch_lora_checkpointing_only else (False, True)):
            r = torch_lora(fields, seq, ckpt, rank, alpha, steps)
            r.update(seq=seq, rank=rank, alpha=alpha)
            key = "%s-lora-r%d%s%s" % (preset, rank, "+checkpointing" if ckpt else "",
                                       "" if len(a.torch_lora) == 1 else "-%d" % seq)
            result["pytorch"][key] = r
            print("  pytorch %s seq %d: %s" % (key, seq, "%.0f tok/s, %.1f GiB" % (
                r["tokens_per_s"], r["peak_gib"]) if r["fits"] else "OOM"), flush=True)
    for spec in a.rondo:
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        r = run_rondo(name, parts[0], int(parts[1]), int(parts[2]), a.out)
        if len(parts) > 3:
            r["predicted_max_seq"] = int(parts[3])
        result["rondo"][name] = r
    print("\n%-28s %s" % ("", "long context on " + a.machine))
    for k, v in result["pytorch"].items():
        if "max_seq" not in v:
            print("%-28s seq %7d: %s" % ("PyTorch " + k, v["seq"], "%.0f tok/s, peak %.1f GiB" % (
                v["tokens_per_s"], v["peak_gib"]) if v["fits"] else "out of memory"))
            continue
        print("%-28s longest trainable sequence %7d tokens (peak %s GiB)"
              % ("PyTorch " + k, v["max_seq"], "%.1f" % v["peak_gib_at_max"] if v["peak_gib_at_max"] else "-"))
    for k, v in result["rondo"].items():
        print("%-28s seq %7d: %s tok/s, trainer memory %s, nvidia-smi peak %s GiB, rc %d%s"
              % ("Rondo " + k, v["seq"], "%.0f" % v["tokens_per_s"] if v["tokens_per_s"] else "-",
                 v["trainer_memory"], "%.1f" % v["nvidia_smi_peak_gib"] if v["nvidia_smi_peak_gib"] else "-",
                 v["returncode"], "; plan's longest %d" % v["predicted_max_seq"] if "predicted_max_seq" in v else ""))
    path = os.path.join(a.out, "long-context-%s.json" % a.machine)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
