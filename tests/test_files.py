"""Every written file appears atomically with the umask's mode, and a failed write leaves nothing;
I/O errors are one line naming the path (CLI and library)."""
from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from typer.testing import CliRunner

from solverfuse.cli import app
from solverfuse.errors import FileError, PlanError
from solverfuse.files import atomic_path, read_text, write_atomic
from solverfuse.plans import build_plan, load_plan, save_plan
from solverfuse.sources import load_graph

runner = CliRunner()
TINY = {"tensors": {"x": {"shape": [64]}}, "inputs": ["x"], "outputs": ["y"],
        "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
                  {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]}


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_atomic_gives_umask_mode_and_no_temp_files(tmp_path, umask022):
    write_atomic(tmp_path / "a.txt", "x")
    assert mode(tmp_path / "a.txt") == 0o644
    old = os.umask(0o077)
    try:
        write_atomic(tmp_path / "b.txt", b"y")
    finally:
        os.umask(old)
    assert mode(tmp_path / "b.txt") == 0o600
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]


def test_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "keep.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            open(tmp, "w").write("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["keep.txt"]


@pytest.mark.parametrize("where", ["missing", "dir"])
def test_write_errors_name_the_path(tmp_path, where):
    path = tmp_path / "no" / "x.json" if where == "missing" else tmp_path
    with pytest.raises(FileError, match=str(path)):
        write_atomic(path, "x")


def test_read_errors_name_the_path(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(PlanError, match="not UTF-8"):
        read_text(bad, PlanError)
    with pytest.raises(PlanError, match="is a directory"):
        load_plan(tmp_path)
    with pytest.raises(PlanError, match="not UTF-8"):
        load_plan(bad)


def _plan_file(tmp_path):
    g = load_graph(TINY)
    p = tmp_path / "p.plan.json"
    save_plan(build_plan(g, "nvidia-h100", [["a", "b"]], strategy="manual"), p)
    return p


def test_every_cli_output_gets_the_umask_mode(tmp_path, umask022):
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(TINY))
    plan = _plan_file(tmp_path)
    assert mode(plan) == 0o644
    r = runner.invoke(app, ["plan", str(gpath), "--time-limit", "5", "-o", str(tmp_path / "o.plan.json")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["emit", str(plan), "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["show", str(plan), "-o", str(tmp_path / "p.svg")])
    assert r.exit_code == 0, r.output
    written = [tmp_path / "o.plan.json", tmp_path / "p.svg"] + list((tmp_path / "c").iterdir())
    assert sorted(p.name for p in written) == sorted(["o.plan.json", "p.svg", "model.c", "model.h", "buffers.json",
                                                      "weights.safetensors"])
    assert {str(p): mode(p) for p in written} == {str(p): 0o644 for p in written}
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


@pytest.mark.parametrize("cmd", ["plan", "show", "compare"])
@pytest.mark.parametrize("where", ["missing-dir", "is-dir"])
def test_cli_output_errors_are_one_line(tmp_path, cmd, where):
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(TINY))
    plan = _plan_file(tmp_path)
    out = tmp_path / "nowhere" / ("x.svg" if cmd == "show" else "x.json")
    if where == "is-dir":
        if cmd == "compare":
            pytest.skip("--plans names a folder")
        out = tmp_path / ("d.svg" if cmd == "show" else "d.json")
        out.mkdir()
    args = {"plan": ["plan", str(gpath), "--time-limit", "2", "-o", str(out)],
            "show": ["show", str(plan), "-o", str(out)],
            "compare": ["compare", str(gpath), "--time-limit", "2", "--plans", str(out)]}[cmd]
    before = sorted(os.listdir(tmp_path))
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert str(out) in lines[0] or str(out.parent) in lines[0]
    assert sorted(os.listdir(tmp_path)) == before


def test_run_check_mismatch_leaves_no_output(tmp_path):
    gpath = tmp_path / "g.json"
    gpath.write_text(json.dumps(TINY))
    out = tmp_path / "out.npz"
    r = runner.invoke(app, ["run", str(gpath), "--strategy", "unfused", "--check", "--rtol", "0",
                            "--atol", "0", "--inputs", str(_inputs(tmp_path)), "-o", str(out)])
    assert r.exit_code == 1, r.output
    assert not out.exists()


def _inputs(tmp_path):
    # values where float32 exp differs from the float64-exact reference in the last bit
    p = tmp_path / "in.npz"
    np.savez(p, x=np.linspace(0.1, 7.3, 64, dtype=np.float32))
    return p
