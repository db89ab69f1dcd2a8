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

from typing import Any, Optional

import numpy as np
from onnx.backend.base import Backend, BackendRep, namedtupledict

from ..errors import EmitError

DEFAULT_TIME_LIMIT = 5.0


class Compiled:
    """One import -> plan -> compile of a model: the graph, its plan, program and constants."""

    def __init__(self, model, options: dict):
        from ..api import plan as make_plan
        from ..onnx_import import import_onnx
        from .build import compile_plan
        self.graph = import_onnx(model)
        self.plan = make_plan(self.graph, options.get("hardware", "nvidia-h100"),
                              strategy=options.get("strategy", "optimal"),
                              time_limit=options.get("time_limit", DEFAULT_TIME_LIMIT), workers=1)
        self.program = compile_plan(self.plan, self.graph, threads=options.get("threads", 1),
                                    cache_dir=options.get("cache_dir"))
        self.constants = _model_constants(model, self.graph)

    def run(self, feeds: dict) -> dict:
        from .reference import check_inputs
        return self.program.run(check_inputs(self.graph, feeds), self.constants)


class SolverfuseRep(BackendRep):
    """A prepared model. Normally compiled once in ``prepare``; a model whose shape parameters
    (Reshape's shape, Slice's starts, axes, ...) are *runtime inputs* cannot be planned with
    static shapes, so it is compiled at ``run`` with those integer inputs bound to the values
    given (one specialisation per distinct set of values, cached)."""

    def __init__(self, model, options: dict, compiled: Optional[Compiled]):
        self.model, self.options, self.compiled = model, options, compiled
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self._specialised: dict[bytes, Compiled] = {}

    def _specialise(self, feeds: dict) -> tuple[Compiled, dict]:
        from onnx import numpy_helper
        params = _parameter_inputs(self.model)
        bound = {k: np.asarray(v) for k, v in feeds.items() if k in params and np.asarray(v).dtype.kind in "iu"}
        key = b"".join(k.encode() + b"\0" + v.tobytes() + str(v.shape).encode() for k, v in sorted(bound.items()))
        if key not in self._specialised:
            model = type(self.model)()
            model.CopyFrom(self.model)
            keep = [i for i in model.graph.input if i.name not in bound]
            del model.graph.input[:]
            model.graph.input.extend(keep)
            model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in bound.items())
            self._specialised[key] = Compiled(model, self.options)
        return self._specialised[key], {k: v for k, v in feeds.items() if k not in bound}

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """Run on ``inputs`` (a list in the model's input order, a dict by name, or one array)."""
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
        compiled = self.compiled
        if compiled is None:
            compiled, feeds = self._specialise(feeds)
        outs = compiled.run(feeds)
        return namedtupledict("Outputs", self.output_names)(*[np.asarray(outs[n]) for n in self.output_names])


#: Ops whose input 0 is a shape parameter too (their output's shape depends on its value).
_SHAPE_FROM_INPUT0 = frozenset({"Range", "ConstantOfShape"})


def _parameter_inputs(model) -> set[str]:
    """Graph inputs that some node reads as a parameter (a position other than the data input 0,
    or any input of Range/ConstantOfShape): binding those fixes the shapes; integer *data* stays
    an input, so a model is never folded away entirely."""
    out = set()
    for node in model.graph.node:
        for i, t in enumerate(node.input):
            if i > 0 or node.op_type in _SHAPE_FROM_INPUT0:
                out.add(t)
    return out


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
            out[init.name] = np.asarray(arr, dtype=np_dtype(t.dtype), order="C").reshape(t.shape)
    return out


class SolverfuseBackend(Backend):
    """ONNX backend running solverfuse plans as emitted C (CPU only).

    ``prepare`` keyword options: ``strategy`` (default ``optimal``), ``hardware`` (profile used for
    planning, default ``nvidia-h100``), ``time_limit`` (solver seconds), ``threads``, ``cache_dir``.
    """

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> SolverfuseRep:
        from ..errors import GraphError
        super().prepare(model, device, **kwargs)
        if not cls.supports_device(device):
            raise EmitError(f"device {device!r} is not supported (CPU only)")
        try:
            compiled = Compiled(model, kwargs)
        except GraphError as e:
            # shape parameters fed at run time: specialise on their values then (see SolverfuseRep)
            if "must be a constant" not in str(e):
                raise
            compiled = None
        return SolverfuseRep(model, kwargs, compiled)

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] == "CPU"


prepare = SolverfuseBackend.prepare
run_model = SolverfuseBackend.run_model
supports_device = SolverfuseBackend.supports_device

