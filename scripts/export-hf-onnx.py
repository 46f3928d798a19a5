#!/usr/bin/env python3
"""Exports a Hugging Face causal LM to an ONNX graph that rondo-compile accepts.

The graph is what PyTorch's exporter makes of the model (torch.onnx.export
with dynamo=True, opset 20): input `input_ids` int64 [batch, seq], both axes
dynamic, output `logits`. Rondo specialises the shapes at compile time
(--batch, --seq-len), so one export serves every shape.

Where the model comes from:
  --model DIR          a local Hugging Face directory (config.json, and the
                       weights unless --graph-only)
  --config FILE.json   a config alone: random weights
  --preset NAME        a built-in config: qwen3-0.6b, qwen3-1.7b, qwen3-8b,
                       gemma3-1b, qwen3-30b-a3b, gpt-oss-20b, llama3.2-1b,
                       qwen2.5-1.5b
  --layers N           keep only the first N decoder layers (any source)

--graph-only writes the graph without weights, for models too large to hold
twice in memory: the model is built on PyTorch's meta device (no memory for
weights at all), and every initializer keeps its name, dtype and shape but
points into an absent `<out>.data` file, as the graph-only fixtures do. A
trainer then starts from `--init=random`. Without it, weights go to
`<out>.data` beside the graph (ONNX external data).

    python3 scripts/export-hf-onnx.py --preset qwen3-8b --graph-only -o qwen3-8b.onnx

Needs PyTorch, transformers and onnx (the GPU machines have them; no GPU is
used).
"""
import argparse
import json
import os
import sys
import time

PRESETS = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     tie_word_embeddings=False),
}
QWEN3_COMMON = dict(vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                    rope_theta=1000000.0, model_type="qwen3")

# The families' shapes of issue 23 (published configs, random weights):
# fields for AutoConfig.for_model; unset fields keep transformers' defaults.
FAMILY_PRESETS = {
    "gemma3-1b": dict(model_type="gemma3_text", vocab_size=262144, hidden_size=1152,
                      intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
                      num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                      sliding_window=512, max_position_embeddings=32768, rms_norm_eps=1e-6,
                      hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                      layer_types=["full_attention" if (i + 1) % 6 == 0 else
                                   "sliding_attention" for i in range(26)]),
    "qwen3-30b-a3b": dict(model_type="qwen3_moe", vocab_size=151936, hidden_size=2048,
                          intermediate_size=6144, moe_intermediate_size=768,
                          num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, num_experts=128,
                          num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
                          mlp_only_layers=[], max_position_embeddings=40960,
                          rms_norm_eps=1e-6, rope_theta=1000000.0,
                          tie_word_embeddings=False),
    "gpt-oss-20b": dict(model_type="gpt_oss", vocab_size=201088, hidden_size=2880,
                        intermediate_size=2880, num_hidden_layers=24,
                        num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                        num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
                        layer_types=["sliding_attention" if i % 2 == 0 else
                                     "full_attention" for i in range(24)],
                        max_position_embeddings=131072, rms_norm_eps=1e-5,
                        tie_word_embeddings=False),
    # Issue 21's other two dense shapes: no query/key norm; Llama 3's rotary
    # frequencies rescaled (a constant table in the graph), Qwen2.5's query,
    # key and value projections with biases.
    "llama3.2-1b": dict(model_type="llama", vocab_size=128256, hidden_size=2048,
                        intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                        max_position_embeddings=131072, rms_norm_eps=1e-5,
                        rope_theta=500000.0,
                        rope_scaling=dict(rope_type="llama3", factor=32.0,
                                          low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_max_position_embeddings=8192),
                        attention_bias=False, mlp_bias=False, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(model_type="qwen2", vocab_size=151936, hidden_size=1536,
                         intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2,
                         max_position_embeddings=32768, rms_norm_eps=1e-6,
                         rope_theta=1000000.0, use_sliding_window=False,
                         tie_word_embeddings=True),
}


def is_moe(config):
    return bool(getattr(config, "num_experts", 0) or getattr(config, "num_local_experts", 0))


def fail(message):
    sys.stderr.write("export-hf-onnx: error: %s\n" % message)
    sys.exit(1)


def load_config(a):
    from transformers import AutoConfig, Qwen3Config
    if a.preset in FAMILY_PRESETS:
        config = AutoConfig.for_model(**FAMILY_PRESETS[a.preset])
    elif a.preset:
        if a.preset not in PRESETS:
            fail("--preset %s: unknown (known: %s)"
                 % (a.preset, ", ".join(sorted(list(PRESETS) + list(FAMILY_PRESETS)))))
        fields = dict(QWEN3_COMMON, **PRESETS[a.preset])
        fields.pop("model_type")
        config = Qwen3Config(**fields)
    elif a.config:
        try:
            with open(a.config) as f:
                fields = json.load(f)
        except (OSError, ValueError) as e:
            fail("--config %s: %s" % (a.config, e))
        config = AutoConfig.for_model(**fields)
    else:
        if not os.path.isdir(a.model):
            fail("--model %s: not a directory (no network on the GPU machines: "
                 "download the model first)" % a.model)
        config = AutoConfig.from_pretrained(a.model)
    if a.layers:
        if a.layers > config.num_hidden_layers:
            fail("--layers %d: the model has only %d" % (a.layers, config.num_hidden_layers))
        config.num_hidden_layers = a.layers
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:a.layers]
    config.use_cache = False
    # GPT-OSS's attention sinks have no SDPA path in transformers; its eager
    # attention exports the sink softmax rondo-compile recognises.
    config._attn_implementation = "eager" if config.model_type == "gpt_oss" else "sdpa"
    if is_moe(config):
        # transformers' default experts backend (grouped_mm) has no ONNX
        # conversion and "eager" loops over experts with data-dependent
        # shapes that torch.export rejects; batched_mm exports statically
        # (router, TopK, GatherND of each (token, slot)'s expert matrices,
        # batched MatMul), the form rondo-compile recognises as routed experts.
        config._experts_implementation = "batched_mm"
        print("export-hf-onnx: a mixture of experts: exporting with the batched_mm "
              "experts backend", flush=True)
    return config


def logits_only(model):
    """Makes the graph's one output the logits. The model's class is swapped
    for a subclass with that forward rather than wrapped in another module:
    a wrapper would prefix every parameter name (model.model.layers.0...),
    and the trainer's --export-safetensors writes the names the graph holds,
    which must be the Hugging Face model's own."""
    base = type(model)

    class LogitsOnly(base):
        def forward(self, input_ids):
            return base.forward(self, input_ids=input_ids, use_cache=False).logits
    model.__class__ = LogitsOnly
    return model


def build_model(a, config):
    import torch
    from transformers import AutoModelForCausalLM
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    extra = {"experts_implementation": "batched_mm"} if is_moe(config) else {}
    if a.graph_only:
        # Built on the meta device (no initialisation work), then given
        # uninitialised CPU memory: the exporter needs real tensors, the
        # values are never written. Non-persistent buffers (the rotary
        # inverse frequencies) are computed in __init__, so those modules
        # are rebuilt on the CPU to keep their true values.
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype, **extra)
        model = model.to_empty(device="cpu")
        for name, module in list(model.named_modules()):
            if "rotary" in type(module).__name__.lower():
                parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
                setattr(parent, name.rsplit(".", 1)[-1], type(module)(config=config))
        # Parameters under 1 KB stay inline in the graph with whatever the
        # uninitialised memory held: where that was zeros, the exporter's
        # optimiser folded `x + bias` away (GPT-OSS's router bias in some
        # layers), so those layers differed from the rest and rondo-compile
        # could not cut the model into repeated layers. Each gets a distinct
        # non-zero pattern instead, which differs from tensor to tensor so
        # that no two are byte-identical (the exporter would merge them).
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                if p.numel() * p.element_size() < 1024:
                    j = torch.arange(p.numel(), dtype=torch.float64)
                    pattern = ((i * 7919 + j * 104729) % 997 + 1) / 997
                    p.copy_(pattern.reshape(p.shape).to(p.dtype))
        return model
    if a.model:
        return AutoModelForCausalLM.from_pretrained(a.model, config=config, torch_dtype=dtype,
                                                    **extra)
    torch.manual_seed(a.seed)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype, **extra)
    # Random initialisation makes every norm weight ones, and the exporter
    # merges byte-identical initializers: the graph would then hold one
    # weight for all norms, which trains them as one. Perturbed, as the
    # fixtures in test/data/models were, each stays its own parameter.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.mul_(1 + 0.05 * torch.randn_like(p))
    return model


def point_initializers_at_absent_file(model_proto, data_name):
    """Graph-only: every initializer big enough to be external keeps its
    name, dtype and shape and points into data_name (which is not written).
    Small ones (the rotary table, scalars) stay inline, as the exporter
    writes them."""
    from onnx import TensorProto
    offset = 0
    for t in model_proto.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL or t.HasField("raw_data"):
            if t.data_location != TensorProto.EXTERNAL and len(t.raw_data) < 1024:
                continue
            numel = 1
            for d in t.dims:
                numel *= d
            size = numel * {TensorProto.BFLOAT16: 2, TensorProto.FLOAT16: 2,
                            TensorProto.FLOAT: 4, TensorProto.DOUBLE: 8,
                            TensorProto.INT64: 8, TensorProto.INT32: 4}.get(t.data_type, 4)
            t.ClearField("raw_data")
            del t.external_data[:]
            for k, v in (("location", data_name), ("offset", str(offset)),
                         ("length", str(size))):
                e = t.external_data.add()
                e.key, e.value = k, v
            t.data_location = TensorProto.EXTERNAL
            offset += (size + 4095) // 4096 * 4096


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a local Hugging Face model directory")
    src.add_argument("--config", help="a config.json (random weights)")
    src.add_argument("--preset", help="qwen3-0.6b, qwen3-1.7b, qwen3-8b, gemma3-1b, "
                     "qwen3-30b-a3b or gpt-oss-20b")
    p.add_argument("-o", "--output", required=True, help="the ONNX file to write")
    p.add_argument("--graph-only", action="store_true",
                   help="no weights: initializers point into an absent OUT.data")
    p.add_argument("--layers", type=int, default=0, help="keep the first N layers")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"],
                   help="the initializers' dtype (default bf16, as the fixtures)")
    p.add_argument("--seed", type=int, default=0, help="random weights' seed")
    p.add_argument("--opset", type=int, default=20)
    p.add_argument("--save-hf", metavar="DIR",
                   help="also save the model as Hugging Face saves it (config.json, "
                        "model.safetensors): the reference for the trainer's "
                        "--export-safetensors (test/GPU/hf-interop.py)")
    a = p.parse_args()
    if not a.output.endswith(".onnx"):
        fail("-o %s: the output must end in .onnx" % a.output)

    import torch
    import onnx
    start = time.time()
    config = load_config(a)
    model = build_model(a, config).eval()
    if is_moe(config) and hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("batched_mm")
    example = torch.zeros((2, 16), dtype=torch.int64)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    out_dir = os.path.dirname(os.path.abspath(a.output))
    base = os.path.basename(a.output)
    data_name = base + ".data"
    tmp = os.path.join(out_dir, ".tmp-" + base)
    try:
        program = torch.onnx.export(logits_only(model), (example,), dynamo=True, opset_version=a.opset,
                                    input_names=["input_ids"], output_names=["logits"],
                                    dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                                    optimize=True)
        if a.graph_only:
            # Serialise the graph with the initializers' headers only: no
            # weight bytes are ever written.
            import onnx_ir as ir
            for value in program.model.graph.initializers.values():
                tensor = value.const_value
                if tensor is not None and tensor.size * tensor.dtype.itemsize >= 1024:
                    value.const_value = ir.ExternalTensor(
                        data_name, offset=0, length=tensor.size * tensor.dtype.itemsize,
                        dtype=tensor.dtype, shape=tensor.shape, name=value.name,
                        base_dir=out_dir)
            proto = ir.serde.serialize_model(program.model)
            point_initializers_at_absent_file(proto, data_name)
            onnx.save(proto, tmp)
        else:
            program.save(tmp, external_data=True)
            os.replace(tmp + ".data", os.path.join(out_dir, data_name)) \
                if os.path.exists(tmp + ".data") else None
            m = onnx.load(tmp, load_external_data=False)
            for t in m.graph.initializer:
                for e in t.external_data:
                    if e.key == "location":
                        e.value = data_name
            onnx.save(m, tmp)
        os.replace(tmp, a.output)
    finally:
        for leftover in (tmp, tmp + ".data"):
            if os.path.exists(leftover):
                os.remove(leftover)
    if a.save_hf:
        if a.graph_only:
            fail("--save-hf needs weights; drop --graph-only")
        model.__class__ = model.__class__.__bases__[0]
        model.save_pretrained(a.save_hf)
    params = sum(p.numel() for p in model.parameters())
    print("export-hf-onnx: wrote %s (%s, %d layers, %.2fB parameters%s) in %.0f s"
          % (a.output, a.preset or a.config or a.model, config.num_hidden_layers, params / 1e9,
             ", graph only" if a.graph_only else "", time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
