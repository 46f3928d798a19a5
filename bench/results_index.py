#!/usr/bin/env python3
"""The Rondo runs kept in bench/results, read into one list of runs.

Each reader takes one kind of result file (bench/w1.py, bench/long_context.py
and bench/families.py JSONs, step logs beside a trace, scripts/gpu-e2e.sh's
plan-vs-trace tables, a few text notes of the first runs) and adds its runs,
with the prediction saved beside each, to a `Runs`; `walk` visits every
folder. bench/predicted_vs_measured.py prints them against their
predictions.
"""
import glob
import json
import os
import re
import subprocess
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
W1_MODEL = os.path.join(ROOT, "test", "data", "models", "qwen3-1.7b.onnx")
MODELS_DIR = os.path.join(ROOT, "test", "data", "models")

# The ratio band the issue asks about.
BAND = 0.15

# Device residency became a planning decision at commit 2ad0101 (2026-11-26):
# before it every plan streamed its weights from the host and ran AdamW there.
RESIDENCY_DATE = "2026-11-26"

# The trace named the mode it ran and carried that mode's prediction only
# from ef0a483 (2026-11-24 05:35) on; before, a stale run's trace carried the
# sync program's predicted step. These files predate it.
STALE_WITH_SYNC_PREDICTION = "sync program's prediction, not stale's"


# --- small helpers -------------------------------------------------------

def rel(path):
    return os.path.relpath(path, RESULTS)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def mean(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


def machine_of(path):
    """The machine kind and GPU count of a results path: h100/ and h200/
    hold runs on one GPU, as h100x1/ and h200x1/ do."""
    top = rel(path).split(os.sep)[0]
    return {"h100": "h100x1", "h200": "h200x1"}.get(top, top)


def device_of(machine):
    return machine[:4]


def folder_date(path):
    m = re.search(r"(\d{4}-\d{2}-\d{2})", rel(path))
    return m.group(1) if m else None


_git_times = {}


def git_added(path):
    """When the file first entered the repository (seconds), to order runs
    of one day; 0 without git. Runs are measured shortly before they are
    committed, so this orders them as they ran."""
    if path not in _git_times:
        # Not --follow: it takes a later file of similar content (another
        # run's JSON) for a rename of an earlier one.
        times = []
        try:
            times = [int(t) for t in subprocess.run(
                ["git", "-C", ROOT, "log", "--format=%ct", "--", os.path.relpath(path, ROOT)],
                capture_output=True, text=True, timeout=30).stdout.split()]
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
        _git_times[path] = min(times) if times else 0
    return _git_times[path]


def git_date(path):
    t = git_added(path)
    if not t:
        return None
    return time.strftime("%Y-%m-%d", time.gmtime(t))


# --- plan texts (rondo-compile --explain) -------------------------------

def parse_plan_text(path):
    """The numbers of one --explain plan text: predicted step of each
    optimizer mode (seconds), rows and tokens per step, microbatches,
    residency."""
    text = read_text(path)
    if "== Plan @" not in text:
        return None
    p = {"path": path}
    m = re.search(r"overlapped optimizer: ([\d.]+) ms/step", text)
    p["overlap"] = float(m.group(1)) / 1e3 if m else None
    m = re.search(r"one-step-stale optimizer[^:]*: ([\d.]+) ms/step", text)
    p["stale"] = float(m.group(1)) / 1e3 if m else None
    m = re.search(r"Step: (\d+) rows, (\d+) tokens, cut into (\d+) microbatches of (\d+) rows",
                  text)
    if m:
        p["rows"], p["tokens"] = int(m.group(1)), int(m.group(2))
        p["microbatches"], p["mb_rows"] = int(m.group(3)), int(m.group(4))
    m = re.search(r"^Residency: (\w+)", text, re.M)
    if m:
        p["residency"] = m.group(1)
    else:
        # No residency search (forced, or several workers): the stage table
        # says whether any stage-job uploads weights.
        uploads = []
        table = re.search(r"Stages in job order[^\n]*\n[^\n]*\n((?:\s+\d+ .*\n)+)", text)
        for line in (table.group(1).splitlines() if table else []):
            cols = line.split()
            if len(cols) > 6:
                try:
                    uploads.append(float(cols[6]))
                except ValueError:
                    pass
        p["residency"] = ("streamed" if any(u > 0 for u in uploads) else "device") \
            if uploads else None
    p["blocks"] = len(re.findall(r"^\s+\d+ block ", text, re.M))
    return p


def plan_label(residency, microbatches, rows):
    parts = []
    if residency:
        parts.append(residency)
    if microbatches:
        parts.append("M = %d x %d" % (microbatches, rows))
    return ", ".join(parts) if parts else "-"


# --- runs ----------------------------------------------------------------

class Runs:
    def __init__(self):
        self.runs = []
        self.used = set()       # files read (or accounted for with a run)
        self.skipped = {}       # path -> reason

    def use(self, *paths):
        for p in paths:
            if p:
                self.used.add(os.path.abspath(p))

    def skip(self, path, reason):
        # One file may give several reasons (rows of one JSON).
        a = os.path.abspath(path)
        if reason not in self.skipped.get(a, ""):
            self.skipped[a] = (self.skipped[a] + "; " if a in self.skipped else "") + reason

    def add(self, **kw):
        def positive(x):
            return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
        if not positive(kw.get("measured")):
            self.skip(os.path.join(RESULTS, kw["folder"], kw["source"].split(" (")[0]),
                      "a Rondo row without a numeric step time (%r)" % (kw.get("measured"),))
            return
        if kw.get("predicted") is not None and not positive(kw["predicted"]):
            kw["predicted"], kw["pred_note"] = None, "not recorded"
        if not positive(kw.get("tokens")):
            kw["tokens"] = None
        kw.setdefault("predicted", None)
        kw.setdefault("pred_note", None)
        kw.setdefault("compile", None)
        kw.setdefault("compile_note", "compile command not recorded")
        kw.setdefault("index", 0)
        kw.setdefault("plan", "-")
        self.runs.append(kw)


def config_label(r):
    return " · ".join(x for x in (r["model"], r["machine"], r["layout"], r["variant"],
                                  r["mode"]) if x)


def layout_label(replicas, workers, gpus):
    if replicas == 1 and workers == 1:
        return "1 GPU"
    if gpus and gpus < replicas * workers:
        return "%d workers sharing %d GPU" % (workers, gpus)
    return "%dx%d on %d GPUs" % (replicas, workers, replicas * workers)


# W1 trainers of bench/w1.py runs: what compiled them (the staging scripts at
# the runs' commits), as rondo-compile arguments after the model.
W1 = ["--batch", "16", "--seq-len", "4096"]
W1_TRAINERS = {
    "w1-streamed.trainer": ("--residency=streamed",
                            W1 + ["--workers", "1", "--residency=streamed"]),
    "w1-chunk4k.trainer": ("--loss-chunk-rows 4096",
                           W1 + ["--workers", "1", "--loss-chunk-rows", "4096"]),
    "w1-lean.trainer": ("16 GB worker budget", W1 + ["--workers", "1", "--worker-memory-gb", "16"]),
    "w1-m8.trainer": ("M = 8 forced (--microbatches 8 --stages=tail:30, 76 GB)",
                      W1 + ["--workers", "1", "--microbatches", "8", "--stages=tail:30",
                            "--worker-memory-gb", "76"]),
    # bench/results/h100x1/residency-2026-11-26e/m8dev-76gb: no script or
    # note kept the command.
    "w1-m8dev.trainer": ("device-resident M = 8 x 2 forced, 76 GB", None),
    "w1-b8.trainer": ("batch 8 per replica (--replicas 2)",
                      ["--batch", "8", "--seq-len", "4096", "--workers", "2", "--replicas", "2"]),
    "w1-b4.trainer": ("batch 4 per replica (--replicas 4)",
                      ["--batch", "4", "--seq-len", "4096", "--workers", "1", "--replicas", "4"]),
}


def w1_trainer(trainer, date, workers):
    """(variant, compile args) of a W1 trainer file name."""
    if trainer in W1_TRAINERS:
        return W1_TRAINERS[trainer]
    m = re.match(r"w1-g(\d+)\.trainer$", trainer or "")
    if m:   # bench/prepare-layouts.sh
        return "planner", W1 + ["--gpus", m.group(1)]
    if trainer in ("w1.trainer", "w1-old.trainer", None):
        # w1-old.trainer: the same command compiled by an older revision
        # (bench/prepare-ab.sh). On 2026-11-22 bench/prepare-gpu.sh compiled
        # w1.trainer for 1, 2 and 4 workers (one shared M); from 2026-11-24
        # on, prepare-stale/ab/residency.sh compile it for one.
        if date and date <= "2026-11-22":
            return "planner", W1 + ["--workers", "1,2,4"]
        if workers == 1:
            return "planner", W1 + ["--workers", "1"]
        return "planner", None
    return "trainer " + trainer, None


def residency_from_log(path):
    """device / mixed / streamed from a trainer's log ("device-resident: N
    parameters (E elements)" against "T trainable"), None without the log."""
    text = read_text(path)
    m = re.search(r"(\d+) trainable \+ (\d+) frozen parameters", text)
    if not m:
        return None
    total = int(m.group(1))
    r = re.search(r"device-resident: \d+ parameters \((\d+) elements\)", text)
    if not r:
        return "streamed"
    return "device" if int(r.group(1)) >= total else "mixed"


def w1_run_rows(runs, path, data):
    """Rows of a bench/w1.py JSON: {"rondo": {tag: row}}, or the first
    format of 2026-11-22 where "rondo" is the one row itself."""
    folder = os.path.dirname(path)
    shape = data.get("shape", "w1")
    rows_per_step = data.get("rows_per_step", 8 if shape == "qwen3-8b" else 16)
    model = {"w1": "W1 (Qwen3-1.7B, 16x4096)",
             "qwen3-8b": "Qwen3-8B full fine-tune, %dx4096" % rows_per_step,
             "llama3.2-1b": "Llama-3.2-1B full fine-tune, %dx4096" % rows_per_step,
             "qwen2.5-1.5b": "Qwen2.5-1.5B full fine-tune, %dx4096" % rows_per_step,
             }.get(shape, "%s, %dx4096" % (shape, rows_per_step))
    prefix = "w1" if shape == "w1" else shape
    tokens = data.get("tokens_per_step")
    date = data.get("date") or folder_date(path) or git_date(path)
    rondo = data.get("rondo") or {}
    rows = [("rondo", rondo)] if "step_seconds" in rondo else list(rondo.items())
    if not rows:
        runs.skip(path, "PyTorch rows only (no Rondo run in this JSON)")
        return
    runs.use(path)
    for index, (tag, row) in enumerate(rows):
        if not isinstance(row, dict) or "step_seconds" not in row:
            runs.skip(path, "Rondo row %r has no step time (%s)" % (
                tag, row.get("error") if isinstance(row, dict) else row))
            continue
        plan = row.get("plan") or {}
        workers = row.get("workers", plan.get("workers", 1))
        replicas = row.get("replicas", 1)
        gpus = row.get("gpus") or data.get("gpus")
        args = row.get("args") or []
        stale = "--optimizer-mode=stale" in args or plan.get("optimizer") == "stale"
        variant, compile_args = (w1_trainer(row.get("trainer"), date, workers) if shape == "w1"
                                 else ("planner", None))
        if shape == "qwen3-8b":
            m = re.match(r"q8-g(\d+)\.trainer$", row.get("trainer", ""))
            if m:   # bench/prepare-layouts.sh with the 8B graph
                compile_args = ["--batch", "8", "--seq-len", "4096", "--gpus", m.group(1),
                                "--host-memory-gb", "480"]
        if "--shard-optimizer=off" in args:
            variant += ", --shard-optimizer=off"
            compile_args = compile_args and compile_args + ["--shard-optimizer=off"]
        # Residency: the trainer's own log, else what the date and the
        # worker count imply.
        log = os.path.join(folder, "%s-rondo-%s.r0.log" % (prefix, tag))
        residency = residency_from_log(log) if os.path.exists(log) else None
        if residency:
            runs.use(log)
        elif date and date < RESIDENCY_DATE:
            residency = "streamed"
        elif workers > 1:
            residency = "streamed"   # several workers always stream
        runs.use(*glob.glob(os.path.join(folder, "%s-rondo-%s*" % (prefix, tag))))
        predicted = plan.get("predictedStepSeconds")
        note = None
        if stale and plan.get("optimizer") != "stale":
            note = "not recorded (%.3f s: %s)" % (predicted, STALE_WITH_SYNC_PREDICTION)
            predicted = None
        elif predicted is None:
            note = "not recorded"
        # The Llama and Qwen2.5 graphs come from the GPU machine
        # (scripts/export-hf-onnx.py --preset NAME --graph-only): model keys
        # as the families' (--model-<key> below).
        model_file = {"w1": W1_MODEL, "qwen3-8b": "8b"}.get(shape, shape)
        if shape in ("llama3.2-1b", "qwen2.5-1.5b"):
            compile_args = ["--batch", "16", "--seq-len", "4096", "--workers", "1"]
        runs.add(machine=machine_of(path), folder=rel(folder),
                 source=os.path.basename(path) + ("" if tag == "rondo" else " (%s)" % tag),
                 model=model, layout=layout_label(replicas, workers, gpus), variant=variant,
                 mode="stale" if stale else "overlap", date=date, order=git_added(path),
                 index=index, measured=row["step_seconds"], tokens=tokens,
                 plan=plan_label(residency, plan.get("microbatches"),
                                 plan.get("rowsPerMicrobatch")),
                 predicted=predicted, pred_note=note, replicas=replicas, workers=workers,
                 compile=compile_args, model_file=model_file,
                 compile_note=None if compile_args else "compile command not recorded")
    # The plan texts beside the JSON (--explain=DIR of the same trainers)
    # repeat the predictions the JSON carries: accounted for, not rows. A
    # machine's own folder holds runs of many days: none of its plans are
    # this JSON's.
    if os.path.dirname(os.path.abspath(folder)) != RESULTS:
        for d in (folder, os.path.dirname(folder)):
            for p in glob.glob(os.path.join(d, "plan*", "**", "*"), recursive=True):
                if os.path.isfile(p):
                    runs.use(p)


def find_plan(folder, names, seq, rows, root):
    """The --explain text of a run saved beside it: folder (then its parents
    up to root) / plans/NAME.txt, plans/NAME/plan_w1.txt, NAME/plan_w1.txt
    or plan/plan_w1.txt, whose step has the run's rows and tokens."""
    d = folder
    while True:
        for name in names:
            for cand in (os.path.join(d, "plans", name + ".txt"),
                         os.path.join(d, "plans", name, "plan_w1.txt"),
                         os.path.join(d, name, "plan_w1.txt"),
                         os.path.join(d, name, "plan", "plan_w1.txt")) + \
                    ((os.path.join(d, "plan", "plan_w1.txt"),) if d == folder else ()):
                p = parse_plan_text(cand) if os.path.exists(cand) else None
                if p and p.get("tokens") == rows * seq and p.get("rows") == rows:
                    return p
        if os.path.abspath(d) == os.path.abspath(root) or len(d) <= len(RESULTS):
            return None
        d = os.path.dirname(d)


def use_plan_dir(runs, plan):
    """Marks a run's plan as read: its whole --explain=DIR, or only the text
    where the texts of several runs share plans/."""
    if plan:
        d = os.path.dirname(plan["path"])
        if os.path.basename(d) == "plans":
            runs.use(plan["path"])
        else:
            runs.use(*[os.path.join(d, f) for f in os.listdir(d)])


LORA8B = ["--batch", "1", "--seq-len", "32768", "--workers", "1", "--lora=rank=16,alpha=32"]
# bench/long_context.py row names: the trainers of bench/prepare-residency.sh
# and bench/prepare-long-context.sh (at the runs' commits).
LONG_CONTEXT = {
    "lora8b-planner": ("planner", LORA8B),
    "lora8b-r16": ("planner", LORA8B),
    "lora8b-device": ("--residency=device", LORA8B + ["--residency=device"]),
    "lora8b-stream24": ("--residency=streamed, 24 GB",
                        LORA8B + ["--residency=streamed", "--worker-memory-gb", "24"]),
    "lora8b-stream32": ("--residency=streamed, 32 GB",
                        LORA8B + ["--residency=streamed", "--worker-memory-gb", "32"]),
    # prepare-long-context.sh: a trainer at the plan's longest sequence.
    "long17-max": ("planner, the plan's longest sequence",
                   ["--batch", "1", "--seq-len", "287232", "--workers", "1"]),
    # No script kept the 64K trainer's command.
    "long17-64k": ("planner", None),
}


def long_context_rows(runs, path, data, root):
    folder = os.path.dirname(path)
    runs.use(path)
    date = folder_date(path) or git_date(path)
    for index, (name, row) in enumerate((data.get("rondo") or {}).items()):
        times = row.get("step_seconds") or []
        if row.get("returncode") != 0 or not times:
            runs.skip(path, "Rondo row %r did not run (rc %s)" % (name, row.get("returncode")))
            continue
        seq = row["seq"]
        lora = name.startswith("lora8b")
        model = ("Qwen3-8B LoRA r16, 1x%d" % seq if lora
                 else "Qwen3-1.7B full fine-tune, 1x%d" % seq)
        variant, args = LONG_CONTEXT.get(name, ("row " + name, None))
        names = [name, name.replace("-planner", "")]
        plan = find_plan(folder, names, seq, 1, root)
        use_plan_dir(runs, plan)
        log = os.path.join(folder, "log-%s.jsonl" % name)
        if os.path.exists(log):
            runs.use(log)
        # long_context.py leaves the first step out of step_seconds already.
        runs.add(machine=machine_of(path), folder=rel(folder), source=os.path.basename(path),
                 model=model, layout="1 GPU", variant=variant, mode="overlap", date=date,
                 order=git_added(path), index=index, measured=mean(times), tokens=seq,
                 plan=plan_label(plan and plan["residency"], plan and plan.get("microbatches"),
                                 plan and plan.get("mb_rows")) if plan else "-",
                 predicted=plan["overlap"] if plan else None,
                 pred_note=None if plan else "not recorded",
                 replicas=1, workers=1, compile=args,
                 model_file="8b" if lora else W1_MODEL,
                 compile_note=None if args else "compile command not recorded")


# bench/families.py presets: the label, the graph (--gemma3-1b, --moe4l,
# --gpt-oss-20b), the --explain folders bench/prepare-families.sh names for
# it, and the compile arguments beyond the shape (its commands).
FAMILY_MODELS = {
    "gemma3-1b": ("Gemma-3-1B full fine-tune", "gemma3-1b", r"gemma3-1b$", []),
    "qwen3-30b-a3b": ("Qwen3-30B-A3B full fine-tune", "moe4l", r"moe\d+l$", []),
    "gpt-oss-20b": ("GPT-OSS-20B LoRA r16", "gptoss", r"gptoss-lora\d+k$",
                    ["--lora=rank=16,alpha=32"]),
}
# The same presets trained with LoRA (the run's PyTorch row is PEFT's):
# the whole Qwen3-30B-A3B shape, whose full fine-tune is the 4-layer cut.
FAMILY_LORA_MODELS = {
    "qwen3-30b-a3b": ("Qwen3-30B-A3B LoRA r16", "moefull", r"moelora\d+k$",
                      ["--lora=rank=16,alpha=32"]),
}


def families_rows(runs, path, data):
    folder = os.path.dirname(path)
    runs.use(path)
    preset, layers = data.get("preset"), data.get("layers") or 0
    rows, seq, skip = data.get("rows"), data.get("seq"), data.get("skip", 0)
    lora = any("lora" in r.get("system", "") for r in data.get("results") or []
               if r.get("system", "").startswith("pytorch"))
    name, model_key, plan_dirs, extra = (
        FAMILY_LORA_MODELS.get(preset) if lora and preset in FAMILY_LORA_MODELS
        else FAMILY_MODELS.get(preset, ("%s (preset not known here)" % preset, None,
                                        None, [])))
    model = "%s%s, %dx%d" % (name, " (%d layers)" % layers if layers else "", rows, seq)
    # The JSON does not name its trainer: the plan of this preset whose step
    # (and layer count, for a cut model) is the run's.
    plan = None
    for cand in sorted(glob.glob(os.path.join(folder, "plans", "*", "plan_w1.txt"))):
        if not plan_dirs or not re.match(plan_dirs, os.path.basename(os.path.dirname(cand))):
            continue
        p = parse_plan_text(cand)
        if p and p.get("tokens") == rows * seq and (not layers or p["blocks"] == layers):
            plan = p
    use_plan_dir(runs, plan)
    for log in glob.glob(os.path.join(folder, "log-*.jsonl")):
        runs.use(log)
    for index, r in enumerate(data.get("results") or []):
        if not r.get("system", "").startswith("rondo"):
            continue
        times = r.get("step_seconds") or []
        if r.get("returncode") != 0 or not times:
            runs.skip(path, "Rondo row did not run (rc %s)" % r.get("returncode"))
            continue
        # families.py's rate: the steps after --skip.
        timed = times[skip:] or times[-1:]
        runs.add(machine=machine_of(path), folder=rel(folder), source=os.path.basename(path),
                 model=model, layout="1 GPU", variant="planner", mode="overlap",
                 date=data.get("date") or folder_date(path), order=git_added(path), index=index,
                 measured=mean(timed), tokens=rows * seq,
                 plan=plan_label(plan["residency"], plan.get("microbatches"), plan.get("mb_rows"))
                 if plan else "-",
                 predicted=plan["overlap"] if plan else None,
                 pred_note=None if plan else "not recorded", replicas=1, workers=1,
                 compile=["--batch", str(rows), "--seq-len", str(seq), "--workers", "1"] + extra
                 if model_key else None, model_file=model_key)


def steps_mean(path, skip=2):
    """Mean step seconds of a trainer's --log-json after the first `skip`
    steps (bench/w1.py's --skip 2, as test/GPU/run-residency.sh passes)."""
    steps = []
    for line in read_text(path).splitlines():
        try:
            s = json.loads(line)
        except ValueError:
            continue
        if "seconds" in s and s.get("step", 0) >= skip:
            steps.append(s["seconds"])
    return mean(steps), steps


def trace_rows(runs, folder):
    """A bench/w1.py run whose JSON did not come back (residency-2026-11-26a):
    the trainers' step logs and traces are there."""
    for steps in sorted(glob.glob(os.path.join(folder, "w1-rondo-*-steps.jsonl"))):
        tag = re.match(r"w1-rondo-(.*)-steps\.jsonl$", os.path.basename(steps)).group(1)
        trace = os.path.join(folder, "w1-rondo-%s-trace.json" % tag)
        log = os.path.join(folder, "w1-rondo-%s.r0.log" % tag)
        data = load_json(trace)
        other = (data or {}).get("otherData") or {}
        measured, _ = steps_mean(steps)
        if measured is None:
            continue
        runs.use(steps, trace, log)
        residency = residency_from_log(log)
        variant = {"planner": "planner",
                   "streamed": "--residency=streamed"}.get(tag, "trainer " + tag)
        args = {"planner": W1 + ["--workers", "1"],
                "streamed": W1 + ["--workers", "1", "--residency=streamed"]}.get(tag)
        predicted = other.get("predictedStepSeconds")
        runs.add(machine=machine_of(folder), folder=rel(folder), source=os.path.basename(steps),
                 model="W1 (Qwen3-1.7B, 16x4096)", layout="1 GPU", variant=variant, mode="overlap",
                 date=folder_date(folder), order=git_added(steps), index=0, measured=measured,
                 tokens=16 * 4096,
                 plan=plan_label(residency, other.get("microbatches"),
                                 other.get("rowsPerMicrobatch")),
                 predicted=predicted, pred_note=None if predicted else "not recorded",
                 replicas=1, workers=1, compile=args, model_file=W1_MODEL,
                 compile_note=None if args else "compile command not recorded")


def loss_parity_rows(runs, folder):
    """bench/loss_parity.py's Rondo phase: the W1 planner's trainer over 200
    steps; no plan was kept with it."""
    steps = os.path.join(folder, "rondo-steps.jsonl")
    measured, _ = steps_mean(steps)
    if measured is None:
        return False
    lines = [json.loads(l) for l in read_text(steps).splitlines() if l.strip()]
    tokens = lines[0].get("tokens")
    runs.use(steps, os.path.join(folder, "rondo.log"))
    runs.add(machine=machine_of(folder), folder=rel(folder), source="rondo-steps.jsonl",
             model="W1 (Qwen3-1.7B, 16x4096)", layout="1 GPU", variant="planner", mode="overlap",
             date=folder_date(folder), order=git_added(steps), index=0, measured=measured,
             tokens=tokens, plan="%d steps (loss parity)" % len(lines),
             pred_note="not recorded", replicas=1, workers=1,
             compile=W1 + ["--workers", "1"], model_file=W1_MODEL, compile_note=None)
    return True


def plan_vs_trace_rows(runs, path):
    """scripts/gpu-e2e.sh check: scripts/plan-vs-trace.py's table for the
    deep10 trainer (qwen3-deep-tiny, 10 x 16 tokens, fp32), every worker on
    the one GPU."""
    text = read_text(path)
    m = re.search(r"step\s+interval\s+([\d.]+)\s+([\d.]+)", text)
    p = re.search(r"plan (\S+) \((\w+) optimizer\): (\d+) workers, "
                  r"(\d+) microbatches of (\d+) rows", text)
    if not (m and p):
        return False
    runs.use(path)
    workers = int(p.group(3))
    runs.add(machine=machine_of(path), folder=rel(os.path.dirname(path)) or ".",
             source=os.path.basename(path), model="qwen3-deep-tiny fp32, 10x16",
             layout="%d workers sharing 1 GPU" % workers, variant="planner",
             mode=p.group(2), date=folder_date(path) or git_date(path), order=git_added(path),
             measured=float(m.group(2)) / 1e3, tokens=160,
             # 2026-11-22 and -25: every plan streamed then.
             plan=plan_label("streamed", int(p.group(4)), int(p.group(5))),
             predicted=float(m.group(1)) / 1e3, replicas=1, workers=workers,
             compile_note="the workers shared one GPU; a plan prices one GPU per worker")
    return True


def q06_rows(runs, path):
    """bench/results/h200/q06-fp32-first-cuda.txt: the first CUDA runs,
    every worker on one H200; test/GPU/run-0.6b-on-gpu.sh's header has the
    compile command. No prediction was kept."""
    text = read_text(path)
    found = False
    for m in re.finditer(r"^workers (\d+):.*steady (\d+) tok/s.*?, ([\d.]+) s/step", text, re.M):
        workers = int(m.group(1))
        found = True
        args = (["--batch", "8", "--seq-len", "1024", "--microbatches", "4", "--workers", "1,2,4",
                 "--precision=fp32"] if workers == 1 else None)
        runs.add(machine=machine_of(path), folder=rel(os.path.dirname(path)),
                 source=os.path.basename(path), model="Qwen3-0.6B fp32, 8x1024",
                 layout="1 GPU" if workers == 1 else "%d workers sharing 1 GPU" % workers,
                 variant="M = 4 (--microbatches 4)", mode="overlap",
                 date=git_date(path), order=git_added(path), index=workers,
                 measured=float(m.group(3)), tokens=8 * 1024, plan="streamed, M = 4 x 2",
                 pred_note="not recorded", replicas=1, workers=workers, compile=args,
                 model_file=os.path.join(MODELS_DIR, "qwen3-0.6b.onnx"),
                 compile_note=None if args else
                 "the workers shared one GPU; a plan prices one GPU per worker")
    if found:
        runs.use(path)
    return found


def replicas_note_rows(runs, path):
    """bench/results/h200x2/replicas-nccl-experimental.txt: W1 over 2 H200s
    (test/GPU/run-replicas.sh at 0d97b1a), tokens/s over steps 3-5 only."""
    text = read_text(path)
    m = re.search(r"1 replica x 2 GPUs \(2-worker plan\): (\d+) tok/s; "
                  r"2 replicas x 1 GPU \(1-worker plan, batch 8 each\): (\d+) tok/s", text)
    if not m:
        return False
    runs.use(path)
    date = git_date(path)
    # The 1x2 run is prepare-gpu.sh's w1.trainer (--workers 1,2,4); the 2x1
    # trainer (w1h.trainer) was compiled by a command no file kept.
    for index, (layout, tokps, args, variant) in enumerate((
            ("1x2 on 2 GPUs", m.group(1), W1 + ["--workers", "1,2,4"], "planner"),
            ("2x1 on 2 GPUs", m.group(2), None, "batch 8 per replica"))):
        runs.add(machine=machine_of(path), folder=rel(os.path.dirname(path)),
                 source=os.path.basename(path), model="W1 (Qwen3-1.7B, 16x4096)",
                 layout=layout, variant=variant, mode="overlap", date=date,
                 order=git_added(path), index=index, measured=16 * 4096 / float(tokps),
                 tokens=16 * 4096, plan="streamed", pred_note="not recorded",
                 replicas=2 if index else 1, workers=1 if index else 2, compile=args,
                 model_file=W1_MODEL,
                 compile_note=None if args else "compile command not recorded")
    return True


def q8b_h200x2_row(runs, path, data):
    """bench/results/h200x2/q8b-h200x2.json: the 8B shape on 2 H200s; its
    trainer's command was not kept (test/GPU/run-multi-b.sh only runs it)."""
    runs.use(path)
    runs.add(machine=machine_of(path), folder=rel(os.path.dirname(path)),
             source=os.path.basename(path),
             model="Qwen3-8B full fine-tune, %dx4096" % (data["tokens_per_step"] // 4096),
             layout="1x2 on 2 GPUs", variant="planner", mode="overlap", date=data.get("date"),
             order=git_added(path), measured=data["step_seconds"], tokens=data["tokens_per_step"],
             plan="streamed, " + re.sub(r".*?(\d+) microbatches of (\d+) rows.*",
                                        r"M = \1 x \2", data.get("plan", "")),
             pred_note="not recorded", replicas=1, workers=2)


# What the script reads no timing from, by file name: the reason it gives.
SKIP_REASONS = [
    (r"README\.md$", None),
    (r"(^|/)w1-pytorch-|pytorch-|torch\.log$|torch-lora", "PyTorch baseline"),
    (r"profile\.txt$",
     "kernel profile (RONDO_PROFILE_KERNELS): GPU time per kernel, no step prediction"),
    (r"cuda-kernels-tests.*\.log$|suite-summary\.log$", "CUDA kernel test suite log"),
    (r"(^|/)fixtures/|gpu-fixtures-fp32|check-reference|gpu-e2e-fp32\.txt$|gdev\.jsonl|rdev|"
     r"kill\.out",
     "tiny fixtures run for correctness (losses, gradients, a replica killed), "
     "not timed against a plan"),
    (r"loss-parity\.json$|parity-config\.json$", "loss parity comparison (losses only)"),
    (r"attention|flash-d256|gemm|grouped_gemm", "kernel benchmark, no training step"),
    (r"adamw-", "host AdamW benchmark"),
    (r"device-measurements\.json$", "hardware rates measured for a device spec"),
    (r"calibration\.json$", "the spec fit's inputs (bench/calibrate_spec.py)"),
    (r"moe-sinks", "CUDA kernel test suite log"),
]


def guarded(runs, path, handler, *args):
    """A handler that fails on a file it half understands leaves the file in
    the list of those not read, with the error, instead of ending the walk."""
    try:
        return handler(runs, path, *args)
    except Exception as e:  # noqa: BLE001 -- any format surprise
        runs.skip(path, "could not read (%s: %s)" % (type(e).__name__, e))
        return False


def same_bytes_elsewhere(path):
    """Another results file of the same name and bytes, if any."""
    with open(path, "rb") as f:
        mine = f.read()
    for other in glob.glob(os.path.join(RESULTS, "**", os.path.basename(path)), recursive=True):
        if os.path.abspath(other) != os.path.abspath(path):
            with open(other, "rb") as f:
                if f.read() == mine:
                    return other
    return None


def walk(runs):
    for machine_dir in sorted(glob.glob(os.path.join(RESULTS, "*"))):
        if not os.path.isdir(machine_dir):
            continue
        for path in sorted(glob.glob(os.path.join(machine_dir, "**", "*.json"), recursive=True)):
            if path.endswith("-trace.json") or os.path.basename(path) == "op-timings.json":
                continue
            data = load_json(path)
            if not isinstance(data, dict):
                continue
            parts = rel(path).split(os.sep)
            # A run's own folder: bench/results/<machine>/<folder>, or the
            # machine's folder for the files directly in it.
            root = os.path.join(machine_dir, parts[1]) if len(parts) > 2 else machine_dir
            if "workload" in data and "rondo" in data:
                guarded(runs, path, w1_run_rows, data)
            elif "workload" in data and "step_seconds" in data:
                guarded(runs, path, q8b_h200x2_row, data)
            elif "rondo" in data and "pytorch" in data:
                guarded(runs, path, long_context_rows, data, root)
            elif "preset" in data and "results" in data:
                guarded(runs, path, families_rows, data)
        for folder in sorted(set(os.path.dirname(p) for p in glob.glob(
                os.path.join(machine_dir, "**", "*"), recursive=True))):
            has_json = any(os.path.abspath(p) in runs.used
                           for p in glob.glob(os.path.join(folder, "*.json")))
            if not has_json and glob.glob(os.path.join(folder, "w1-rondo-*-steps.jsonl")):
                guarded(runs, folder, trace_rows)
            if os.path.exists(os.path.join(folder, "rondo-steps.jsonl")):
                guarded(runs, folder, loss_parity_rows)
        for path in sorted(glob.glob(os.path.join(machine_dir, "**", "*.txt"), recursive=True)):
            if os.path.abspath(path) in runs.used:
                continue
            (guarded(runs, path, plan_vs_trace_rows) or guarded(runs, path, q06_rows)
             or guarded(runs, path, replicas_note_rows))
    # Everything else, with why it gives no row.
    for path in sorted(glob.glob(os.path.join(RESULTS, "**", "*"), recursive=True)):
        a = os.path.abspath(path)
        if not os.path.isfile(path) or a in runs.used or a in runs.skipped:
            continue
        r = rel(path).replace(os.sep, "/")
        reason = "no Rondo step time this script reads"
        for pattern, why in SKIP_REASONS:
            if re.search(pattern, r):
                reason = why
                break
        if reason is None:
            continue
        m = re.match(r"(w1|qwen3-8b)-rondo-(.+?)(-steps\.jsonl|-trace\.json|\.r\d+\.log)$",
                     os.path.basename(path))
        if m:
            # A trainer's files whose bench/w1.py row is not in the folder's
            # JSON (the row was read, these were not).
            reason = "no row %r in this folder's JSON" % m.group(2)
            twin = same_bytes_elsewhere(path)
            if twin:
                reason += "; byte-identical to %s (left from that run)" % rel(twin)
        runs.skip(path, reason)


# --- today's compiler ----------------------------------------------------
