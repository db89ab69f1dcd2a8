"""Emitter safety: hostile names never reach C, -Wall -Wextra -Werror builds, ASan/UBSan runs,
clear one-line errors (missing compiler, unsupported op or dtype, wrong parameters), the emit CLI."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from solverfuse.cli import app
from solverfuse.emit.build import compile_plan
from solverfuse.emit.program import render
from solverfuse.errors import EmitError
from solverfuse.sources import load_graph
from solverfuse.plans import build_plan, save_plan

from .conftest import EXAMPLES
from .emit_helpers import HW, check, fuse_greedily, graph, run_plan, unfused

HOSTILE = ['x"); system("rm -rf /', "*/ int evil; /*", "line\nbreak", "#include <stdio.h>",
           "naïve ünïcødé ✓", "back\\slash\\", "??/", "%s%n"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-cache")


def hostile_graph():
    x, w, h1, h2, y, z = HOSTILE[:6]
    t = {x: [3, 8], w: {"shape": [8, 8], "constant": True}, y: [3, 8]}
    nodes = [(HOSTILE[6], "MatMul", [x, w], [h1]), (HOSTILE[7], "Relu", [h1], [h2]),
             ("n\n*/", "Softmax", [h2], [y]), ("#define x", "Exp", [h2], [z])]
    return graph(t, [x], [y, z], nodes, name='*/ "graph" \n')


def test_hostile_names_never_reach_the_c_source():
    g = hostile_graph()
    for groups in (unfused(g), fuse_greedily(g)):
        files = render(build_plan(g, HW, groups, strategy="t"), g)
        for text in (files["model.c"], files["model.h"]):
            for name in HOSTILE + ["n\n*/", "#define x"]:
                assert name not in text
        # the names live only in buffers.json, exactly (JSON-escaped, round-tripped)
        assert HOSTILE[0] in {b["tensor"] for b in json.loads(files["buffers.json"])["buffers"]}


def test_hostile_names_compile_strict_and_run(cache):
    g = hostile_graph()
    check(g, unfused(g), cache)
    check(g, fuse_greedily(g), cache)


@pytest.mark.parametrize("which", ["hostile", "attention", "layernorm_gelu", "ops", "blocked_conv"])
def test_sanitizers_find_nothing(which, cache):
    if which == "hostile":
        g = hostile_graph()
    elif which == "ops":
        t = {"img": [1, 2, 5, 5], "w": {"shape": [2, 1, 3, 3], "constant": True}, "i": {"shape": [2], "dtype": "int64"}}
        g = graph(t, ["img", "i"], ["y", "p", "g"],
                  [("c", "Conv", ["img", "w"], ["y"], {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1]}),
                   ("mp", "MaxPool", ["img"], ["p"], {"kernel_shape": [2, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1,
                                                      "strides": [2, 2]}),
                   ("ga", "Gather", ["img", "i"], ["g"], {"axis": 2})])
    elif which == "blocked_conv":
        # register-blocked conv tiles: padded phase-split copy, bands of rows whose last chunk
        # runs past the plane into the copy's slack (stride 1 and 2, dilation, bias + relu)
        t = {"x": [1, 3, 11, 13], "w": {"shape": [8, 3, 3, 3], "constant": True},
             "v": {"shape": [4, 3, 3, 2], "constant": True}, "bb": {"shape": [8], "constant": True}}
        g = graph(t, ["x"], ["y", "z"],
                  [("c", "Conv", ["x", "w", "bb"], ["h"], {"pads": [1, 2, 1, 0], "dilations": [1, 2]}),
                   ("r", "Relu", ["h"], ["y"]),
                   ("c2", "Conv", ["x", "v"], ["z"], {"strides": [2, 3], "pads": [0, 1, 2, 1]})])
    else:
        g = load_graph(EXAMPLES / f"{which}.json")
    for groups in (unfused(g), fuse_greedily(g)):
        _, _, out, ins, cs = run_plan(g, groups, cache, sanitize=True)
        _, _, plain, _, _ = run_plan(g, groups, cache)
        for t in g.outputs:
            np.testing.assert_allclose(out[t], plain[t], rtol=1e-5, atol=1e-6)


def test_missing_compiler_is_one_clear_error(tmp_path):
    g = load_graph(EXAMPLES / "mlp.json")
    plan = build_plan(g, HW, unfused(g), strategy="t")
    with pytest.raises(EmitError, match="C compiler '/nonexistent' not found"):
        compile_plan(plan, g, cc="/nonexistent", cache_dir=tmp_path)
    assert not any(p.name.endswith(".so") for p in tmp_path.rglob("*"))


def test_unsupported_op_and_dtype_name_the_place():
    g = load_graph({"tensors": {"x": {"shape": [4]}, "y": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
                    "nodes": [{"name": "my fancy op", "op": "FancyOp", "category": "memory", "inputs": ["x"],
                               "outputs": ["y"]}]})
    with pytest.raises(EmitError, match="node 'my fancy op': op 'FancyOp' is not supported"):
        render(build_plan(g, HW, unfused(g), strategy="t"), g)
    h = load_graph({"tensors": {"x": {"shape": [4], "dtype": "float16"}}, "inputs": ["x"], "outputs": ["y"],
                    "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    with pytest.raises(EmitError, match="tensor 'x': dtype float16 is not supported"):
        render(build_plan(h, HW, unfused(h), strategy="t"), h)


def test_parameters_and_indices_are_checked_at_run_time(cache):
    t = {"x": [2, 6], "sh": {"shape": [2], "dtype": "int64", "constant": True, "value": [3, 4]},
         "i": {"shape": [3], "dtype": "int64"}}
    g = graph(t, ["x", "i"], ["y", "z"], [("rs", "Reshape", ["x", "sh"], ["y"]),
                                         ("ga", "Gather", ["x", "i"], ["z"], {"axis": 1})])
    plan, prog, out, ins, cs = run_plan(g, unfused(g), cache)
    np.testing.assert_array_equal(out["y"], ins["x"].reshape(3, 4))
    with pytest.raises(EmitError, match="parameter tensor differs"):
        prog.run(ins, dict(cs, sh=np.array([4, 3])))
    with pytest.raises(EmitError, match="out-of-range index"):
        prog.run(dict(ins, i=np.array([0, 6, 1])), cs)
    negative = prog.run(dict(ins, i=np.array([-1, 0, -6])), cs)["z"]
    np.testing.assert_array_equal(negative, ins["x"][:, [5, 0, 0]])


def test_time_reports_one_positive_duration_per_repeat(cache):
    g = load_graph(EXAMPLES / "mlp.json")
    plan, prog, out, ins, cs = run_plan(g, unfused(g), cache)
    secs = prog.time(ins, cs, repeats=3)
    assert len(secs) == 3 and all(s > 0 for s in secs)
    with pytest.raises(EmitError, match="counters=True"):
        prog.counters


def test_emit_cli_writes_source_that_builds_strict(tmp_path):
    g = load_graph(EXAMPLES / "attention.json")
    plan_path = tmp_path / "plan.json"
    save_plan(build_plan(g, HW, fuse_greedily(g), strategy="t"), plan_path)
    r = CliRunner().invoke(app, ["emit", str(plan_path), "-o", str(tmp_path / "out"), "--threads", "2"])
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["buffers.json", "model.c", "model.h", "weights.safetensors"]
    c = subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-fopenmp", "-c",
                        str(tmp_path / "out" / "model.c"), "-o", str(tmp_path / "model.o")],
                       capture_output=True, text=True)
    assert c.returncode == 0, c.stderr
    assert "#pragma omp parallel" in (tmp_path / "out" / "model.c").read_text()


def test_emit_cli_bad_plan_is_one_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text('{"format": "solverfuse-plan/1", "groups": [')
    r = CliRunner().invoke(app, ["emit", str(bad), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2
    assert r.output.strip().startswith("error:") and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    g = load_graph({"tensors": {"x": {"shape": [4]}, "y": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
                    "nodes": [{"name": "odd one", "op": "FancyOp", "category": "memory", "inputs": ["x"],
                               "outputs": ["y"], "flops": 4}]})
    plan_path = tmp_path / "p2.json"
    save_plan(build_plan(g, HW, unfused(g), strategy="t"), plan_path)
    r = CliRunner().invoke(app, ["emit", str(plan_path), "-o", str(tmp_path / "out2")])
    assert r.exit_code == 2 and "odd one" in r.output
    assert not (tmp_path / "out2").exists()


def test_sanitizer_build_really_catches_an_overflow(cache):
    """The ASan harness is not vacuous: one element written past a buffer is reported."""
    from solverfuse.emit.build import Program, build
    from solverfuse.emit.program import buffer_table
    from solverfuse.emit.data import constants, random_inputs
    g = load_graph(EXAMPLES / "mlp.json")
    plan = build_plan(g, HW, unfused(g), strategy="t")
    files = render(plan, g)
    files.pop("buffers.json")
    files["model.c"] = files["model.c"].replace(
        "    return 0;\n}", "    ((volatile float *)B[0])[sf_numel[0]] = 1;\n    return 0;\n}", 1)
    path = build(files, sanitize=True, cache_dir=cache)
    prog = Program(plan, g, buffer_table(plan, g), path, sanitize=True, counters=False, threads=1)
    with pytest.raises(EmitError, match="sanitized program failed.*heap-buffer-overflow"):
        prog.run(random_inputs(g), constants(g))


def test_outputs_that_are_inputs_and_tensors_nobody_reads(cache):
    t = {"x": [3], "c": {"shape": [3], "constant": True, "value": [1.0, 2.0, 3.0]}}
    g = graph(t, ["x"], ["x", "y", "c"], [("r", "Relu", ["x"], ["y"]), ("d", "Dropout", ["x"], ["z", "mask"])])
    plan, prog, out, ins, cs = run_plan(g, unfused(g), cache)
    np.testing.assert_array_equal(out["x"], ins["x"])
    np.testing.assert_array_equal(out["c"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(out["y"], np.maximum(ins["x"], 0))
    assert plan.groups[1].writes == []  # Dropout's outputs are read by nobody: nothing is stored


def test_unwritable_cache_is_one_clear_error(tmp_path):
    g = load_graph(EXAMPLES / "mlp.json")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(EmitError, match="cannot use build cache"):
        compile_plan(build_plan(g, HW, unfused(g), strategy="t"), g, cache_dir=blocker / "cache")
