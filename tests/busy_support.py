"""Processes that keep the cores busy while a test runs: virtual time must not notice them."""
from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager


@contextmanager
def busy_processes(count: int):
    """``count`` processes that spin on the cores while the block runs, stopped by their PIDs after it; the
    block gets their PIDs."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield [process.pid for process in spinning]
    finally:
        for process in spinning:
            process.kill()
            process.wait()
