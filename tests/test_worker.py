"""The solver runs in a worker process: a native abort, a kill (as the OOM killer does) or a hang
there gives the best greedy plan, status feasible and the reason, never a dead caller."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from solverfuse import greedy, worker, zoo
from solverfuse.api import plan as make_plan
from solverfuse.cli import app
from solverfuse.errors import ArgumentError
from solverfuse.plans import validate

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def graph():
    return zoo.synthetic_graph(40, seed=5)


@pytest.fixture
def fault(monkeypatch):
    def set_fault(kind):
        monkeypatch.setattr(worker, "FAULT", kind)
    return set_fault


def best_greedy_traffic(g):
    return min(greedy.greedy_plan(g, "nvidia-h100", name).traffic_bytes for name in greedy.STRATEGIES)


@pytest.mark.parametrize("kind,why", [("abort", "SIGABRT"), ("kill", "SIGKILL"), ("hang", "did not stop")])
def test_dead_or_hung_worker_gives_the_best_greedy_plan(graph, fault, kind, why):
    fault(kind)
    p = make_plan(graph, "nvidia-h100", time_limit=2 if kind == "hang" else 20, workers=2)
    assert p.status == "feasible"
    assert why in p.reason and "best greedy plan" in p.reason
    assert p.traffic_bytes == best_greedy_traffic(graph)
    validate(p)  # the independent validator accepts it
    assert p.bound_bytes is not None and p.bound_bytes <= p.traffic_bytes


def test_a_crash_with_time_left_is_solved_again_with_one_worker(graph, fault):
    fault("abort-once")
    p = make_plan(graph, "nvidia-h100", time_limit=60, workers=2)
    assert "SIGABRT" in p.reason and "solved again with one CP-SAT worker" in p.reason
    assert p.traffic_bytes <= best_greedy_traffic(graph)
    validate(p)


def test_cli_prints_the_reason_and_writes_the_fallback(graph, fault, tmp_path):
    gpath = tmp_path / "g.json"
    gpath.write_text(graph.to_json())
    fault("abort")
    r = runner.invoke(app, ["plan", str(gpath), "--time-limit", "20", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    assert "note: the solver worker died (SIGABRT" in r.output
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["status"] == "feasible" and "SIGABRT" in saved["reason"]


def test_healthy_worker_matches_the_in_process_solve(graph):
    from solverfuse.solve import solve
    p = make_plan(graph, "nvidia-h100", time_limit=30, workers=1, seed=3)
    q = solve(graph, "nvidia-h100", time_limit=30, workers=1, seed=3,
              hints=[make(graph, worker.load_hardware("nvidia-h100")) for make in greedy.STRATEGIES.values()])
    assert p.reason is None
    if p.status == q.status == "optimal":
        assert p.traffic_bytes == q.traffic_bytes


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "10", True])
def test_bad_time_limits_are_rejected_by_the_library(graph, bad):
    with pytest.raises(ArgumentError, match="time limit"):
        make_plan(graph, "nvidia-h100", time_limit=bad)


def test_the_worker_does_not_inherit_a_lock_another_thread_of_the_caller_holds(graph, monkeypatch):
    """The CI deadlock, made deterministic: another thread of the caller holds a lock that the
    solve path takes. A child forked from the caller would inherit the lock held forever (and the
    patched function) and hang until the time limit; the worker's child starts from a clean
    interpreter, so the solve proves the optimum."""
    import threading
    held, release = threading.Lock(), threading.Event()

    def holder():
        with held:
            release.wait(30)
    t = threading.Thread(target=holder, daemon=True)
    t.start()

    def solve_behind_the_lock(*args, **kwargs):
        with held:
            raise AssertionError("unreachable while the lock is held")
    import solverfuse.solve
    monkeypatch.setattr(solverfuse.solve, "solve_report", solve_behind_the_lock)
    try:
        p = make_plan(graph, "nvidia-h100", time_limit=20, workers=1)
    finally:
        release.set()
        t.join()
    assert p.status == "optimal" and p.reason is None
    validate(p)


def zygotes() -> list[int]:
    """This process's solver zygotes (children running ``-m solverfuse.zygote``)."""
    out = []
    for task in Path("/proc/self/task").glob("*"):
        for pid in (task / "children").read_text().split():
            try:
                if b"solverfuse.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out.append(int(pid))
            except OSError:
                pass
    return out


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_a_killed_zygote_is_replaced(graph):
    make_plan(graph, "nvidia-h100", time_limit=20, workers=1)
    before = zygotes()
    assert before
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    for pid in before:  # dead (a zombie until we reap it): the next call must notice and replace it
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
    p = make_plan(graph, "nvidia-h100", time_limit=20, workers=1)
    assert p.status == "optimal" and p.reason is None
    assert zygotes() and not set(zygotes()) & set(before)


def test_a_script_without_a_main_guard_calls_the_library_once(tmp_path):
    """multiprocessing's spawn/forkserver would re-run this script in the worker."""
    script = tmp_path / "use.py"
    script.write_text(
        "import solverfuse\n"
        "g = {'tensors': {'x': {'shape': [64]}}, 'inputs': ['x'], 'outputs': ['y'],\n"
        "     'nodes': [{'name': 'a', 'op': 'Relu', 'inputs': ['x'], 'outputs': ['h']},\n"
        "               {'name': 'b', 'op': 'Exp', 'inputs': ['h'], 'outputs': ['y']}]}\n"
        "print('plan', solverfuse.plan(g, 'nvidia-h100', time_limit=20).status)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["plan optimal"]


@pytest.mark.parametrize("stamp_matches", [True, False])
def test_a_prestarted_worker_that_loads_the_file_itself_plans_the_same(graph, tmp_path, stamp_matches):
    """The worker started ahead of time loads the graph JSON itself (when the caller's file stamp
    matches) or is sent the caller's copy (when it does not): the plan is the same either way."""
    path = tmp_path / "g.json"
    path.write_text(graph.to_json())
    child = worker.prestart(path)
    stamp = worker.file_stamp(path) if stamp_matches else "changed"
    try:
        p = worker.solve_in_worker(graph, "nvidia-h100", time_limit=30, workers=1, seed=1, worker=child,
                                   source_stamp=stamp).plan
    finally:
        child.close()
    q = worker.solve_in_worker(graph, "nvidia-h100", time_limit=30, workers=1, seed=1).plan
    assert p.reason is None and q.reason is None
    assert p.status == q.status == "optimal"
    assert p.traffic_bytes == q.traffic_bytes and p.graph_sha256 == q.graph_sha256
    validate(p)
