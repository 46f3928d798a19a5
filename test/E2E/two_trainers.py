#!/usr/bin/env python3
"""Starts a trainer on a checkpoint directory and, while it runs, a second
one on the same directory; prints how the second ended and the first one's
pid and host, for FileCheck.

  two_trainers.py TRAINER DATA DIR
"""
import os
import signal
import socket
import subprocess
import sys
import time


def main():
    trainer, data, directory = sys.argv[1:4]
    first = subprocess.Popen([trainer, "--data", data, "--steps", "1000000",
                              "--quiet", "--checkpoint-dir", directory],
                             stderr=subprocess.DEVNULL)
    try:
        lock = os.path.join(directory, "LOCK")
        deadline = time.time() + 120
        # The first trainer holds the lock once LOCK names it.
        while not (os.path.exists(lock) and open(lock).read().strip()):
            if first.poll() is not None or time.time() > deadline:
                print("the first trainer did not start")
                return 1
            time.sleep(0.05)
        start = time.time()
        second = subprocess.run([trainer, "--data", data, "--steps", "1",
                                 "--checkpoint-dir", directory],
                                capture_output=True, text=True, timeout=120)
        seconds = time.time() - start
        print("second trainer: exit %d" % second.returncode)
        print(second.stderr.strip())
        print("first trainer: pid %d on host %s" % (first.pid, socket.gethostname()))
        print("the second stopped %s" % ("at once" if seconds < 10 else
                                         "after %.1f s" % seconds))
        print("the first is %s" % ("running" if first.poll() is None else "gone"))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
