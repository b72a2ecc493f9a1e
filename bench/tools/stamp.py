"""Copies stdin to stdout, each line prefixed with the wall-clock time it arrived.

Put after the training command in a pipe (``python train.py | python stamp.py``), identically
under the runtime and by hand, so step rates come from the same clock in both.
"""
import sys
import time

for line in sys.stdin:
    sys.stdout.write(f"{time.time():.6f} {line}")
    sys.stdout.flush()
