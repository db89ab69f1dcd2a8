"""A built plan's library with its buffers, for the benchmarks that time ``sf_run`` from Python
(A/B scripts whose workers build each tree's library: this module imports neither solverfuse nor
the other benchmark modules, so the caller's process keeps the tree it chose); and ONNX Runtime
timed beside them, interleaved (:func:`interleaved`).

>>> table = [{"tensor": "x", "role": "input", "dtype": "float32", "shape": [2]},
...          {"tensor": "t", "role": "boundary", "dtype": "float32", "shape": [2]},
...          {"tensor": "y", "role": "output", "dtype": "float32", "shape": [2]}]
>>> arrays, ptrs = bind_buffers(table, {"x": [1, 2]}, {})
>>> [None if a is None else a.shape for a in arrays], ptrs[1] is None
([(2,), None, (2,)], True)
"""
from __future__ import annotations

import ctypes
import statistics

import numpy as np


def bind_buffers(table, inputs: dict, consts: dict) -> tuple[list, object]:
    """Arrays for a library's buffer table (rows with tensor, role, dtype, shape): inputs and
    constants filled from ``inputs`` / ``consts``, outputs allocated, the library's own buffers
    (its arena) None; and the pointer array ``sf_run`` takes."""
    arrays = []
    for b in table:
        src = inputs if b["role"] == "input" else consts if b["role"] == "constant" else None
        dt = np.bool_ if b["dtype"] == "bool" else np.dtype(b["dtype"])
        if src is not None:
            arrays.append(np.ascontiguousarray(np.asarray(src[b["tensor"]], dtype=dt).reshape(b["shape"])))
        else:
            arrays.append(np.empty(b["shape"], dtype=dt) if b["role"] == "output" else None)
    ptrs = (ctypes.c_void_p * (len(arrays) + 1))(*[None if a is None else a.ctypes.data for a in arrays])
    return arrays, ptrs


class Lib:
    """A built library (``built["lib"]``, ``built["table"]``) loaded with its buffers; calling it
    runs ``sf_run`` once."""

    def __init__(self, built: dict, inputs: dict, consts: dict):
        self.lib = ctypes.CDLL(built["lib"])
        self.arrays, self.ptrs = bind_buffers(built["table"], inputs, consts)
        self.lib.sf_init()
        self.outputs = [a for a, b in zip(self.arrays, built["table"]) if b["role"] == "output"]

    def __call__(self):
        if self.lib.sf_run(self.ptrs):
            raise RuntimeError("sf_run failed")


def interleaved(libs: dict, sess, feeds: dict, rounds: int, now) -> dict:
    """Seconds per run of every library in ``libs`` (name -> :class:`Lib`) and of ONNX Runtime
    (``ort``), run in turn ``rounds`` times after one warm-up run each (it packs the weights and
    pages the buffers in), timed by ``now``; each library's outputs are first checked against
    ONNX Runtime's. Returns name -> list of seconds.

    >>> interleaved({}, type("S", (), {"run": lambda self, o, f: []})(), {}, 2, iter(range(9)).__next__)
    {'ort': [1, 1]}
    """
    runs = {**libs, "ort": lambda: sess.run(None, feeds)}
    for f in runs.values():
        f()
    ref = sess.run(None, feeds)
    for name, lib in libs.items():
        for got, want in zip(lib.outputs, ref):
            np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-3, atol=1e-3, err_msg=name)
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, f in runs.items():
            t0 = now()
            f()
            times[k].append(now() - t0)
    return times


def medians(times: dict) -> dict:
    """``{name}_med`` and ``{name}_min`` of every list of :func:`interleaved`'s result.

    >>> medians({"a": [3, 1, 2]})
    {'a_med': 2, 'a_min': 1}
    """
    return {k: v for name, t in times.items() for k, v in ((f"{name}_med", statistics.median(t)), (f"{name}_min", min(t)))}
