#!/usr/bin/env python3
"""Predicted against measured step time for every Rondo run in bench/results.

Walks bench/results/<machine>/..., finds every Rondo training run whose step
time was measured (bench/w1.py JSONs, bench/long_context.py and
bench/families.py JSONs, step logs beside a trace, the plan-vs-trace tables
of scripts/gpu-e2e.sh, a few text notes of the first runs), and the
prediction that was saved with it: the trace's predictedStepSeconds (which
bench/w1.py copies into its JSON's "plan"), or the "overlapped optimizer:
X ms/step" line of the plan's --explain text kept beside the run. A run
whose folder kept no prediction says "not recorded": nothing is recomputed
for it from today's compiler in the first table.

--repredict adds a second table: for the most recent run of each
configuration, what today's compiler predicts for it, from the compile
command that made that run's trainer (bench/prepare-*.sh at the run's
commit, or the folder's README) with the device of the machine it ran on:

  rondo-compile MODEL ARGS --target=cuda --device=h100|h200 --emit=pipe \\
      --explain=DIR -o /dev/null

and the predicted step of the plan the run used (DIR/plan_w<N>.txt, or
plan_r<R>_w<N>.txt for a layout of R replicas). Configurations whose
command was not recorded, or whose model is not on this machine, say so.

    /usr/bin/python3 bench/predicted_vs_measured.py [--repredict]
        [--compiler build/bin/rondo-compile] [--model-8b /tmp/qwen3-8b.onnx]
        [--gemma3-1b /tmp/fam/gemma3-1b.onnx]
        [--moe4l /tmp/fam/qwen3-30b-a3b-4l.onnx] [--moe-full /tmp/fam/qwen3-30b-a3b.onnx]
        [--gpt-oss-20b /tmp/fam/gpt-oss-20b.onnx]

Prints Markdown (docs/CostModel.md, "Predicted against measured, every
configuration in bench/results", is this output). Folders and files it
does not read are listed at the end with the reason.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

from results_index import (BAND, RESULTS, ROOT, Runs, config_label, device_of,
                           parse_plan_text, plan_label, rel, walk)


def model_path(key, a):
    return {"8b": a.model_8b, "gemma3-1b": a.gemma3_1b, "moe4l": a.moe4l,
            "moefull": a.moe_full, "gptoss": a.gpt_oss_20b, "llama3.2-1b": a.llama,
            "qwen2.5-1.5b": a.qwen25}.get(key, key)


def repredict(run, a, tmp):
    """(seconds, plan label, note) of today's compiler for the run's compile
    command, or (None, None, why not)."""
    if not run.get("compile"):
        return None, None, run.get("compile_note") or "compile command not recorded"
    model = model_path(run.get("model_file"), a)
    if not model or not os.path.exists(model):
        return None, None, "model not available here (%s)" % (model or run.get("model_file"))
    out = tempfile.mkdtemp(dir=tmp)
    args = list(run["compile"])
    if run["mode"] == "stale":
        args.append("--optimizer-mode=stale")
    cmd = [a.compiler, model] + args + ["--target=cuda", "--device=" + device_of(run["machine"]),
                                        "--emit=pipe", "--explain=" + out, "-o", os.devnull]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return None, None, "compiler did not run (%s)" % e
    R, N = run["replicas"], run["workers"]
    # --gpus names a layout's plan plan_r<R>_w<N>; --replicas and --workers
    # name it plan_w<N>.
    names = (["plan_r%d_w%d.txt" % (R, N)] if R > 1 else []) + ["plan_w%d.txt" % N]
    plan = None
    for name in names:
        if os.path.exists(os.path.join(out, name)):
            plan = parse_plan_text(os.path.join(out, name))
            break
    if proc.returncode != 0 or not plan:
        err = (proc.stderr.strip().splitlines() or ["no plan for %dx%d" % (R, N)])[-1]
        return None, None, "compiler: " + err[:160]
    seconds = plan["stale"] if run["mode"] == "stale" else plan["overlap"]
    return seconds, plan_label(plan["residency"], plan.get("microbatches"), plan.get("mb_rows")), \
        " ".join(os.path.basename(x) if x == model else x for x in [model] + args)


# --- output --------------------------------------------------------------

def fmt_step(seconds, tokens):
    if seconds is None:
        return "-"
    s = "%.3f s" % seconds if seconds >= 0.1 else "%.2f ms" % (seconds * 1e3)
    if tokens:
        s += " (%s tok/s)" % format(int(round(tokens / seconds)), ",")
    return s


def ratio(measured, predicted):
    return measured / predicted if measured and predicted else None


def mark(r):
    if r is None:
        return "-"
    return ("**%.2f**" % r) if abs(r - 1) > BAND else "%.2f" % r


def worst(pairs, n):
    """The n (run, predicted) pairs furthest from 1 either way."""
    pairs = sorted(pairs, key=lambda rp: -abs(math.log(rp[0]["measured"] / rp[1])))[:n]
    return "; ".join("%s (`%s`) %.2f" % (config_label(r), r["folder"] + "/" + r["source"],
                                          r["measured"] / p) for r, p in pairs)


def main():
    global RESULTS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repredict", action="store_true",
                   help="also run today's rondo-compile on the most recent run of each "
                   "configuration")
    p.add_argument("--compiler", default=os.path.join(ROOT, "build", "bin", "rondo-compile"))
    p.add_argument("--model-8b", default="/tmp/qwen3-8b.onnx",
                   help="the Qwen3-8B shape's graph (scripts/export-hf-onnx.py --preset "
                   "qwen3-8b --graph-only)")
    p.add_argument("--gemma3-1b", default="/tmp/fam/gemma3-1b.onnx")
    p.add_argument("--moe4l", default="/tmp/fam/qwen3-30b-a3b-4l.onnx",
                   help="Qwen3-30B-A3B's shape cut to 4 layers")
    p.add_argument("--moe-full", default="/tmp/fam/qwen3-30b-a3b.onnx",
                   help="the whole Qwen3-30B-A3B shape")
    p.add_argument("--gpt-oss-20b", default="/tmp/fam/gpt-oss-20b.onnx")
    p.add_argument("--llama", default="/tmp/models/llama3.2-1b.onnx",
                   help="Llama-3.2-1B's shape (--preset llama3.2-1b --graph-only)")
    p.add_argument("--qwen25", default="/tmp/models/qwen2.5-1.5b.onnx",
                   help="Qwen2.5-1.5B's shape (--preset qwen2.5-1.5b --graph-only)")
    p.add_argument("--results", default=RESULTS, help="the results tree (default: bench/results)")
    p.add_argument("--tables-only", action="store_true",
                   help="leave out the list of files not read (docs/CostModel.md's section)")
    a = p.parse_args()
    RESULTS = os.path.abspath(a.results)
    runs = Runs()
    walk(runs)
    rs = sorted(runs.runs, key=lambda r: (config_label(r), r["date"] or "", r["order"],
                                          r["folder"], r["source"], r["index"]))
    out = []
    w = out.append
    w("#### Every run, with the prediction saved beside it")
    w("")
    w("Measured: the mean step of the timed steps (bench/w1.py's, bench/long_context.py's "
      "or bench/families.py's own, or a step log after its first two steps). Predicted "
      "then: the plan's predicted step (overlapped optimizer unless the mode says stale) "
      "as the compiler of the run's day saved it in the run's trace or `--explain` text. "
      "Ratios outside 1 ± %.2f in bold." % BAND)
    w("")
    w("| configuration | result | date | ran | measured step | predicted then | "
      "measured / predicted |")
    w("|---|---|---|---|---:|---:|---:|")
    for r in rs:
        w("| %s | `%s` | %s | %s | %s | %s | %s |" % (
            config_label(r), r["folder"] + "/" + r["source"], r["date"] or "-", r["plan"],
            fmt_step(r["measured"], r["tokens"]),
            fmt_step(r["predicted"], None) if r["predicted"] else r["pred_note"],
            mark(ratio(r["measured"], r["predicted"]))))
    with_pred = [r for r in rs if r["predicted"]]
    within = [r for r in with_pred if abs(ratio(r["measured"], r["predicted"]) - 1) <= BAND]
    configs = sorted(set(config_label(r) for r in rs))
    w("")
    w("%d runs of %d configurations; %d with a prediction saved, %d of them within %d%% "
      "(measured / predicted in [%.2f, %.2f]); %d without." % (
          len(rs), len(configs), len(with_pred), len(within), BAND * 100, 1 - BAND, 1 + BAND,
          len(rs) - len(with_pred)))
    w("")
    w("Furthest from their predictions: " + worst(
        [(r, r["predicted"]) for r in with_pred], 6) + ".")
    if a.repredict:
        w("")
        w("#### The most recent run of each configuration, predicted by today's compiler")
        w("")
        w("`rondo-compile MODEL ARGS --target=cuda --device=h100|h200 --emit=pipe --explain=DIR "
          "-o /dev/null`, ARGS as the run's trainer was compiled (plus `--optimizer-mode=stale` "
          "for a stale run), the device of the machine it ran on; the predicted step of the "
          "plan of the run's layout. \"ran\" is the plan the run trained with, \"today\" the "
          "one today's compiler makes of the same command.")
        w("")
        w("| configuration | most recent run | date | ran | measured step | today's plan | "
          "predicted today | measured / predicted | compiled |")
        w("|---|---|---|---|---:|---|---:|---:|---|")
        latest = {}
        for r in rs:
            latest[config_label(r)] = r     # sorted oldest first
        done = []
        with tempfile.TemporaryDirectory() as tmp:
            for label in configs:
                r = latest[label]
                seconds, plan, note = repredict(r, a, tmp)
                done.append((r, seconds))
                w("| %s | `%s` | %s | %s | %s | %s | %s | %s | %s |" % (
                    label, r["folder"] + "/" + r["source"], r["date"] or "-", r["plan"],
                    fmt_step(r["measured"], r["tokens"]), plan or "-",
                    fmt_step(seconds, None) if seconds else "-",
                    mark(ratio(r["measured"], seconds)),
                    ("`%s`" % note) if seconds else note))
        got = [(r, s) for r, s in done if s]
        ok = [(r, s) for r, s in got if abs(r["measured"] / s - 1) <= BAND]
        last = max(r["date"] or "" for r, _ in got) if got else ""
        recent = [(r, s) for r, s in got if r["date"] == last]
        recent_ok = [(r, s) for r, s in recent if abs(r["measured"] / s - 1) <= BAND]
        w("")
        w("%d configurations; today's compiler predicts %d of them (the last column says why "
          "not the others), %d within %d%%. Of those last measured "
          "on %s, %d of %d are within %d%%; the others were last measured earlier, with "
          "older kernels." % (
              len(done), len(got), len(ok), BAND * 100, last, len(recent_ok), len(recent),
              BAND * 100))
        w("")
        w("Furthest from today's predictions: " + worst(got, 6) + ".")
    if a.tables_only:
        print("\n".join(out))
        return 0
    skipped = {}
    for path, reason in runs.skipped.items():
        d = os.path.dirname(rel(path))
        skipped.setdefault((d, reason), []).append(os.path.basename(path))
    w("")
    w("#### Not read")
    w("")
    for (d, reason), files in sorted(skipped.items()):
        names = sorted(files)
        shown = ", ".join(names[:4]) + (" and %d more" % (len(names) - 4) if len(names) > 4 else "")
        w("- `%s/`: %s: %s" % (d, shown, reason))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
