#!/usr/bin/env python3
"""LoRA trainers against an explicit low-rank update in float64.

The adapters a trainer compiled with --lora has are read from its training
function (rondo-compile --emit=train): every argument with tg.lora_of names
the base weight (ONNX initializer) it adapts. With s = alpha / r, A [in, r]
and B [r, out] in the trainer's layout (PEFT's lora_A.weight is A^T, its
lora_B.weight B^T), the LoRA model is the plain model with
W' = W + s A B (transposed for a base stored [out, in]). Stacked experts
W [E, d1, d2] have A [E, d1, r] and B [E, r, d2], W'_e = W_e + s A_e B_e, and
PEFT's ParamWrapper layout: lora_A.weight [E*r, d1] (row e*r + j = A_e[:, j]),
lora_B.weight [d2, r*E] (column j*E + e = B_e[j, :]); PEFT lists them (and
routers) in adapter_config.json's target_parameters, matched as suffixes.

  lora_reference.py make TRAIN.mlir MODEL.onnx ADAPTERS.safetensors MERGED.onnx
      random A and B (B nonzero) as a PEFT safetensors file, written with
      NumPy, and MODEL with W' merged in float64 (stored as fp32)
  lora_reference.py grads TRAIN.mlir ADAPTERS.safetensors LORA.onnx MERGED.onnx
      gradient dumps (--dump-gradients) of the LoRA trainer and of the plain
      trainer on the merged model: the losses agree to 1e-5 relative, and
      dA = s dW' B^T, dB = s A^T dW' (float64 chain rule from the merged
      model's dW') agree with the LoRA trainer's to 1e-4 (max-normalised)
  lora_reference.py trained TRAIN.mlir MODEL.onnx START.safetensors LOG.jsonl
                    EXPORTED.safetensors EXPORTED.onnx
      after a few steps: the loss fell; the exported base weights are
      bit-identical to MODEL's; every adapter moved; PEFT names and shapes,
      and adapter_config.json beside the adapters
  lora_reference.py merged TRAIN.mlir MODEL.onnx ADAPTERS.safetensors MERGED.onnx
      --merge-lora's model holds W + s A B of the exported adapters (float64
      reference, 1e-6 relative) and every other initializer unchanged
  lora_reference.py eval-loss LOG.jsonl LOG2.jsonl
      the first log's evaluation loss equals the second's first loss (1e-5)
  lora_reference.py edit IN.safetensors OUT.safetensors drop|extra|transpose
      a damaged copy for the trainer's errors: without its first tensor, with
      one more, or with its first tensor transposed

Exits non-zero with a message naming the first tensor that disagrees.
"""
import json
import os
import re
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def adapters(train_mlir):
    """[(name, factor, base, shape, base_transposed)] and (rank, alpha);
    `parameter` of each adapter (tg.lora_parameter) in PARAMETER_TARGETS."""
    text = open(train_mlir).read()
    config = re.search(r'tg\.lora = #tg\.lora<rank = (\d+), alpha = ([^ ,]+) : f64',
                       text)
    if not config:
        sys.exit("%s: no tg.lora configuration" % train_mlir)
    rank, alpha = int(config.group(1)), float(config.group(2))
    found = []
    for m in re.finditer(r'tensor<((?:\d+x)+)f32> \{([^}]*tg\.lora_of[^}]*)\}', text):
        attrs = m.group(2)
        get = lambda key: re.search(key + r' = "([^"]*)"', attrs).group(1)
        found.append((get("tg.param"), get("tg.lora_factor"), get("tg.lora_of"),
                      tuple(int(d) for d in m.group(1).split("x")[:-1]),
                      "tg.lora_base_transposed" in attrs))
        if "tg.lora_parameter" in attrs:
            PARAMETER_TARGETS.add(found[-1][0])
    if not found:
        sys.exit("%s: no LoRA adapters" % train_mlir)
    return found, rank, alpha


PARAMETER_TARGETS = set()


def torch_names(train_mlir):
    """{tg.param: tg.torch_name} of the training function's parameters."""
    names = {}
    for m in re.finditer(r'\{([^}]*tg\.param = [^}]*)\}', open(train_mlir).read()):
        param = re.search(r'tg\.param = "([^"]*)"', m.group(1)).group(1)
        torch = re.search(r'tg\.torch_name = "([^"]*)"', m.group(1))
        names[param] = torch.group(1) if torch else param
    return names


def peft_name(name):
    return "base_model.model." + name


def to_peft(value, factor):
    """PEFT's tensor of one adapter in the trainer's layout."""
    if value.ndim == 2:
        return value.T
    e, d1, d2 = value.shape
    if factor == "A":  # [E, d1, r] -> [E*r, d1]
        return value.transpose(0, 2, 1).reshape(e * d2, d1)
    return value.transpose(2, 1, 0).reshape(d2, d1 * e)  # [E, r, d2] -> [d2, r*E]


def from_peft(value, factor, shape):
    if len(shape) == 2:
        return value.T
    e, d1, d2 = shape
    if factor == "A":
        return value.reshape(e, d2, d1).transpose(0, 2, 1)
    return value.reshape(d2, d1, e).transpose(2, 1, 0)


def peft_shape(factor, shape):
    return tuple(to_peft(np.zeros(shape), factor).shape)


def swap(x):
    return np.swapaxes(x, -1, -2)


def write_safetensors(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data, result = raw[8 + n:], {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        begin, end = info["data_offsets"]
        result[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
    return result


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def factors(found, peft):
    """{base: (A [in, r], B [r, out], transposed)} in float64, trainer layout."""
    out = {}
    for name, factor, base, shape, transposed in found:
        a, b, _ = out.get(base, (None, None, transposed))
        value = from_peft(peft[peft_name(name)].astype(np.float64), factor, shape)
        assert value.shape == shape, (name, value.shape, shape)
        out[base] = (value, b, transposed) if factor == "A" else (a, value, transposed)
    return out


def delta(a, b, scale, transposed):
    d = scale * (a @ b)
    return d.T if transposed else d


def merged_delta(found, peft, base, per_base, scale):
    """The delta of `base`: s A B from the trainer-layout factors, or, for
    stacked experts, PEFT's own ParamWrapper formula on the file's tensors
    (einsum "o r e, e r i -> e i o" of lora_B [d2, r*E] viewed [d2, r, E] and
    lora_A [E*r, d1] viewed [E, r, d1]), so the merged model does not
    depend on this script's reading of the layout."""
    a, b, transposed = per_base[base]
    if a.ndim == 2:
        return delta(a, b, scale, transposed)
    names = {factor: peft_name(name) for name, factor, of, *_ in found if of == base}
    e, d1, r = a.shape
    peft_a = peft[names["A"]].astype(np.float64).reshape(e, r, d1)
    peft_b = peft[names["B"]].astype(np.float64)
    peft_b = peft_b.reshape(peft_b.shape[0], r, e)
    return np.einsum("ore,eri->eio", peft_b, peft_a) * scale


def make(train_mlir, model_path, adapters_path, merged_path):
    found, rank, alpha = adapters(train_mlir)
    rng = np.random.default_rng(1234)
    peft = {}
    for name, factor, base, shape, _ in sorted(found):
        # PEFT's layout: ours transposed. B is not zero, so the adapters
        # change the function and every gradient of A is nonzero.
        peft[peft_name(name)] = (rng.standard_normal(peft_shape(factor, shape)) * 0.05
                                 ).astype(np.float32)
    write_safetensors(adapters_path, peft)
    stored = read_safetensors(adapters_path)
    per_base = factors(found, stored)
    model = onnx.load(model_path)
    for t in model.graph.initializer:
        if t.name in per_base:
            w = numpy_helper.to_array(t).astype(np.float64)
            merged = w + merged_delta(found, stored, t.name, per_base, alpha / rank)
            t.CopyFrom(numpy_helper.from_array(merged.astype(np.float32), t.name))
    onnx.save(model, merged_path)
    print("%d adapters on %d weights, rank %d, alpha %g" % (len(found), len(per_base), rank, alpha))
    return 0


def rel_err(got, ref):
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))


def grads(train_mlir, adapters_path, lora_path, merged_path):
    found, rank, alpha = adapters(train_mlir)
    scale = alpha / rank
    per_base = factors(found, read_safetensors(adapters_path))
    lora, merged = initializers(lora_path), initializers(merged_path)
    loss_lora, loss_merged = float(lora["loss"]), float(merged["loss"])
    err = abs(loss_lora - loss_merged) / abs(loss_merged)
    print("loss: LoRA %.8f, merged model %.8f, relative difference %.2e"
          % (loss_lora, loss_merged, err))
    if err > 1e-5:
        print("MISMATCH: the losses differ by more than 1e-5")
        return 1
    trainable = set(lora) - {"loss", "input_ids"}
    expected = {name for name, *_ in found}
    if trainable != expected:
        print("MISMATCH: gradients of %s, expected exactly the adapters"
              % sorted(trainable ^ expected))
        return 1
    worst = 0.0
    for name, factor, base, shape, transposed in found:
        a, b, _ = per_base[base]
        dw = merged[base].astype(np.float64)
        if transposed:
            dw = dw.T
        ref = scale * (dw @ swap(b)) if factor == "A" else scale * (swap(a) @ dw)
        got = lora[name].astype(np.float64)
        if got.shape != ref.shape:
            print("MISMATCH: %s has shape %s, expected %s" % (name, got.shape, ref.shape))
            return 1
        e = rel_err(got, ref)
        worst = max(worst, e)
        if e > 1e-4:
            print("MISMATCH: %s: max|g - ref| / max|ref| = %.3e > 1e-4" % (name, e))
            return 1
    print("%d adapter gradients match the float64 chain rule (worst %.2e)" % (len(found), worst))
    return 0


def trained(train_mlir, model_path, start_path, log_path, exported_path, onnx_path):
    found, rank, alpha = adapters(train_mlir)
    losses = [json.loads(line)["loss"] for line in open(log_path)
              if line.strip() and "loss" in json.loads(line)]
    if not losses[-1] < losses[0]:
        print("MISMATCH: the loss did not fall: %s" % losses)
        return 1
    print("loss fell from %.6f to %.6f in %d steps" % (losses[0], losses[-1], len(losses)))
    before, after = initializers(model_path), initializers(onnx_path)
    if set(before) != set(after):
        print("MISMATCH: the exported model's initializers differ: %s"
              % sorted(set(before) ^ set(after)))
        return 1
    for name in before:
        if before[name].dtype != after[name].dtype or before[name].shape != after[name].shape \
                or before[name].tobytes() != after[name].tobytes():
            print("MISMATCH: base weight %s changed" % name)
            return 1
    print("%d initializers of the exported model are bit-identical to the original"
          % len(before))
    start, end = read_safetensors(start_path), read_safetensors(exported_path)
    want = {peft_name(name): peft_shape(factor, shape) for name, factor, _, shape, _ in found}
    got = {name: tuple(t.shape) for name, t in end.items()}
    if got != want:
        print("MISMATCH: exported tensors %s, expected %s" % (sorted(got.items()), sorted(want.items())))
        return 1
    for name in want:
        if np.array_equal(start[name], end[name]):
            print("MISMATCH: adapter %s did not change" % name)
            return 1
    print("%d adapters moved, with PEFT names and shapes (e.g. %s %s)"
          % (len(want), sorted(want)[0], list(want[sorted(want)[0]])))
    config = json.load(open(os.path.join(os.path.dirname(exported_path) or ".",
                                         "adapter_config.json")))
    modules = sorted({name.split(".")[-3] for name, *_ in found
                      if name not in PARAMETER_TARGETS})
    expect = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank,
              "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": modules,
              "bias": "none", "fan_in_fan_out": False}
    for key, value in expect.items():
        if config.get(key) != value:
            print("MISMATCH: adapter_config.json %s = %r, expected %r"
                  % (key, config.get(key), value))
            return 1
    print("adapter_config.json: r %d, lora_alpha %g, target_modules %s"
          % (config["r"], config["lora_alpha"], ",".join(config["target_modules"])))
    if PARAMETER_TARGETS:
        # PEFT selects a parameter when its name is an entry or ends with
        # "." + an entry: exactly the adapted bases must be selected.
        torch = torch_names(train_mlir)
        bases = {base for name, _, base, *_ in found if name in PARAMETER_TARGETS}
        adapters_of = {base for _, _, base, *_ in found}
        entries = config.get("target_parameters", [])
        chosen = {p for p, t in torch.items() if p not in {n for n, *_ in found}
                  and any(t == e or t.endswith("." + e) for e in entries)}
        if chosen != bases or adapters_of & chosen != bases:
            print("MISMATCH: target_parameters %s select %s, expected %s"
                  % (entries, sorted(chosen), sorted(bases)))
            return 1
        print("adapter_config.json: target_parameters %s select the %d adapted parameters"
              % (",".join(entries), len(bases)))
    return 0


def merged(train_mlir, model_path, adapters_path, merged_path):
    found, rank, alpha = adapters(train_mlir)
    stored = read_safetensors(adapters_path)
    per_base = factors(found, stored)
    before, after = initializers(model_path), initializers(merged_path)
    worst = 0.0
    for name, w in before.items():
        if name not in per_base:
            if w.tobytes() != after[name].tobytes():
                print("MISMATCH: %s is not adapted but changed" % name)
                return 1
            continue
        ref = w.astype(np.float64) + merged_delta(found, stored, name, per_base, alpha / rank)
        e = rel_err(after[name].astype(np.float64), ref)
        worst = max(worst, e)
        if e > 1e-6:
            print("MISMATCH: merged %s: relative error %.3e > 1e-6" % (name, e))
            return 1
    print("%d merged weights equal W + s A B (worst %.2e)" % (len(per_base), worst))
    return 0


def eval_loss(log_path, log2_path):
    records = [json.loads(line) for line in open(log_path) if line.strip()]
    evals = [r["eval_loss"] for r in records if "eval_loss" in r]
    first = [json.loads(line)["loss"] for line in open(log2_path) if line.strip()][0]
    err = abs(evals[-1] - first) / abs(first)
    print("trained LoRA model %.8f, merged model %.8f, relative difference %.2e"
          % (evals[-1], first, err))
    if err > 1e-5:
        print("MISMATCH: the merged model's loss differs by more than 1e-5")
        return 1
    return 0


def edit(in_path, out_path, how):
    tensors = read_safetensors(in_path)
    first = sorted(tensors)[0]
    if how == "drop":
        del tensors[first]
    elif how == "extra":
        tensors["base_model.model.model.layers.9.mlp.down_proj.lora_A.weight"] = tensors[first]
    elif how == "transpose":
        tensors[first] = tensors[first].T
    elif how.startswith("transpose:"):
        name = how.split(":", 1)[1]
        tensors[name] = tensors[name].T
    else:
        print("edit: expected drop, extra or transpose")
        return 2
    write_safetensors(out_path, tensors)
    return 0


def main(argv):
    commands = {"make": (make, 4), "grads": (grads, 4), "trained": (trained, 6),
                "merged": (merged, 4), "eval-loss": (eval_loss, 2), "edit": (edit, 3)}
    if len(argv) >= 2 and argv[1] in commands:
        fn, n = commands[argv[1]]
        if len(argv) == n + 2:
            return fn(*argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
