"""The library behind ``solverfuse run``: graph -> plan -> compiled C -> outputs, checked and timed.

One call, :func:`run_graph`, does the whole pipeline and returns a JSON-ready result dict; the CLI
only parses arguments and prints it. Inputs come from an ``.npz`` file (:func:`load_inputs`,
which names the offending tensor on any mismatch) or are seeded random
(:func:`solverfuse.emit.data.random_inputs`); outputs go to an ``.npz`` keyed by tensor name,
written atomically (:func:`save_outputs`).

Constants run with their real data (values, fills, the weights file or the ONNX model's
initializers); only constants without any data get seeded random data, and the result counts them
(``random_constants``). A light ONNX model's placeholder weights (one repeated value each) run as
they are unless ``seeded_weights`` asks for seeded data in their place (:mod:`solverfuse.light`).
``check`` compares every graph output with ONNX Runtime run on the ONNX
model file itself when the graph was given as one (``engine="auto"``), else with ONNX's reference
evaluator (small graphs) or ONNX Runtime on the graph converted back to ONNX: an output passes
when ``|got - want| <= atol + rtol * |want|`` elementwise (NumPy's
``isclose``; integer and bool outputs must be equal). Reported errors: ``max_abs_error`` and
``max_rel_error`` = the largest ``|got - want| / max(|want|, atol)``.

>>> import numpy as np
>>> compare_outputs({"y": np.array([1.0, 2.0])}, {"y": np.array([1.0, 2.001])}, rtol=1e-3, atol=1e-6)["ok"]
True
"""
from __future__ import annotations

import os
import statistics
import zipfile
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from .errors import EmitError, GraphError, ResourceError, SolverfuseError
from .files import atomic_path
from .graph import Graph
from .sources import load_graph
from .hardware import load_hardware

#: Graphs with at most this many flops are checked with ONNX's (slow, pure NumPy) reference
#: evaluator under ``engine="auto"``; larger ones with ONNX Runtime.
REFERENCE_MAX_FLOPS = 20_000_000
RTOL, ATOL = 1e-3, 1e-4


def load_inputs(path: Union[str, os.PathLike], graph: Graph) -> dict[str, np.ndarray]:
    """Read graph inputs from an ``.npz`` (keys = tensor names); EmitError names any problem.

    Unknown keys are an error too (a typo would otherwise silently run on other data).
    """
    from .emit.reference import check_inputs
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise EmitError(f"{path}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise EmitError(f"{path}: not a readable .npz file ({e})") from None
    if not isinstance(data, dict):
        raise EmitError(f"{path}: not an .npz archive (a single .npy array?)")
    wanted = {x for x in graph.inputs if not graph.tensors[x].constant}
    extra = sorted(set(data) - wanted)
    if extra:
        raise EmitError(f"{path}: {extra[0]!r} is not a graph input "
                        f"(inputs: {', '.join(repr(x) for x in graph.inputs)})")
    try:
        return check_inputs(graph, data)
    except EmitError as e:
        raise EmitError(f"{path}: {e}") from None


def save_outputs(path: Union[str, os.PathLike], arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays to an ``.npz`` keyed by tensor name, atomically (no half-written file)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})


def memory_available() -> int:
    """Bytes of memory this process could still get (``MemAvailable``, else physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def check_memory(graph: Graph, available: Optional[int] = None) -> int:
    """Refuse (ResourceError, with the numbers) a run whose tensors -- every input, constant,
    intermediate and output held at once, as the compiled program does -- exceed the memory
    available; else return the bytes needed. Checked before anything is allocated.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [1024, 1024]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    >>> check_memory(g, available=1 << 30)
    8388608
    >>> check_memory(g, available=1 << 20)
    Traceback (most recent call last):
    ...
    solverfuse.errors.ResourceError: running 'graph' needs 8.00 MiB for its tensors, but only 1.00 MiB of memory is available
    """
    from .summary import human_bytes
    need = sum(graph.nbytes(t) for t in graph.tensors)
    have = memory_available() if available is None else available
    if need > have:
        raise ResourceError(f"running {graph.name!r} needs {human_bytes(need)} for its tensors, "
                            f"but only {human_bytes(have)} of memory is available")
    return need


def compare_outputs(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], *,
            rtol: float = RTOL, atol: float = ATOL) -> dict[str, Any]:
    """Max abs/rel error per output and overall, and whether every output is within tolerance.

    >>> r = compare_outputs({"y": np.array([0.0, 10.0])}, {"y": np.array([0.0, 10.5])}, rtol=1e-3, atol=1e-6)
    >>> r["ok"], r["max_abs_error"], round(r["max_rel_error"], 4)
    (False, 0.5, 0.0476)
    >>> compare_outputs({"y": np.array([np.inf, 1.0])}, {"y": np.array([np.inf, 1.0])})["outputs"]["y"]["why"]
    'the reference itself has 1 non-finite values (inf/nan) of 2: the data overflows'

    An output whose reference is flat -- at most 1% of its elements (none, for a model run with
    uniform fill weights; one, for a saturated softmax) away from its median beyond the tolerance --
    is flagged (``reference_flat``: that median and the count): matching it says little about the
    kernels.

    >>> compare_outputs({"y": np.zeros(4)}, {"y": np.zeros(4)})["outputs"]["y"]["reference_flat"]
    {'value': 0.0, 'informative': 0}
    >>> "reference_flat" in compare_outputs({"y": np.arange(4.0)}, {"y": np.arange(4.0)})["outputs"]["y"]
    False
    """
    per = {}
    for name, ref in want.items():
        a = np.asarray(got[name])
        b = np.asarray(ref)
        if a.shape != b.shape:
            per[name] = {"ok": False, "max_abs_error": float("inf"), "max_rel_error": float("inf"),
                         "why": f"shape {list(a.shape)} != reference {list(b.shape)}"}
            continue
        if b.dtype.kind in "biu":
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            ok = bool(np.array_equal(a, b))
            rel = diff / np.maximum(np.abs(b.astype(np.float64)), 1.0)
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            ok = bool(np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True).all())
            # errors only where the reference is finite: inf - inf says nothing about a kernel
            finite = np.isfinite(b64)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.where(finite, np.abs(a64 - b64), 0.0)
            diff = np.where(np.isnan(diff), np.inf, diff)
            rel = diff / np.maximum(np.abs(np.where(finite, b64, 1.0)), atol)
        per[name] = {"ok": ok, "max_abs_error": float(diff.max(initial=0.0)),
                     "max_rel_error": float(rel.max(initial=0.0))}
        bad_ref = int(b.size - np.count_nonzero(np.isfinite(b))) if b.dtype.kind == "f" else 0
        if bad_ref:
            per[name]["reference_nonfinite"] = bad_ref
            per[name]["why"] = (f"the reference itself has {bad_ref} non-finite values (inf/nan) of "
                                f"{b.size}: the data overflows{'' if ok else '; they differ from ours'}")
        elif b.size > 1 and b.dtype.kind in "biuf":
            flat = _flat(b, rtol, atol)
            if flat is not None:
                per[name]["reference_flat"] = flat
    return {"ok": all(p["ok"] for p in per.values()),
            "max_abs_error": max((p["max_abs_error"] for p in per.values()), default=0.0),
            "max_rel_error": max((p["max_rel_error"] for p in per.values()), default=0.0),
            "rtol": rtol, "atol": atol, "outputs": per}


def _flat(ref: np.ndarray, rtol: float, atol: float) -> Optional[dict]:
    """``{"value": median, "informative": count}`` when at most 1% of ``ref``'s elements are away
    from its median beyond the tolerance (integers and booleans: differ from its commonest value),
    else None."""
    if ref.dtype.kind == "f":
        med = np.median(ref)
    else:
        values, counts = np.unique(ref, return_counts=True)
        med = values[np.argmax(counts)]
    away = ~np.isclose(ref, med, rtol=rtol, atol=atol) if ref.dtype.kind == "f" else ref != med
    count = int(np.count_nonzero(away))
    return {"value": med.item(), "informative": count} if count <= ref.size // 100 else None


def choose_engine(graph: Graph, engine: str = "auto") -> str:
    """``reference`` for small graphs (ONNX's own evaluator), ``onnxruntime`` otherwise."""
    if engine != "auto":
        return engine
    flops = sum(graph.flops(n.name) for n in graph.nodes)
    return "reference" if flops <= REFERENCE_MAX_FLOPS else "onnxruntime"


def get_plan(graph: Graph, hardware: str = "nvidia-h100", *, plan_path=None,
             strategy: str = "optimal", time_limit: float = 10.0, workers: int = 1, seed: int = 0):
    """The plan to execute: read from ``plan_path`` (validated against ``graph``) or made now."""
    if plan_path is not None:
        from .plans import load_plan
        return load_plan(plan_path, graph)
    from .api import plan
    return plan(graph, hardware, strategy=strategy, time_limit=time_limit, workers=workers, seed=seed)


def run_graph(graph: Union[Graph, str, os.PathLike, dict], *, plan_path=None, strategy: str = "optimal",
              hardware: str = "nvidia-h100", inputs: Union[None, str, os.PathLike, Mapping] = None,
              output: Union[None, str, os.PathLike] = None, seed: int = 0, threads: int = 1,
              check: bool = False, engine: str = "auto", rtol: float = RTOL, atol: float = ATOL,
              time: bool = False, repeats: int = 10, time_limit: float = 10.0, workers: int = 1,
              cache_dir=None, seeded_weights: bool = False) -> dict[str, Any]:
    """Plan (or load a plan), compile, run, optionally check and time; a JSON-ready result.

    Keys: ``graph``, ``strategy``, ``status``, ``groups``, ``traffic_bytes``, ``outputs``
    (name -> shape), ``output_file``, ``light_weights`` (an ONNX model's placeholder weights,
    :func:`solverfuse.light.light_weights`), ``seeded_weights``; with ``check``: ``check`` (see
    :func:`compare`) plus ``engine``; with ``time``: ``median_seconds``, ``times``. The arrays are
    in ``result["arrays"]`` (dropped by the CLI before printing). ``seeded_weights``: a light ONNX
    model's placeholders get :func:`solverfuse.light.seeded_weights` data (from ``seed``), in our
    run and in the check's reference alike.
    """
    from .emit.build import compile_plan
    from .emit.data import constants, random_inputs, without_data
    model_file = Path(graph) if isinstance(graph, (str, os.PathLike)) and \
        str(graph).lower().endswith(".onnx") else None
    if seeded_weights and model_file is None:
        raise GraphError(f"{graph}: seeded weights replace a light ONNX model's placeholders; "
                         f"this is not an ONNX model file")
    g = load_graph(graph)
    reference_model: Any = model_file
    light: list[str] = []
    if model_file is not None:
        import onnx
        from .light import light_weights, seeded_weights as seeded
        model = onnx.load(str(model_file), load_external_data=False)
        light = light_weights(model)
        if seeded_weights:
            if not light:
                raise GraphError(f"{model_file}: no light placeholder weights (ConstantOfShape) to seed: "
                                 f"the model carries its own weights")
            from .emit.data import random_tensor
            from .onnx_import import import_onnx
            # in the domain each weight's consumers need (fan-in scaled, positive variances), as
            # far as the imported graph still has the placeholder (not folded into another constant)
            domain = {t: random_tensor(g, t, seed, scale=0.1) for t in light
                      if t in g.tensors and g.tensors[t].constant}
            reference_model = seeded(model, seed, arrays=domain)
            g = import_onnx(reference_model, name=g.name)
    hw = load_hardware(hardware)
    plan = get_plan(g, hw, plan_path=plan_path, strategy=strategy, time_limit=time_limit,
                    workers=workers, seed=seed)
    check_memory(g)
    if isinstance(inputs, (str, os.PathLike)):
        feeds = load_inputs(inputs, g)
    elif inputs is None:
        feeds = random_inputs(g, seed)
    else:
        from .emit.reference import check_inputs
        feeds = check_inputs(g, inputs)
    consts = constants(g, seed)
    random_consts = len(without_data(g))
    program = compile_plan(plan, g, threads=threads, cache_dir=cache_dir)
    outs = program.run(feeds, consts)
    arrays = {name: np.asarray(outs[name]) for name in g.outputs}
    result: dict[str, Any] = {
        "graph": g.name, "strategy": plan.strategy, "status": plan.status, "hardware": plan.hardware,
        "groups": len(plan.groups), "traffic_bytes": plan.traffic_bytes, "threads": threads,
        "outputs": {k: list(v.shape) for k, v in arrays.items()}, "random_constants": random_consts,
        "light_weights": len(light), "seeded_weights": len(light) if seeded_weights else 0}
    if check:
        from .emit.reference import reference_outputs
        eng = "onnxruntime-model" if model_file is not None and engine in ("auto", "onnxruntime") \
            else choose_engine(g, engine)
        try:
            want = model_outputs(reference_model, feeds, g.outputs) if eng == "onnxruntime-model" else \
                reference_outputs(g, feeds, consts, eng)
        except SolverfuseError:
            raise
        except Exception as e:  # noqa: BLE001 -- the reference engine itself failed (ORT, evaluator)
            raise EmitError(f"the {eng} reference could not run this graph: "
                            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        result["engine"] = eng
        result["check"] = compare_outputs(arrays, want, rtol=rtol, atol=atol)
    if output is not None and (not check or result["check"]["ok"]):  # a failed check writes nothing
        save_outputs(output, arrays)
        result["output_file"] = str(output)
    if time:
        times = [float(t) for t in program.time(feeds, consts, repeats=repeats)]
        result["median_seconds"] = statistics.median(times)
        result["times"] = times
    result["arrays"] = arrays
    return result


def model_outputs(model: Union[str, os.PathLike, Any], feeds: Mapping[str, np.ndarray],
                  names: list[str]) -> dict[str, np.ndarray]:
    """Run the ONNX model file itself (its own weights; or an ``onnx.ModelProto``) with ONNX
    Runtime: the reference for a graph imported from it. Graph optimisations off and one thread,
    so it is faithful and quiet."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    source = str(model) if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in sess.get_inputs()}
    outs = sess.run(names, {k: v for k, v in feeds.items() if k in wanted})
    return dict(zip(names, outs))


def format_result(result: Mapping[str, Any]) -> str:
    """A few readable lines for the terminal."""
    lines = [f"{result['graph']}: {result['strategy']} plan ({result['status']}), "
             f"{result['groups']} kernels, {result['traffic_bytes']} bytes planned traffic"]
    for name, shape in result["outputs"].items():
        lines.append(f"  output {name!r} {shape}")
    if result.get("seeded_weights"):
        lines.append(f"note: the model's {result['seeded_weights']} light placeholder weights ran with seeded "
                     f"random data{' (the check reference too)' if 'check' in result else ''}")
    elif result.get("light_weights"):
        lines.append(f"note: {result['light_weights']} weights of this model are light placeholders (one repeated "
                     f"value each); --seeded-weights gives them seeded random data")
    if result.get("random_constants"):
        lines.append(f"note: {result['random_constants']} constants have no data in the graph and ran "
                     f"with seeded random data")
    if "check" in result:
        c = result["check"]
        lines.append(f"check vs {result['engine']}: {'OK' if c['ok'] else 'MISMATCH'} "
                     f"max abs error {c['max_abs_error']:.3g}, max rel error {c['max_rel_error']:.3g} "
                     f"(rtol {c['rtol']:g}, atol {c['atol']:g})")
        for name, p in c["outputs"].items():
            if not p["ok"] or p.get("reference_nonfinite"):
                lines.append(f"  {name!r}: {p.get('why') or 'max abs error %.3g' % p['max_abs_error']}")
            flat = p.get("reference_flat")
            if flat and flat["informative"] == 0:
                lines.append(f"  note: every element of the reference {name!r} is {flat['value']:.6g} within the "
                             f"tolerance, so this match says little about the kernels (uniform fill weights?)")
            elif flat:
                lines.append(f"  note: only {flat['informative']} element(s) of the reference {name!r} are away from "
                             f"{flat['value']:.6g} beyond the tolerance, so this match says little about the kernels "
                             f"(a saturated softmax?)")
    if "median_seconds" in result:
        lines.append(f"time: median {result['median_seconds'] * 1e3:.3f} ms over {len(result['times'])} runs")
    if "output_file" in result:
        lines.append(f"wrote {result['output_file']}")
    return "\n".join(lines)
