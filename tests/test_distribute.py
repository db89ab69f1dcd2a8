"""Parts solved in parallel worker processes (and on Ray): the same plans as one process, optimal
against the brute-force oracle, and a worker that dies or hangs costs its part only its hint."""
from __future__ import annotations

import json
import os
import re
import sys

import onnx
import pytest
from typer.testing import CliRunner

from solverfuse import distribute, greedy, tasks, zoo
from solverfuse.api import plan as make_plan
from solverfuse.api import sweep
from solverfuse.cli import app
from solverfuse.errors import ArgumentError
from solverfuse.graph import load_graph as graph_from_dict
from solverfuse.hardware import load_hardware
from solverfuse.oracle import brute_force
from solverfuse.plans import validate
from solverfuse.solve import solve_report
from solverfuse.sources import load_graph

H100 = load_hardware("nvidia-h100")
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
runner = CliRunner()
#: How a plan's reason names the parts of a failed task (one part, or a batch of them).
KEPT = r"the part of '[^']+' \(\d+ ops\) kept its hint|\d+ parts \(\d+ ops, the largest that of '[^']+'\) kept their hints"


def hints(g):
    return [make(g, H100) for make in greedy.STRATEGIES.values()]


def light(name):
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not in this onnx package")
    return load_graph(path)


def union(graphs) -> dict:
    """Disjoint copies of ``graphs`` in one graph (names prefixed): its parts are theirs."""
    out: dict = {"name": "union", "tensors": {}, "inputs": [], "outputs": [], "nodes": []}
    for k, g in enumerate(graphs):
        d = json.loads(g.to_json())
        p = lambda name, k=k: f"g{k}_{name}" if name else name  # noqa: E731
        out["tensors"].update({p(t): spec for t, spec in d["tensors"].items()})
        out["inputs"] += [p(t) for t in d["inputs"]]
        out["outputs"] += [p(t) for t in d["outputs"]]
        for n in d["nodes"]:
            out["nodes"].append(dict(n, name=p(n["name"]), inputs=[p(t) for t in n["inputs"]],
                                     outputs=[p(t) for t in n["outputs"]]))
    return out


@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])
def test_parallel_parts_give_the_sequential_plan(name):
    """Same seed, one CP-SAT worker per part: the parts' models are the same, so every part
    proven optimal gives the same groups."""
    g = light(name)
    h = hints(g)
    seq = solve_report(g, H100, time_limit=300, workers=1, seed=4, hints=h)
    par = solve_report(g, H100, time_limit=300, workers=1, seed=4, hints=h, jobs=2)
    assert seq.parts == par.parts > 10
    assert seq.plan.status == par.plan.status == "optimal"
    assert par.plan.reason is None
    assert [grp.nodes for grp in par.plan.groups] == [grp.nodes for grp in seq.plan.groups]
    assert par.plan.traffic_bytes == seq.plan.traffic_bytes == par.plan.bound_bytes
    validate(par.plan)


def test_parallel_parts_reach_the_oracles_optimum():
    """A graph of disjoint small random graphs: its optimum is the sum of theirs (brute force)."""
    pieces = [zoo.synthetic_graph(n, seed=s) for n, s in [(8, 1), (9, 2), (7, 3), (9, 4), (8, 5)]]
    expect = sum(brute_force(p, H100)[0] for p in pieces)
    g = graph_from_dict(union(pieces))
    r = solve_report(g, H100, time_limit=120, workers=1, seed=0, jobs=3)
    assert r.parts >= len(pieces)
    assert r.plan.status == "optimal" and r.plan.traffic_bytes == expect == r.plan.bound_bytes
    validate(r.plan)


@pytest.mark.parametrize("kind,why", [("kill", "SIGKILL"), ("abort", "SIGABRT")])
def test_a_dead_part_worker_costs_its_part_only_its_hint(monkeypatch, kind, why):
    g = light("squeezenet")
    h = hints(g)
    ok = solve_report(g, H100, time_limit=300, workers=1, seed=0, hints=h, jobs=2).plan
    monkeypatch.setattr(tasks, "FAULT", kind)  # the first task's worker (the largest part) dies
    r = solve_report(g, H100, time_limit=300, workers=1, seed=0, hints=h, jobs=2)
    p = r.plan
    assert p.status == "feasible" and why in p.reason and re.search(KEPT, p.reason)
    validate(p)
    best_hint = min(greedy.greedy_plan(g, H100, name).traffic_bytes for name in greedy.STRATEGIES)
    assert ok.traffic_bytes <= p.traffic_bytes <= best_hint
    assert p.bound_bytes <= ok.traffic_bytes  # the bound stays a bound


def test_a_hung_part_worker_is_stopped_at_the_time_limit(monkeypatch):
    g = light("squeezenet")
    monkeypatch.setattr(tasks, "FAULT", "hang")
    r = solve_report(g, H100, time_limit=3, workers=1, seed=0, hints=hints(g), jobs=2)
    assert r.plan.status == "feasible" and "did not stop within the time limit" in r.plan.reason
    validate(r.plan)


def test_the_library_solves_parts_in_parallel_and_survives_a_dead_part_worker(monkeypatch):
    """Through ``solverfuse.plan``: the solver's child runs the pool; the fault reaches it."""
    g = light("squeezenet")
    p = make_plan(g, "nvidia-h100", time_limit=60, workers=1, jobs=2)
    assert p.status == "optimal" and p.reason is None
    monkeypatch.setattr(tasks, "FAULT", "kill")
    q = make_plan(g, "nvidia-h100", time_limit=60, workers=1, jobs=2)
    assert q.status == "feasible" and "SIGKILL" in q.reason and re.search(KEPT, q.reason)
    assert p.traffic_bytes <= q.traffic_bytes
    validate(q)


def test_local_executor_replaces_a_dead_worker():
    ex = distribute.open_executor(10, jobs=1)
    try:
        tasks.FAULT = "kill"
        ex.submit("dies", "operator:add", (1,))
        (o,) = ex.wait_all(60)
        assert (o.key, o.ok) == ("dies", False) and "SIGKILL" in o.reason
        ex.submit("next", "operator:add", (1,))
        assert [(o.key, o.value) for o in ex.wait_all(60)] == [("next", 11)]
    finally:
        tasks.FAULT = None
        ex.close()


def test_sweep_plans_models_times_hardware():
    graphs = [zoo.synthetic_graph(30, seed=1), zoo.synthetic_graph(25, seed=2)]
    hws = ["nvidia-h100", "intel-xeon-8480"]
    plans = sweep(graphs, hws, time_limit=60, jobs=2)
    assert [(p.graph.name, p.hardware) for p in plans] == [(g.name, h) for g in graphs for h in hws]
    for (g, h), p in zip([(g, h) for g in graphs for h in hws], plans):
        alone = make_plan(g, h, time_limit=60, workers=1)
        assert p.status == alone.status == "optimal" and p.traffic_bytes == alone.traffic_bytes
        validate(p)


def test_bad_jobs_and_missing_ray_are_one_line(monkeypatch, tmp_path):
    g = zoo.synthetic_graph(10, seed=1)
    with pytest.raises(ArgumentError, match="jobs"):
        make_plan(g, "nvidia-h100", jobs=-1)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if solverfuse[ray] were not installed
    with pytest.raises(ArgumentError, match=r"solverfuse\[ray\]"):
        make_plan(g, "nvidia-h100", ray="auto")
    path = tmp_path / "g.json"
    path.write_text(g.to_json())
    for cmd in (["plan", str(path)], ["sweep", str(path)]):
        r = runner.invoke(app, cmd + ["--ray", "auto"])
        assert r.exit_code == 2 and r.output.strip().splitlines() == [
            "error: --ray needs the ray package: pip install 'solverfuse[ray]'"]


def test_cli_plan_with_jobs_and_sweep_write_plans(tmp_path):
    path = tmp_path / "net.json"
    path.write_text(light("squeezenet").to_json())
    r = runner.invoke(app, ["plan", str(path), "--jobs", "2", "--workers", "1", "--time-limit", "60",
                            "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p.json").read_text())["status"] == "optimal"
    out = tmp_path / "plans"
    out.mkdir()
    r = runner.invoke(app, ["sweep", str(path), "--hardware", "nvidia-h100", "--hardware", "nvidia-a100",
                            "--jobs", "2", "--time-limit", "60", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(f.name for f in out.iterdir()) == ["net.nvidia-a100.plan.json", "net.nvidia-h100.plan.json"]
    assert r.output.count("optimal") == 2


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray tests need solverfuse[ray]")
    info = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield info.address_info["gcs_address"] if hasattr(info, "address_info") else info["gcs_address"]
    ray.shutdown()


def test_ray_parts_and_sweep_match_local(ray_cluster):
    """One short Ray session: a graph's parts and a models x hardware sweep on a local cluster
    give the plans the local executor gives."""
    g = light("squeezenet")
    h = hints(g)
    seq = solve_report(g, H100, time_limit=300, workers=1, seed=4, hints=h)
    par = solve_report(g, H100, time_limit=300, workers=1, seed=4, hints=h, ray=ray_cluster)
    assert par.plan.status == seq.plan.status == "optimal" and par.plan.reason is None
    assert [grp.nodes for grp in par.plan.groups] == [grp.nodes for grp in seq.plan.groups]
    small = zoo.synthetic_graph(20, seed=3)
    # the limit bounds the whole sweep, Ray's workers starting included: 60 s ran out once on a
    # 2-core machine running two test suites at once (a plan "feasible", not "optimal"); an
    # optimal plan returns as soon as it is proven, so a larger limit costs nothing otherwise
    plans = sweep([small], ["nvidia-h100", "intel-xeon-8480"], time_limit=300, ray=ray_cluster)
    assert [p.hardware for p in plans] == ["nvidia-h100", "intel-xeon-8480"]
    for p in plans:
        alone = make_plan(small, p.hardware, time_limit=300, workers=1)
        assert p.status == alone.status == "optimal" and p.traffic_bytes == alone.traffic_bytes


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_an_interrupt_leaves_no_part_worker(tmp_path):
    """SIGINT while the parts solve in parallel: exit 130, one line, and every process gone (the
    solver's child, its zygote and the part workers that zygote forked)."""
    import signal
    import time
    from .test_signals import alive, children, none_left, start
    path = tmp_path / "g.json"
    path.write_text(zoo.synthetic_graph(1500, seed=2).to_json())
    proc = start(["plan", str(path), "--time-limit", "300", "--jobs", "2", "-o", str(tmp_path / "p.json")])
    end = time.monotonic() + 180
    kids: list = []
    while time.monotonic() < end and proc.poll() is None and len(kids) < 5:
        time.sleep(0.1)  # the zygote, the solver's child, its zygote and two part workers
        kids = children(proc.pid)
    assert len(kids) >= 5, "no part workers started"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "p.json").exists()
    assert none_left(kids), [k for k in kids if alive(k)]


def test_sweep_writes_every_plan_or_none(tmp_path):
    """Same stems get distinct files; a write that fails takes the earlier plans back."""
    g = ('{"tensors": {"x": {"shape": [64]}}, "inputs": ["x"], "outputs": ["y"], "nodes": ['
         '{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},'
         '{"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]}')
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    paths = [tmp_path / "one" / "net.json", tmp_path / "two" / "net.json"]
    for p in paths:
        p.write_text(g)
    out = tmp_path / "plans"
    out.mkdir()
    hw = ["--hardware", "nvidia-h100", "--hardware", "nvidia-a100"]
    r = runner.invoke(app, ["sweep", *map(str, paths), *hw, "--strategy", "tvm", "--jobs", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert len(list(out.iterdir())) == 4
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "net.nvidia-a100.plan.json").mkdir()  # the second plan's name is taken by a folder
    r = runner.invoke(app, ["sweep", str(paths[0]), *hw, "--strategy", "tvm", "--jobs", "1", "-o", str(bad)])
    assert r.exit_code == 2, r.output
    assert [f.name for f in bad.iterdir()] == ["net.nvidia-a100.plan.json"]
    assert r.output.strip().splitlines()[-1].startswith("error: ")
