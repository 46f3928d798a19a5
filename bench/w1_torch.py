"""What runs inside bench/w1.py's PyTorch child processes: the plain
PyTorch Qwen3 (or Llama, Qwen2) module the compiled variants train
(build_w1_module), the Hugging Face model eager and hf-compile train
(hf_causal_lm), one GPU's child (torch_child), one rank of a data-parallel
variant (torch_data_parallel_child), and the module checks of --self-check
that need torch. bench/w1.py starts the children and reads what they
print."""
import contextlib
import json
import math
import os
import re
import sys
import time

from w1 import QWEN3_17B, SHAPES, head_dim as config_head_dim, rank_rows

# The model types build_w1_module knows (Hugging Face's model_type; a
# configuration without one is Qwen3's): whether the attention has
# RMSNorms on each head's query and key (Qwen3's q_norm, k_norm).
QK_NORM = {"qwen3": True, "llama": False, "qwen2": False}


def build_w1_module(config, compile_parts=False, wrap_blocks=False):
    """module-compile's model: Qwen3 as a plain PyTorch module (no Hugging
    Face) from a QWEN3_17B-style dict (or QWEN3_8B), or Llama or Qwen2 from
    a dict with that model_type ("llama", "qwen2": scripts/export-hf-onnx.py's
    FAMILY_PRESETS, Hugging Face's fields). Needs torch, not CUDA: build it
    under `with torch.device(...)`. Parameter names are those of Hugging
    Face's Qwen3Model (LlamaModel, Qwen2Model), so that its state_dict loads
    here (see module_check). What differs between the three:
      q_norm, k_norm   RMSNorm of each head's query and key before the
                       rotation: Qwen3 only;
      biases           Qwen2: on q, k and v (not o); Llama: on q, k, v and o
                       where attention_bias, on the MLP where mlp_bias;
                       Qwen3: on q, k, v and o where attention_bias;
      head_dim         the config's, else hidden_size / num_attention_heads;
      rotary           theta = rope_theta, Hugging Face's default
                       frequencies, or Llama 3's rescaled ones where
                       rope_scaling's rope_type is "llama3".
    The LM head is the embedding where tie_word_embeddings (W1, Llama-3.2-1B,
    Qwen2.5-1.5B), else a Linear of its own, lm_head (Qwen3-8B; the name
    Qwen3ForCausalLM gives it). model(ids) returns the causal-LM loss, the
    mean over the tokens of ids[:, 1:] (Hugging Face's, with labels=ids).

    compile_parts: each decoder block torch.compile'd (Module.compile, in
    place), and the final norm + LM head + loss compiled as one function.
    wrap_blocks (with compile_parts): each block replaced by its
    torch.compile wrapper instead, so that hooks put on the blocks later
    (FSDP2's fully_shard) run outside the compiled code, as torchtitan
    compiles before it shards."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    model_type = config.get("model_type", "qwen3")
    if model_type not in QK_NORM:
        raise ValueError("build_w1_module: model_type %r is none of %s"
                         % (model_type, ", ".join(sorted(QK_NORM))))
    qk_norm = QK_NORM[model_type]
    # Hugging Face's: Qwen2Attention's q, k, v always with biases and o
    # without; LlamaAttention's and Qwen3Attention's all four with
    # attention_bias, LlamaMLP's with mlp_bias.
    if model_type == "qwen2":
        qkv_bias, o_bias = True, False
    else:
        qkv_bias = o_bias = bool(config.get("attention_bias", False))
    mlp_bias = model_type == "llama" and bool(config.get("mlp_bias", False))
    eps = config["rms_norm_eps"]
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads, head_dim = config["num_key_value_heads"], config_head_dim(config)
    scaling = config.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ("default", "llama3"):
        raise ValueError("build_w1_module: rope_scaling %r: only llama3's is "
                         "implemented" % (scaling,))

    def rms_norm(x, weight):
        # Hugging Face's Qwen3RMSNorm (LlamaRMSNorm and Qwen2RMSNorm are the
        # same): in fp32, the weight times the result cast back to the
        # input's dtype.
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x.to(dtype)

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return rms_norm(x, self.weight)

    def rotate(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(hidden, heads * head_dim, bias=qkv_bias)
            self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias)
            self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=o_bias)
            if qk_norm:
                self.q_norm = RMSNorm(head_dim)
                self.k_norm = RMSNorm(head_dim)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, heads, head_dim)
            k = self.k_proj(x).view(b, t, kv_heads, head_dim)
            if qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            v = self.v_proj(x).view(b, t, kv_heads, head_dim).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            # Native GQA: no materialised mask, K/V not repeated to all heads.
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=True)
            return self.o_proj(o.transpose(1, 2).reshape(b, t, heads * head_dim))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            inner = config["intermediate_size"]
            self.gate_proj = nn.Linear(hidden, inner, bias=mlp_bias)
            self.up_proj = nn.Linear(hidden, inner, bias=mlp_bias)
            self.down_proj = nn.Linear(inner, hidden, bias=mlp_bias)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = Attention()
            self.mlp = MLP()
            self.input_layernorm = RMSNorm(hidden)
            self.post_attention_layernorm = RMSNorm(hidden)

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    def head_loss(x, norm_weight, embedding, ids):
        logits = F.linear(rms_norm(x, norm_weight), embedding)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(),
                               ids[:, 1:].flatten())

    class W1Module(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(config["vocab_size"], hidden)
            self.layers = nn.ModuleList(
                Block() for _ in range(config["num_hidden_layers"]))
            self.norm = RMSNorm(hidden)
            if not config["tie_word_embeddings"]:
                self.lm_head = nn.Linear(hidden, config["vocab_size"], bias=False)
            self.head_loss = torch.compile(head_loss) if compile_parts else head_loss
            self.rope = {}
            # Hugging Face's _init_weights: normal(0, initializer_range) for
            # linear and embedding weights, zeros for the biases, ones for
            # the norms.
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def rotary(self, t, device):
            """cos, sin [1, 1, t, head_dim] in fp32, as Hugging Face's rotary
            embedding: theta = rope_theta, its default frequencies, or Llama
            3's rescaled ones (inverse_frequencies)."""
            key = (t, str(device))
            if key not in self.rope:
                with torch.autocast(device.type, enabled=False):
                    self.rope[key] = self.rotary_tables(t, device)
            return self.rope[key]

        def inverse_frequencies(self, device):
            """Hugging Face's _compute_default_rope_parameters and, where
            rope_scaling's rope_type is llama3, _compute_llama3_parameters:
            the wavelengths longer than original_max_position_embeddings /
            low_freq_factor divided by factor, those shorter than
            original / high_freq_factor kept, the ones between interpolated
            (both leave the attention scaling at 1)."""
            exponent = torch.arange(0, head_dim, 2, dtype=torch.int64,
                                    device=device).float() / head_dim
            inv = 1.0 / (config["rope_theta"] ** exponent)
            if rope_type != "llama3":
                return inv
            factor = scaling["factor"]
            low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
            original = scaling["original_max_position_embeddings"]
            low_freq_wavelen = original / low
            high_freq_wavelen = original / high
            wavelen = 2 * math.pi / inv
            inv_llama = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
            smooth = (original / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
            medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
            return torch.where(medium, smoothed, inv_llama)

        def rotary_tables(self, t, device):
            inv = self.inverse_frequencies(device)
            freqs = torch.outer(torch.arange(t, device=device).float(), inv)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos()[None, None], emb.sin()[None, None]

        def forward(self, ids):
            x = self.embed_tokens(ids)
            cos, sin = self.rotary(ids.shape[1], ids.device)
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
            for layer in self.layers:
                x = layer(x, cos, sin)
            head = (self.embed_tokens.weight if config["tie_word_embeddings"]
                    else self.lm_head.weight)
            return self.head_loss(x, self.norm.weight, head, ids)

    model = W1Module()
    if compile_parts:
        # One compiled graph serves all the blocks (parameters are graph
        # inputs); a higher limit in case a torch version guards per module.
        dynamo = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo, name):
                setattr(dynamo, name, max(getattr(dynamo, name), 64))
        if wrap_blocks:
            for i in range(len(model.layers)):
                model.layers[i] = torch.compile(model.layers[i])
        else:
            for layer in model.layers:
                layer.compile()
    return model


# PyTorch's kernels by name (cuBLAS/CUTLASS GEMMs, SDPA's flash or cuDNN
# attention, the fused AdamW, copies and casts), for --profile-torch.
KERNEL_CATEGORIES = [
    # Only the data-parallel variants launch NCCL kernels.
    ("communication (NCCL)", re.compile(r"nccl", re.I)),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|_mha", re.I)),
    ("GEMMs (LM head included)",
     re.compile(r"gemm|xmma|cutlass|nvjet|cublas|sm90_|sm80_|ampere_|triton_tem", re.I)),
    ("AdamW", re.compile(r"adam|multi_tensor", re.I)),
    ("cross-entropy", re.compile(r"softmax|nll|cross_entropy", re.I)),
    ("copies, casts, fills", re.compile(r"copy|memcpy|memset|fill|cat_|CatArray", re.I)),
]


def kernel_category(name):
    for category, pattern in KERNEL_CATEGORIES:
        if pattern.search(name):
            return category
    return "elementwise, norms, rotary, accumulation"


def kernel_ms_by_category(run):
    """run() (one more step) under torch.profiler: GPU ms per kernel
    category, the categories of docs/Performance.md's table."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
    categories = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        cat = kernel_category(e.name)
        categories[cat] = categories.get(cat, 0.0) + e.time_range.elapsed_us() / 1e3
    return categories


def hf_causal_lm(fields, init_from=None):
    """The Hugging Face causal LM of a configuration dict, SDPA attention,
    fp32, on the CPU, random weights (or init_from's, a directory that
    from_pretrained reads): Qwen3ForCausalLM of a QWEN3_17B-style dict (no
    model_type), else AutoModelForCausalLM of AutoConfig.for_model(**fields)
    (the FAMILY_PRESETS shapes: LlamaForCausalLM, Qwen2ForCausalLM)."""
    import torch
    if "model_type" not in fields:
        from transformers import Qwen3Config, Qwen3ForCausalLM
        config = Qwen3Config(**fields)
        config._attn_implementation = "sdpa"
        if init_from:
            return Qwen3ForCausalLM.from_pretrained(
                init_from, config=config, torch_dtype=torch.float32)
        return Qwen3ForCausalLM(config)
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.for_model(**fields)
    if init_from:
        return AutoModelForCausalLM.from_pretrained(
            init_from, config=config, torch_dtype=torch.float32,
            attn_implementation="sdpa")
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def torch_child(a):
    """PyTorch variant a.torch_child of --shape (W1) on GPU 0; prints one
    JSON line."""
    import numpy as np
    import torch
    variant = a.torch_child
    shape = SHAPES[a.shape]
    step_rows, seq = shape["rows"], shape["seq"]
    torch.manual_seed(0)
    if variant in ("eager", "hf-compile"):
        # a.torch_init_from: the initial weights of a Rondo trainer (--steps
        # 0 --export-safetensors), for bench/loss_parity.py.
        model = hf_causal_lm(shape["config"], a.torch_init_from).cuda()
        run = torch.compile(model) if variant == "hf-compile" else model

        def loss_of(x):
            return run(input_ids=x, labels=x).loss
    elif variant == "module-compile":
        with torch.device("cuda"):
            model = build_w1_module(shape["config"], compile_parts=True)
        loss_of = model
    else:
        raise SystemExit("unknown PyTorch variant " + variant)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    # The rows of the token file Rondo reads: step s trains on rows
    # 16 s ... 16 s + 15 (mod the file's rows; 8 for qwen3-8b), as the
    # trainer does.
    ids = np.load(a.torch_data, mmap_mode="r")
    if ids.ndim != 2 or ids.shape[1] != seq:
        raise SystemExit("%s: shape %s, not [rows, %d]" % (a.torch_data, ids.shape, seq))
    rows = a.torch_rows
    accum = step_rows // rows
    times, losses = [], []

    def one_step(step):
        index = (step_rows * step + np.arange(step_rows)) % ids.shape[0]
        batch = torch.from_numpy(np.ascontiguousarray(ids[index], dtype=np.int64)).cuda()
        torch.cuda.synchronize()
        t = time.perf_counter()
        total = torch.zeros((), device="cuda")
        for i in range(accum):
            x = batch[i * rows:(i + 1) * rows]
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_of(x) / accum
            loss.backward()
            total += loss.detach().float()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t, float(total)

    for step in range(a.steps):
        seconds, loss = one_step(step)
        times.append(seconds)
        losses.append(loss)
        print("step %d: %.3f s, loss %.4f" % (step, times[-1], losses[-1]),
              file=sys.stderr, flush=True)
    categories = None
    if a.profile_torch:
        categories = kernel_ms_by_category(lambda: one_step(a.steps))
    print(json.dumps(timing_result(variant, times, a.skip, losses,
                                   step_rows * seq, categories,
                                   rows_per_backward=rows)), flush=True)


def offload_materialized(model, shard, device="cuda"):
    """fsdp2-offload's model, built on the meta device (no memory): each part
    given GPU memory and its initial weights (as build_w1_module's: normal(0,
    0.02) for the linear and embedding weights, zeros for the biases (Qwen2's
    q, k, v), ones for the norms) just
    before shard(part) (fully_shard with CPUOffloadPolicy) keeps its shard in
    pinned host memory and frees the rest: the blocks one at a time, then
    the root (embedding, final norm, LM head). The whole fp32 model, 33 GB at
    Qwen3-8B, is never on a GPU at once, so that the GPU peak is training's,
    not the initialisation's. Every rank draws the same full weights
    (torch.manual_seed before) and keeps its shard of them."""
    import torch

    def materialize(prefix, module):
        module.to_empty(device=device, recurse=True)
        with torch.no_grad():
            for name, p in module.named_parameters(prefix=prefix):
                # The RMSNorms' weights: input_layernorm, q_norm, ..., norm.
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.normal_(mean=0.0, std=0.02)

    for i, layer in enumerate(model.layers):
        materialize("layers.%d" % i, layer)
        shard(layer)
    for name, child in model.named_children():
        if name != "layers":
            materialize(name, child)
    shard(model)


def torch_data_parallel_child(a):
    """One rank of data-parallel PyTorch variant a.torch_child (RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in the environment,
    as torchrun sets them): its share of each step's rows (16 for W1, the
    --shape's; rank_rows); rank 0 prints one JSON line, the step time the
    slowest rank's."""
    import numpy as np
    import torch
    import torch.distributed as dist
    variant = a.torch_child
    shape = SHAPES[a.shape]
    step_rows, seq = shape["rows"], shape["seq"]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    first, count, per, chunks = rank_rows(world, rank, a.torch_rows, step_rows)
    offload = variant == "fsdp2-offload"
    extra = {}
    if offload:
        # The optimizer runs on the CPU: the host's cores shared among the
        # ranks (torchrun would set OMP_NUM_THREADS=1).
        threads = max(1, len(os.sched_getaffinity(0)) // world)
        torch.set_num_threads(threads)
        extra.update(cpu_threads_per_rank=threads,
                     blocks="eager" if a.offload_eager else "compiled",
                     optimizer="AdamW on the CPU, %s" % a.offload_adam)
    # module-compile's model and initial weights on every rank (DDP
    # broadcasts rank 0's anyway; FSDP2 keeps each rank's shard of its own);
    # fsdp2-offload's on the meta device, given memory part by part below.
    torch.manual_seed(0)
    with torch.device("meta" if offload else "cuda"):
        model = build_w1_module(shape["config"],
                                compile_parts=not (offload and a.offload_eager),
                                wrap_blocks=variant in ("fsdp2-compile", "fsdp2-offload"))
    model.train()
    if variant == "ddp-compile":
        from torch.nn.parallel import DistributedDataParallel
        # The blocks compile to module-compile's graphs: no DDPOptimizer
        # split at bucket boundaries (each block's gradients, ready at the end
        # of its backward, are reduced during the next block's anyway).
        torch._dynamo.config.optimize_ddp = False
        # static_graph stays off: with no_sync() it fails its first backward
        # (expect_autograd_hooks_ INTERNAL ASSERT, pytorch/pytorch#143580)
        # and then stops reducing (pytorch/pytorch#187732, not merged).
        train = DistributedDataParallel(model, device_ids=[local])

        def syncing(sync):
            return contextlib.nullcontext() if sync else train.no_sync()
    elif variant == "fsdp2-compile":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                      reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        train = model

        def syncing(sync):
            # Without: the chunk's gradients stay unsharded, accumulated in
            # fp32, until the last chunk's reduce-scatter.
            model.set_requires_gradient_sync(sync)
            return contextlib.nullcontext()
    elif offload:
        from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,
                                            fully_shard)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                      reduce_dtype=torch.float32)
        # Parameters, gradients and so the optimizer's state on the CPU
        # (pinned): each block's shard copied to the GPU for its all-gather,
        # its reduce-scattered gradient back to the host.
        offload_materialized(model, lambda m: fully_shard(
            m, mp_policy=policy, offload_policy=CPUOffloadPolicy()))
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        train = model

        def syncing(sync):
            # Every chunk reduce-scatters: its gradient shard goes to the host
            # and adds to the earlier chunks' there. Skipping the sync would
            # keep the whole model's unsharded fp32 gradients on the GPU
            # (33 GB at Qwen3-8B) until the last chunk.
            return contextlib.nullcontext()
    else:
        raise SystemExit("unknown data-parallel PyTorch variant " + variant)
    if offload:
        # The shards are CPU DTensors: AdamW of their CPU tensors.
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                **{a.offload_adam: True})
    else:
        # After fully_shard: its parameters are the shards (DTensors).
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = np.load(a.torch_data, mmap_mode="r")
    if ids.ndim != 2 or ids.shape[1] != seq:
        raise SystemExit("%s: shape %s, not [rows, %d]" % (a.torch_data, ids.shape, seq))
    times, losses = [], []

    def one_step(step):
        # The one-GPU variants' rows of step `step`; this rank's share.
        index = (step_rows * step + np.arange(step_rows)) % ids.shape[0]
        batch = torch.from_numpy(np.ascontiguousarray(
            ids[index[first:first + count]], dtype=np.int64)).cuda()
        # The ranks start the clock together.
        dist.all_reduce(torch.zeros(1, device="cuda"))
        torch.cuda.synchronize()
        t = time.perf_counter()
        total = torch.zeros(1, device="cuda")
        for i in range(chunks):
            x = batch[i * per:(i + 1) * per]
            with syncing(i == chunks - 1):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = train(x) / chunks
                loss.backward()
            total += loss.detach().float()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        seconds = torch.tensor([time.perf_counter() - t], dtype=torch.float64,
                               device="cuda")
        # The slowest rank's time; the loss over the global batch (the mean
        # of the ranks' means over equal shares).
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        dist.all_reduce(total)
        return float(seconds), float(total) / world

    for step in range(a.steps):
        seconds, loss = one_step(step)
        times.append(seconds)
        losses.append(loss)
        print("rank %d step %d: %.3f s, loss %.4f" % (rank, step, seconds, loss),
              file=sys.stderr, flush=True)
    categories = None
    if a.profile_torch:
        # Every rank runs the step (its collectives); rank 0 profiles it.
        if rank == 0:
            categories = kernel_ms_by_category(lambda: one_step(a.steps))
        else:
            one_step(a.steps)
    if rank == 0:
        result = timing_result("%s x%d" % (variant, world), times, a.skip,
                               losses, step_rows * seq, categories, gpus=world,
                               rows_per_rank=count, rows_per_backward=per)
        result.update(extra)
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


def timing_result(variant, times, skip, losses, tokens_per_step, categories,
                  **extra):
    """The JSON line a child prints: its step times (the first `skip` not
    counted), tokens/s, losses, CUDA's allocation peak, `extra`."""
    import torch
    steady = times[skip:]
    result = {
        "kernel_ms_by_category": categories,
        "variant": variant,
        "tokens_per_s": tokens_per_step * len(steady) / sum(steady),
        "step_seconds": sum(steady) / len(steady),
        "step_times": times,
        "skipped_steps": skip,
        "losses": losses,
        "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "torch": torch.__version__,
    }
    result.update(extra)
    return result


def module_check():
    """build_w1_module against Hugging Face's causal LM on tiny
    configurations: Qwen3ForCausalLM with W1's tied LM head and with an
    untied one (as Qwen3-8B's), and, where SHAPES has the llama3.2-1b and
    qwen2.5-1.5b shapes, their configurations cut to the same tiny sizes
    (LlamaForCausalLM with Llama 3's rotary scaling, Qwen2ForCausalLM with
    its q, k, v biases and head_dim derived): loss and every gradient on the
    CPU in fp32, the rotary tables, and, where there is a GPU, the compiled
    module under autocast bf16; and fsdp2-offload's initialisation from the
    meta device (on the CPU, without FSDP; Qwen3 untied, and Qwen2 for its
    biases). Needs torch (and transformers for the comparison), not CUDA."""
    sizes = dict(vocab_size=512, hidden_size=64, intermediate_size=96,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    tiny = dict(QWEN3_17B, head_dim=16, max_position_embeddings=256, **sizes)
    configs = [dict(tiny, tie_word_embeddings=tied) for tied in (True, False)]
    ok = check_meta_init(dict(tiny, tie_word_embeddings=False))
    if "llama3.2-1b" in SHAPES:
        # head_dim 16 and rope_theta 500000: of the 8 frequencies, four
        # kept, one between Llama 3's two wavelength bounds (interpolated)
        # and three beyond (divided by its factor).
        configs.append(dict(SHAPES["llama3.2-1b"]["config"], head_dim=16, **sizes))
    if "qwen2.5-1.5b" in SHAPES:
        # No head_dim: 64 / 4 heads.
        qwen2 = dict(SHAPES["qwen2.5-1.5b"]["config"], **sizes)
        ok = check_meta_init(qwen2) and ok
        configs.append(qwen2)
    for config in configs:
        status = module_check_config(config)
        if status is None:  # no transformers
            break
        ok = ok and status
    return 0 if ok else 1


def check_meta_init(config):
    """offload_materialized on the CPU, each part's shard step a no-op: no
    parameter left on the meta device, the norms ones (two a block, four
    with Qwen3's q_norm and k_norm, and the final one), the biases zeros
    (Qwen2's three a block), the other weights normal(0, 0.02), and a finite
    loss."""
    import torch
    model_type = config.get("model_type", "qwen3")
    torch.manual_seed(0)
    with torch.device("meta"):
        model = build_w1_module(config)
    offload_materialized(model, lambda m: None, device="cpu")
    norms = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith(".bias")]
    others = [p for n, p in model.named_parameters()
              if not n.endswith("norm.weight") and not n.endswith(".bias")]
    layers = config["num_hidden_layers"]
    ids = torch.randint(0, config["vocab_size"], (2, 64))
    loss = model(ids)
    ok = (not any(p.is_meta for p in model.parameters())
          and len(norms) == (4 if QK_NORM[model_type] else 2) * layers + 1
          and all(bool((p == 1).all()) for p in norms)
          and len(biases) == (3 * layers if model_type == "qwen2" else 0)
          and all(bool((p == 0).all()) for p in biases)
          and all(abs(float(p.std()) - 0.02) < 0.002 for p in others)
          and hasattr(model, "lm_head") != config["tie_word_embeddings"]
          and bool(torch.isfinite(loss)))
    print("%smeta-device initialisation (fsdp2-offload's), loss %.4f: %s" % (
        "" if model_type == "qwen3" else model_type + ": ", loss.item(),
        "ok" if ok else "FAIL"))
    return ok


def module_check_config(tiny):
    """module_check for one tiny configuration: True where it passes, None
    where transformers is missing."""
    import torch
    tied = tiny["tie_word_embeddings"]
    label = ("%s: " % tiny["model_type"] if "model_type" in tiny else "") + (
        "" if tied else "untied LM head: ")
    torch.manual_seed(0)
    ids = torch.randint(0, tiny["vocab_size"], (2, 64))
    ours = build_w1_module(tiny)
    loss = ours(ids)
    loss.backward()
    print("%smodule: %d parameters, loss %.4f (ln V = %.4f)" % (
        label, sum(p.numel() for p in ours.parameters()), loss.item(),
        math.log(tiny["vocab_size"])))
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers not available: no comparison")
        return None
    hf = hf_causal_lm(tiny)
    with torch.no_grad():
        # Hugging Face starts the biases (Qwen2's q, k, v) at zero: random
        # ones, so that the forward pass shows where they are added.
        for name, p in hf.named_parameters():
            if name.endswith(".bias"):
                p.normal_(mean=0.0, std=0.5)
    if (hf.lm_head.weight is hf.model.embed_tokens.weight) != tied:
        print("FAIL: Hugging Face's LM head is %s" % ("not tied" if tied else "tied"))
        return False
    state = dict(hf.model.state_dict())
    if not tied:
        # Qwen3ForCausalLM's own LM head, beside its Qwen3Model.
        state["lm_head.weight"] = hf.lm_head.weight
    keys = ours.load_state_dict(state, strict=False)
    if keys.missing_keys or [k for k in keys.unexpected_keys if "rotary" not in k]:
        print("FAIL: state_dict keys differ: %s" % (keys,))
        return False
    if sum(p.numel() for p in ours.parameters()) != sum(p.numel() for p in hf.parameters()):
        print("FAIL: parameter counts differ")
        return False
    rotary_ok = check_rotary(ours, hf, ids.shape[1], label)
    ours.zero_grad()
    ref = hf(input_ids=ids, labels=ids).loss
    ref.backward()
    mine = ours(ids)
    mine.backward()
    worst = 0.0
    for name, p in ours.named_parameters():
        q = hf.get_parameter(name if name.startswith("lm_head.") else "model." + name)
        worst = max(worst, float((p.grad - q.grad).abs().max() / q.grad.abs().max()))
    ok = abs(mine.item() - ref.item()) < 1e-4 and worst < 1e-3
    print("%scpu fp32: loss %.6f, Hugging Face %.6f; worst gradient error %.2e "
          "(relative to the tensor's largest): %s" % (
              label, mine.item(), ref.item(), worst, "ok" if ok else "FAIL"))
    ok = ok and rotary_ok
    if torch.cuda.is_available():
        with torch.device("cuda"):
            compiled = build_w1_module(tiny, compile_parts=True)
        compiled.load_state_dict(state, strict=False)
        hf = hf.cuda()
        x = ids.cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ref = hf(input_ids=x, labels=x).loss
            mine = compiled(x)
        mine.backward()
        good = abs(mine.item() - ref.item()) < 2e-2 * abs(ref.item())
        grads = all(p.grad is not None and bool(torch.isfinite(p.grad).all())
                    for p in compiled.parameters())
        print("%scuda compiled, autocast bf16: loss %.4f, Hugging Face %.4f; "
              "gradients %s: %s" % (label, mine.item(), ref.item(),
                                    "finite" if grads else "missing or not finite",
                                    "ok" if good and grads else "FAIL"))
        ok = ok and good and grads
    return ok


def check_rotary(ours, hf, t, label):
    """build_w1_module's cos and sin tables for t positions against those of
    Hugging Face's rotary embedding (hf.model.rotary_emb, fp32): True where
    they agree, or where that embedding's call is not the one known here
    (x, position_ids), which is said."""
    import torch
    cos, sin = ours.rotary_tables(t, torch.device("cpu"))
    try:
        x = torch.zeros(1, t, cos.shape[-1])
        ref_cos, ref_sin = hf.model.rotary_emb(x, torch.arange(t)[None])
    except (AttributeError, TypeError) as e:
        print("%srotary tables: not compared (%s: %s)" % (label, type(e).__name__, e))
        return True
    worst = max(float((cos[0, 0] - ref_cos[0].float()).abs().max()),
                float((sin[0, 0] - ref_sin[0].float()).abs().max()))
    ok = worst < 1e-5
    print("%srotary tables (%d positions): worst difference %.2e from Hugging "
          "Face's: %s" % (label, t, worst, "ok" if ok else "FAIL"))
    return ok
