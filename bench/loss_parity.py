#!/usr/bin/env python3
"""W1 trained by Rondo and by PyTorch from the same initial weights: the
loss of every 10th step within 1% (issue 21's must-show).

The Rondo trainer draws its initial weights (--init=random --seed 1) and
writes them in Hugging Face's layout (--steps 0 --export-safetensors); the
PyTorch run (bench/w1.py's child: Hugging Face's Qwen3, autocast bf16, fused
AdamW, lr 1e-4, weight decay 0.01, 2-row microbatches accumulated to 16 rows)
loads them. Both read the same token file, 16 rows per step, and keep the
same AdamW hyperparameters (Rondo's defaults are PyTorch's). A device
command runs at most 10 minutes, so the phases run separately:

    python3 bench/loss_parity.py data   --out DIR --steps 200
    python3 bench/loss_parity.py init   --out DIR --trainer build-gpu/w1.trainer
    python3 bench/loss_parity.py rondo  --out DIR --trainer build-gpu/w1.trainer
    python3 bench/loss_parity.py torch  --out DIR [--variant hf-compile]
    python3 bench/loss_parity.py compare --out DIR   # table + loss-parity.json

`init` writes the initial weights (DIR/init). `compare` exits 1 when
a 10th step differs by more than --tolerance (relative).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import w1  # noqa: E402  (QWEN3_17B, the PyTorch child)


def ids_path(a):
    return os.path.join(a.out, "w1-ids.npy")


def data(a):
    import numpy as np
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)  # bench/w1.py's token file
    np.save(ids_path(a), rng.integers(0, a.token_range, size=(16 * a.steps, 4096),
                                      dtype=np.int64))
    json.dump({"steps": a.steps, "token_range": a.token_range},
              open(os.path.join(a.out, "parity-config.json"), "w"))


def steps_of(a):
    return json.load(open(os.path.join(a.out, "parity-config.json")))["steps"]


def rondo_args(a):
    return [a.trainer, "--data", ids_path(a), "--init=random", "--seed", "1",
            "--lr", "1e-4"]


def init(a):
    init = os.path.join(a.out, "init")
    subprocess.run(rondo_args(a) + ["--steps", "0", "--export-safetensors", init,
                                    "--quiet"], check=True)
    config = dict(w1.QWEN3_17B, architectures=["Qwen3ForCausalLM"],
                  model_type="qwen3", torch_dtype="float32")
    json.dump(config, open(os.path.join(init, "config.json"), "w"), indent=1)


def rondo(a):
    common = rondo_args(a)
    log = os.path.join(a.out, "rondo-steps.jsonl")
    with open(os.path.join(a.out, "rondo.log"), "w") as out:
        subprocess.run(common + ["--steps", str(steps_of(a)), "--log-json", log],
                       check=True, stdout=out, stderr=subprocess.STDOUT)


def torch_run(a):
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "w1.py"),
           "--torch-child", a.variant, "--torch-data", ids_path(a),
           "--steps", str(steps_of(a)), "--skip", "1", "--torch-rows", "2",
           "--torch-init-from", os.path.join(a.out, "init")]
    with open(os.path.join(a.out, "torch.log"), "w") as out:
        subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT)


def compare(a):
    rondo_losses = {}
    for line in open(os.path.join(a.out, "rondo-steps.jsonl")):
        if line.strip():
            row = json.loads(line)
            if "loss" in row and "step" in row:
                # The trainer counts steps from 0; the table from 1.
                rondo_losses[int(row["step"]) + 1] = float(row["loss"])
    result = [json.loads(l) for l in open(os.path.join(a.out, "torch.log"))
              if l.startswith("{")]
    if not result:
        sys.exit("torch.log has no result line")
    torch_losses = result[-1]["losses"]
    rows, worst = [], 0.0
    print("%6s %12s %12s %10s" % ("step", "rondo", "pytorch", "rel diff"))
    for step in range(1, len(torch_losses) + 1):
        if step != 1 and step % 10:
            continue
        r, t = rondo_losses.get(step), torch_losses[step - 1]
        if r is None:
            sys.exit("the Rondo log has no loss for step %d" % step)
        rel = abs(r - t) / abs(t)
        worst = max(worst, rel)
        rows.append({"step": step, "rondo": r, "pytorch": t, "relative": rel})
        print("%6d %12.6f %12.6f %9.4f%%" % (step, r, t, 100 * rel))
    ok = worst <= a.tolerance
    json.dump({"variant": result[-1].get("variant"), "tolerance": a.tolerance,
               "worst_relative": worst, "within": ok, "rows": rows,
               "rondo_all": rondo_losses, "pytorch_all": torch_losses},
              open(os.path.join(a.out, "loss-parity.json"), "w"), indent=1)
    print("worst relative difference %.4f%% (tolerance %.2f%%): %s"
          % (100 * worst, 100 * a.tolerance, "within" if ok else "NOT within"))
    sys.exit(0 if ok else 1)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=["data", "init", "rondo", "torch", "compare"])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--token-range", type=int, default=8192)
    p.add_argument("--trainer")
    p.add_argument("--variant", default="hf-compile", choices=["eager", "hf-compile"])
    p.add_argument("--tolerance", type=float, default=0.01)
    a = p.parse_args()
    if a.phase in ("init", "rondo") and not a.trainer:
        p.error(a.phase + " needs --trainer")
    {"data": data, "init": init, "rondo": rondo, "torch": torch_run,
     "compare": compare}[a.phase](a)


if __name__ == "__main__":
    main()
