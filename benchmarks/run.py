"""solverfuse benchmarks: one entry point, everything measured side by side in one run.

    python benchmarks/run.py            # full run (about 30-40 minutes on 2 cores)
    python benchmarks/run.py --quick    # smoke run (a minute or two), written to a temp folder

Writes ``RESULTS.md`` (machine description + tables + what each number means), ``results/*.png``
and ``results/results.json`` (raw numbers) under ``--out`` (default: this folder for a full run).

Sections (see ``issues show 6``):

1. **solve scaling** -- optimal planner on the 9 ONNX light models, BERT and GPT-2 blocks, and
   synthetic DAGs of 100 / 1,000 / 10,000 ops: status, time to proven optimum, gap;
2. **plan quality** -- traffic of every greedy baseline and of no fusion against the optimum and
   Q_min on the same graphs (the same plans as section 1);
3. **runtime** -- the memory-bound motifs at sizes far above the last-level cache: emitted C for
   the optimal, unfused and every greedy plan, ONNX Runtime and (if installed) torch.compile, all
   at the same thread count, interleaved round by round so machine noise hits every side alike;
   achieved GB/s against a STREAM triad measured in the same run; the light models end-to-end;
4. **model fidelity** -- predicted bytes vs the emitter's instrumented counters, and cachegrind's
   last-level misses for one motif vs the predicted DRAM bytes.

Every failure of one measurement is recorded as text in the results (and the table says so)
instead of stopping the run: a benchmark that dies on the last graph reports nothing.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from solverfuse import cost, zoo  # noqa: E402

LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def log(*args) -> None:
    print(time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


def guarded(fn: Callable[[], Any]) -> Any:
    """Run one measurement; on failure return ``{"error": one line}`` instead of raising."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- a benchmark records every failure and goes on
        log("  failed:", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        if "--debug" in sys.argv:
            traceback.print_exc()
        return {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}


def with_timeout(fn: Callable[[], dict], seconds: float) -> dict:
    """Run ``fn`` in a forked child; ``{"error": "timed out ..."}`` if it takes over ``seconds``.

    A greedy baseline or a solve that does not return in time must not stall the whole benchmark;
    the child is killed and the table says so.
    """
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child():
        send.send(guarded(fn))
        send.close()
    proc = ctx.Process(target=child, daemon=True)
    t = time.perf_counter()
    proc.start()
    send.close()
    out = recv.recv() if recv.poll(seconds) else {"error": f"timed out after {seconds:.0f} s (killed)"}
    if proc.is_alive():
        proc.kill()
    proc.join()
    if "error" in out:
        out.setdefault("seconds", time.perf_counter() - t)
    return out


# ------------------------------------------------------------------ graphs

def light_model(name: str):
    """An ONNX light model (shipped inside the onnx package) imported as a Graph."""
    import onnx
    from solverfuse.onnx_import import import_onnx
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    return import_onnx(path)


def planning_graphs(quick: bool) -> list[tuple[str, Callable]]:
    """(name, builder) for sections 1 and 2."""
    out: list[tuple[str, Callable]] = [(m, (lambda m=m: light_model(m))) for m in
                                       (LIGHT_MODELS[:2] if quick else LIGHT_MODELS)]
    if quick:
        out += [("bert (1 layer, h128)", lambda: zoo.bert_block(1, 128, 32, 4)),
                ("gpt2 (1 layer, h128)", lambda: zoo.gpt2_block(1, 128, 32, 4)),
                ("synthetic 100", lambda: zoo.synthetic_graph(100))]
    else:
        out += [("bert (2 layers, h768, s128)", lambda: zoo.bert_block(2, 768, 128, 12)),
                ("gpt2 (2 layers, h768, s128)", lambda: zoo.gpt2_block(2, 768, 128, 12))]
        out += [(f"synthetic {n}", (lambda n=n: zoo.synthetic_graph(n))) for n in (100, 1000, 10000)]
    return out


# ------------------------------------------------------------------ sections 1 + 2

def plan_all(graph, hw, time_limit: float, workers: int, timeout: Optional[float] = None) -> dict:
    """Every greedy baseline and the optimal plan for one graph, with wall times; each strategy
    runs in a child process killed after ``timeout`` seconds (no limit when None)."""
    def limited(fn: Callable[[], dict], seconds: Optional[float]) -> dict:
        return guarded(fn) if seconds is None else with_timeout(fn, seconds)
    from solverfuse import api, greedy
    row: dict[str, Any] = {"ops": len(graph.nodes), "q_min": cost.q_min(graph),
                           "unfused": cost.unfused_traffic(graph), "strategies": {}}
    for name in greedy.STRATEGIES:
        def one(name=name):
            t = time.perf_counter()
            p = greedy.greedy_plan(graph, hw, name)
            return {"traffic": p.traffic_bytes, "groups": len(p.groups), "seconds": time.perf_counter() - t}
        row["strategies"][name] = limited(one, timeout)

    def optimal():
        t = time.perf_counter()
        p = api.plan(graph, hw, strategy="optimal", time_limit=time_limit, workers=workers, seed=0)
        return {"traffic": p.traffic_bytes, "groups": len(p.groups), "status": p.status,
                "bound": p.bound_bytes, "gap": p.gap, "solve_seconds": p.solve_seconds,
                "seconds": time.perf_counter() - t}
    row["optimal"] = limited(optimal, None if timeout is None else timeout + 2 * time_limit)
    return row


def section_planning(quick: bool, hw_name: str, time_limit: float, workers: int) -> list[dict]:
    from solverfuse.hardware import load_hardware
    hw = load_hardware(hw_name)
    rows = []
    for name, build in planning_graphs(quick):
        log("plan", name)
        t = time.perf_counter()
        g = guarded(build)
        if isinstance(g, dict):
            rows.append({"graph": name, **g})
            continue
        load_s = time.perf_counter() - t
        row = {"graph": name, "load_seconds": load_s,
               **plan_all(g, hw, time_limit, workers, timeout=120 if quick else 240)}
        opt = row["optimal"]
        log(f"  {row['ops']} ops, optimal: {opt.get('status', opt.get('error'))} "
            f"{opt.get('seconds', 0):.1f}s")
        rows.append(row)
        del g
        gc.collect()
    return rows


# ------------------------------------------------------------------ section 3

def motif_graphs(llc_bytes: int, factor: float, hw) -> list[tuple[str, Any]]:
    """The motifs with each large tensor at ``factor`` x the last-level cache."""
    elems = int(factor * llc_bytes) // 4

    def rows_for(cols: int) -> int:
        return max(8, elems // cols // 8 * 8)
    out = []
    for name, build in zoo.MOTIFS.items():
        if name == "l1_overflow":
            g = zoo.l1_overflow(8, hw)
            cols = g.tensors["x"].shape[1]
            out.append((name, zoo.l1_overflow(rows_for(cols), hw)))
        elif name == "matmul_bias_relu":
            # k = 64: a thin MatMul whose output (and epilogue) is as large as the other motifs'
            out.append((name, zoo.matmul_bias_relu(rows_for(256), 256, k=64)))
        elif name == "residual_layernorm_gelu":
            out.append((name, build(rows_for(768), 768)))
        else:
            out.append((name, build(rows_for(1024), 1024)))
    return out


def ort_session(graph, consts: dict, threads: int):
    """ONNX Runtime session of ``graph`` with ``consts`` as its initializers (:func:`ort_model_session`)."""
    from solverfuse.emit.reference import to_onnx
    return ort_model_session(to_onnx(graph, consts).SerializeToString(), threads)


def ort_model_session(model, threads: int):
    """ONNX Runtime as every benchmark compares with: every graph optimisation, ``threads``
    intra-op threads that do not spin after a run (spinning ORT threads would take the cores from
    the C program timed next in the same process: every 2-thread C run took ~35 ms more with them
    spinning); ``model`` is a file path or serialised bytes."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), so,
                                providers=["CPUExecutionProvider"])


def torch_function(graph, consts: dict, threads: int):
    """torch.compile (Inductor's C++ backend) of the graph, interpreted node by node.

    The compiled function takes the inputs and preallocated output tensors and writes the
    results into them (``out.copy_``, which Inductor fuses into its kernel), so torch runs on
    reused buffers like the C program and ONNX Runtime with IO binding: a fresh 128 MB output per
    call would cost it first-touch page faults that the others do not pay.
    """
    import torch
    torch.set_num_threads(threads)
    const_t = {k: torch.from_numpy(v) for k, v in consts.items()}
    nodes = [(n.op, list(n.inputs), n.outputs[0], dict(n.attributes)) for n in graph.nodes]
    inputs, outputs = list(graph.inputs), list(graph.outputs)

    def f(*args):
        env = dict(const_t)
        env.update(zip(inputs, args[:len(inputs)]))
        for op, ins, out, attrs in nodes:
            env[out] = _TORCH_OPS[op]([env[t] if t else None for t in ins], attrs)
        for o, t in zip(args[len(inputs):], outputs):
            o.copy_(env[t])
    return torch.compile(f, backend="inductor", dynamic=False)


def _layernorm_torch(a, attrs):
    import torch
    return torch.nn.functional.layer_norm(a[0], a[0].shape[-1:], a[1], a[2] if len(a) > 2 else None,
                                          attrs.get("epsilon", 1e-5))


def _reduce(fn):
    return lambda a, attrs: fn(a[0], dim=tuple(attrs["axes"]), keepdim=bool(attrs.get("keepdims", 1)))


def _torch_ops() -> dict:
    try:
        import torch
    except ImportError:
        return {}
    return {"Add": lambda a, _: a[0] + a[1], "Sub": lambda a, _: a[0] - a[1], "Mul": lambda a, _: a[0] * a[1],
            "Div": lambda a, _: a[0] / a[1], "Relu": lambda a, _: torch.relu(a[0]),
            "Abs": lambda a, _: torch.abs(a[0]), "Exp": lambda a, _: torch.exp(a[0]),
            "Erf": lambda a, _: torch.erf(a[0]), "MatMul": lambda a, _: a[0] @ a[1],
            "Softmax": lambda a, at: torch.softmax(a[0], dim=at.get("axis", -1)),
            "LayerNormalization": _layernorm_torch,
            "ReduceMax": _reduce(lambda x, dim, keepdim: torch.amax(x, dim=dim, keepdim=keepdim)),
            "ReduceSum": _reduce(torch.sum), "ReduceMean": _reduce(torch.mean)}


_TORCH_OPS: dict = {}


def time_side_by_side(runners: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each runner, interleaved: round r runs every runner once, in rotated order.

    A runner returns the seconds of one *warm* execution it measured itself (see
    :func:`warm`), so allocation and first-touch page faults are not what is compared.
    """
    names = list(runners)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(float(runners[k]()))
    return times


def warm(fn: Callable[[], Any]) -> Callable[[], float]:
    """A runner that executes ``fn`` twice and returns the wall time of the second execution."""
    def run() -> float:
        fn()
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return run


def c_runner(prog, inputs: dict, consts: dict) -> Callable[[], float]:
    """The emitted program, timed inside C (``Program.time``): two runs on one set of buffers,
    the second (warm: buffers already faulted in) is the measurement."""
    return lambda: prog.time(inputs, consts, repeats=2)[1]


def ort_call(sess, inputs: dict) -> Callable[[], Any]:
    """One ONNX Runtime run with IO binding: inputs and preallocated outputs bound once (its
    steady state, the same footing as the C program's reused buffers)."""
    import numpy as np
    io = sess.io_binding()
    for i in sess.get_inputs():
        io.bind_cpu_input(i.name, np.ascontiguousarray(inputs[i.name]))
    for o in sess.get_outputs():
        io.bind_output(o.name, "cpu")
    sess.run_with_iobinding(io)            # let ORT allocate the outputs once, then rebind them
    for o, v in zip(sess.get_outputs(), io.get_outputs()):
        arr = v.numpy()
        io.bind_output(o.name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
    return lambda: sess.run_with_iobinding(io)


def ort_runner(sess, inputs: dict) -> Callable[[], float]:
    """:func:`ort_call`, timed warm."""
    return warm(ort_call(sess, inputs))


def runtime_one(name: str, graph, hw, threads: int, rounds: int, time_limit: float,
                with_greedy: bool = True, check: bool = True, triad=None) -> dict:
    """Emitted C of every plan vs ONNX Runtime (and torch.compile) on one graph."""
    import numpy as np
    from solverfuse import api, greedy
    from solverfuse.emit.build import compile_plan
    from solverfuse.emit.data import constants, random_inputs
    res: dict[str, Any] = {"graph": name, "ops": len(graph.nodes),
                           "input_bytes": sum(graph.nbytes(t) for t in graph.inputs), "variants": {}}
    plans = {"optimal": api.plan(graph, hw, strategy="optimal", time_limit=time_limit, workers=1)}
    res["optimal_status"] = plans["optimal"].status
    for s in (greedy.STRATEGIES if with_greedy else []):
        p = guarded(lambda s=s: greedy.greedy_plan(graph, hw, s))
        if not isinstance(p, dict):
            plans[s] = p
    inputs, consts = random_inputs(graph, seed=0), constants(graph, seed=0)
    feeds = [inputs[t] for t in graph.inputs]
    runners: dict[str, Callable] = {}
    programs: dict[frozenset, Any] = {}
    first: dict[frozenset, str] = {}
    for key, p in plans.items():
        part = frozenset(frozenset(g.nodes) for g in p.groups)
        res["variants"][key] = {"traffic": p.traffic_bytes, "groups": len(p.groups)}
        if part in first:               # the same partition as an earlier strategy: same program,
            res["variants"][key]["same_plan_as"] = first[part]   # timed once, reported for both
            continue
        first[part] = key
        prog = guarded(lambda p=p: compile_plan(p, graph, threads=threads))
        if isinstance(prog, dict):
            res["variants"][key].update(prog)
            continue
        programs[part] = prog
        runners[key] = c_runner(prog, inputs, consts)
    sess = guarded(lambda: ort_session(graph, consts, threads))
    if isinstance(sess, dict):
        res["variants"]["onnxruntime"] = sess
    else:
        runners["onnxruntime"] = ort_runner(sess, inputs)
        res["variants"]["onnxruntime"] = {}
    if _TORCH_OPS and all(n.op in _TORCH_OPS for n in graph.nodes):
        def build_torch():
            import torch
            fn = torch_function(graph, consts, threads)
            args = [torch.from_numpy(np.ascontiguousarray(x)) for x in feeds]
            args += [torch.empty(graph.tensors[t].shape, dtype=torch.float32) for t in graph.outputs]
            t = time.perf_counter()
            with torch.no_grad():
                fn(*args)
            return fn, args, time.perf_counter() - t
        built = guarded(build_torch)
        if isinstance(built, dict):
            res["variants"]["torch.compile"] = built
        else:
            fn, args, compile_s = built
            import torch

            def run_torch(fn=fn, args=args):
                with torch.no_grad():
                    return fn(*args)
            runners["torch.compile"] = warm(run_torch)
            res["variants"]["torch.compile"] = {"compile_seconds": compile_s}
    if check and not isinstance(sess, dict) and "optimal" in runners:
        def compare():
            want = sess.run(graph.outputs, {i.name: inputs[i.name] for i in sess.get_inputs()})
            got = programs[frozenset(frozenset(g.nodes) for g in plans["optimal"].groups)].run(inputs, consts)
            errs = [float(np.max(np.abs(got[t].astype(np.float64) - w) / (np.abs(w) + 1e-3))) if w.size else 0.0
                    for t, w in zip(graph.outputs, want)]
            return max(errs) if errs else 0.0
        res["max_rel_error_vs_ort"] = guarded(compare)
    if triad is not None:           # the bandwidth limit, measured in the same interleaved rounds
        runners["triad"] = warm(triad)
    times = time_side_by_side(runners, rounds)
    if triad is not None:
        ts = times.pop("triad")
        res["triad"] = {"seconds": ts, "median_s": statistics.median(ts),
                        "gbs": triad.nbytes / statistics.median(ts) / 1e9}
    for k, ts in times.items():
        res["variants"][k].update({"seconds": ts, "median_s": statistics.median(ts)})
    for k, v in res["variants"].items():
        if "same_plan_as" in v and "median_s" in res["variants"][v["same_plan_as"]]:
            v["median_s"] = res["variants"][v["same_plan_as"]]["median_s"]
        if "traffic" in v and "median_s" in v:
            v["gbs"] = v["traffic"] / v["median_s"] / 1e9
    res["predicted_bytes_optimal"] = plans["optimal"].traffic_bytes
    del programs, runners, inputs, consts
    gc.collect()
    return res


def section_runtime(quick: bool, threads: int, time_limit: float, factor: float) -> dict:
    from solverfuse.emit.build import BASE_FLAGS
    from solverfuse.hardware import detect
    hw = detect()
    llc = hw.l3_bytes or hw.l2_bytes
    out: dict[str, Any] = {"hardware": hw.model_dump(mode="json"), "threads": threads,
                           "llc_bytes": llc, "factor": factor}
    n = int(factor * llc) // 4
    log("triad", n, "floats per array")
    flags = BASE_FLAGS + ["-march=native"]
    out["triad"] = guarded(lambda: machine.triad(n, 6 if quick else 12, threads, flags))
    triad = guarded(lambda: machine.TriadLib(n, threads, flags))
    triad = None if isinstance(triad, dict) else triad
    rounds = 3 if quick else 9
    motifs = []
    for name, g in motif_graphs(llc, factor, hw):
        log("runtime", name, g.tensors[g.inputs[0]].shape)
        motifs.append({"graph": name, **guarded(lambda: runtime_one(name, g, hw, threads, rounds, time_limit,
                                                                     triad=triad))})
    out["motifs"] = motifs
    del triad
    gc.collect()
    models = []
    for m in (LIGHT_MODELS[:1] if quick else LIGHT_MODELS):
        log("runtime (light model)", m)
        g = guarded(lambda: light_model(m))
        if isinstance(g, dict):
            models.append({"graph": m, **g})
            continue
        models.append({"graph": m, **guarded(lambda: runtime_one(m, g, hw, threads, 3, time_limit,
                                                                  with_greedy=False))})
    out["models"] = models
    return out


# ------------------------------------------------------------------ section 4

def fidelity_one(name: str, graph, hw, time_limit: float) -> dict:
    """Predicted bytes per group vs the instrumented build's counters."""
    from solverfuse import api
    from solverfuse.emit.build import compile_plan
    from solverfuse.emit.data import constants, random_inputs
    p = api.plan(graph, hw, strategy="optimal", time_limit=time_limit, workers=1)
    prog = compile_plan(p, graph, counters=True)
    prog.run(random_inputs(graph, seed=0), constants(graph, seed=0))
    counted = prog.counters
    rows, mismatches = [], []
    for grp, c in zip(p.groups, counted):
        got = int(c["read_bytes"]) + int(c["written_bytes"])
        rows.append({"group": grp.name, "predicted": grp.traffic_bytes, "counted": got})
        if got != grp.traffic_bytes and len(mismatches) < 4:
            ops = sorted({graph.index.node[v].op for v in grp.nodes})
            mismatches.append({"group": grp.name, "ops": "+".join(ops), "predicted": grp.traffic_bytes,
                               "read": int(c["read_bytes"]), "written": int(c["written_bytes"])})
    return {"graph": name, "groups": len(rows), "predicted": p.traffic_bytes,
            "counted": sum(r["counted"] for r in rows), "mismatches": mismatches,
            "groups_equal": sum(r["predicted"] == r["counted"] for r in rows)}


def section_fidelity(quick: bool, time_limit: float, cachegrind: bool) -> dict:
    from solverfuse.hardware import detect
    hw = detect()
    cases = [(name, build(64, 256)) for name, build in zoo.MOTIFS.items() if name != "l1_overflow"]
    cases.append(("l1_overflow", zoo.l1_overflow(16, hw)))
    cases += [("bert (1 layer, h128)", zoo.bert_block(1, 128, 32, 4)),
              ("gpt2 (1 layer, h128)", zoo.gpt2_block(1, 128, 32, 4))]
    for m in (LIGHT_MODELS[:1] if quick else LIGHT_MODELS):
        g = guarded(lambda: light_model(m))
        if not isinstance(g, dict):
            cases.append((m, g))
    rows = []
    for name, g in cases:
        log("fidelity", name)
        rows.append({"graph": name, **guarded(lambda: fidelity_one(name, g, hw, time_limit))})
    out: dict[str, Any] = {"counters": rows}
    if cachegrind:
        import cachegrind_llc
        log("cachegrind")
        out["cachegrind"] = guarded(lambda: cachegrind_llc.measure(quick))
    return out


# ------------------------------------------------------------------ main

def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: benchmarks/, "
                    "or a temp folder with --quick)")
    ap.add_argument("--sections", default="1,3,4", help="comma list of 1 (=1+2), 3, 4")
    ap.add_argument("--hardware", default="nvidia-h100", help="profile for sections 1-2")
    ap.add_argument("--time-limit", type=float, default=None, help="CP-SAT seconds per graph")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers for sections 1-2")
    ap.add_argument("--threads", type=int, default=1, help="threads of C, ORT and torch")
    ap.add_argument("--factor", type=float, default=None, help="motif tensor size / LLC")
    ap.add_argument("--torch-path", default=None, help="extra sys.path entry where torch is installed")
    ap.add_argument("--no-merge", dest="merge", action="store_false",
                    help="do not carry over sections of an earlier results.json in --out")
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md and the plots from --out's results.json; measure nothing")
    args = ap.parse_args(argv)
    if args.report_only:
        import report
        out = args.out or HERE
        report.write(json.loads((out / "results" / "results.json").read_text()), out)
        return 0
    if args.torch_path:
        sys.path.append(args.torch_path)
    _TORCH_OPS.update(_torch_ops())
    out = args.out or (Path(tempfile.mkdtemp(prefix="solverfuse-bench-")) if args.quick else HERE)
    (out / "results").mkdir(parents=True, exist_ok=True)
    time_limit = args.time_limit or (5.0 if args.quick else 60.0)
    factor = args.factor or (0.25 if args.quick else 4.0)
    sections = set(args.sections.split(","))
    t0 = time.time()
    results: dict[str, Any] = {"machine": machine.describe(), "quick": args.quick,
                               "settings": {"hardware": args.hardware, "time_limit": time_limit,
                                            "workers": args.workers, "threads": args.threads,
                                            "factor": factor}}
    results["machine"]["torch"] = "installed" if _TORCH_OPS else "not installed"
    if "1" in sections:
        results["planning"] = section_planning(args.quick, args.hardware, time_limit, args.workers)
    if "3" in sections:
        results["runtime"] = guarded(lambda: section_runtime(args.quick, args.threads, time_limit, factor))
    if "4" in sections:
        results["fidelity"] = guarded(lambda: section_fidelity(args.quick, time_limit,
                                                               cachegrind=results["machine"]["valgrind"]))
    results["wall_seconds"] = time.time() - t0
    previous = out / "results" / "results.json"
    if args.merge and previous.exists():       # keep the sections this run did not redo
        old = json.loads(previous.read_text())
        for key in ("planning", "runtime", "fidelity"):
            if key not in results and key in old:
                results[key] = old[key]
                results.setdefault("carried_over", []).append(f"{key} (run of {old['machine']['date_utc']})")
        results["wall_seconds"] += old.get("wall_seconds", 0) if results.get("carried_over") else 0
    import report
    from solverfuse.files import write_atomic
    write_atomic(out / "results" / "results.json", json.dumps(results, indent=1, default=str))
    report.write(results, out)
    log("wrote", out / "RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
