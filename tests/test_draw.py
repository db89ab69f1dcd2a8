"""`show`: pictures of one or two plans (PNG, SVG), atomic, one-line errors."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from solverfuse.cli import app
from solverfuse.draw import _hull, draw_plans, layers, layout
from solverfuse.errors import PlanError
from solverfuse.sources import load_graph
from solverfuse.greedy import greedy_plan
from solverfuse.plans import save_plan

from .conftest import EXAMPLES, light_model_path


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plans")
    g = load_graph(EXAMPLES / "inception.json")
    paths = []
    for name in ("tvm", "guide"):
        p = d / f"{name}.json"
        save_plan(greedy_plan(g, "nvidia-h100", name), p)
        paths.append(p)
    return paths


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<?xml")])
def test_show_two_plans_side_by_side(plan_files, tmp_path, suffix, magic):
    out = tmp_path / f"cmp{suffix}"
    r = CliRunner().invoke(app, ["show", str(plan_files[0]), str(plan_files[1]), "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = out.read_bytes()
    assert data.startswith(magic) and len(data) > 10_000
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left behind


def test_svg_labels_cut_tensors_and_titles(plan_files, tmp_path):
    out = tmp_path / "one.svg"
    r = CliRunner().invoke(app, ["show", str(plan_files[0]), "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    # SVG text is drawn as glyph paths; matplotlib keeps each string in a comment
    assert "tvm (heuristic) on nvidia-h100" in text
    # cut tensors: pool_c's output [1, 32, 28, 28] float32 = 100352 B, relu_b1's [1, 8, 28, 28] = 25088 B
    assert "98.00 KiB" in text and "24.50 KiB" in text


@pytest.mark.parametrize("args, message", [
    (["show", "missing.json", "-o", "x.png"], "no such file"),
    (["show", "{p}", "-o", "{tmp}/x.gif"], "must end in"),
    (["show", "{p}", "-o", "{tmp}/no/dir/x.png"], "no such folder"),
    (["show", "{p}", "{p}", "{p}", "-o", "{tmp}/x.png"], "one or two plans"),
])
def test_show_errors(plan_files, tmp_path, args, message):
    args = [a.format(p=plan_files[0], tmp=tmp_path) for a in args]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
    assert not any(tmp_path.iterdir())


def test_layers_push_side_branches_down():
    g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["z"],
                    "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
                              {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["i"]},
                              {"name": "s", "op": "Neg", "inputs": ["x"], "outputs": ["j"]},
                              {"name": "c", "op": "Add", "inputs": ["i", "j"], "outputs": ["z"]}]})
    assert layers(g) == {"a": 0, "b": 1, "s": 1, "c": 2}
    pos = layout(g)
    assert pos["b"][1] == pos["s"][1] == -1.0 and pos["b"][0] != pos["s"][0]


def test_hull_of_a_square_with_an_inner_point():
    assert sorted(_hull([(0, 0), (2, 0), (2, 2), (0, 2), (1, 1)])) == [(0, 0), (0, 2), (2, 0), (2, 2)]


def test_resnet50_is_drawn(tmp_path):
    from solverfuse.onnx_import import import_onnx
    g = import_onnx(light_model_path("resnet50"))
    out = tmp_path / "r50.png"
    draw_plans([greedy_plan(g, "nvidia-h100", "tvm"), greedy_plan(g, "nvidia-h100", "xla")], out)
    from PIL import Image
    w, h = Image.open(out).size
    assert h > 5 * w > 0  # a tall layered layout, not a squashed one


def test_draw_refuses_three_plans(plan_files, tmp_path):
    from solverfuse.plans import load_plan
    p = load_plan(plan_files[0])
    with pytest.raises(PlanError, match="one or two plans"):
        draw_plans([p, p, p], tmp_path / "x.svg")
