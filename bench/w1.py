#!/usr/bin/env python3
"""Workload W1 of ../shared/anchors.md, Rondo beside PyTorch in one run.

W1: the Qwen3-1.7B graph (test/data/models/qwen3-1.7b.onnx, random weights),
16 x 4096 tokens per step, causal-LM loss, fp32 master weights and AdamW.

Rondo: a trainer compiled for the GPUs (see bench/README.md for the compile
line), run for --steps steps; tokens/s over the steps after the first two,
the plan's predicted step time and the measured bubble from its --trace.

PyTorch eager, the anchor: Hugging Face Qwen3ForCausalLM built from the same
configuration, random weights, fp32 parameters on one GPU, autocast bf16,
SDPA attention, fused AdamW, the same 16 x 4096 tokens per step reached by
gradient accumulation over --torch-rows rows at a time (no recompute).

Both run as child processes, one after the other, so that each one's peak
host memory (ru_maxrss) and peak GPU memory (nvidia-smi, polled every
100 ms) are its own. Prints a table and writes OUT/w1-<machine>.json.

    python3 bench/w1.py --trainer build-gpu/w1.trainer --workers 1 \\
        --machine h100x1 --out bench/results/h100
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time

# anchors.md: N = 1.41e9 matmul parameters, L=28, H=16, Q=128, S=4096.
FLOP_PER_TOKEN = 6 * 1.41e9 + 12 * 28 * 16 * 128 * 4096
PEAK_BF16 = 989e12

QWEN3_17B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                 num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128,
                 max_position_embeddings=40960, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, tie_word_embeddings=True)


class GpuMemoryPoller:
    """The peak of nvidia-smi's memory.used (MiB) per GPU while running."""

    def __init__(self):
        self.peak = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop.is_set():
            try:
                text = subprocess.run(
                    ["nvidia-smi", "--query-gpu=index,memory.used",
                     "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=10).stdout
                for line in text.strip().splitlines():
                    i, used = (int(x) for x in line.split(","))
                    self.peak[i] = max(self.peak.get(i, 0), used)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            self.stop.wait(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def run_child(cmd, env=None, log=None):
    """Runs cmd; returns (status, peak RSS in GiB, seconds, peak GPU MiB)."""
    start = time.monotonic()
    with GpuMemoryPoller() as gpu:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux.
    return (proc.returncode, usage.ru_maxrss / 2**20,
            time.monotonic() - start, gpu.peak)


def bubble_from_trace(path, first_step):
    """Measured bubble: 1 - compute-row busy time / (span x GPUs), over the
    steps from first_step on (the trace's workers are one per GPU)."""
    with open(path) as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"
              and not e["args"].get("eval") and e["args"]["step"] >= first_step
              and e["pid"] < trace["otherData"]["workers"]]
    if not events:
        return None, trace["otherData"]
    t0 = min(e["ts"] for e in events)
    t1 = max(e["ts"] + e["dur"] for e in events)
    workers = trace["otherData"]["workers"]
    busy = sum(e["dur"] for e in events if e["tid"] == 2)
    return 1 - busy / ((t1 - t0) * workers), trace["otherData"]


def parse_config(text, a):
    """NAME=WORKERS:GPUS[:REPLICAS[:TRAINER[:STEPS[:ARGS]]]], e.g.
    2x2=2:0,1,2,3:2:w1-b8.trainer: REPLICAS processes of the WORKERS-worker
    plan, replica r on the r-th group of WORKERS GPUs of GPUS; ARGS are
    more trainer flags, separated by spaces (--shard-optimizer=off)."""
    name, _, spec = text.partition("=")
    parts = spec.split(":")
    workers = int(parts[0])
    gpus = parts[1] if len(parts) > 1 and parts[1] else ""
    replicas = int(parts[2]) if len(parts) > 2 and parts[2] else 1
    trainer = parts[3] if len(parts) > 3 and parts[3] else a.trainer
    steps = int(parts[4]) if len(parts) > 4 and parts[4] else a.steps
    extra = parts[5].split() if len(parts) > 5 else []
    if gpus and len(gpus.split(",")) != workers * replicas:
        raise SystemExit("--config %s: %d GPUs for %d replicas x %d workers"
                         % (text, len(gpus.split(",")), replicas, workers))
    return {"name": name, "workers": workers, "gpus": gpus,
            "replicas": replicas, "trainer": trainer, "steps": steps,
            "args": extra}


def run_group(cmds, envs, logs, timeout):
    """Runs the processes together, killing them after `timeout` seconds;
    returns (statuses, summed peak RSS in GiB, peak GPU MiB)."""
    with GpuMemoryPoller() as gpu:
        procs = [subprocess.Popen(c, env=e, stdout=l, stderr=subprocess.STDOUT)
                 for c, e, l in zip(cmds, envs, logs)]
        killer = threading.Timer(timeout, lambda: [p.kill() for p in procs])
        killer.start()
        statuses, rss = [], 0.0
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            statuses.append(os.waitstatus_to_exitcode(status))
            rss += usage.ru_maxrss / 2**20
        killer.cancel()
    return statuses, rss, gpu.peak


def rondo(a, out_dir, cfg, port):
    ids = os.path.join(out_dir, "w1-ids.npy")
    tag = cfg["name"]
    log_json = os.path.join(out_dir, "w1-rondo-%s-steps.jsonl" % tag)
    trace = os.path.join(out_dir, "w1-rondo-%s-trace.json" % tag)
    replicas, workers = cfg["replicas"], cfg["workers"]
    gpus = cfg["gpus"].split(",") if cfg["gpus"] else []
    cmds, envs, logs = [], [], []
    for r in range(replicas):
        cmd = [cfg["trainer"], "--data", ids, "--steps", str(cfg["steps"]),
               "--init=random", "--seed", "1", "--workers", str(workers),
               "--log-json", log_json, "--trace", trace, "--lr", "1e-4"]
        if gpus:
            cmd += ["--gpus", ",".join(gpus[r * workers:(r + 1) * workers])]
        if a.optimizer_mode:
            cmd += ["--optimizer-mode", a.optimizer_mode]
        cmd += cfg["args"]
        env = dict(os.environ)
        if replicas > 1:
            cmd += ["--replicas", str(replicas), "--replica-engine=nccl"]
            env.update(RANK=str(r), WORLD_SIZE=str(replicas),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       NCCL_NVLS_ENABLE="0")
        cmds.append(cmd)
        envs.append(env)
        logs.append(open(os.path.join(out_dir, "w1-rondo-%s.r%d.log" % (tag, r)), "w"))
    statuses, rss, gpu = run_group(cmds, envs, logs, a.timeout)
    for l in logs:
        l.close()
    if any(statuses):
        for r in range(replicas):
            with open(os.path.join(out_dir, "w1-rondo-%s.r%d.log" % (tag, r))) as f:
                sys.stderr.write(f.read()[-3000:])
        return {"error": "trainer exited with status %s" % statuses}
    steps = [json.loads(l) for l in open(log_json) if l.strip()]
    steady = [s for s in steps if s["step"] >= a.skip]
    # The trainer's own account of GPU memory (rank 0): the plan's arena
    # against the temporaries beside it.
    memory = {}
    with open(os.path.join(out_dir, "w1-rondo-%s.r0.log" % tag)) as f:
        for line in f:
            m = re.search(r"GPU (\d+) memory: arena ([\d.]+) GB.*temporaries peak "
                          r"([\d.]+) GB \(pool reserved ([\d.]+) GB\)", line)
            if m:
                memory[m.group(1)] = {"arena_gb": float(m.group(2)),
                                      "temporaries_gb": float(m.group(3)),
                                      "pool_reserved_gb": float(m.group(4))}
    seconds = sum(s["seconds"] for s in steady)
    tokens = 16 * 4096 * len(steady)
    bubble, plan = bubble_from_trace(trace, a.skip)
    predicted = plan.get("predictedStepSeconds")
    return {
        "workers": workers, "replicas": replicas, "trainer": os.path.basename(cfg["trainer"]),
        "args": cfg["args"],
        "gpus": len(gpus) if gpus else workers * replicas,
        "tokens_per_s": tokens / seconds,
        "step_seconds": seconds / len(steady),
        "losses": [s["loss"] for s in steps],
        "peak_gpu_mib": gpu,
        "peak_host_gib": rss,
        "gpu_memory": memory,
        "bubble": bubble,
        "plan": {k: plan[k] for k in ("program", "workers", "microbatches",
                                      "rowsPerMicrobatch", "optimizer",
                                      "predictedStepSeconds") if k in plan},
        "predicted_tokens_per_s": 16 * 4096 / predicted if predicted else None,
    }


def torch_child(a):
    """PyTorch eager W1 on GPU 0; prints one JSON line."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    config = Qwen3Config(**QWEN3_17B)
    config._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(config).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    rows = a.torch_rows
    accum = 16 // rows
    gen = torch.Generator(device="cuda").manual_seed(0)
    times, losses = [], []
    for step in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        total = 0.0
        for _ in range(accum):
            x = torch.randint(0, a.token_range, (rows, 4096), device="cuda",
                              generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss / accum
            loss.backward()
            total += float(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        losses.append(total)
    steady = times[a.skip:]
    print(json.dumps({
        "tokens_per_s": 16 * 4096 * len(steady) / sum(steady),
        "step_seconds": sum(steady) / len(steady),
        "losses": losses,
        "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "rows_per_backward": rows,
        "torch": torch.__version__,
    }), flush=True)


def pytorch(a, out_dir):
    log_path = os.path.join(out_dir, "w1-pytorch.log")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=(a.gpus or "0").split(",")[0])
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-child",
           "--steps", str(a.steps), "--skip", str(a.skip),
           "--torch-rows", str(a.torch_rows), "--token-range", str(a.token_range)]
    with open(log_path, "w") as log:
        status, rss, _, gpu = run_child(cmd, env=env, log=log)
    text = open(log_path).read()
    if status != 0:
        sys.stderr.write(text[-4000:])
        return {"error": "PyTorch exited with status %d" % status}
    result = json.loads([l for l in text.splitlines() if l.startswith("{")][-1])
    result["peak_gpu_mib"] = gpu
    result["peak_host_gib"] = rss
    return result


def mfu(tokens_per_s, gpus):
    return tokens_per_s * FLOP_PER_TOKEN / (PEAK_BF16 * gpus)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainer", help="the compiled W1 trainer")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--gpus", default="", help="--gpus of the trainer")
    p.add_argument("--optimizer-mode", default="overlap")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--skip", type=int, default=2,
                   help="steps left out of the rate (warm-up)")
    p.add_argument("--torch-rows", type=int, default=2,
                   help="PyTorch rows per forward/backward (gradient accumulation)")
    p.add_argument("--token-range", type=int, default=8192,
                   help="tokens are drawn uniformly from [0, N): something "
                   "for the loss to learn (it falls from ln 151936 = 11.9 "
                   "toward ln N), at the cost of nothing else")
    p.add_argument("--machine", default="h100x1")
    p.add_argument("--out", default=".")
    p.add_argument("--skip-pytorch", action="store_true")
    p.add_argument("--config", action="append", default=[],
                   help="NAME=WORKERS:GPUS[:REPLICAS[:TRAINER[:STEPS[:ARGS]]]], repeatable: "
                   "several Rondo configurations in one run (replicas use "
                   "the NCCL engine, started as torchrun would)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds after which a configuration's processes are killed")
    p.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.torch_child:
        torch_child(a)
        return 0
    os.makedirs(a.out, exist_ok=True)
    configs = [parse_config(c, a) for c in a.config] if a.config else (
        [parse_config("rondo=%d:%s" % (a.workers, a.gpus), a)] if a.trainer else [])
    result = {"workload": "W1", "machine": a.machine,
              "tokens_per_step": 16 * 4096, "date": time.strftime("%Y-%m-%d"),
              "rondo": {}}
    if configs:
        # One token file for every configuration: the same rows per step.
        import numpy as np
        rng = np.random.default_rng(0)
        steps = max(c["steps"] for c in configs)
        np.save(os.path.join(a.out, "w1-ids.npy"),
                rng.integers(0, a.token_range, size=(16 * steps, 4096),
                             dtype=np.int64))
    path = os.path.join(a.out, "w1-%s.json" % a.machine)
    # Written after every run, so that a run cut short keeps what finished.
    def save():
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    # The first configuration (the 1-GPU baseline), then PyTorch, then the
    # rest.
    for i, cfg in enumerate(configs):
        result["rondo"][cfg["name"]] = rondo(a, a.out, cfg, 29600 + i)
        save()
        if i == 0:
            result["pytorch"] = None if a.skip_pytorch else pytorch(a, a.out)
            save()
    if not configs:
        result["pytorch"] = None if a.skip_pytorch else pytorch(a, a.out)

    t = result["pytorch"]
    rows = []
    entries = [("rondo " + k, x, x.get("gpus", 1)) for k, x in result["rondo"].items()]
    entries.append(("pytorch eager (1 GPU)", t, 1))
    for name, x, g in entries:
        if not x or "error" in x:
            rows.append((name, x["error"] if x else "not run"))
            continue
        peak = max(x["peak_gpu_mib"].values()) / 1024 if x["peak_gpu_mib"] else float("nan")
        x["mfu"] = mfu(x["tokens_per_s"], g)
        rows.append((name, "%9.0f tok/s  MFU %4.1f%%  step %6.2f s  GPU peak %5.1f GiB"
                     "  host peak %5.1f GiB" % (x["tokens_per_s"], 100 * x["mfu"],
                                                x["step_seconds"], peak, x["peak_host_gib"])))
    ok = {k: x for k, x in result["rondo"].items() if x and "error" not in x}
    one = next((x for x in ok.values() if x["gpus"] == 1 and x["replicas"] == 1), None)
    for k, r in ok.items():
        pred = r["predicted_tokens_per_s"]
        text = "plan predicts %s tok/s (measured/predicted %s); bubble %s" % (
            "%.0f" % pred if pred else "-",
            "%.2f" % (r["tokens_per_s"] / pred) if pred else "-",
            "%.1f%%" % (100 * r["bubble"]) if r["bubble"] is not None else "-")
        if t and "error" not in t:
            r["ratio_to_pytorch"] = r["tokens_per_s"] / t["tokens_per_s"]
            text += "; %.2fx PyTorch" % r["ratio_to_pytorch"]
        if one and r is not one:
            r["scaling_over_1gpu"] = r["tokens_per_s"] / one["tokens_per_s"]
            r["scaling_efficiency"] = r["scaling_over_1gpu"] / r["gpus"]
            text += "; %.2fx 1 GPU (%.0f%% efficiency)" % (
                r["scaling_over_1gpu"], 100 * r["scaling_efficiency"])
        rows.append(("  " + k, text))
    print("W1 on %s (16 x 4096 tokens per step)" % a.machine)
    for name, text in rows:
        print("  %-24s %s" % (name, text))
    save()
    print("wrote " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
