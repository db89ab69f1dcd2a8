"""solverfuse.torch's importer: every model of the torch set becomes a checked Graph whose nodes
are the FX nodes, whose weights carry the state dict's data, and whose outputs have the module's
shapes; saved ExportedPrograms (.pt2) plan from the command line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'solverfuse[torch]')")
pytest.importorskip("transformers", reason="transformers is not installed (the torch model set needs it)")

import solverfuse.torch as st  # noqa: E402
from solverfuse.torch.models import MODELS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", params=sorted(MODELS))
def imported(request):
    model, inputs = MODELS[request.param]()
    ep = st.export_for_inductor(model, inputs)
    return request.param, model, inputs, ep, st.from_exported_program(ep, request.param)


def test_every_model_imports_with_fx_names_shapes_and_weights(imported):
    name, model, inputs, ep, g = imported
    fx = {n.name: n for n in ep.graph.nodes if n.op == "call_function"}
    assert g.nodes and all(v.name in fx for v in g.nodes)
    # Every FX op that computes a tensor from tensors is a node (only getitem / folded sources are not).
    computed = {n for n, x in fx.items() if str(x.target) != "<built-in function getitem>"
                and any(isinstance(a, torch.fx.Node) for a in x.all_input_nodes)
                and x.meta.get("val") is not None}
    assert computed == {v.name for v in g.nodes}, name
    assert not st.graph_unknown_ops(g), f"{name}: ATen ops without an op-table row"
    with torch.no_grad():
        out = model(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert [tuple(g.tensors[t].shape) for t in g.outputs] == [tuple(o.shape) for o in outs]
    state = {k: v for k, v in model.state_dict().items()}
    sig = {s.arg.name: s.target for s in ep.graph_signature.input_specs if s.kind.name != "USER_INPUT"}
    checked = 0
    for tensor, target in sig.items():
        if target in state and g.tensors[tensor].value is not None:
            np.testing.assert_array_equal(g.constant_value(tensor), state[target].numpy())
            checked += 1
    assert checked > 0 or not any(target in state for target in sig.values())


def test_aten_ops_map_onto_their_rows():
    class M(torch.nn.Module):
        def forward(self, x, w):
            h = torch.relu(x @ w) + 1.0
            return torch.softmax(h, dim=-1).permute(1, 0)

    g = st.from_module(M(), (torch.randn(4, 8), torch.randn(8, 6)))
    ops = [n.op for n in g.nodes]
    assert ops[:3] == ["MatMul", "Relu", "Add"] and ops[-1] == "Transpose"
    assert {"ReduceMax", "Exp", "ReduceSum", "Div"} <= set(ops)   # Inductor's softmax decomposition
    add = next(n for n in g.nodes if n.op == "Add")
    assert g.constant_value(add.inputs[1]).tolist() == 1.0


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solverfuse.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)


def test_plan_and_compare_a_saved_exported_program(tmp_path):
    model, inputs = MODELS["residual_layernorm_gelu"]()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, inputs), str(path))
    r = _cli("compare", str(path), "--hardware", "detect", "--time-limit", "5", "--workers", "1")
    assert r.returncode == 0, r.stderr
    rows = [line.split()[0] for line in r.stdout.splitlines()[3:]]
    assert rows.index("inductor-real") == rows.index("inductor") + 1
    bad = tmp_path / "bad.pt2"
    bad.write_text("not a zip")
    r = _cli("plan", str(bad), "--hardware", "detect")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "bad.pt2" in r.stderr
