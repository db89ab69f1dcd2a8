"""Data to execute a graph with: constant values and seeded random inputs.

A constant with data (a ``value``, a ``fill``, a weights-file reference or an imported array) gets
exactly that; a constant with none (a hand-written graph's weights, see :func:`without_data`) and
every graph input get seeded random data that is deterministic per tensor name and seed, and *numerically
sane for the op that consumes it*: a tensor's domain is read off its consumers, because random
data must not make a correct program look wrong (a negative BatchNormalization variance gives
NaN, an out-of-range Gather index reads past a buffer, an unscaled weight overflows float32
after fifty convolutions).

=================  =====================================================================
consumer (input)   data
=================  =====================================================================
Conv/MatMul/Gemm   weight ~ N(0, 1/fan_in): activations keep their scale through deep nets
 weight
BatchNorm var      uniform(0.5, 1.5) (positive); scale ~ 1 + N(0, 0.1)
Div/Mod divisor,   uniform(0.5, 1.5) (away from zero / inside the real domain)
Sqrt/Log/Pow base,
Reciprocal
Gather indices     integers in [0, size of the gathered axis)
other float        N(0, 1) for inputs, N(0, 0.1) for constants; ints in [0, 10); bools random
=================  =====================================================================

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [2, 3]}, "v": {"shape": [3], "constant": True},
...     "w": {"shape": [3], "constant": True, "fill": 2.0}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "d", "op": "Div", "inputs": ["x", "v"], "outputs": ["h"]},
...               {"name": "m", "op": "Mul", "inputs": ["h", "w"], "outputs": ["y"]}]})
>>> c = constants(g)
>>> c["w"].tolist(), bool((c["v"] >= 0.5).all()), c["v"].dtype.name
([2.0, 2.0, 2.0], True, 'float32')
>>> bool((random_inputs(g, seed=1)["x"] == random_inputs(g, seed=1)["x"]).all())
True
"""
from __future__ import annotations

import hashlib
import math
from typing import Optional

import numpy as np

from ..dtypes import np_dtype
from ..graph import Graph
from ..ops import numel

#: (op, input position) whose data must be positive (kept in [0.5, 1.5)).
POSITIVE_INPUTS = {("BatchNormalization", 4), ("Div", 1), ("Mod", 1), ("Sqrt", 0), ("Log", 0),
                   ("Pow", 0), ("Reciprocal", 0)}


def tensor_rng(name: str, seed: int) -> np.random.Generator:
    """A generator seeded by (seed, tensor name): the data of a tensor never depends on others.

    >>> tensor_rng("w", 0).random() == tensor_rng("w", 0).random() != tensor_rng("b", 0).random()
    True
    """
    digest = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([seed & 0xFFFFFFFF, digest])


def _uses(graph: Graph, tensor: str) -> list[tuple[str, int, str]]:
    """(op, input position, node name) for every read of ``tensor``."""
    out = []
    for c in graph.index.consumers.get(tensor, []):
        node = graph.index.node[c]
        out.extend((node.op, i, c) for i, t in enumerate(node.inputs) if t == tensor)
    return out


def _fan_in(graph: Graph, tensor: str, op: str, pos: int, node: str) -> Optional[int]:
    """Fan-in if ``tensor`` is a Conv/MatMul/Gemm weight operand at ``pos``, else None."""
    shape = graph.tensors[tensor].shape
    attrs = graph.index.node[node].attributes
    if op == "Conv" and pos == 1 and len(shape) >= 2:
        return numel(shape[1:])
    if op == "MatMul" and pos in (0, 1) and shape:
        return shape[-1] if pos == 0 or len(shape) == 1 else shape[-2]
    if op == "Gemm" and pos in (0, 1) and len(shape) == 2:
        trans = attrs.get("transA" if pos == 0 else "transB", 0)
        return shape[0] if (pos == 0) == bool(trans) else shape[1]
    return None


def _index_bound(graph: Graph, tensor: str) -> Optional[int]:
    """Exclusive upper bound for a tensor read as Gather indices (smallest gathered axis)."""
    bounds = []
    for op, pos, node in _uses(graph, tensor):
        if op == "Gather" and pos == 1:
            n = graph.index.node[node]
            data = graph.tensors[n.inputs[0]].shape
            axis = n.attributes.get("axis", 0)
            bounds.append(data[axis % len(data)] if data else 1)
    return min(bounds) if bounds else None


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-ordered array whose data starts at a 64-byte boundary (NumPy's large
    arrays start 16 bytes past a page): a row whose blocks of 16 floats are whole cache lines
    can be written with non-temporal stores (emit/rows.py's GELU block), 12% less time for
    residual_layernorm_gelu at 2x the LLC.

    >>> a = aligned_empty((3, 5), np.float32)
    >>> a.ctypes.data % 64, a.shape, a.dtype, a.flags.c_contiguous
    (0, (3, 5), dtype('float32'), True)
    """
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(n + 64, np.uint8)
    off = -raw.ctypes.data % 64
    return raw[off:off + n].view(dt).reshape(shape)


def random_tensor(graph: Graph, tensor: str, seed: int = 0, *, scale: float = 1.0) -> np.ndarray:
    """Seeded random data for one tensor, in the domain its consumers need (see module doc), at a
    64-byte boundary as the program's own buffers are (:func:`aligned_empty`): the kernels take
    any alignment, but a row read across cache lines costs loads (l1_overflow's pipelined softmax
    row, emit/softmax_pipeline.py: 0.42 against 0.39 ns per element with its input 16 bytes past
    a line, NumPy's offset for a large array, Zen 4).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"t": {"shape": [5, 4]}, "i": {"shape": [3], "dtype": "int64"}},
    ...     "inputs": ["t", "i"], "outputs": ["y"],
    ...     "nodes": [{"name": "g", "op": "Gather", "inputs": ["t", "i"], "outputs": ["y"]}]})
    >>> idx = random_tensor(g, "i"); idx.dtype.name, bool(((idx >= 0) & (idx < 5)).all()), idx.ctypes.data % 64
    ('int64', True, 0)
    """
    values = _random_values(graph, tensor, seed, scale)
    out = aligned_empty(values.shape, values.dtype)
    out[...] = values
    return out


def _random_values(graph: Graph, tensor: str, seed: int, scale: float) -> np.ndarray:
    t = graph.tensors[tensor]
    shape, dt = tuple(t.shape), np_dtype(t.dtype)
    rng = tensor_rng(tensor, seed)
    uses = _uses(graph, tensor)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        bound = _index_bound(graph, tensor)
        low = 1 if any((op, pos) in POSITIVE_INPUTS for op, pos, _ in uses) else 0
        high = bound if bound is not None else 10
        return rng.integers(low, max(high, low + 1), size=shape).astype(dt)
    if any((op, pos) in POSITIVE_INPUTS for op, pos, _ in uses):
        return rng.uniform(0.5, 1.5, size=shape).astype(dt)
    if any(op == "BatchNormalization" and pos == 1 for op, pos, _ in uses):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(dt)
    fans = [f for op, pos, node in uses if (f := _fan_in(graph, tensor, op, pos, node))]
    if fans and t.constant:
        return (rng.standard_normal(shape) / math.sqrt(max(fans))).astype(dt)
    return (scale * rng.standard_normal(shape)).astype(dt)


def without_data(graph: Graph) -> list[str]:
    """Constants that carry no data (no value, fill, weights reference or imported array): the
    ones :func:`constants` fills with seeded random data (a hand-written graph's weights).

    >>> from solverfuse.graph import load_graph
    >>> without_data(load_graph({"tensors": {"x": {"shape": [2]}, "w": {"shape": [2], "constant": True},
    ...     "b": {"shape": [2], "constant": True, "fill": 1.0}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "m", "op": "Mul", "inputs": ["x", "w"], "outputs": ["h"]},
    ...               {"name": "a", "op": "Add", "inputs": ["h", "b"], "outputs": ["y"]}]}))
    ['w']
    """
    return [name for name, t in graph.tensors.items() if t.constant and not graph.has_data(name)]


def constants(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Every constant tensor's data, keyed by name: its ``value`` / ``fill`` / weights-file data
    (:meth:`~solverfuse.graph.Graph.constant_data`), else seeded random (see :func:`without_data`).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 3]}, "w": {"shape": [3, 2], "constant": True}},
    ...     "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "m", "op": "MatMul", "inputs": ["x", "w"], "outputs": ["y"]}]})
    >>> c = constants(g, seed=3); c["w"].shape, bool((c["w"] == constants(g, seed=3)["w"]).all())
    ((3, 2), True)
    """
    out = {}
    for name, t in graph.tensors.items():
        if not t.constant:
            continue
        value = graph.constant_data(name)
        out[name] = np.asarray(value, dtype=np_dtype(t.dtype)) if value is not None else \
            random_tensor(graph, name, seed, scale=0.1)
    return out


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random data for every graph input (not the constants), keyed by name.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 2]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "s", "op": "Sqrt", "inputs": ["x"], "outputs": ["y"]}]})
    >>> bool((random_inputs(g)["x"] > 0).all())
    True
    """
    return {name: random_tensor(graph, name, seed) for name in graph.inputs
            if not graph.tensors[name].constant}


def write_program_weights(graph: Graph, path, seed: int = 0):
    """Write every constant the emitted program reads into one weights file (``path``), keyed by
    tensor name, so the C program ships with its data; returns the path.

    Loading convention (what a C host does; the file is in the safetensors layout, see
    :mod:`solverfuse.weights`): read the 8-byte little-endian header length ``N`` and the JSON
    header that follows; for each row ``{"index": i, "tensor": name, "role": "constant", ...}`` of
    ``buffers.json``, ``B[i]`` points at ``file + 8 + N + data_offsets[0]`` of header entry
    ``name`` (each array 64-byte aligned in the file, so a ``mmap`` of the file can be used in
    place; ``dtype``/``shape`` as listed, matching the row's). Other rows are inputs, outputs or
    intermediates the host allocates. Constants without data (a hand-written graph) are stored
    with the seeded random data ``run`` uses.

    >>> import tempfile, os
    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.weights import WeightsFile
    >>> g = load_graph({"tensors": {"x": {"shape": [2]}, "w": {"shape": [2], "constant": True,
    ...     "value": [1.0, 2.0]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "m", "op": "Mul", "inputs": ["x", "w"], "outputs": ["y"]}]})
    >>> p = write_program_weights(g, os.path.join(tempfile.mkdtemp(), "weights.safetensors"))
    >>> WeightsFile(p).array("w").tolist()
    [1.0, 2.0]
    """
    from ..weights import write_weights
    write_weights(path, constants(graph, seed))
    return path
