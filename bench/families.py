#!/usr/bin/env python3
"""The families of issue 23 (mixtures of experts, sliding-window attention)
on one GPU: Rondo trainers beside PyTorch in one run.

PyTorch (--torch eager, the default): the Hugging Face model of the same preset
(scripts/export-hf-onnx.py's FAMILY_PRESETS, random weights), fp32
parameters, autocast bf16, SDPA attention (GPT-OSS: eager, for its sinks),
fused AdamW, mixtures of experts on transformers' grouped_mm experts backend
(PyTorch's own grouped GEMM), microbatches of --torch-rows rows accumulated
to --rows rows per step: a full fine-tune. --torch lora / lora-ckpt: PEFT's
LoRA (rank --lora-rank, alpha --lora-alpha) on the model in bf16, on every
attention projection and, in a mixture of experts, every expert's stacked
projections (target_parameters; else the MLP's linears), AdamW on the
adapters, without / with gradient checkpointing.

Rondo (--rondo NAME=TRAINER): each trainer trains --steps steps of --rows
rows of --seq random tokens (--init=random, ids in [0, 8192)).

For each: tokens/s over the steps after --skip, the losses, the GPU peak
(nvidia-smi, and torch.cuda.max_memory_allocated for PyTorch) and the host
peak (the child's maximum resident set). Prints a table and writes
OUT/families-<preset>-<machine>.json.

    python3 bench/families.py --preset gemma3-1b --seq 4096 --rows 8 \\
        --machine h100x1 --out OUT --torch eager \\
        --rondo rondo=build-gpu/gemma3-1b.trainer
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from w1 import GpuMemoryPoller  # noqa: E402


def family_presets():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                        "export-hf-onnx.py")
    spec = importlib.util.spec_from_file_location("export_hf_onnx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FAMILY_PRESETS


# The PyTorch child: the config and data (TORCH_PROLOGUE), a model and its
# optimizer (TORCH_FULL or TORCH_LORA), then the timed steps (TORCH_STEPS).
TORCH_PROLOGUE = r'''
import json, sys, time, torch
from transformers import AutoConfig, AutoModelForCausalLM
a = json.loads(sys.argv[1])
fields = dict(a["fields"])
if a["layers"]:
    fields["num_hidden_layers"] = a["layers"]
    if "layer_types" in fields:
        fields["layer_types"] = fields["layer_types"][:a["layers"]]
cfg = AutoConfig.for_model(**fields)
cfg.use_cache = False
moe = bool(getattr(cfg, "num_experts", 0) or getattr(cfg, "num_local_experts", 0))
extra = {"experts_implementation": "grouped_mm"} if moe else {}
attn = "eager" if cfg.model_type == "gpt_oss" else "sdpa"
torch.manual_seed(0)
'''

TORCH_FULL = r'''
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, **extra)
trainable = list(model.parameters())
'''

TORCH_LORA = r'''
from peft import LoraConfig, get_peft_model
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn,
                                             dtype=torch.bfloat16, **extra)
model.requires_grad_(False)
# What rondo-compile's --lora adapts (targets all-linear): every attention
# projection and, in a mixture of experts, every expert's stacked
# projections (PEFT's target_parameters), the router left alone.
modules = ["q_proj", "k_proj", "v_proj", "o_proj"]
params = []
if moe:
    params = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
else:
    modules += ["gate_proj", "up_proj", "down_proj"]
model = get_peft_model(model, LoraConfig(r=a["rank"], lora_alpha=a["alpha"], lora_dropout=0.0,
                                         target_modules=modules,
                                         target_parameters=params or None))
if a["checkpointing"]:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
trainable = [p for p in model.parameters() if p.requires_grad]
'''

TORCH_STEPS = r'''
# The trainer's defaults: lr 1e-3, weight decay 0.01.
opt = torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.01, fused=True)
rows, seq, mb = a["rows"], a["seq"], a["torch_rows"]
ids = torch.from_numpy(__import__("numpy").load(a["data"])).cuda()
times, losses = [], []
try:
    for step in range(a["steps"]):
        torch.cuda.synchronize(); t0 = time.time()
        total = 0.0
        for r in range(0, rows, mb):
            x = ids[r:r + mb]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            (loss * (x.shape[0] / rows)).backward()
            total += loss.item() * x.shape[0] / rows
        opt.step(); opt.zero_grad(set_to_none=True); torch.cuda.synchronize()
        times.append(time.time() - t0); losses.append(total)
        print("step %d %.3f s loss %.4f" % (step + 1, times[-1], total), flush=True)
    print("RESULT " + json.dumps({"step_seconds": times, "losses": losses,
                                  "max_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
                                  "parameters": sum(p.numel() for p in trainable)}))
except torch.OutOfMemoryError:
    print("RESULT " + json.dumps({"oom": True, "step_seconds": times,
                                  "max_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}))
'''


def run_child(cmd, timeout):
    """Runs cmd, returns (returncode, output, host peak GiB, GPU peak GiB).
    The child is reaped with wait4 so that its own maximum resident set is
    read (not that of every child reaped before)."""
    import threading
    with GpuMemoryPoller() as poller:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
    gpu = max(poller.peak.values()) / 1024 if poller.peak else None
    return os.waitstatus_to_exitcode(status), out, usage.ru_maxrss / 2**20, gpu


def rate(times, skip, tokens):
    timed = times[skip:] or times[-1:]
    return tokens / (sum(timed) / len(timed)) if timed else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", required=True)
    p.add_argument("--layers", type=int, default=0, help="keep the first N layers")
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--torch-rows", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--skip", type=int, default=2)
    p.add_argument("--torch", default="eager",
                   help="comma-separated: eager (full fine-tune), lora (PEFT, bf16 base), "
                        "lora-ckpt (the same with gradient checkpointing); '' for none")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-alpha", type=float, default=32)
    p.add_argument("--rondo", action="append", default=[], metavar="NAME=TRAINER")
    p.add_argument("--machine", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=float, default=400)
    a = p.parse_args()
    presets = family_presets()
    if a.preset not in presets:
        sys.exit("families: --preset %s: unknown (known: %s)" % (a.preset, ", ".join(presets)))
    os.makedirs(a.out, exist_ok=True)
    import numpy as np
    data = os.path.join(a.out, "ids.npy")
    np.save(data, np.random.default_rng(0).integers(0, 8192, size=(a.rows, a.seq))
            .astype(np.int64))
    tokens = a.rows * a.seq
    results = []
    for spec in a.rondo:
        name, trainer = spec.split("=", 1)
        log = os.path.join(a.out, "log-%s-%s%s.jsonl" % (
            name, a.preset, "-%dl" % a.layers if a.layers else ""))
        rc, out, host, gpu = run_child(
            [trainer, "--data", data, "--steps", str(a.steps), "--init=random", "--gpus", "0",
             "--log-json", log], a.timeout)
        print(out[-2500:])
        records = [json.loads(l) for l in open(log)] if os.path.exists(log) else []
        steps = [r for r in records if "loss" in r and "step" in r]
        times = [r["seconds"] for r in steps if "seconds" in r]
        results.append({"system": "rondo " + name, "returncode": rc,
                        "tokens_per_s": rate(times, a.skip, tokens) if rc == 0 else None,
                        "step_seconds": times, "losses": [r["loss"] for r in steps],
                        "gpu_peak_gib": gpu, "host_peak_gib": host})
    for variant in [v for v in a.torch.split(",") if v]:
        if variant not in ("eager", "lora", "lora-ckpt"):
            sys.exit("families: --torch %s: one of eager, lora, lora-ckpt" % variant)
        args = {"fields": presets[a.preset], "layers": a.layers, "rows": a.rows, "seq": a.seq,
                "torch_rows": a.torch_rows, "steps": a.steps, "data": data,
                "rank": a.lora_rank, "alpha": a.lora_alpha,
                "checkpointing": variant == "lora-ckpt"}
        script = TORCH_PROLOGUE + (TORCH_FULL if variant == "eager" else TORCH_LORA) + \
            TORCH_STEPS
        rc, out, host, gpu = run_child([sys.executable, "-c", script, json.dumps(args)],
                                       a.timeout)
        lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
        res = json.loads(lines[-1][7:]) if lines else {}
        if not lines:
            print(out[-3000:])
        results.append({"system": "pytorch " + variant, "returncode": rc,
                        "tokens_per_s": None if res.get("oom") or rc != 0
                        else rate(res.get("step_seconds", []), a.skip, tokens),
                        "out_of_memory": bool(res.get("oom")),
                        "step_seconds": res.get("step_seconds"), "losses": res.get("losses"),
                        "gpu_peak_gib": gpu, "gpu_max_allocated_gib": res.get("max_allocated_gib"),
                        "host_peak_gib": host, "parameters": res.get("parameters")})
    os.remove(data)
    best_torch = max([r["tokens_per_s"] or 0 for r in results if r["system"].startswith("pytorch")]
                     or [0])
    print("\n%s%s, %d x %d tokens per step, %s" % (
        a.preset, " (%d layers)" % a.layers if a.layers else "", a.rows, a.seq, a.machine))
    print("%-22s %12s %9s %10s %10s" % ("system", "tokens/s", "vs torch", "GPU GiB", "host GiB"))
    for r in results:
        tps = r["tokens_per_s"]
        print("%-22s %12s %9s %10s %10s" % (
            r["system"], "%.0f" % tps if tps else ("OOM" if r.get("out_of_memory") else
                                                    "rc=%s" % r["returncode"]),
            "%.2fx" % (tps / best_torch) if tps and best_torch else "-",
            "%.1f" % r["gpu_peak_gib"] if r["gpu_peak_gib"] else "-",
            "%.1f" % r["host_peak_gib"] if r["host_peak_gib"] else "-"))
    path = os.path.join(a.out, "families-%s%s-%d-%s.json" % (
        a.preset, "-%dl" % a.layers if a.layers else "", a.seq, a.machine))
    with open(path, "w") as f:
        json.dump({"preset": a.preset, "layers": a.layers, "seq": a.seq, "rows": a.rows,
                   "steps": a.steps, "skip": a.skip, "machine": a.machine,
                   "date": time.strftime("%Y-%m-%d"), "results": results}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
