"""All 9 ONNX light models, end to end: import -> plan (optimal and unfused) -> emitted C -> run,
matching ONNX Runtime on the same random inputs and random weights.

The light models' weights are all the same constant (0.02), which makes every logit equal and the
final Softmax exactly uniform whatever the kernels compute -- a check on that would be vacuous. So
the graphs are kept as imported (same plans, same compiled programs as the ONNX backend test) but
are *run* with seeded random weights (:func:`solverfuse.emit.data.random_tensor`: fan-in scaled,
positive BatchNormalization variances), and each test first asserts the reference output is not
degenerate. Float32 through 50+ layers with a different summation order stays within ~1e-6 of
the output's scale here, so the tolerance (rtol 1e-4, atol 1e-6 x scale) leaves a wide margin
while still catching any real indexing or fusion error.
"""
from __future__ import annotations

import numpy as np
import pytest

from solverfuse.api import plan as make_plan
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs, random_tensor
from solverfuse.emit.reference import reference_outputs
from solverfuse.onnx_import import import_onnx

from .conftest import LIGHT_MODELS, light_model_path

#: Solver time limit; the same as the ONNX backend's default, so both tests share compiled programs.
TIME_LIMIT = 30.0  # an upper bound: a loaded CI machine must not turn the plan into a fallback
_cache: dict = {}


def model_case(name: str):
    """(graph, inputs, constants, reference outputs) for one model; only the last one is kept
    (VGG19's weights alone are 550 MB)."""
    if name not in _cache:
        _cache.clear()
        g = import_onnx(light_model_path(name))
        consts = constants(g, seed=0)
        for t, arr in consts.items():
            if arr.dtype.kind == "f" and arr.size > 1 and g.tensors[t].fill is not None:
                consts[t] = random_tensor(g, t, seed=0, scale=0.1)
        x = random_inputs(g, seed=0)
        _cache[name] = (g, x, consts, reference_outputs(g, x, consts, "onnxruntime"))
    return _cache[name]


@pytest.fixture(scope="module", autouse=True)
def _free_weights():
    yield
    _cache.clear()


@pytest.mark.parametrize("strategy", ["optimal", "unfused"])
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_matches_onnxruntime(name, strategy):
    g, x, consts, want = model_case(name)
    plan = make_plan(g, "nvidia-h100", strategy=strategy, time_limit=TIME_LIMIT, workers=1)
    if strategy == "unfused":
        assert len(plan.groups) == len(g.nodes)
    else:
        assert plan.traffic_bytes <= plan.unfused_traffic_bytes and len(plan.groups) < len(g.nodes)
    got = compile_plan(plan, g).run(x, consts)
    assert set(got) == set(g.outputs)
    for t in g.outputs:
        ref = want[t]
        scale = float(np.abs(ref).max())
        # the reference depends on the data: not a constant output (the test could not fail otherwise)
        assert np.isfinite(ref).all() and float(ref.std()) > 0.01 * float(np.abs(ref).mean()), t
        assert got[t].shape == ref.shape and got[t].dtype == ref.dtype
        np.testing.assert_allclose(got[t], ref, rtol=1e-4, atol=1e-6 * scale, err_msg=f"{name}/{strategy}/{t}")
