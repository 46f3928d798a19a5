#!/usr/bin/env python3
"""Builds the attention results table from bench/attention_gpu.sh's logs.

Usage: attention_table.py OUT.json OUT.md LOGDIR [LOGDIR...]

Reads each LOGDIR's timing.log ("[ flash ]" lines of
DISABLED_FlashTimingPaths: path, B, T, D and the times; timing-new.log in
older runs, whose lines have no B and mean B = 1) and sdpa.jsonl (PyTorch
SDPA; lines that are not JSON, PyTorch's warnings, are skipped). Each
measurement is a median of 20 event-timed calls; where several runs measured
one case the table keeps each run's value in the JSON and shows the last
run's in the table (the runs differ in code: run1 converted q/k/v one
tensor at a time). FLOPs count the causal half: fwd 4 B Hq T^2 D / 2, bwd
2.5 times that.
"""
import json
import os
import re
import sys

HQ, HKV = 16, 8
NAMES = {
    "cudnn": "Rondo on cuDNN (deterministic backward, default on sm_90)",
    "cudnn-atomic": "Rondo on cuDNN, atomic-dQ backward (not reproducible)",
    "flash": "Rondo's own kernels (wgmma, two-kernel backward)",
    "default": "Rondo's own kernels (wgmma, two-kernel backward)",
    "fused": "Rondo's own kernels, fused wgmma backward (opt-in)",
    "mma.sync": "Rondo's own kernels, mma.sync (non-Hopper path)",
    "sdpa_flash": "PyTorch SDPA flash (FA2)",
    "sdpa_cudnn": "PyTorch SDPA cuDNN (atomic dQ)",
}


def flops(B, T, D):
    return 4.0 * B * HQ * T * T * D / 2


def read_run(logdir):
    rows = {}
    timing = os.path.join(logdir, "timing.log")
    if not os.path.exists(timing):
        timing = os.path.join(logdir, "timing-new.log")
    if os.path.exists(timing):
        for line in open(timing):
            if not line.startswith("[ flash ]"):
                continue
            kv = dict(re.findall(r"(\w+)=([\w.\-]+)", line))
            key = (kv["path"], int(kv.get("B", 1)), int(kv["T"]), int(kv["D"]))
            rows[key] = (float(kv["fwd_ms"]), float(kv["bwd_ms"]))
    meta = {}
    sdpa = os.path.join(logdir, "sdpa.jsonl")
    if os.path.exists(sdpa):
        for line in open(sdpa):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "torch" in d:
                meta = d
            elif "error" not in d:
                key = (d["backend"], d.get("B", 1), d["T"], d["D"])
                rows[key] = (d["fwd_ms"], d["bwd_ms"])
    return rows, meta


def main():
    out_json, out_md, logdirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    runs = [(d, *read_run(d)) for d in logdirs]
    shapes = sorted({k[1:] for _, rows, _ in runs for k in rows},
                    key=lambda s: (-s[0], -s[2], s[1]))
    table, meta = [], {}
    for B, T, D in shapes:
        for path in NAMES:
            per_run = {}
            for d, rows, m in runs:
                meta = m or meta
                if (path, B, T, D) in rows:
                    per_run[os.path.basename(os.path.normpath(d))] = \
                        rows[(path, B, T, D)]
            if not per_run:
                continue
            fwd, bwd = list(per_run.values())[-1]
            fl = flops(B, T, D)
            table.append({
                "impl": NAMES[path], "path": path, "B": B, "Hq": HQ,
                "Hkv": HKV, "T": T, "D": D, "causal": True,
                "fwd_ms": round(fwd, 4), "bwd_ms": round(bwd, 4),
                "fwd_tflops": round(fl / fwd / 1e9, 1),
                "bwd_tflops": round(2.5 * fl / bwd / 1e9, 1),
                "runs": {r: {"fwd_ms": round(f, 4), "bwd_ms": round(b, 4)}
                         for r, (f, b) in per_run.items()},
                "source": list(per_run)[-1]})
    json.dump({"torch": meta, "rows": table}, open(out_json, "w"), indent=1)
    with open(out_md, "w") as f:
        f.write("| shape | implementation | fwd ms (TFLOP/s) | bwd ms "
                "(TFLOP/s) | run |\n|---|---|---|---|---|\n")
        for r in table:
            f.write(f"| B{r['B']} T{r['T']} D{r['D']} | {r['impl']} | "
                    f"{r['fwd_ms']:.3f} ({r['fwd_tflops']}) | "
                    f"{r['bwd_ms']:.3f} ({r['bwd_tflops']}) | "
                    f"{r['source']} |\n")


if __name__ == "__main__":
    main()
