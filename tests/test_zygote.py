"""The zygote's life follows its caller's, also when the caller forks."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import os, sys, time
from pathlib import Path
from solverfuse import zygote
zygote.prestart()
def mine():
    out = []
    for task in Path("/proc/self/task").glob("*"):
        for pid in (task / "children").read_text().split():
            if b"solverfuse.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(int(pid))
    return out
while not mine():
    time.sleep(0.01)
child = os.fork()
if child == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1); os.dup2(null, 2)  # the test reads the caller's output until it closes
    time.sleep(60)
    os._exit(0)
print(mine()[0], child, flush=True)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_the_zygote_exits_with_its_caller_even_when_a_forked_child_lives_on():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    zyg, child = map(int, r.stdout.split())
    try:
        deadline = time.monotonic() + 30
        while alive(zyg) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(child), "the forked caller should still be running"
        assert not alive(zyg), "the zygote outlived its caller because a forked child kept its socket"
    finally:
        os.kill(child, 9)
