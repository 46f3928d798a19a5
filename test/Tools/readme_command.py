#!/usr/bin/env python3
"""Prints the arguments of the first command line in README.md's indented
code blocks that contains MARKER (the program itself left out), so that a
test runs the README's own line and the two cannot drift apart.

  readme_command.py README.md MARKER
"""
import shlex
import sys


def main():
    readme, marker = sys.argv[1:3]
    for line in open(readme, encoding="utf-8"):
        if line.startswith("    ") and marker in line.split():
            print(" ".join(shlex.quote(a) for a in shlex.split(line)[1:]))
            return 0
    print("no code line of %s has %s" % (readme, marker), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
