#!/usr/bin/env python3
"""Stops a training run the way GNU timeout and Slurm do: SIGTERM to the
trainer, then to its process group, so it gets two SIGTERMs close
together. Prints how it ended, whether the final checkpoint exists
and how a --resume run goes on, for FileCheck.

  signal_twice.py TRAINER DATA DIR
"""
import os
import re
import signal
import subprocess
import sys
import time


def main():
    trainer, data, directory = sys.argv[1:4]
    # Its own process group, as under timeout or a Slurm step.
    proc = subprocess.Popen([trainer, "--data", data, "--steps", "1000000",
                             "--save-every", "1000", "--checkpoint-dir",
                             directory],
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines = []
    deadline = time.time() + 120
    # Training has started once a step is logged.
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("step ") or time.time() > deadline:
            break
    os.kill(proc.pid, signal.SIGTERM)
    # 2 ms later, well within the grace period, so that the trainer has
    # handled the first: two SIGTERMs pending at once merge into one in the
    # kernel, which is why only some stops under timeout lost the checkpoint.
    time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGTERM)
    rest = proc.communicate(timeout=120)[1]
    text = "".join(lines) + rest
    print("trainer: exit %d" % proc.returncode)
    m = re.search(r"rondo: interrupted at step (\d+); checkpoint written to (\S+)",
                  text)
    if not m:
        print("no checkpoint line:\n" + text)
        return 1
    step, path = int(m.group(1)), m.group(2)
    print("interrupted at step N; checkpoint written to %s/step-N.ckpt: %s"
          % (directory, "yes" if path == os.path.join(directory, "step-%d.ckpt" % step)
             else "no, " + path))
    print("the checkpoint exists: %s" % ("yes" if os.path.isfile(path) else "no"))
    resumed = subprocess.run([trainer, "--data", data, "--steps", str(step + 2),
                              "--checkpoint-dir", directory, "--resume"],
                             capture_output=True, text=True, timeout=120)
    print("resumed: exit %d" % resumed.returncode)
    print("resumed from step N: %s" % (
        "yes" if re.search(r"rondo: resuming from step %d \(" % step,
                           resumed.stderr) else "no:\n" + resumed.stderr))
    print("trained steps N+1 and N+2: %s" % (
        "yes" if "step %d/%d" % (step + 2, step + 2) in resumed.stderr
        and "step %d/%d" % (step + 1, step + 2) in resumed.stderr
        else "no:\n" + resumed.stderr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
