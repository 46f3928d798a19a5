#!/usr/bin/env python3
"""Kills a Rondo trainer with SIGKILL again and again and checks that the
resumed runs end bitwise where an uninterrupted run ends.

  kill-resume-loop.py (--trainer T | --model M.onnx) [options] [-- ARGS]

1. With --model, compiles a trainer (rondo-compile from --compiler or PATH,
   with --compile-args, default for qwen3-deep-tiny).
2. Runs an uninterrupted reference for --steps S steps (--log-json,
   --export-onnx).
3. Runs the same with --save-every 1 --checkpoint-dir D --resume, each run
   with its own --log-json and --export-onnx, and sends SIGKILL to it at a
   seeded random moment (--seed), --kills N times; then lets one run
   complete. The moments are drawn from three kinds, in turn:
     startup  a delay in [0, the reference's start-up time] after launch;
     step     a delay in [0, one step time] after a progress line (which is
              printed right before that step's checkpoint is written);
     write    as soon as a temporary checkpoint file shows up in D, i.e.
              in the middle of a checkpoint write.
   With --signal INT or TERM the trainer must stop after the current step
   instead, with a checkpoint and status 128 + the signal's number.
   Resumed runs cycle through --resume-workers and --resume-modes, so the
   checkpoint must not depend on the plan.
   No run may find LATEST naming a damaged checkpoint.
4. Merges the logs of all runs by step (the last run to log a step wins;
   every step must be logged; a line cut off by the kill is ignored) and
   compares the losses with the reference's, and the final weights (the
   --export-onnx of the completing run) byte for byte.

Prints one line per run and a summary; exits 1 naming the first difference.
Extra trainer arguments go after `--`.
"""
import argparse
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trainer", help="a compiled trainer")
    src.add_argument("--model", help="an ONNX model to compile")
    p.add_argument("--compiler", default="rondo-compile")
    p.add_argument("--compile-args",
                   default="--batch 4 --seq-len 16 --microbatches 2 --workers 1,2")
    p.add_argument("--data", help="token data (default: random ids.npy)")
    p.add_argument("--vocab", type=int, default=512,
                   help="vocabulary of the generated data (default 512)")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--signal", default="KILL", choices=["KILL", "INT", "TERM"],
                   help="the signal to send (default KILL). INT and TERM must "
                   "let the step finish, write a checkpoint, say so and exit "
                   "with 128 + the signal's number; the next run must resume "
                   "from that step")
    p.add_argument("--twice", action="store_true",
                   help="send INT/TERM twice, 2 ms apart, as a process "
                   "manager signalling the trainer and its group does: one "
                   "request, the trainer exits with 128 + the signal's number")
    p.add_argument("--workers", default="2", help="workers of the reference run")
    p.add_argument("--resume-workers", default="1,2",
                   help="workers of the killed runs, cycled (default 1,2)")
    p.add_argument("--resume-modes", default="overlap,sync",
                   help="--optimizer-mode of the killed runs, cycled")
    p.add_argument("--work", default=None, help="work directory (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds any one run may take")
    p.add_argument("extra", nargs="*", help="more trainer arguments (after --)")
    return p.parse_args()


def fail(message):
    print("kill-resume-loop: FAIL: " + message)
    sys.exit(1)


def read_log(path):
    """step -> loss repr of a --log-json file; ignores a cut-off last line."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:  # Written when the kill came.
                continue
            fail("%s: line %d is not JSON: %r" % (path, i + 1, line))
        if "loss" in rec and "step" in rec and "eval_loss" not in rec:
            out[rec["step"]] = repr(rec["loss"])
    return out


def temp_files(ckdir, pid):
    """The temporary checkpoint files process `pid` is writing."""
    return glob.glob(os.path.join(ckdir, "*.tmp.%d" % pid))


def main():
    a = parse_args()
    rng = random.Random(a.seed)
    work = a.work or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), "kill-resume-%d" % os.getpid())
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)

    trainer = a.trainer
    if a.model:
        trainer = os.path.join(work, "trainer")
        cmd = [a.compiler, a.model] + a.compile_args.split() + ["-o", trainer]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        if r.returncode != 0:
            fail("compiling failed: %s\n%s" % (" ".join(cmd), r.stdout))
    trainer = os.path.abspath(trainer)

    data = a.data
    if not data:
        import numpy as np
        data = os.path.join(work, "ids.npy")
        ids = np.random.default_rng(a.seed).integers(0, a.vocab, size=(a.rows, a.seq_len))
        np.save(data, ids.astype(np.int64))

    common = [trainer, "--data", data, "--steps", str(a.steps)] + a.extra

    # The reference, uninterrupted; its log gives the step time.
    ref_log = os.path.join(work, "ref.json")
    ref_onnx = os.path.join(work, "ref.onnx")
    t0 = time.monotonic()
    r = subprocess.run(common + ["--workers", a.workers, "--quiet", "--log-json", ref_log,
                                 "--export-onnx", ref_onnx],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=a.timeout)
    total = time.monotonic() - t0
    if r.returncode != 0:
        fail("the reference run failed (status %d):\n%s" % (r.returncode, r.stdout))
    reference = read_log(ref_log)
    if sorted(reference) != list(range(a.steps)):
        fail("the reference logged steps %s" % sorted(reference))
    with open(ref_log) as f:
        seconds = [json.loads(l)["seconds"] for l in f if l.strip()]
    step_time = max(1e-3, sum(seconds) / len(seconds))
    startup = max(1e-3, total - sum(seconds))

    ckdir = os.path.join(work, "ck")
    workers = a.resume_workers.split(",")
    modes = a.resume_modes.split(",")
    signo = getattr(signal, "SIG" + a.signal)
    # INT/TERM handlers are installed once the trainer runs; a signal during
    # the dynamic loader's work would find the default action.
    kinds = ["step", "write", "startup"] if a.signal == "KILL" else ["step", "write"]
    expect_resume = None
    logs = []
    kills = {k: 0 for k in kinds}
    in_write = 0
    run = 0
    final_onnx = None
    while True:
        run += 1
        if run > a.kills + 50:
            fail("no run completed after %d runs" % run)
        log = os.path.join(work, "run%d.json" % run)
        onnx_out = os.path.join(work, "run%d.onnx" % run)
        w, mode = workers[(run - 1) % len(workers)], modes[(run - 1) % len(modes)]
        cmd = common + ["--workers", w, "--optimizer-mode", mode, "--save-every", "1",
                        "--checkpoint-dir", ckdir, "--resume", "--log-json", log,
                        "--export-onnx", onnx_out]
        killing = sum(kills.values()) < a.kills
        kind = kinds[sum(kills.values()) % len(kinds)] if killing else None
        # The draws happen for every kill, whatever its kind, so one seed
        # gives one schedule.
        delay_startup = rng.uniform(0, startup)
        delay_step = rng.uniform(0, step_time)
        after_lines = rng.randint(1, 3)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                universal_newlines=True)
        output = []
        progress = threading.Event()
        lines_seen = [0]

        def reader():
            for line in proc.stderr:
                output.append(line)
                if line.startswith("step "):
                    lines_seen[0] += 1
                    if lines_seen[0] >= after_lines:
                        progress.set()
        th = threading.Thread(target=reader, daemon=True)
        th.start()
        killed = False
        sent = False
        start = time.monotonic()
        if killing:
            if kind == "startup":
                time.sleep(delay_startup)
            elif kind == "step":
                while not progress.is_set() and proc.poll() is None:
                    progress.wait(0.01)
                time.sleep(delay_step)
            else:  # write
                while not temp_files(ckdir, proc.pid) and proc.poll() is None:
                    if time.monotonic() - start > a.timeout:
                        break
                    time.sleep(0.0005)
            if proc.poll() is None:
                proc.send_signal(signo)
                if a.twice:
                    time.sleep(0.002)
                    proc.send_signal(signo)
                killed = True
                sent = True
                try:
                    proc.wait(timeout=a.timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    fail("run %d did not stop within %g s of SIG%s" % (run, a.timeout, a.signal))
                kills[kind] += 1
                during_write = bool(temp_files(ckdir, proc.pid))
                in_write += during_write
        try:
            proc.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("run %d took more than %g s" % (run, a.timeout))
        th.join()
        logs.append(log)
        # LATEST must never name a partial file: a resume that falls back to
        # the previous checkpoint means it did.
        damaged = [l for l in output if "truncated or corrupt" in l
                   or "resuming from the previous checkpoint" in l]
        if damaged:
            fail("run %d found a damaged checkpoint:\n%s" % (run, "".join(damaged)))
        resumed = [l for l in output if "resuming from step" in l]
        start_step = resumed[0].split("resuming from step ")[1].split()[0] if resumed else "0"
        if resumed or expect_resume is not None:
            if expect_resume is not None and start_step != str(expect_resume):
                fail("run %d resumed from step %s, the interrupted run wrote step %s"
                     % (run, start_step, expect_resume))
        expect_resume = None
        finished = False
        if killed and a.signal != "KILL":
            th.join()
            text = "".join(output)
            finished = any(l.startswith("rondo: wrote trained weights") for l in output)
            if proc.returncode == 0 or (proc.returncode == -signo and finished):
                # It finished before the signal came (the default action
                # applies again once the training loop has returned).
                killed = False
            elif proc.returncode == -signo and a.twice:
                # The second signal came after the trainer had restored the
                # default action on its way out: death by that signal is the
                # "exit at once" asked for.
                pass
            elif proc.returncode != 128 + signo:
                fail("run %d exited with status %d after SIG%s, not %d:\n%s"
                     % (run, proc.returncode, a.signal, 128 + signo, text))
            elif not a.twice:
                import re
                m = re.search(r"rondo: interrupted at step (\d+); checkpoint written to "
                              + re.escape(ckdir) + r"/step-(\d+)\.ckpt", text)
                if not m or m.group(1) != m.group(2):
                    fail("run %d: no 'interrupted at step N; checkpoint written to' "
                         "line:\n%s" % (run, text))
                expect_resume = int(m.group(1))
                print("run %d: stopped at step %s with status %d"
                      % (run, m.group(1), proc.returncode))
        if killed:
            print("run %d: --workers %s --optimizer-mode %s: from step %s, killed (%s)%s"
                  % (run, w, mode, start_step, kind,
                     ", during a checkpoint write" if during_write else ""))
            continue
        if proc.returncode != 0 and not (proc.returncode == -signo and finished):
            fail("run %d exited with status %d:\n%s" % (run, proc.returncode, "".join(output)))
        if killing:
            # The run finished before the signal was sent or took effect (a
            # loaded machine, a short run): that was no kill. Start the
            # scenario over, so every kill asked for really lands.
            if sent:
                kills[kind] -= 1
                in_write -= during_write
            print("run %d: finished before the SIG%s took effect; starting over"
                  % (run, a.signal))
            shutil.rmtree(ckdir, ignore_errors=True)
            logs = []
            expect_resume = None
            continue
        print("run %d: --workers %s --optimizer-mode %s: from step %s, completed"
              % (run, w, mode, start_step))
        final_onnx = onnx_out
        break

    merged = {}
    for log in logs:
        merged.update(read_log(log))
    missing = [s for s in range(a.steps) if s not in merged]
    if missing:
        fail("steps %s were logged by no run" % missing)
    for s in range(a.steps):
        if merged[s] != reference[s]:
            fail("step %d: loss %s after kills, %s uninterrupted" % (s, merged[s], reference[s]))
    with open(ref_onnx, "rb") as f:
        ref_bytes = f.read()
    with open(final_onnx, "rb") as f:
        final_bytes = f.read()
    if ref_bytes != final_bytes:
        detail = ""
        try:
            import onnx
            from onnx import numpy_helper
            ra = {t.name: numpy_helper.to_array(t) for t in onnx.load(ref_onnx).graph.initializer}
            rb = {t.name: numpy_helper.to_array(t) for t in onnx.load(final_onnx).graph.initializer}
            for n in ra:
                if n not in rb or ra[n].tobytes() != rb[n].tobytes():
                    detail = ": first differing initializer '%s'" % n
                    break
        except ImportError:
            pass
        fail("the final weights differ from the reference's%s" % detail)
    print("%d SIG%s%s (%s), %d during a checkpoint write; %d runs; %d steps: "
          "bitwise-identical losses and final weights"
          % (sum(kills.values()), a.signal, " (twice)" if a.twice else "", ", ".join("%d %s" % (kills[k], k) for k in kinds),
             in_write, run, a.steps))
    if not a.keep and not a.work:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
