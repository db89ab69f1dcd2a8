"""An ONNX backend (``onnx.backend.base.Backend``) that executes models as solverfuse's emitted C.

``prepare(model)`` imports the ``ModelProto`` (:func:`solverfuse.onnx_import.import_onnx`), plans
it (optimal by default, short time limit, one CP-SAT worker), compiles the plan
(:func:`solverfuse.emit.build.compile_plan`) and returns a :class:`SolverfuseRep` whose ``run``
executes the C. This is what lets ONNX's own backend test runner
(``onnx.backend.test.runner.Runner``) check the emitter against ONNX's node tests and the light
models (see ``tests/test_onnx_backend.py``).

The importer keeps only small or uniform initializer values in the graph (planning needs bytes,
not data); the representation therefore keeps the model's real initializer values and passes them
to the program, so results are those of the model, not of seeded stand-in data.

>>> SolverfuseBackend.supports_device("CPU"), SolverfuseBackend.supports_device("CUDA")
(True, False)
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from onnx.backend.base import Backend, BackendRep, namedtupledict

from ..errors import EmitError

DEFAULT_TIME_LIMIT = 5.0


class SolverfuseRep(BackendRep):
    """A compiled model: graph, plan, program and the constants it runs with."""

    def __init__(self, graph, plan, program, constants: dict[str, np.ndarray], output_names: Sequence[str]):
        self.graph, self.plan, self.program = graph, plan, program
        self.constants = constants
        self.input_names = [x for x in graph.inputs if not graph.tensors[x].constant]
        self.output_names = list(output_names)

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """Run on ``inputs`` (a list in the model's input order, a dict by name, or one array)."""
        from .reference import check_inputs
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise EmitError(f"model has {len(self.input_names)} inputs "
                                f"({', '.join(map(repr, self.input_names))}), got {len(inputs)}")
            feeds = dict(zip(self.input_names, inputs))
        outs = self.program.run(check_inputs(self.graph, feeds), self.constants)
        return namedtupledict("Outputs", self.output_names)(*[np.asarray(outs[n]) for n in self.output_names])


def _model_constants(model, graph) -> dict[str, np.ndarray]:
    """The graph's constants: the model's own initializer values where the graph has the tensor,
    the graph's value/fill or seeded data for the rest."""
    from onnx import numpy_helper
    from .data import constants, np_dtype
    out = constants(graph)
    for init in model.graph.initializer:
        t = graph.tensors.get(init.name)
        if t is not None and t.constant and init.name in out:
            arr = numpy_helper.to_array(init)
            out[init.name] = np.ascontiguousarray(arr, dtype=np_dtype(t.dtype)).reshape(t.shape)
    return out


class SolverfuseBackend(Backend):
    """ONNX backend running solverfuse plans as emitted C (CPU only).

    ``prepare`` keyword options: ``strategy`` (default ``optimal``), ``hardware`` (profile used for
    planning, default ``nvidia-h100``), ``time_limit`` (solver seconds), ``threads``, ``cache_dir``.
    """

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> SolverfuseRep:
        from ..api import plan as make_plan
        from ..onnx_import import import_onnx
        from .build import compile_plan
        super().prepare(model, device, **kwargs)
        if not cls.supports_device(device):
            raise EmitError(f"device {device!r} is not supported (CPU only)")
        graph = import_onnx(model)
        plan = make_plan(graph, kwargs.get("hardware", "nvidia-h100"),
                         strategy=kwargs.get("strategy", "optimal"),
                         time_limit=kwargs.get("time_limit", DEFAULT_TIME_LIMIT), workers=1)
        program = compile_plan(plan, graph, threads=kwargs.get("threads", 1),
                               cache_dir=kwargs.get("cache_dir"))
        names = [o.name for o in model.graph.output]
        return SolverfuseRep(graph, plan, program, _model_constants(model, graph), names)

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] == "CPU"


prepare = SolverfuseBackend.prepare
run_model = SolverfuseBackend.run_model
supports_device = SolverfuseBackend.supports_device

