#!/usr/bin/env python3
"""An export that fails at the end of training although its destination was
fine at the start (here its directory is removed during training; a full
disk fails the same way): the trainer must keep the final weights in a
checkpoint, name it, and a --resume run from it must export them. Prints
what happened, for FileCheck.

  export_fails.py TRAINER DATA WORKDIR
"""
import os
import re
import shutil
import subprocess
import sys


def main():
    trainer, data, work = (os.path.abspath(a) for a in sys.argv[1:4])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "out"))
    onnx = os.path.join(work, "out", "model.onnx")
    proc = subprocess.Popen([trainer, "--data", data, "--steps", "300",
                             "--export-onnx", onnx],
                            stderr=subprocess.PIPE, text=True, cwd=work)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("step "):
            break
    # Checked and fine before step 1; gone by the end.
    os.rmdir(os.path.join(work, "out"))
    text = "".join(lines) + proc.communicate(timeout=300)[1]
    print("trainer: exit %d" % proc.returncode)
    error = [l for l in text.splitlines() if ": error: " in l]
    print(error[0] if error else "no error line:\n" + text)
    m = re.search(r"are kept in (\S+)/step-300\.ckpt: export them with "
                  r"--resume --checkpoint-dir (\S+) --steps 300", text)
    if not m:
        return 1
    directory = os.path.join(work, m.group(1))
    print("the checkpoint exists: %s" % (
        "yes" if os.path.isfile(os.path.join(directory, "step-300.ckpt")) else "no"))
    os.makedirs(os.path.join(work, "out"))
    again = subprocess.run([trainer, "--data", data, "--steps", "300",
                            "--resume", "--checkpoint-dir", m.group(2),
                            "--export-onnx", onnx],
                           capture_output=True, text=True, cwd=work, timeout=300)
    print("export again: exit %d" % again.returncode)
    print("the export exists: %s" % ("yes" if os.path.isfile(onnx) else "no"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
