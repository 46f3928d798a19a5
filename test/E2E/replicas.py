#!/usr/bin/python3
"""Checks for trainer --replicas (test/E2E/replicas.test).

  replicas.py close A.jsonl B.jsonl RTOL
      the losses of two --log-json files agree step by step to RTOL
      (relative); prints the worst difference.
  replicas.py norms A.jsonl B.jsonl RTOL
      the same for the logged gradient norms.
  replicas.py kill-resume MPIRUN TRAINER DATA WORK
      runs 2 replicas for 40 steps with a checkpoint every 4, kills replica 1
      with SIGKILL once the checkpoint of step 8 exists, checks that the job
      ends within 60 s naming the lost rank, resumes it, and checks that the
      resumed run's losses equal an uninterrupted run's bit for bit.
"""
import json
import os
import shlex
import signal
import subprocess
import sys
import time


def losses(path, key="loss"):
    return {r["step"]: r[key] for r in map(json.loads, open(path)) if key in r and "step" in r}


def fail(message):
    print("replicas.py: FAIL: " + message)
    sys.exit(1)


def close(a, b, rtol, key="loss", what="losses"):
    la, lb = losses(a, key), losses(b, key)
    # A resumed run logs only its own steps.
    if not la or not set(la) <= set(lb):
        fail("different steps: %s vs %s" % (sorted(la), sorted(lb)))
    worst = max(abs(la[s] - lb[s]) / abs(lb[s]) for s in la)
    if worst > rtol:
        fail("%s differ by %.3g relative (> %g)" % (what, worst, rtol))
    print("%d steps: %s agree to %.2g relative (tolerance %g)" % (len(la), what, worst, rtol))


def kill_resume(mpirun, trainer, data, work, *extra):
    """MPIRUN "self": a layout trainer (rondo-compile --gpus) whose chosen
    layout has 2 replicas, started as one process that launches them; EXTRA
    are more trainer flags (--gpus 0,1)."""
    os.makedirs(work, exist_ok=True)
    if mpirun == "self":
        base = [trainer, "--data", data, "--steps", "40", "--save-every", "4"] + list(extra)
    else:
        base = shlex.split(mpirun) + ["-np", "2", trainer, "--replicas", "2", "--data", data,
                                      "--steps", "40", "--workers", "2", "--save-every", "4"]
    ref = os.path.join(work, "ref.jsonl")
    subprocess.run(base + ["--checkpoint-dir", os.path.join(work, "ref-ck"), "--log-json", ref,
                           "--quiet"], check=True)
    ck = os.path.join(work, "ck")
    first = os.path.join(work, "first.jsonl")
    proc = subprocess.Popen(base + ["--checkpoint-dir", ck, "--log-json", first],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True)
    start = time.monotonic()
    while not os.path.exists(os.path.join(ck, "step-8.ckpt")):
        if proc.poll() is not None or time.monotonic() - start > 60:
            fail("no checkpoint of step 8 appeared")
        time.sleep(0.005)
    ranks = subprocess.run(["pgrep", "-f", "-P", str(proc.pid), os.path.basename(trainer)],
                           capture_output=True, text=True).stdout.split()
    if len(ranks) != 2:
        fail("expected 2 replica processes under %s, found %s" % (
            "the trainer" if mpirun == "self" else "mpirun", ranks))
    # pgrep lists by PID; mpirun starts rank 0 first.
    victim = sorted(int(p) for p in ranks)[1]
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail("the job did not end within 60 s of losing a replica")
    named = "rank 1" in out or "replica 1 of 2 was lost" in out
    print("replica 1 killed: the job ended in %.0f s with status %d%s" % (
        time.monotonic() - killed, proc.returncode,
        "" if not named else "; the survivor named replica 1" if mpirun == "self"
        else "; mpirun named rank 1"))
    if proc.returncode == 0 or not named:
        fail("expected a failure naming rank 1:\n" + out)
    second = os.path.join(work, "second.jsonl")
    out = subprocess.run(base + ["--checkpoint-dir", ck, "--resume", "--log-json", second],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        fail("the resumed run failed:\n" + out.stdout)
    resumed = [l for l in out.stdout.splitlines() if "resuming from step" in l]
    print(resumed[0] if resumed else "no resume line")
    want, got = losses(ref), losses(second)
    if not got or max(got) != 39:
        fail("the resumed run did not reach step 40")
    for s, v in got.items():
        if v != want[s]:
            fail("step %d: loss %r after resuming, %r uninterrupted" % (s, v, want[s]))
    print("resumed steps %d-%d: bitwise-identical losses to the uninterrupted run" % (min(got) + 1, max(got) + 1))


if __name__ == "__main__":
    if sys.argv[1] == "close":
        close(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif sys.argv[1] == "norms":
        close(sys.argv[2], sys.argv[3], float(sys.argv[4]), "grad_norm", "gradient norms")
    elif sys.argv[1] == "kill-resume":
        kill_resume(*sys.argv[2:])
    else:
        fail("unknown command " + sys.argv[1])
