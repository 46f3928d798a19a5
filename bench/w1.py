#!/usr/bin/env python3
"""Workload W1 of ../shared/anchors.md, Rondo beside PyTorch in one run.

W1: the Qwen3-1.7B graph (test/data/models/qwen3-1.7b.onnx, random weights),
16 x 4096 tokens per step, causal-LM loss, fp32 master weights and AdamW.
--shape qwen3-8b: the same for the Qwen3-8B architecture (scripts/
export-hf-onnx.py --preset qwen3-8b: hidden 4096, 36 layers, 32 heads, 8 KV
heads, untied LM head) at 8 x 4096 tokens per step; everything below with 8
rows for 16, MFU from its N = 6.95e9 and L = 36, H = 32, and files named
qwen3-8b-* for w1-*. Its full fine-tune does not fit one GPU: fsdp2-offload.
--shape llama3.2-1b / qwen2.5-1.5b: the other two dense shapes, scripts/
export-hf-onnx.py's FAMILY_PRESETS of those names (Llama-3.2-1B: hidden
2048, 16 layers, 32 heads of 64, 8 KV heads, Llama 3's rotary scaling, a
128256-token vocabulary; Qwen2.5-1.5B: hidden 1536, 28 layers, 12 heads of
128, 2 KV heads, biases on q, k and v; both tied and without query/key norm)
at W1's 16 x 4096 tokens per step, MFU from their configurations' N, L, H
and Q, files named after the shape.

Rondo: a trainer compiled for the GPUs (see bench/README.md for the compile
line), run for --steps steps; tokens/s over the steps after the first two,
the plan's predicted step time and the measured bubble from its --trace.

PyTorch, the anchors, each variant of --pytorch in a child process of its
own on one GPU, fp32 parameters, autocast bf16, fused AdamW (lr 1e-4), the
same 16 x 4096 tokens per step (the rows of the same token file as Rondo)
reached by gradient accumulation over --torch-rows rows at a time (no
recompute):
  eager           Hugging Face Qwen3ForCausalLM built from the same
                  configuration (the Llama and Qwen2.5 shapes:
                  AutoModelForCausalLM of their FAMILY_PRESETS fields,
                  LlamaForCausalLM / Qwen2ForCausalLM), random weights, SDPA
                  attention;
  hf-compile      the same model under torch.compile(model) (default mode);
  module-compile  a plain PyTorch module of the same configuration
                  (build_w1_module in w1_torch.py: SDPA with is_causal and native GQA), each
                  decoder block torch.compile'd and the final norm, LM head
                  and loss compiled as one function.
The steps left out of the rate (--skip, at least 1 for the compiled
variants) absorb the compilation.

Data-parallel PyTorch, named in --pytorch, on the GPUs of each --pytorch-gpus
LIST (default: one GPU), G = len(LIST) processes started here as torchrun
would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT; NCCL), each training
its 16 / G rows of the same 16-row step in chunks of --torch-rows, the loss
its mean over them, the gradients averaged over the ranks (rank_rows below):
  ddp-compile     module-compile's model and compiled blocks (no
                  DDPOptimizer split) wrapped in DistributedDataParallel
                  (default buckets; no_sync() on all but the last chunk),
                  fused AdamW on each GPU;
  fsdp2-compile   the same model, each block a torch.compile wrapper, under
                  FSDP2 (fully_shard per block and the root; bf16 parameters,
                  fp32 gradient reduction), fused AdamW on the shards;
  fsdp2-offload   fsdp2-compile with CPUOffloadPolicy: the fp32 shards, their
                  gradients and AdamW's state in host memory (shards pinned),
                  each block's shard copied to the GPU for its all-gather and
                  its gradient back; AdamW on the CPU (foreach, or
                  --offload-adam fused), the host's cores split among the
                  ranks; the model built on the meta device and given GPU
                  memory a block at a time as it is sharded; every chunk
                  reduce-scatters (no unsharded gradients kept on the GPU).
                  --offload-eager: no torch.compile. No recompute, as the
                  others: Qwen3-8B's 36 blocks keep ~13 GiB of activations
                  per 4096-token row when compiled (~23 GiB eager).
Their rows are "ddp-compile xG", with "gpus": G; the step time is the
slowest rank's, the rate the global 16 x 4096 tokens per step.

All of them run as child processes, one after the other, so that each one's
peak host memory (ru_maxrss) and peak GPU memory (nvidia-smi, polled every
100 ms) are its own; a child that fails or outlives --timeout leaves its
error in its row and the run goes on. Prints a table (the ratio column is
against the fastest PyTorch row, on as many GPUs as the row's where a
data-parallel row ran) and writes OUT/w1-<machine>.json.

    python3 bench/w1.py --trainer build-gpu/w1.trainer --workers 1 \\
        --machine h100x1 --out bench/results/h100
"""
import argparse
import contextlib
import json
import math
import os
import re
import signal
import socket
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
# scripts/export-hf-onnx.py's preset qwen3-8b (the graph of the 8B trainers):
# untied LM head.
QWEN3_8B = dict(QWEN3_17B, hidden_size=4096, intermediate_size=12288,
                num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, tie_word_embeddings=False)


def family_presets():
    """scripts/export-hf-onnx.py's FAMILY_PRESETS (the configurations its
    --preset exports, fields for transformers' AutoConfig.for_model), loaded
    as bench/families.py loads them; {} where that script is not here."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                        "export-hf-onnx.py")
    if not os.path.exists(path):
        return {}
    import importlib.util
    spec = importlib.util.spec_from_file_location("export_hf_onnx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FAMILY_PRESETS


def head_dim(config):
    """A configuration's head dimension: head_dim where it has one, else
    hidden_size / num_attention_heads (Qwen2's, as Hugging Face derives it)."""
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def decoder_matmul_params(config):
    """The decoder blocks' matmul weights of a QWEN3_17B-style dict (or a
    FAMILY_PRESETS one): q, k, v, o and the three MLP projections of every
    layer (no biases)."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * head_dim(config)
    kv = config["num_key_value_heads"] * head_dim(config)
    per_layer = hidden * (2 * q + 2 * kv) + 3 * hidden * inner
    return config["num_hidden_layers"] * per_layer


# --shape: the model and the global batch of a step (rows x seq tokens).
# matmul_params is anchors.md's N, the decoder blocks' matmul weights (no
# embedding, no LM head, no norms, no biases): 1.41e9 as anchors.md rounds
# W1's (1.409e9), 6.95e9 for Qwen3-8B (6.946e9, its model card's 6.95B
# non-embedding parameters), decoder_matmul_params of the configuration for
# the other dense shapes (Llama-3.2-1B 0.973e9; Qwen2.5-1.5B 1.310e9, its
# model card's 1.31B non-embedding parameters). prefix
# names the files a run writes. The Llama and Qwen2.5 configurations are
# scripts/export-hf-onnx.py's FAMILY_PRESETS, the graphs their trainers are
# compiled from (model_type tells w1_torch.py which Hugging Face model and
# which attention details: no query/key norm, Llama 3's rotary scaling,
# Qwen2's q/k/v biases).
SHAPES = {
    "w1": dict(title="W1", config=QWEN3_17B, rows=16, seq=4096,
               matmul_params=1.41e9, prefix="w1"),
    "qwen3-8b": dict(title="Qwen3-8B", config=QWEN3_8B, rows=8, seq=4096,
                     matmul_params=6.95e9, prefix="qwen3-8b"),
}
# 16 x 4096 tokens per step, as W1.
_FAMILIES = family_presets()
for _name, _title in (("llama3.2-1b", "Llama-3.2-1B"), ("qwen2.5-1.5b", "Qwen2.5-1.5B")):
    if _name in _FAMILIES:
        SHAPES[_name] = dict(title=_title, config=_FAMILIES[_name], rows=16, seq=4096,
                             matmul_params=decoder_matmul_params(_FAMILIES[_name]),
                             prefix=_name)


def flop_per_token(shape):
    """anchors.md's 6 N + 12 L H Q S for SHAPES[shape]; FLOP_PER_TOKEN for
    w1."""
    s = SHAPES[shape]
    c = s["config"]
    return (6 * s["matmul_params"] + 12 * c["num_hidden_layers"]
            * c["num_attention_heads"] * head_dim(c) * s["seq"])


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


def kill_group(proc):
    """Kills the process group `proc` leads, if it is still there."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(cmd, env=None, log=None, timeout=None):
    """Runs cmd in a process group of its own, killing the group after
    `timeout` seconds; returns (status, peak RSS in GiB, seconds, peak GPU
    MiB, whether it was killed for the timeout). Whatever the child left
    behind in its group (torch.compile's worker processes) goes with it."""
    start = time.monotonic()
    timed_out = threading.Event()
    with GpuMemoryPoller() as gpu:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

        def on_timeout():
            timed_out.set()
            kill_group(proc)
        killer = threading.Timer(timeout, on_timeout) if timeout else None
        if killer:
            killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            # Interrupted (^C): the child is in a session of its own and would
            # not see the terminal's signal, so end it here.
            kill_group(proc)
            raise
        finally:
            if killer:
                killer.cancel()
        kill_group(proc)
        proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux.
    return (proc.returncode, usage.ru_maxrss / 2**20,
            time.monotonic() - start, gpu.peak, timed_out.is_set())


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


def run_ranks(cmds, envs, logs, timeout=None):
    """run_child for the ranks of one data-parallel PyTorch job: each rank in
    a process group of its own, every group killed after `timeout` seconds,
    or as soon as one rank fails (the others would wait for it in NCCL),
    and at the end (torch.compile's workers). Returns (statuses, summed peak
    RSS in GiB, seconds, peak GPU MiB, whether killed for the timeout, the
    first rank that failed on its own or None)."""
    start = time.monotonic()
    timed_out = threading.Event()
    procs = []

    def kill_groups():
        for proc in procs:
            kill_group(proc)

    def on_timeout():
        timed_out.set()
        kill_groups()
    statuses, rss, failed = [None] * len(cmds), 0.0, None
    with GpuMemoryPoller() as gpu:
        killer = threading.Timer(timeout, on_timeout) if timeout else None
        try:
            for cmd, env, log in zip(cmds, envs, logs):
                procs.append(subprocess.Popen(cmd, env=env, stdout=log,
                                              stderr=subprocess.STDOUT,
                                              start_new_session=True))
            if killer:
                killer.start()
            while None in statuses:
                for r, proc in enumerate(procs):
                    if statuses[r] is not None:
                        continue
                    # This process's own children only (not -1: the poller's
                    # nvidia-smi is waited for by its thread).
                    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                    if not pid:
                        continue
                    statuses[r] = proc.returncode = os.waitstatus_to_exitcode(status)
                    rss += usage.ru_maxrss / 2**20
                    if statuses[r] != 0 and failed is None and not timed_out.is_set():
                        failed = r
                        kill_groups()
                if None in statuses:
                    time.sleep(0.2)
        except BaseException:
            # Interrupted (^C, SIGTERM through main's handler): the ranks are
            # in sessions of their own, out of reach of the terminal's signal.
            kill_groups()
            raise
        finally:
            if killer:
                killer.cancel()
        kill_groups()
    return (statuses, rss, time.monotonic() - start, gpu.peak,
            timed_out.is_set(), failed)


def free_port():
    """A TCP port free on 127.0.0.1 now, for MASTER_PORT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rondo(a, out_dir, cfg, port):
    shape = SHAPES[a.shape]
    prefix = shape["prefix"]
    ids = os.path.join(out_dir, "%s-ids.npy" % prefix)
    tag = cfg["name"]
    log_json = os.path.join(out_dir, "%s-rondo-%s-steps.jsonl" % (prefix, tag))
    trace = os.path.join(out_dir, "%s-rondo-%s-trace.json" % (prefix, tag))
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
        logs.append(open(os.path.join(out_dir, "%s-rondo-%s.r%d.log" % (prefix, tag, r)),
                         "w"))
    statuses, rss, gpu = run_group(cmds, envs, logs, a.timeout)
    for l in logs:
        l.close()
    if any(statuses):
        for r in range(replicas):
            with open(os.path.join(out_dir, "%s-rondo-%s.r%d.log" % (prefix, tag, r))) as f:
                sys.stderr.write(f.read()[-3000:])
        return {"error": "trainer exited with status %s" % statuses}
    steps = [json.loads(l) for l in open(log_json) if l.strip()]
    steady = [s for s in steps if s["step"] >= a.skip]
    # The trainer's own account of GPU memory (rank 0): the plan's arena
    # against the temporaries beside it.
    memory = {}
    with open(os.path.join(out_dir, "%s-rondo-%s.r0.log" % (prefix, tag))) as f:
        for line in f:
            m = re.search(r"GPU (\d+) memory: arena ([\d.]+) GB.*temporaries peak "
                          r"([\d.]+) GB \(pool reserved ([\d.]+) GB"
                          r"(?:; CUDA graphs ([\d.]+) GB)?\)", line)
            if m:
                memory[m.group(1)] = {"arena_gb": float(m.group(2)),
                                      "temporaries_gb": float(m.group(3)),
                                      "pool_reserved_gb": float(m.group(4))}
                if m.group(5) is not None:
                    memory[m.group(1)]["cuda_graphs_gb"] = float(m.group(5))
    seconds = sum(s["seconds"] for s in steady)
    # The shape's global batch per step (the trainer was compiled for it).
    step_tokens = shape["rows"] * shape["seq"]
    tokens = step_tokens * len(steady)
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
        "predicted_tokens_per_s": step_tokens / predicted if predicted else None,
    }


PYTORCH_VARIANTS = ("eager", "hf-compile", "module-compile")
# On the GPUs of each --pytorch-gpus list; run only when --pytorch names them.
DATA_PARALLEL_VARIANTS = ("ddp-compile", "fsdp2-compile", "fsdp2-offload")


def rank_rows(world, rank, torch_rows, rows=16):
    """A data-parallel rank's share of each `rows`-row global batch (16 for
    W1, the shape's rows): rows first ... first + count - 1 (count = rows /
    world, contiguous), trained `per` rows per forward/backward
    (--torch-rows, at most the share) in `chunks` chunks. Each chunk's loss
    is its mean over its targets divided by `chunks`, and DDP and FSDP
    average the gradients over the ranks, so every row weighs 1 / (world x
    chunks x per) = 1/rows of the step's gradient, as in the one-GPU variants
    (rows / --torch-rows chunks of --torch-rows rows). Returns (first, count,
    per, chunks)."""
    if world < 1 or rows % world:
        raise ValueError("%d GPUs do not divide the %d rows of a step" % (world, rows))
    if torch_rows < 1 or rows % torch_rows:
        raise ValueError("--torch-rows %d does not divide %d" % (torch_rows, rows))
    count = rows // world
    # Both divide rows, so the smaller divides the larger.
    per = min(torch_rows, count)
    return rank * count, count, per, count // per


def parse_gpu_lists(texts, rows=16):
    """--pytorch-gpus, each a comma list of GPU ids: the lists, each with
    distinct GPUs, a count that divides the `rows` rows of a step, and no
    two of the same count (a row's name is its variant and count,
    "ddp-compile x4")."""
    lists, counts = [], set()
    for text in texts:
        gpus = [g.strip() for g in text.split(",") if g.strip()]
        if not gpus or len(set(gpus)) != len(gpus):
            raise ValueError("--pytorch-gpus %r: empty or a GPU twice" % text)
        if rows % len(gpus):
            raise ValueError("--pytorch-gpus %r: %d GPUs do not divide the %d "
                             "rows of a step" % (text, len(gpus), rows))
        if len(gpus) in counts:
            raise ValueError("--pytorch-gpus: two lists of %d GPUs" % len(gpus))
        counts.add(len(gpus))
        lists.append(gpus)
    return lists


def failed_row(row, why, text):
    """A PyTorch row that has no result: why, with the log's last line, and
    the log's tail (also on stderr)."""
    lines = [l for l in text.splitlines() if l.strip()]
    row["error"] = why + (": " + lines[-1][:300] if lines else "")
    row["log_tail"] = text[-3000:]
    sys.stderr.write(text[-4000:])
    return row


def pytorch(a, out_dir, variant, ids_path):
    """Runs one PyTorch variant as a child process; returns its row, with
    "error" (and the log's tail) where it failed, was killed or printed no
    result."""
    name = "pytorch-" + variant
    log_path = os.path.join(out_dir, "%s-%s.log" % (SHAPES[a.shape]["prefix"], name))
    # The first of the first --pytorch-gpus list, or else of --gpus.
    first_gpu = (parse_gpu_lists(a.pytorch_gpus, SHAPES[a.shape]["rows"])[0][0]
                 if a.pytorch_gpus else (a.gpus or "0").split(",")[0])
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=first_gpu)
    skip = max(a.skip, 1) if variant != "eager" else a.skip
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-child", variant,
           "--torch-data", ids_path, "--steps", str(a.steps), "--skip", str(skip),
           "--torch-rows", str(a.torch_rows), "--shape", a.shape]
    if a.profile_torch:
        cmd.append("--profile-torch")
    row = {"name": name, "variant": variant}
    try:
        with open(log_path, "w") as log:
            status, rss, seconds, gpu, timed_out = run_child(
                cmd, env=env, log=log, timeout=a.timeout)
        with open(log_path, errors="replace") as f:
            text = f.read()
        row.update(peak_gpu_mib=gpu, peak_host_gib=rss, wall_seconds=seconds)
        results = [l for l in text.splitlines() if l.startswith("{")]
        if status != 0 or not results:
            if timed_out:
                why = "killed after --timeout %g s" % a.timeout
            elif status != 0:
                why = "exited with status %d" % status
            else:
                why = "printed no result"
            return failed_row(row, why, text)
        row.update(json.loads(results[-1]))
    except Exception as e:  # a broken child must not end the run
        row["error"] = "%s: %s" % (type(e).__name__, e)
    return row


def pytorch_data_parallel(a, out_dir, variant, gpus, ids_path):
    """Runs data-parallel variant `variant` on the GPUs `gpus` (ids), one
    rank each, as torchrun would start them; returns its row ("ddp-compile
    x4"), with "error" (and the failing rank's log tail) where a rank failed,
    they were killed for --timeout or rank 0 printed no result."""
    world = len(gpus)
    label = "%s x%d" % (variant, world)
    name = "pytorch-" + label
    logs = [os.path.join(out_dir, "%s-pytorch-%s-x%d.r%d.log" % (
        SHAPES[a.shape]["prefix"], variant, world, r)) for r in range(world)]
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-child", variant,
           "--torch-data", ids_path, "--steps", str(a.steps),
           "--skip", str(max(a.skip, 1)), "--torch-rows", str(a.torch_rows),
           "--shape", a.shape]
    if variant == "fsdp2-offload":
        cmd += ["--offload-adam", a.offload_adam] + (
            ["--offload-eager"] if a.offload_eager else [])
    if a.profile_torch:
        cmd.append("--profile-torch")
    port = free_port()
    envs = [dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(gpus), RANK=str(r),
                 LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                 LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
            for r in range(world)]
    row = {"name": name, "variant": label, "gpus": world, "gpu_ids": ",".join(gpus)}
    try:
        files = [open(path, "w") for path in logs]
        try:
            statuses, rss, seconds, gpu, timed_out, failed = run_ranks(
                [cmd] * world, envs, files, timeout=a.timeout)
        finally:
            for f in files:
                f.close()
        row.update(peak_gpu_mib=gpu, peak_host_gib=rss, wall_seconds=seconds)
        with open(logs[0], errors="replace") as f:
            results = [l for l in f.read().splitlines() if l.startswith("{")]
        if any(statuses) or not results:
            with open(logs[failed or 0], errors="replace") as f:
                text = f.read()
            if timed_out:
                why = "killed after --timeout %g s" % a.timeout
            elif failed is not None:
                why = "rank %d exited with status %d" % (failed, statuses[failed])
            elif any(statuses):
                why = "exited with statuses %s" % statuses
            else:
                why = "printed no result"
            return failed_row(row, why, text)
        row.update(json.loads(results[-1]))
    except Exception as e:  # a broken child must not end the run
        row["error"] = "%s: %s" % (type(e).__name__, e)
    return row


def mfu(tokens_per_s, gpus, flop=FLOP_PER_TOKEN):
    """Model FLOP utilisation, anchors.md's: FLOP per token `flop` (W1's
    by default; flop_per_token(shape))."""
    return tokens_per_s * flop / (PEAK_BF16 * gpus)


def self_check():
    """--self-check: check_rank_rows and check_shapes (pure Python), then
    module_check where there is torch."""
    from w1_checks import check_rank_rows, check_shapes
    split_ok = check_rank_rows()
    split_ok = check_shapes() and split_ok
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch not available: no module comparison")
        return 0 if split_ok else 1
    from w1_torch import module_check
    return module_check() or (0 if split_ok else 1)


def report(result):
    """Adds MFU and the ratios to PyTorch to the rows of `result`; returns
    the table's lines. The ratio column is against the fastest PyTorch row
    (result["best_pytorch"]); where a PyTorch row ran on several GPUs
    (--pytorch-gpus), against the fastest PyTorch row on as many GPUs as the
    row's (result["best_pytorch_by_gpus"], "-" where there is none)."""
    shape = SHAPES[result.get("shape", "w1")]
    flop = flop_per_token(result.get("shape", "w1"))
    torch_rows = result.get("pytorch_variants") or {}
    ok_torch = {v: x for v, x in torch_rows.items() if x and "error" not in x}
    best = max(ok_torch, key=lambda v: ok_torch[v]["tokens_per_s"]) if ok_torch else None
    result["best_pytorch"] = best
    by_gpus = {}  # GPUs -> the fastest PyTorch row on that many
    for v, x in ok_torch.items():
        g = x.get("gpus", 1)
        if g not in by_gpus or x["tokens_per_s"] > ok_torch[by_gpus[g]]["tokens_per_s"]:
            by_gpus[g] = v
    per_gpus = any(g > 1 for g in by_gpus)
    if per_gpus:
        result["best_pytorch_by_gpus"] = {str(g): v for g, v in sorted(by_gpus.items())}
    lines = ["%s on %s (%d x %d tokens per step)" % (
        shape["title"], result["machine"], shape["rows"], shape["seq"]),
             "  %-24s %9s %6s %7s %9s %10s  %s" % (
                 "", "tok/s", "MFU", "step", "GPU peak", "host peak",
                 "vs the fastest pytorch on as many GPUs" if per_gpus
                 else "vs pytorch-" + best if best else "")]
    entries = [("rondo " + k, x, x.get("gpus", 1) if x else 1)
               for k, x in result["rondo"].items()]
    entries += [("pytorch-" + v, x, x.get("gpus", 1) if x else 1)
                for v, x in torch_rows.items()]
    if not torch_rows:
        entries.append(("pytorch", None, 1))
    for name, x, g in entries:
        if not x or "error" in x:
            lines.append("  %-24s %s" % (name, x["error"] if x else "not run"))
            continue
        peak = (max(x["peak_gpu_mib"].values()) / 1024 if x.get("peak_gpu_mib")
                else float("nan"))
        x["mfu"] = mfu(x["tokens_per_s"], g, flop)
        if per_gpus:
            ref = by_gpus.get(g)
            ratio = ("%.2fx %s" % (x["tokens_per_s"] / ok_torch[ref]["tokens_per_s"], ref)
                     if ref else "-")
        else:
            ratio = ("%.2fx" % (x["tokens_per_s"] / ok_torch[best]["tokens_per_s"])
                     if best else "")
        lines.append("  %-24s %9.0f %5.1f%% %6.2fs %5.1f GiB %6.1f GiB  %s" % (
            name, x["tokens_per_s"], 100 * x["mfu"], x["step_seconds"], peak,
            x["peak_host_gib"], ratio))
    ok = {k: x for k, x in result["rondo"].items() if x and "error" not in x}
    one = next((x for x in ok.values() if x["gpus"] == 1 and x["replicas"] == 1), None)
    for k, r in ok.items():
        pred = r["predicted_tokens_per_s"]
        text = "plan predicts %s tok/s (measured/predicted %s); bubble %s" % (
            "%.0f" % pred if pred else "-",
            "%.2f" % (r["tokens_per_s"] / pred) if pred else "-",
            "%.1f%%" % (100 * r["bubble"]) if r["bubble"] is not None else "-")
        r["vs_pytorch"] = {v: r["tokens_per_s"] / x["tokens_per_s"]
                           for v, x in ok_torch.items()}
        if "eager" in r["vs_pytorch"]:
            r["ratio_to_pytorch"] = r["vs_pytorch"]["eager"]
        if r["vs_pytorch"]:
            text += "; PyTorch: " + ", ".join(
                "%.2fx %s" % (q, v) for v, q in r["vs_pytorch"].items())
        if per_gpus and r["gpus"] in by_gpus:
            ref = by_gpus[r["gpus"]]
            r["vs_pytorch_same_gpus"] = {ref: r["vs_pytorch"][ref]}
            text += "; on as many GPUs %.2fx %s" % (r["vs_pytorch"][ref], ref)
        if one and r is not one:
            r["scaling_over_1gpu"] = r["tokens_per_s"] / one["tokens_per_s"]
            r["scaling_efficiency"] = r["scaling_over_1gpu"] / r["gpus"]
            text += "; %.2fx 1 GPU (%.0f%% efficiency)" % (
                r["scaling_over_1gpu"], 100 * r["scaling_efficiency"])
        lines.append("  %s: %s" % (k, text))
    if per_gpus and 1 in by_gpus:
        base = ok_torch[by_gpus[1]]
        for v, x in ok_torch.items():
            if x.get("gpus", 1) > 1:
                x["scaling_over_1gpu_pytorch"] = x["tokens_per_s"] / base["tokens_per_s"]
                lines.append("  pytorch-%s: %.2fx pytorch-%s on 1 GPU (%.0f%% efficiency)" % (
                    v, x["scaling_over_1gpu_pytorch"], by_gpus[1],
                    100 * x["scaling_over_1gpu_pytorch"] / x["gpus"]))
    return lines


def parse_variants(text):
    variants = [v.strip() for v in text.split(",") if v.strip()]
    known = PYTORCH_VARIANTS + DATA_PARALLEL_VARIANTS
    for v in variants:
        if v not in known:
            raise SystemExit("--pytorch: %r is none of %s" % (v, ",".join(known)))
    return list(dict.fromkeys(variants))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="w1",
                   help="the model and global batch: w1 (Qwen3-1.7B, 16 x 4096 "
                   "tokens per step), qwen3-8b (Qwen3-8B, untied LM head, "
                   "8 x 4096), llama3.2-1b (Llama-3.2-1B, 16 x 4096) or "
                   "qwen2.5-1.5b (Qwen2.5-1.5B, 16 x 4096), the last two "
                   "scripts/export-hf-onnx.py's presets; the trainers must be "
                   "compiled for it")
    p.add_argument("--trainer", help="the compiled trainer (W1's, or --shape's)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--gpus", default="", help="--gpus of the trainer (PyTorch "
                   "runs on the first of them, unless --pytorch-gpus)")
    p.add_argument("--optimizer-mode", default="overlap")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--skip", type=int, default=2,
                   help="steps left out of the rate (warm-up; at least 1 for "
                   "the compiled PyTorch variants, whose first step compiles)")
    p.add_argument("--torch-rows", type=int, default=2,
                   help="PyTorch rows per forward/backward (gradient "
                   "accumulation); divides the shape's rows per step")
    p.add_argument("--token-range", type=int, default=8192,
                   help="tokens are drawn uniformly from [0, N): something "
                   "for the loss to learn (it falls from ln 151936 = 11.9 "
                   "toward ln N), at the cost of nothing else")
    p.add_argument("--machine", default="h100x1")
    p.add_argument("--out", default=".")
    p.add_argument("--pytorch", default=",".join(PYTORCH_VARIANTS), metavar="LIST",
                   help="the PyTorch variants to run, a comma list of %s "
                   "(default: these; empty: none) and the data-parallel %s, "
                   "run on each --pytorch-gpus list" % (
                       ",".join(PYTORCH_VARIANTS), ",".join(DATA_PARALLEL_VARIANTS)))
    p.add_argument("--pytorch-gpus", action="append", default=[], metavar="LIST",
                   help="GPU ids, e.g. 0,1,2,3, repeatable (--pytorch-gpus 0 "
                   "--pytorch-gpus 0,1 ...): each data-parallel variant of "
                   "--pytorch runs once per LIST, one process per GPU, each "
                   "training 16/len(LIST) rows of every step (8/len(LIST) "
                   "for --shape qwen3-8b; its row: "
                   "\"ddp-compile x4\"); the one-GPU variants run on the first "
                   "GPU of the first LIST. Default: the first of --gpus, or 0")
    p.add_argument("--skip-pytorch", action="store_true", help="run no PyTorch variant")
    p.add_argument("--config", action="append", default=[],
                   help="NAME=WORKERS:GPUS[:REPLICAS[:TRAINER[:STEPS[:ARGS]]]], repeatable: "
                   "several Rondo configurations in one run (replicas use "
                   "the NCCL engine, started as torchrun would)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds after which a configuration's processes, or a "
                   "PyTorch variant's, are killed")
    p.add_argument("--self-check", action="store_true",
                   help="compare module-compile's model with Hugging Face's on a "
                   "tiny configuration (CPU; the compiled module too if there "
                   "is a GPU) and exit")
    p.add_argument("--offload-adam", choices=("foreach", "fused"), default="foreach",
                   help="fsdp2-offload's AdamW on the CPU shards: foreach=True "
                   "(default) or fused=True (PyTorch's CPU fused Adam, "
                   "torch >= 2.4)")
    p.add_argument("--offload-eager", action="store_true",
                   help="fsdp2-offload without torch.compile (eager blocks, "
                   "head and loss), should compiling fail under CPU offload")
    p.add_argument("--profile-torch", action="store_true",
                   help="after the timed steps, one more PyTorch step under "
                        "torch.profiler: GPU ms per kernel category in the JSON "
                        "(kernel_ms_by_category)")
    p.add_argument("--torch-child", choices=PYTORCH_VARIANTS + DATA_PARALLEL_VARIANTS,
                   help=argparse.SUPPRESS)
    p.add_argument("--torch-data", help=argparse.SUPPRESS)
    p.add_argument("--torch-init-from", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.self_check:
        return self_check()
    if a.torch_child in DATA_PARALLEL_VARIANTS:
        from w1_torch import torch_data_parallel_child
        torch_data_parallel_child(a)
        return 0
    if a.torch_child:
        from w1_torch import torch_child
        torch_child(a)
        return 0
    variants = [] if a.skip_pytorch else parse_variants(a.pytorch)
    shape = SHAPES[a.shape]
    step_rows, seq = shape["rows"], shape["seq"]
    try:
        gpu_lists = (parse_gpu_lists(a.pytorch_gpus, step_rows) if a.pytorch_gpus
                     else [[(a.gpus or "0").split(",")[0]]])
    except ValueError as e:
        raise SystemExit(str(e))
    if (variants and any(len(g) > 1 for g in gpu_lists)
            and not set(variants) & set(DATA_PARALLEL_VARIANTS)):
        raise SystemExit("--pytorch-gpus: several GPUs, but --pytorch names none "
                         "of the data-parallel variants %s"
                         % ",".join(DATA_PARALLEL_VARIANTS))
    # The PyTorch children run in sessions of their own (run_child), out of
    # reach of a signal sent to this process's group (an outer `timeout`):
    # exiting through SystemExit lets run_child end the running one.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _: sys.exit(128 + number))
    if a.torch_rows < 1 or step_rows % a.torch_rows:
        raise SystemExit("--torch-rows must divide %d" % step_rows)
    if variants and a.steps <= max(a.skip, 1 if set(variants) - {"eager"} else 0):
        raise SystemExit("--steps %d leaves no PyTorch step to time after --skip %d"
                         " (at least 1 for the compiled variants)" % (a.steps, a.skip))
    os.makedirs(a.out, exist_ok=True)
    configs = [parse_config(c, a) for c in a.config] if a.config else (
        [parse_config("rondo=%d:%s" % (a.workers, a.gpus), a)] if a.trainer else [])
    result = {"workload": shape["title"], "machine": a.machine,
              "tokens_per_step": step_rows * seq, "date": time.strftime("%Y-%m-%d"),
              "rondo": {}, "pytorch": None, "pytorch_variants": {}}
    if a.shape != "w1":
        # W1's JSON stays as it was; report() reads this (w1 without).
        result["shape"] = a.shape
        result["rows_per_step"] = step_rows
        result["flop_per_token"] = flop_per_token(a.shape)
    if a.pytorch_gpus:
        result["pytorch_gpus"] = [",".join(g) for g in gpu_lists]
    ids = os.path.join(a.out, "%s-ids.npy" % shape["prefix"])
    if configs or variants:
        # One token file for every configuration and PyTorch variant: the
        # same rows per step.
        import numpy as np
        rng = np.random.default_rng(0)
        steps = max([c["steps"] for c in configs] + ([a.steps] if variants else []))
        np.save(ids, rng.integers(0, a.token_range, size=(step_rows * steps, seq),
                                  dtype=np.int64))
    path = os.path.join(a.out, "%s-%s.json" % (shape["prefix"], a.machine))
    # Written after every run, so that a run cut short keeps what finished.
    def save():
        with open(path, "w") as f:
            json.dump(result, f, indent=1)

    def run_pytorch():
        for v in variants:
            if v in DATA_PARALLEL_VARIANTS:
                # One row per GPU list, "ddp-compile x4".
                for gpus in gpu_lists:
                    row = pytorch_data_parallel(a, a.out, v, gpus, ids)
                    result["pytorch_variants"]["%s x%d" % (v, len(gpus))] = row
                    save()
                continue
            row = pytorch(a, a.out, v, ids)
            result["pytorch_variants"][v] = row
            if v == "eager":
                result["pytorch"] = row  # the field of earlier runs' JSON
            save()
    # The first configuration (the 1-GPU baseline), then PyTorch, then the
    # rest.
    for i, cfg in enumerate(configs):
        result["rondo"][cfg["name"]] = rondo(a, a.out, cfg, 29600 + i)
        save()
        if i == 0:
            run_pytorch()
    if not configs:
        run_pytorch()
    lines = report(result)
    print("\n".join(lines))
    save()
    print("wrote " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
