"""Fuzz: malformed graphs, plans and hardware files through every command and the library call.

Each case must end in success or in exit code 2 with exactly one ``error:`` line, no traceback and
no file left behind; the library must return or raise a one-line SolverfuseError. Bounded for CI
(in-process CliRunner, few examples per command); ``benchmarks/fuzz.py`` runs the same cases long.
Plus the specific wrong successes and crashes of issue 16, one test each.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

import solverfuse
from solverfuse.cli import app
from solverfuse.errors import GraphError, SolverfuseError
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.plans import load_plan

from .fuzzing import GRAPH, MUTATIONS, SPECIAL, check_cli, check_library, files_in, mutate, \
    valid_hardware, valid_plan

runner = CliRunner()
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                           max_leaves=6)
cases = st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10_000),
                  st.one_of(st.sampled_from(SPECIAL), json_values))


def fast(n: int):
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                    database=None)


def _write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _cli(tmp_path, args):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    before = files_in(out)
    r = runner.invoke(app, [a.replace("@OUT", str(out)) for a in args])
    return check_cli(r, out, before)


@fast(80)
@given(cases)
def test_library_on_malformed_graphs(case):
    kind, where, value = case
    data = mutate(GRAPH, kind, where, value)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = data.decode("utf-8", "replace")
    check_library(solverfuse.plan, doc, "nvidia-h100", strategy="tvm")
    check_library(load_graph, doc if isinstance(doc, dict) else 7)


@fast(40)
@given(cases)
def test_inspect_and_plan_on_malformed_graphs(tmp_path_factory, case):
    tmp = tmp_path_factory.mktemp("g")
    g = _write(tmp, "g.json", mutate(GRAPH, *case))
    _cli(tmp, ["inspect", str(g)])
    if case[1] % 4 == 0:  # the solver path costs a fork and a CP-SAT call: a quarter of the cases
        if _cli(tmp, ["plan", str(g), "--time-limit", "1", "--workers", "1", "-o", "@OUT/p.json"]) == "ok":
            load_plan(tmp / "out" / "p.json")  # what was written validates


@fast(6)
@given(cases)
def test_compare_and_run_on_malformed_graphs(tmp_path_factory, case):
    tmp = tmp_path_factory.mktemp("c")
    g = _write(tmp, "g.json", mutate(GRAPH, *case))
    _cli(tmp, ["compare", str(g), "--time-limit", "1", "--workers", "1", "--plans", "@OUT"])
    _cli(tmp, ["run", str(g), "--strategy", "tvm", "-o", "@OUT/o.npz"])


@fast(40)
@given(cases)
def test_plan_files(tmp_path_factory, case):
    tmp = tmp_path_factory.mktemp("p")
    p = _write(tmp, "p.json", mutate(valid_plan(), *case))
    check_library(load_plan, p)
    _cli(tmp, ["explain", str(p)])
    if case[1] % 3 == 0:
        _cli(tmp, ["emit", str(p), "-o", "@OUT/c"])
    if case[1] % 5 == 0:
        _cli(tmp, ["show", str(p), "-o", "@OUT/p.svg"])


@fast(40)
@given(cases)
def test_hardware_files(tmp_path_factory, case):
    tmp = tmp_path_factory.mktemp("h")
    h = _write(tmp, "hw.json", mutate(valid_hardware(), *case))
    check_library(load_hardware, str(h))
    _cli(tmp, ["hardware", "show", str(h)])
    if case[1] % 4 == 0:
        g = _write(tmp, "g.json", json.dumps(GRAPH).encode())
        _cli(tmp, ["plan", str(g), "--hardware", str(h), "--time-limit", "1", "--workers", "1"])


# ---------------------------------------------------------------- issue 16's cases, one each

def _graph(**change) -> dict:
    doc = json.loads(json.dumps(GRAPH))
    for path, value in change.items():
        *head, last = path.split("__")
        obj = doc
        for k in head:
            obj = obj[int(k)] if k.isdigit() else obj[k]
        obj[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize("doc,match", [
    (_graph(tensors__x__shape=[True, 8]), "shape"),
    (_graph(nodes__0__attributes__transA="yes"), "transA"),
    (_graph(nodes__0__attributes__transA=True), "transA"),
    (_graph(nodes__5__flops=-5), "flops"),
    (_graph(nodes=[]), "no nodes"),
    (_graph(outputs=[]), "no outputs"),
    (_graph(tensors__x__shape=[-1, 8]), "shape"),
    (_graph(tensors__x__constant="yes"), "constant"),
    (_graph(nodes__4__attributes__perm=[1.5, 0]), "perm"),
])
def test_wrong_successes_are_errors(doc, match):
    with pytest.raises(GraphError, match=match):
        load_graph(doc)


@pytest.mark.parametrize("source", [[1, 2], None, 7, 3.5])
def test_library_rejects_wrong_top_level_types(source):
    with pytest.raises(SolverfuseError):
        solverfuse.plan(source)


def test_library_on_deep_nesting_and_huge_integers(tmp_path):
    deep = _write(tmp_path, "d.json", b'{"tensors": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(GraphError):
        load_graph(deep)
    huge = _write(tmp_path, "h.json", json.dumps(GRAPH).replace("[4, 8]", "[4, " + "9" * 4400 + "]").encode())
    with pytest.raises(GraphError):
        load_graph(huge)
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(GraphError):
        load_graph({"tensors": {"x": {"shape": [4], "value": nested, "constant": True}}, "inputs": [],
                    "outputs": ["x"], "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})


@pytest.mark.parametrize("cmd", ["plan", "compare", "run"])
@pytest.mark.parametrize("opt", [("--time-limit", "-1"), ("--time-limit", "nan"), ("--time-limit", "inf"),
                                 ("--seed", str(2**70))])
def test_bad_numbers_are_one_line_everywhere(tmp_path, cmd, opt):
    g = _write(tmp_path, "g.json", json.dumps(GRAPH).encode())
    r = runner.invoke(app, [cmd, str(g), *opt])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
    assert r.stderr.startswith("error: ") and opt[0].strip("-").replace("-", " ") in r.stderr


def test_run_refuses_tensors_beyond_memory_before_allocating(tmp_path):
    big = _graph(tensors__x__shape=[1 << 17, 1 << 17])
    big["tensors"]["w"]["shape"] = [1 << 17, 1 << 17]
    big["nodes"] = [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]
    big["outputs"] = ["y"]
    del big["tensors"]["z"]
    g = _write(tmp_path, "g.json", json.dumps(big).encode())
    r = runner.invoke(app, ["run", str(g), "--strategy", "unfused", "-o", str(tmp_path / "o.npz")])
    assert r.exit_code == 2, r.output
    assert "needs" in r.stderr and "available" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.npz").exists()


def test_internal_errors_are_one_line_with_a_distinct_exit_code(monkeypatch, tmp_path):
    from solverfuse import summary
    def broken(*a, **k):
        raise KeyError("a bug")
    monkeypatch.setattr(summary, "inspect_graph", broken)
    g = _write(tmp_path, "g.json", json.dumps(GRAPH).encode())
    r = runner.invoke(app, ["inspect", str(g)])
    assert r.exit_code == 70
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error" in lines[0] and "please report" in lines[0]
