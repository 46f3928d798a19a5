#!/usr/bin/env python3
"""Issue 24's scenario, end to end: a model whose path holds a backslash
escape and a quote; a trainer on a checkpoint directory and a second one
refused there; the first stopped by SIGTERM; the run resumed with the same
--log-json (and --tensorboard) and an --export-onnx whose directory is gone
by the end. Nothing may be lost: the checkpoint of the stop, every step in
the log once and in order with the losses of an uninterrupted run, the
final weights kept and exported again bit for bit as the uninterrupted
run's; and every message must name what it is about. Prints what happened,
for FileCheck (test/E2E/scenario.test).

  scenario.py RONDO_COMPILE MODEL WORKDIR
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np


def lines_of(proc, lines, until=None):
    """Collects proc's stderr lines in a thread; returns an event set once a
    line matches `until`."""
    seen = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if until and re.match(until, line):
                seen.set()
        seen.set()

    threading.Thread(target=read, daemon=True).start()
    return seen


def losses(path):
    steps = [json.loads(l) for l in open(path) if l.startswith('{"step"')]
    return [r["step"] for r in steps], [r["loss"] for r in steps]


def main():
    compiler, model, work = (os.path.abspath(a) for a in sys.argv[1:4])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # A backslash escape C++ would read as 'A', and a quote; the decoy is
    # the file an unescaped path would name.
    hostile = os.path.join(work, 'w\\x41"q.onnx')
    shutil.copy(model, hostile)
    with open(os.path.join(work, 'wA"q.onnx'), "w") as f:
        f.write("not a model\n")
    ids = os.path.join(work, "ids.npy")
    np.save(ids, np.random.default_rng(11).integers(0, 512, size=(64, 16)).astype(np.int64))
    trainer = os.path.join(work, "trainer")
    built = subprocess.run([compiler, hostile, "--batch", "2", "--seq-len", "16",
                            "--workers", "1", "-o", trainer],
                           capture_output=True, text=True)
    print("compile: exit %d; %s" % (built.returncode, built.stderr.splitlines()[-1]))

    ck, log, tb = (os.path.join(work, n) for n in ("ck", "log.json", "tb"))
    common = ["--data", ids, "--checkpoint-dir", ck, "--log-json", log,
              "--tensorboard", tb]
    # 1. The first trainer, and a second one on its directory.
    first_lines = []
    first = subprocess.Popen([trainer, "--steps", "1000000", "--save-every", "3"] + common,
                             stderr=subprocess.PIPE, text=True)
    started = lines_of(first, first_lines, r"step 5/")
    if not started.wait(300) or first.poll() is not None:
        print("the first trainer did not reach step 5:\n" + "\n".join(first_lines))
        return 1
    print([l for l in first_lines if "reading the weights" in l][0])
    second = subprocess.run([trainer, "--steps", "1"] + common,
                            capture_output=True, text=True, timeout=120)
    print("second trainer: exit %d" % second.returncode)
    print(second.stderr.strip())
    print("first trainer: pid %d on host %s, %s" %
          (first.pid, socket.gethostname(),
           "running" if first.poll() is None else "gone"))
    # 2. Stopped by SIGTERM: a checkpoint of the step it stopped at.
    first.send_signal(signal.SIGTERM)
    first.wait(120)
    time.sleep(0.2)  # the reader thread's last lines
    stop = [l for l in first_lines if l.startswith("rondo: interrupted")]
    print("first trainer: exit %d" % first.returncode)
    print(stop[0] if stop else "no interrupt line:\n" + "\n".join(first_lines[-5:]))
    m = re.search(r"interrupted at step (\d+); checkpoint written to (\S+)$", stop[0] if stop else "")
    if not m:
        return 1
    stopped = int(m.group(1))
    print("its checkpoint exists: %s" % ("yes" if os.path.isfile(m.group(2)) else "no"))

    # 3. Resumed with the same log, exporting into a directory that is gone
    # by the end (as a full disk would fail).
    steps = stopped + 200
    out = os.path.join(work, "out")
    os.makedirs(out)
    onnx = os.path.join(out, "model.onnx")
    resumed_lines = []
    resumed = subprocess.Popen([trainer, "--steps", str(steps), "--resume",
                                "--export-onnx", onnx] + common,
                               stderr=subprocess.PIPE, text=True)
    running = lines_of(resumed, resumed_lines, r"step \d+/")
    running.wait(300)
    os.rmdir(out)
    resumed.wait(300)
    time.sleep(0.2)
    print("resumed trainer: exit %d" % resumed.returncode)
    print([l for l in resumed_lines if l.startswith("rondo: resuming")][0])
    errors = [l for l in resumed_lines if ": error: " in l]
    print(errors[0] if errors else "no error line:\n" + "\n".join(resumed_lines[-5:]))
    kept = re.search(r"are kept in (\S+): export them with --resume "
                     r"--checkpoint-dir (\S+) --steps (\d+)", errors[0] if errors else "")
    if not kept:
        return 1
    print("the final weights' checkpoint exists: %s" %
          ("yes" if os.path.isfile(kept.group(1)) else "no"))

    # 4. Nothing lost: an uninterrupted run of as many steps from the same
    # bytes under a plain name.
    plain = os.path.join(work, "plain.onnx")
    shutil.copy(model, plain)
    ref_log, ref_onnx = os.path.join(work, "ref.json"), os.path.join(work, "ref.onnx")
    ref = subprocess.run([trainer, "--data", ids, "--steps", str(steps), "--quiet",
                          "--weights", plain, "--log-json", ref_log,
                          "--export-onnx", ref_onnx], capture_output=True, text=True)
    print("uninterrupted run: exit %d" % ref.returncode)
    got_steps, got = losses(log)
    ref_steps, want = losses(ref_log)
    print("the log holds steps %s, each once and in order: %s" %
          ("0 to %d" % got_steps[-1] if got_steps else "none",
           "yes" if got_steps == list(range(steps)) else "no"))
    print("its losses equal the uninterrupted run's, bit for bit: %s" %
          ("yes" if got == want and ref_steps == got_steps else "no"))
    tb_check = subprocess.run([sys.executable,
                               os.path.join(os.path.dirname(__file__), "tensorboard_events.py"),
                               tb, log], capture_output=True, text=True)
    print("tensorboard: " + tb_check.stdout.strip().replace("\n", "; "))

    # 5. The kept weights exported as the message says.
    os.makedirs(out)
    again = subprocess.run([trainer, "--data", ids, "--steps", kept.group(3), "--resume",
                            "--checkpoint-dir", kept.group(2), "--export-onnx", onnx,
                            "--quiet"], capture_output=True, text=True)
    print("export again: exit %d" % again.returncode)
    same = os.path.isfile(onnx) and open(onnx, "rb").read() == open(ref_onnx, "rb").read()
    print("the export equals the uninterrupted run's, byte for byte: %s" %
          ("yes" if same else "no"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
