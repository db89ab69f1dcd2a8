"""The graph model (``solverfuse-graph/1``): load, validate, infer shapes, index.

A graph is tensors + nodes, ONNX operator names and semantics. :func:`load_graph` accepts a JSON
file, a JSON string/dict, an ``.onnx`` file, or a networkx DiGraph (see :func:`from_networkx`),
and returns a *checked* :class:`Graph`: every tensor shaped, names unique, no cycles, every
reference resolved. Every problem raises :class:`GraphError` with one line naming the place.

>>> g = load_graph({"format": "solverfuse-graph/1", "name": "tiny",
...     "tensors": {"x": {"shape": [4, 8], "dtype": "float32"}},
...     "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "e", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> g.tensors["y"].shape, g.nbytes("h"), g.index.consumers["h"]
([4, 8], 128, ['e'])
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Optional, Union

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictFloat, StrictInt, StrictStr,
                      ValidationError)

from . import dag, jsontext
from .dtypes import np_dtype
from .errors import GraphError
from .files import read_text
from .gcpause import paused
from .ops import DTYPE_ALIASES, DTYPE_SIZES, OPS, ShapeError, infer_node, node_flops, numel

FORMAT = "solverfuse-graph/1"
#: Largest tensor accepted (bytes); beyond this sizes are treated as absurd (overflow guards).
MAX_TENSOR_BYTES = 1 << 46


class WeightRef(BaseModel):
    """Where a constant's data lives: an array ``key`` in a weights file (see :mod:`.weights`).

    ``file`` is relative to the graph JSON's folder (or absolute); a ``.onnx`` file means the
    model the graph was imported from. ``sha256`` (of the array's bytes) refuses a stale file."""
    model_config = ConfigDict(extra="forbid")
    file: str
    key: str
    sha256: Optional[str] = None


class Tensor(BaseModel):
    """A tensor: static shape, ONNX dtype name; a constant carries its data: a small ``value``,
    a ``fill``, or ``data`` (a reference into a weights file beside the graph)."""
    model_config = ConfigDict(extra="forbid")
    shape: Optional[list[StrictInt]] = None
    dtype: StrictStr = "float32"
    constant: StrictBool = False
    value: Optional[Any] = Field(default=None, description="nested list, for small constants")
    fill: Optional[StrictFloat] = Field(default=None, description="every element equals this")
    data: Optional[WeightRef] = Field(default=None, description="reference into a weights file")


class Node(BaseModel):
    """One operator application. ``category``/``flops`` let an unknown op be planned (opaquely)."""
    model_config = ConfigDict(extra="forbid")
    name: StrictStr
    op: StrictStr
    inputs: list[StrictStr] = Field(description='tensor names; "" marks an omitted optional input')
    outputs: list[StrictStr]
    attributes: dict[str, Any] = Field(default_factory=dict)
    category: Optional[Literal["compute", "memory", "data"]] = None
    flops: Optional[StrictInt] = Field(default=None, ge=0)


@dataclass
class GraphIndex:
    """The structure of a checked graph, derived once (``graph.index``, cached) and handed to every
    stage: ops by name, producers and consumers of tensors, a topological order and each op's
    position in it, predecessors and successors, the graph outputs; computed on first use, the
    descendant/ancestor bitsets over positions (:mod:`solverfuse.dag`) and tensor byte sizes.

    >>> g = load_graph({"tensors": {"x": {"shape": [4, 8]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "e", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["h"]}]})
    >>> g.index.order, g.index.succs["r"], g.index.desc, g.index.anc, g.index.nbytes["h"]
    (['r', 'e'], ['e'], [2, 0], [0, 1], 128)
    """
    node: dict[str, Node]
    producer: dict[str, str]
    consumers: dict[str, list[str]]
    order: list[str]
    position: dict[str, int]
    preds: dict[str, list[str]]
    succs: dict[str, list[str]]
    outputs: frozenset[str]
    tensors: dict[str, Tensor] = field(default_factory=dict, repr=False)
    #: Tables later stages derive from this structure (the cost model's, ...), by their module's
    #: name: they live as long as the index, and a changed graph gets a new index. Not pickled
    #: (rebuilt on demand: cheaper than carrying them to a worker).
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)  # one step: another thread may be adding a cached table
        state.pop("memo", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.memo = {}

    @cached_property
    def desc(self) -> list[int]:
        """Descendants of the op at each topological position, as a bitset over positions
        (quadratic memory: about 12 MB for 10,000 ops; ask only when needed)."""
        pos = self.position
        return dag.descendants([[pos[w] for w in self.succs[v]] for v in self.order])

    @cached_property
    def anc(self) -> list[int]:
        """Ancestors of the op at each topological position, as a bitset over positions."""
        pos = self.position
        return dag.ancestors([[pos[u] for u in self.preds[v]] for v in self.order])

    @cached_property
    def constant_only(self) -> frozenset[str]:
        """Ops computed from constants only (every input a constant or such an op's output): a
        function of the weights, foldable before the graph runs (TVM's FoldConstant does)."""
        const = {t for t, info in self.tensors.items() if info.constant}
        out = set()
        for v in self.order:
            ins = self.node[v].inputs
            if ins and all(not t or t in const for t in ins):
                out.add(v)
                const.update(t for t in self.node[v].outputs if t)
        return frozenset(out)

    @cached_property
    def nbytes(self) -> dict[str, int]:
        """Bytes of every shaped tensor (elements x dtype size)."""
        return {k: numel(t.shape) * DTYPE_SIZES[t.dtype] for k, t in self.tensors.items() if t.shape is not None}


class Graph(BaseModel):
    """A checked compute graph; build it with :func:`load_graph` (which validates)."""
    model_config = ConfigDict(extra="forbid")
    format: Literal["solverfuse-graph/1"] = FORMAT
    name: StrictStr = "graph"
    tensors: dict[str, Tensor]
    inputs: list[StrictStr]
    outputs: list[StrictStr]
    nodes: list[Node]
    #: tensor name -> array or zero-argument loader: constant data held in memory (an import).
    _arrays: dict = PrivateAttr(default_factory=dict)
    #: folder that relative weights-file references resolve against (the graph JSON's).
    _base_dir: Optional[str] = PrivateAttr(default=None)

    @cached_property
    def index(self) -> GraphIndex:
        node = {n.name: n for n in self.nodes}
        producer = {t: n.name for n in self.nodes for t in n.outputs if t}
        consumers: dict[str, list[str]] = {t: [] for t in self.tensors}
        for n in self.nodes:
            for t in dict.fromkeys(x for x in n.inputs if x):
                consumers.setdefault(t, []).append(n.name)
        preds = {n.name: list(dict.fromkeys(producer[t] for t in n.inputs if t in producer))
                 for n in self.nodes}
        succs: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for v, ps in preds.items():
            for u in ps:
                succs[u].append(v)
        order = _topo_order(self.nodes, succs)
        return GraphIndex(node, producer, consumers, order, {n: i for i, n in enumerate(order)},
                          preds, succs, frozenset(self.outputs), self.tensors)

    def model_copy(self, *, update: Optional[dict[str, Any]] = None, deep: bool = False) -> "Graph":
        """A copy; one with changed fields derives its own :attr:`index` (the cached one would be stale)."""
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy.__dict__.pop("index", None)
        return copy

    def nbytes(self, tensor: str) -> int:
        """Bytes of a tensor (elements x dtype size)."""
        return self.index.nbytes[tensor]

    def is_source(self, tensor: str) -> bool:
        """True for graph inputs and constants: tensors that start in global memory."""
        return tensor not in self.index.producer

    def flops(self, node: str) -> int:
        """Floating-point operations of a node (op table, or the node's declared flops); computed
        once per node (planners ask for the same ops' flops at every candidate group)."""
        known = self.index.memo.get("flops")
        if known is None:
            known = self.index.memo["flops"] = {}
        hit = known.get(node)
        if hit is None:
            hit = known[node] = self._flops(node)
        return hit

    def _flops(self, node: str) -> int:
        n = self.index.node[node]
        if n.flops is not None or n.op not in OPS:
            return n.flops or 0
        ins = [(tuple(self.tensors[t].shape), self.tensors[t].dtype) for t in n.inputs if t]
        outs = [(tuple(self.tensors[t].shape), self.tensors[t].dtype) for t in n.outputs if t]
        return node_flops(n.op, n.attributes, ins, outs)

    def constant_value(self, tensor: str) -> Optional[np.ndarray]:
        """The value of a constant tensor as an array, or None if it is not a known constant."""
        t = self.tensors.get(tensor)
        if t is None or not t.constant or t.shape is None:
            return None
        if t.value is not None:
            return np.asarray(t.value, dtype=np_dtype(t.dtype)).reshape(t.shape)
        if t.fill is not None and numel(t.shape) <= (1 << 26):
            return np.full(t.shape, t.fill, dtype=np_dtype(t.dtype))
        return None

    def constant_data(self, tensor: str) -> Optional[np.ndarray]:
        """The real data of a constant: ``value``, ``fill``, held in memory, or read from its
        weights file (lazily, sha256 checked); None when the constant has no data at all.

        Raises GraphError naming the weights file when it is missing, corrupt or stale."""
        t = self.tensors.get(tensor)
        if t is None or not t.constant:
            return None
        if t.value is not None or t.fill is not None:
            if t.value is not None:
                return np.asarray(t.value, dtype=np_dtype(t.dtype)).reshape(t.shape)
            return np.full(t.shape, t.fill, dtype=np_dtype(t.dtype))
        held = self._arrays.get(tensor)
        if held is not None:
            return np.asarray(held() if callable(held) else held)
        if t.data is None:
            return None
        from .weights import onnx_initializer, open_weights
        path = self.weights_path(t.data)
        if path.suffix.lower() == ".onnx":
            try:
                return onnx_initializer(path, t.data.key)
            except GraphError as e:
                if "no initializer" not in str(e):
                    raise
                raise GraphError(f"{path}: constant {t.data.key!r} was folded at import and is not "
                                 f"stored in the model; import it again with solverfuse.load_graph, "
                                 f"or save the graph with its weights (save_graph)") from None
        return open_weights(path).array(t.data.key, t.data.sha256, t.shape, t.dtype)

    def has_data(self, tensor: str) -> bool:
        """True when a constant carries data (value, fill, weights reference or imported array)."""
        t = self.tensors[tensor]
        return t.value is not None or t.fill is not None or t.data is not None or tensor in self._arrays

    def weights_path(self, ref: WeightRef) -> Path:
        """The path a weights reference points at (relative ones resolve beside the graph)."""
        p = Path(ref.file)
        return p if p.is_absolute() else Path(self._base_dir or ".") / p

    def digest(self) -> str:
        """sha256 of the canonical JSON of the graph (what a plan refers to).

        Weight references are left out: a plan made on ``model.onnx`` holds for the
        ``graph.json`` + weights file imported from it (the weights are checked by their own sha256).

        Cached like :attr:`index` (a checked graph is not mutated): every plan build and
        validation asks for it, and serialising a large model takes most of a second. The cache
        is keyed on the field objects, so a ``model_copy(update=...)`` recomputes it (a pickled
        copy keeps it: the key is renewed on unpickling)."""
        key = self._digest_key()
        hit = self.__dict__.get("_digest_cache")
        if hit is None or hit[0] != key:
            with paused():
                text = json.dumps(self.model_dump(mode="json", exclude={"tensors": {"__all__": {"data"}}}),
                                  ensure_ascii=False)
            hit = (key, hashlib.sha256(text.encode()).hexdigest())
            self.__dict__["_digest_cache"] = hit
        return hit[1]

    def _digest_key(self) -> tuple:
        return (id(self.tensors), id(self.nodes), id(self.inputs), id(self.outputs), self.name)

    def __getstate__(self):
        state = super().__getstate__()
        hit = self.__dict__.get("_digest_cache")
        if hit is not None and hit[0] != self._digest_key():  # stale: not worth carrying
            state["__dict__"] = {k: v for k, v in state["__dict__"].items() if k != "_digest_cache"}
        return state

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        hit = self.__dict__.get("_digest_cache")
        if hit is not None:  # it was current when pickled (see __getstate__); the ids are new
            self.__dict__["_digest_cache"] = (self._digest_key(), hit[1])

    def structure_copy(self) -> "Graph":
        """A shallow copy without the constant data held in memory (an import's arrays and
        loaders): what a planning worker process needs, cheap to pickle whatever the model's size.
        Weights-file references stay, so the copy's :meth:`digest` is the same.

        >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
        ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
        >>> c = g.structure_copy()
        >>> c.digest() == g.digest(), c.nodes is g.nodes
        (True, True)
        """
        out = self.model_copy()
        out._arrays = {}
        return out

    def to_json(self, indent: Optional[int] = 1) -> str:
        with paused():
            data = self.model_dump(mode="json", exclude_defaults=False)
            if indent is None:
                return json.dumps(data, ensure_ascii=False)
            return jsontext.dumps(data, indent)  # = json.dumps(data, indent=indent, ensure_ascii=False)

    def to_networkx(self):
        """A networkx DiGraph view: node attrs ``op``/``node``; edge attrs ``tensors``/``bytes``."""
        import networkx as nx
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.name, op=n.op, node=n)
        for n in self.nodes:
            for t in n.inputs:
                p = self.index.producer.get(t)
                if p is None:
                    continue
                if g.has_edge(p, n.name):
                    if t not in g.edges[p, n.name]["tensors"]:
                        g.edges[p, n.name]["tensors"].append(t)
                        g.edges[p, n.name]["bytes"] += self.nbytes(t)
                else:
                    g.add_edge(p, n.name, tensors=[t], bytes=self.nbytes(t))
        return g


def _topo_order(nodes: list[Node], succs: dict[str, list[str]]) -> list[str]:
    """A topological order, ties broken by file order (stable, deterministic)."""
    num = {n.name: i for i, n in enumerate(nodes)}
    order = dag.topological_order([[num[w] for w in succs[n.name]] for n in nodes], key=int)
    if len(order) != len(nodes):
        done = set(order)
        stuck = next(n.name for i, n in enumerate(nodes) if i not in done)
        raise GraphError(f"cycle: node {stuck!r} depends (transitively) on its own output")
    return [nodes[i].name for i in order]


def _fmt_loc(loc) -> str:
    return ".".join(str(x) for x in loc)


@paused()
def parse_graph(data: Union[dict, str, bytes], base_dir: Union[None, str, os.PathLike] = None) -> Graph:
    """Parse JSON text or a dict into a :class:`Graph` and check it (see :func:`check_graph`).

    ``base_dir`` is where relative weights-file references resolve (default: the working folder)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise GraphError(f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
        except ValueError as e:  # e.g. an integer of more than 4300 digits
            raise GraphError(f"bad JSON: {str(e).splitlines()[0]}") from None
        except RecursionError:
            raise GraphError("JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise GraphError(f"a graph must be a JSON object, got {type(data).__name__}")
    if data.get("format", FORMAT) != FORMAT:
        raise GraphError(f"format must be {FORMAT!r}, got {data.get('format')!r}")
    try:
        g = Graph.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise GraphError(f"{_fmt_loc(err['loc'])}: {err['msg']}") from None
    except RecursionError:
        raise GraphError("graph nested too deeply") from None
    g._base_dir = None if base_dir is None else str(base_dir)
    return check_weights(check_graph(g))


def check_weights(g: Graph) -> Graph:
    """Check every weights file the graph refers to exists and lists each array with the
    graph's shape and dtype -- headers only, no data is read (planning stays lazy)."""
    from .weights import open_weights
    for name, t in g.tensors.items():
        if t.data is None or name in g._arrays:
            continue
        path = g.weights_path(t.data)
        if path.suffix.lower() == ".onnx":
            if not path.is_file():
                raise GraphError(f"{path}: no such file (weights of constant {name!r})")
            continue
        open_weights(path).entry(t.data.key, t.shape, t.dtype)
    return g


def check_graph(g: Graph) -> Graph:
    """Validate references, names, dtypes and sizes; infer every missing shape; fold Constant nodes.

    Returns a new, fully shaped graph (nodes in a topological order). Raises GraphError.
    """
    tensors = dict(g.tensors)  # a tensor changed below is copied first: ``g`` is left as it was
    nodes = list(g.nodes)
    if not nodes:
        raise GraphError("the graph has no nodes (nothing to plan)")
    if not g.outputs:
        raise GraphError("the graph has no outputs (nothing would be computed)")
    seen_nodes: set[str] = set()
    for n in nodes:
        if n.name in seen_nodes:
            raise GraphError(f"duplicate node name {n.name!r}")
        seen_nodes.add(n.name)
    for name, t in tensors.items():
        if t.dtype in DTYPE_ALIASES:
            t = tensors[name] = t.model_copy(update={"dtype": DTYPE_ALIASES[t.dtype]})
        if t.dtype not in DTYPE_SIZES:
            raise GraphError(f"tensor {name!r}: unknown dtype {t.dtype!r}")
        if t.shape is not None:
            _check_shape(name, t.shape, t.dtype)
        if t.value is not None:
            _check_value(name, t)
    # Constant nodes become constant tensors: they hold data, not work.
    kept = []
    for n in nodes:
        if n.op == "Constant":
            if len(n.outputs) != 1 or "value" not in n.attributes:
                raise GraphError(f"node {n.name!r}: Constant needs one output and a 'value' attribute")
            arr = np.asarray(n.attributes["value"])
            dt = tensors[n.outputs[0]].dtype if n.outputs[0] in tensors else \
                ("int64" if arr.dtype.kind in "iu" else "float32")
            tensors[n.outputs[0]] = Tensor(shape=list(arr.shape), dtype=dt, constant=True,
                                           value=arr.tolist())
        else:
            kept.append(n)
    nodes = kept
    produced: dict[str, str] = {}
    for n in nodes:
        if n.op not in OPS and n.category is None:
            raise GraphError(f"node {n.name!r}: unknown op {n.op!r} (declare a 'category' to plan it opaquely)")
        if not n.outputs:
            raise GraphError(f"node {n.name!r} has no outputs")
        _check_attributes(n)
        for t in n.outputs:
            if not t:
                continue
            if t in produced:
                raise GraphError(f"tensor {t!r} is produced by both {produced[t]!r} and {n.name!r}")
            if t in g.inputs or (t in tensors and tensors[t].constant):
                raise GraphError(f"node {n.name!r} writes {t!r}, which is a graph input or constant")
            produced[t] = n.name
    for name in g.inputs:
        if name not in tensors:
            raise GraphError(f"graph input {name!r} is not declared in tensors")
        if tensors[name].shape is None:
            raise GraphError(f"graph input {name!r} has no shape")
    if len(set(g.inputs)) != len(g.inputs):
        raise GraphError("duplicate name in graph inputs")
    for n in nodes:
        for t in n.inputs:
            if t and t not in produced and t not in g.inputs and not (t in tensors and tensors[t].constant):
                raise GraphError(f"node {n.name!r} reads unknown tensor {t!r} "
                                 f"(not a graph input, constant or node output)")
    for t in g.outputs:
        if t not in produced and t not in g.inputs and not (t in tensors and tensors[t].constant):
            raise GraphError(f"graph output {t!r} is not produced by any node")
    for name, t in list(tensors.items()):
        if t.constant and t.shape is None:
            if t.value is None:
                raise GraphError(f"constant {name!r} has no shape")
            tensors[name] = t.model_copy(update={"shape": list(np.asarray(t.value).shape)})
    pre = Graph(name=g.name, tensors=tensors, inputs=g.inputs, outputs=g.outputs, nodes=nodes)
    # the order alone (the checked graph derives its full index once, when first asked)
    node = {n.name: n for n in nodes}
    succs: dict[str, list[str]] = {n.name: [] for n in nodes}
    for n in nodes:
        for u in dict.fromkeys(produced[t] for t in n.inputs if t in produced):
            succs[u].append(n.name)
    order = _topo_order(nodes, succs)  # raises on a cycle
    out_nodes = []
    for name in order:
        n = node[name]
        _infer(n, tensors, pre)
        out_nodes.append(n)
    unused = [k for k in tensors if k not in produced and k not in g.inputs and not tensors[k].constant]
    if unused:
        read = {t for n in nodes for t in n.inputs}
        for k in unused:
            if k not in read and k not in g.outputs:
                del tensors[k]
    out = Graph(name=g.name, tensors=tensors, inputs=g.inputs, outputs=g.outputs, nodes=out_nodes)
    out._arrays, out._base_dir = dict(g._arrays), g._base_dir
    return out


#: Attribute types the op table's shape rules and the emitter rely on (ONNX semantics): a flag is
#: the integer 0 or 1 (``"yes"`` and ``true`` are not), an axis an integer, a list of ints a list.
FLAG_ATTRS = frozenset({"transA", "transB", "keepdims", "noop_with_empty_axes", "ceil_mode",
                        "count_include_pad", "select_last_index", "exclusive", "reverse"})
INT_ATTRS = frozenset({"axis", "group", "largest", "sorted", "batch_dims", "storage_order"})
INT_LIST_ATTRS = frozenset({"perm", "axes", "kernel_shape", "strides", "pads", "dilations", "split",
                            "output_padding", "output_shape"})
FLOAT_ATTRS = frozenset({"alpha", "beta", "epsilon", "momentum", "gamma", "bias", "lambd"})


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_attributes(n: Node) -> None:
    """Type-check the attributes the op table reads; GraphError names the node and attribute."""
    for key, v in n.attributes.items():
        if key in FLAG_ATTRS and not (_is_int(v) and v in (0, 1)):
            bad = "must be 0 or 1"
        elif key in INT_ATTRS and not _is_int(v):
            bad = "must be an integer"
        elif key in INT_LIST_ATTRS and not (isinstance(v, list) and all(_is_int(x) for x in v)):
            bad = "must be a list of integers"
        elif key in FLOAT_ATTRS and (isinstance(v, bool) or not isinstance(v, (int, float))
                                     or v != v or v in (float("inf"), float("-inf"))):
            bad = "must be a finite number"
        else:
            continue
        raise GraphError(f"node {n.name!r} ({n.op}): attribute {key!r} {bad}, got {v!r}"[:300])


def _check_value(name: str, t: Tensor) -> None:
    """A constant's ``value`` must be numbers of its dtype, as many as its shape holds."""
    try:
        arr = np.asarray(t.value, dtype=np_dtype(t.dtype))
    except (ValueError, TypeError, OverflowError) as e:
        raise GraphError(f"constant {name!r}: value is not an array of {t.dtype} ({str(e)[:100]})") from None
    if t.shape is not None and arr.size != numel(t.shape):
        raise GraphError(f"constant {name!r}: value has {arr.size} elements, shape {t.shape} needs {numel(t.shape)}")


def _check_shape(name: str, shape: list[int], dtype: str) -> None:
    if any((not isinstance(d, int)) or d < 0 for d in shape):
        raise GraphError(f"tensor {name!r}: bad shape {shape} (dimensions must be integers >= 0)")
    total = DTYPE_SIZES[dtype]
    for d in shape:
        total *= d
        if total > MAX_TENSOR_BYTES:
            raise GraphError(f"tensor {name!r}: shape {shape} is absurdly large (over {MAX_TENSOR_BYTES} bytes)")


def _infer(n: Node, tensors: dict[str, Tensor], pre: Graph) -> None:
    """Infer the outputs of one node in place; check declared shapes agree."""
    ins = []
    for t in n.inputs:
        if t:
            ins.append((tuple(tensors[t].shape), tensors[t].dtype))
        else:
            ins.append((None, None))
    declared = [tensors.get(t) for t in n.outputs]
    if n.op not in OPS:
        for t, d in zip(n.outputs, declared):
            if t and (d is None or d.shape is None):
                raise GraphError(f"node {n.name!r} (unknown op {n.op!r}): output {t!r} needs a declared shape")
        return
    # Only integer constants steer shapes (Reshape/Slice/Expand/axes inputs); float weights never do,
    # and materialising a filled weight just to ignore it would cost seconds on real models.
    values = [pre.constant_value(t) if t and tensors[t].dtype in ("int64", "int32") else None
              for t in n.inputs]
    real_ins = [i for i in ins if i[0] is not None]
    if not real_ins and n.op != "ConstantOfShape":
        raise GraphError(f"node {n.name!r} ({n.op}) has no inputs")
    try:
        attrs = dict(n.attributes)
        if n.op == "Split":
            attrs["_num_outputs"] = len(n.outputs)
        if n.op == "ConstantOfShape" and declared and declared[0] is not None:
            attrs["_dtype"] = declared[0].dtype
        outs = infer_node(n.op, attrs, ins, values)
    except ShapeError as e:
        raise GraphError(f"node {n.name!r} ({n.op}): {e}") from None
    except (KeyError, IndexError, TypeError) as e:
        raise GraphError(f"node {n.name!r} ({n.op}): missing or malformed input/attribute ({e})") from None
    for t, d, (shape, dtype) in zip(n.outputs, declared, outs):
        if not t:
            continue
        if d is not None and d.shape is not None and tuple(d.shape) != tuple(shape):
            raise GraphError(f"node {n.name!r} ({n.op}): output {t!r} declared shape {d.shape} "
                             f"but inputs give {list(shape)}")
        _check_shape(t, list(shape), dtype)
        tensors[t] = Tensor(shape=list(shape), dtype=dtype if d is None else DTYPE_ALIASES.get(d.dtype, d.dtype))


def from_networkx(dg, name: str = "graph") -> Graph:
    """Build a checked Graph from a networkx DiGraph.

    Each graph node is an op with attributes ``op`` (ONNX name), ``shape`` (its single output's
    shape), optional ``dtype`` (default float32), ``attributes`` and ``category``. A node with no
    predecessors and ``op == "Input"`` is a graph input; ``op == "Constant"`` a constant.
    Nodes without successors are graph outputs. Edge order follows ``dg.predecessors``; an edge
    attribute ``index`` fixes the input position.

    >>> import networkx as nx
    >>> d = nx.DiGraph()
    >>> d.add_node("x", op="Input", shape=[8]); d.add_node("r", op="Relu"); d.add_edge("x", "r")
    >>> from_networkx(d).tensors["r"].shape
    [8]
    """
    tensors: dict[str, dict] = {}
    nodes, inputs = [], []
    for v, data in dg.nodes(data=True):
        op = data.get("op")
        if op is None:
            raise GraphError(f"networkx node {v!r} has no 'op' attribute")
        if op in ("Input", "Constant"):
            tensors[str(v)] = {"shape": data.get("shape"), "dtype": data.get("dtype", "float32"),
                               "constant": op == "Constant", "fill": data.get("fill")}
            if op == "Input":
                inputs.append(str(v))
            continue
        preds = sorted(dg.predecessors(v), key=lambda u: dg.edges[u, v].get("index", 0))
        t = {"dtype": data.get("dtype", "float32")}
        if data.get("shape") is not None:
            t["shape"] = data["shape"]
        tensors[str(v)] = t
        nodes.append({"name": str(v), "op": op, "inputs": [str(u) for u in preds],
                      "outputs": [str(v)], "attributes": data.get("attributes", {}),
                      **({"category": data["category"]} if data.get("category") else {})})
    outputs = [str(v) for v in dg.nodes if dg.out_degree(v) == 0 and dg.nodes[v].get("op") not in ("Input", "Constant")]
    return parse_graph({"format": FORMAT, "name": name, "tensors": tensors, "inputs": inputs,
                        "outputs": outputs, "nodes": nodes})


def load_graph(source: Union[str, os.PathLike, dict, Graph, Any]) -> Graph:
    """Load a graph in the graph format: a ``.json`` path, JSON text, a dict, a Graph or a networkx
    DiGraph. ONNX models and ``.pt2`` files go through :func:`solverfuse.sources.load_graph` (also
    ``solverfuse.load_graph``), which dispatches to their readers."""
    if isinstance(source, Graph):
        return source
    if isinstance(source, dict):
        return parse_graph(source)
    if hasattr(source, "nodes") and hasattr(source, "edges") and hasattr(source, "predecessors"):
        return from_networkx(source)
    if not isinstance(source, (str, os.PathLike)):
        raise GraphError(f"a graph must be a path, a dict, a Graph or a networkx DiGraph, "
                         f"got {type(source).__name__}")
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return parse_graph(source)  # JSON text, not a path
    path = Path(source)
    try:
        exists = path.exists()
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, ...
        raise GraphError(f"{str(path)[:200]}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if not exists:
        raise GraphError(f"{path}: no such file")
    if path.is_dir():
        raise GraphError(f"{path}: is a directory, not a graph file")
    if path.suffix.lower() in (".onnx", ".pt2"):
        raise GraphError(f"{path}: not a graph JSON file; load models with solverfuse.load_graph "
                         f"(solverfuse.sources), which reads .onnx and .pt2")
    text = read_text(path, GraphError)
    try:
        return parse_graph(text, base_dir=path.parent)
    except GraphError as e:
        msg = str(e)
        raise GraphError(msg if msg.startswith("weights file") else f"{path}: {msg}") from None


def save_graph(graph: Graph, path: Union[str, os.PathLike]) -> Optional[Path]:
    """Write the graph JSON and, when constants carry data beyond ``value``/``fill``, one weights
    file beside it (``<stem>.safetensors``, each array referenced with its sha256).

    Both files appear or neither does (the data is read and checked before anything is written).
    Returns the weights file's path, or None when there is nothing to store.

    >>> import tempfile, os
    >>> g = load_graph({"tensors": {"x": {"shape": [2]}, "w": {"shape": [2], "constant": True,
    ...     "value": [1.0, 2.0]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "m", "op": "Mul", "inputs": ["x", "w"], "outputs": ["y"]}]})
    >>> save_graph(g, os.path.join(tempfile.mkdtemp(), "g.json")) is None
    True
    """
    from .files import write_atomic
    from .weights import SUFFIX, write_weights
    path = Path(path)
    stored = [n for n, t in graph.tensors.items()
              if t.constant and t.value is None and t.fill is None and graph.has_data(n)]
    tensors = dict(graph.tensors)
    wpath = None
    if stored:
        arrays = {n: graph.constant_data(n) for n in stored}
        wpath = path.with_name(path.stem + SUFFIX)
        shas = write_weights(wpath, arrays)
        for n in stored:
            tensors[n] = tensors[n].model_copy(update={"data": WeightRef(file=wpath.name, key=n, sha256=shas[n])})
    try:
        write_atomic(path, graph.model_copy(update={"tensors": tensors}).to_json() + "\n")
    except BaseException:
        if wpath is not None and wpath.exists():
            wpath.unlink()
        raise
    return wpath


def graph_schema() -> dict:
    """The published JSON Schema of ``solverfuse-graph/1``."""
    schema = Graph.model_json_schema()
    schema["$id"] = "https://solverfuse.dev/schema/solverfuse-graph-1.json"
    schema["title"] = "solverfuse-graph/1"
    return schema
