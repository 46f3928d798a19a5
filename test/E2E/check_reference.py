#!/usr/bin/env python3
"""Compares a trainer's outputs with the PyTorch references in models/.

  check_reference.py grads  GRADS.onnx REF.onnx          every gradient
  check_reference.py losses LOG.jsonl REF.json [--steps N] initial + AdamW losses
  check_reference.py npy    REF.onnx OUT.npy             writes input_ids
  check_reference.py ignore  IDS.npy K LABELS.npy PREFIX.npy
      labels equal to the ids except -100 after position K, and the ids cut
      to K+1 tokens: by causality both give the same loss and gradients
  check_reference.py same   A.onnx B.onnx                 two gradient dumps agree
  check_reference.py logits-loss LOGITS.npy IDS.npy REF.onnx  HF loss of logits vs ref

Tolerances are those of models/README.md. Exits non-zero with a message
naming the first tensor or step that disagrees.
"""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def tensors(path):
    model = onnx.load(path)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def check_grads(grads_path, ref_path):
    got, ref = tensors(grads_path), tensors(ref_path)
    got = {k: v for k, v in got.items() if k not in ("input_ids", "loss")}
    ref_grads = {k: v for k, v in ref.items() if k not in ("input_ids", "loss")}
    if set(got) != set(ref_grads):
        print("trainable set differs: extra %s, missing %s"
              % (sorted(set(got) - set(ref_grads)), sorted(set(ref_grads) - set(got))))
        return 1
    worst = 0.0
    for name, r in sorted(ref_grads.items()):
        g = got[name]
        if g.shape != r.shape:
            print("%s: shape %s, reference %s" % (name, g.shape, r.shape))
            return 1
        err = float(np.max(np.abs(g.astype(np.float64) - r)) / max(np.max(np.abs(r)), 1e-30))
        worst = max(worst, err)
        if err > 1e-4:
            print("%s: max|g-ref|/max|ref| = %.3e > 1e-4" % (name, err))
            return 1
    print("%d gradients match (worst relative error %.2e)" % (len(ref_grads), worst))
    return 0


def check_losses(log_path, ref_path, steps):
    ref = json.load(open(ref_path))
    expected = [ref["loss"]] + ref["adamw"]["losses_after_each_step"]
    got = [json.loads(line)["loss"] for line in open(log_path) if line.strip()]
    expected = expected[:steps]
    if len(got) < len(expected):
        print("log has %d losses, expected %d" % (len(got), len(expected)))
        return 1
    for step, (g, e) in enumerate(zip(got, expected)):
        rel = abs(g - e) / abs(e)
        tol = 1e-5 if step == 0 else 1e-4
        if rel > tol:
            print("step %d: loss %.7f, reference %.7f (relative error %.2e > %g)"
                  % (step, g, e, rel, tol))
            return 1
    print("%d losses match the reference" % len(expected))
    return 0


def make_ignore(ids_path, k, labels_path, prefix_path):
    ids = np.load(ids_path)
    labels = ids.copy()
    labels[:, k + 1:] = -100
    np.save(labels_path, labels)
    np.save(prefix_path, np.ascontiguousarray(ids[:, :k + 1]))
    return 0


def check_same(a_path, b_path):
    a, b = tensors(a_path), tensors(b_path)
    a.pop("input_ids", None)
    b.pop("input_ids", None)
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print("%s is only in one of the dumps" % name)
            return 1
        scale = max(float(np.max(np.abs(b[name]))), 1e-30)
        err = float(np.max(np.abs(a[name].astype(np.float64) - b[name]))) / scale
        if err > 1e-5:
            print("%s: relative difference %.3e > 1e-5" % (name, err))
            return 1
    print("%d tensors agree" % len(a))
    return 0


def check_logits_loss(logits_path, ids_path, ref_path):
    logits = np.load(logits_path).astype(np.float64)
    ids = np.load(ids_path)
    ref = float(tensors(ref_path)["loss"])
    z = logits[:, :-1].reshape(-1, logits.shape[-1])
    y = ids[:, 1:].reshape(-1)
    z = z - z.max(-1, keepdims=True)
    loss = float(np.mean(np.log(np.exp(z).sum(-1)) - z[np.arange(len(y)), y]))
    rel = abs(loss - ref) / abs(ref)
    if rel > 1e-5:
        print("loss from logits %.8f, reference %.8f (relative error %.2e)" % (loss, ref, rel))
        return 1
    print("loss from logits matches the reference (%.8f, relative error %.1e)" % (loss, rel))
    return 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "logits-loss":
        return check_logits_loss(argv[2], argv[3], argv[4])
    if len(argv) >= 6 and argv[1] == "ignore":
        return make_ignore(argv[2], int(argv[3]), argv[4], argv[5])
    if len(argv) >= 4 and argv[1] == "same":
        return check_same(argv[2], argv[3])
    if len(argv) >= 4 and argv[1] == "grads":
        return check_grads(argv[2], argv[3])
    if len(argv) >= 4 and argv[1] == "losses":
        steps = int(argv[5]) if len(argv) >= 6 and argv[4] == "--steps" else 6
        return check_losses(argv[2], argv[3], steps)
    if len(argv) >= 4 and argv[1] == "npy":
        np.save(argv[3], tensors(argv[2])["input_ids"])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
