"""SIGINT / SIGTERM during `solverfuse plan`: exit 130 / 143, one line, no file (or the best plan
so far with --keep-partial), and no solver worker left running."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solverfuse import zoo

ROOT = Path(__file__).resolve().parent.parent


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (the solver's zygote and the workers it forked)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for k in kids:
            out += [k] + children(k)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def big_graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("sig") / "g.json"
    path.write_text(zoo.synthetic_graph(1500, seed=2).to_json())
    return path


def start(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "solverfuse.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_worker(proc, seconds=120.0) -> list[int]:
    """The plan command's descendants once a solver worker runs (the zygote has forked one)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        kids = children(proc.pid)
        if len(kids) >= 2:
            time.sleep(1.0)  # let it get into the baselines / CP-SAT
            return children(proc.pid) or kids
        time.sleep(0.05)
    pytest.fail("the plan command started no worker")


def none_left(pids: list[int], seconds: float = 10.0) -> bool:
    """True once none of ``pids`` runs (they exit within moments; the machine may be loaded)."""
    end = time.monotonic() + seconds
    while [k for k in pids if alive(k)]:
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_during_solve(big_graph, tmp_path, sig, code):
    out = tmp_path / "p.json"
    proc = start(["plan", str(big_graph), "--time-limit", "300", "-o", str(out)])
    kids = wait_for_worker(proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), stderr
    assert "not written" in lines[0]
    assert not out.exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    assert none_left(kids), [k for k in kids if alive(k)]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_keep_partial_writes_the_best_plan_so_far(big_graph, tmp_path):
    out = tmp_path / "p.json"
    proc = start(["plan", str(big_graph), "--time-limit", "300", "-o", str(out), "--keep-partial"])
    wait_for_worker(proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and f"written to {out}" in lines[0], stderr
    saved = json.loads(out.read_text())
    assert saved["status"] == "feasible" and saved["reason"].startswith("interrupted")
    from solverfuse.plans import load_plan
    load_plan(out)  # the validator accepts it


def loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_while_the_command_is_still_importing(big_graph, tmp_path, sig, code):
    """A signal in the first moments -- here, as soon as pydantic's native core is mapped, long
    before the graph is read -- is the one line and the exit code too, not a KeyboardInterrupt
    traceback (SIGINT) or a silent death (SIGTERM)."""
    out = tmp_path / "p.json"
    proc = start(["plan", str(big_graph), "--time-limit", "300", "-o", str(out)])
    end = time.monotonic() + 60
    while not loaded(proc.pid, "pydantic_core") and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.002)
    assert proc.poll() is None, "the command ended before the signal"
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), stderr
    assert not out.exists()
