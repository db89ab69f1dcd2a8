"""The ``solverfuse`` command line: parse arguments, call the library, print. Nothing else.

Every failure is one line on stderr: a library error (:class:`SolverfuseError`) exits 2, a bug
in solverfuse (:class:`InternalError` or any unexpected exception) exits 70 with a hint to report
it, SIGINT / SIGTERM exit 130 / 143.
"""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_early(signum, frame):  # pragma: no cover - console entry
    """SIGINT / SIGTERM before :func:`main` takes over (imports): nothing to clean up yet."""
    os.write(2, b"error: interrupted\n")
    os._exit(128 + signum)


if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "solverfuse":
    # the console entry: signal handling first, before typer, pydantic and numpy load (a second or
    # so on a busy machine, when a Ctrl-C used to print a KeyboardInterrupt traceback)
    for _s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_s, _interrupted_early)

import functools  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import time as _time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional  # noqa: E402

import typer  # noqa: E402

from .errors import Interrupted, SolverfuseError  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Optimal operator-fusion planning with CP-SAT.")
hardware_app = typer.Typer(no_args_is_help=True, help="Hardware profiles.")
app.add_typer(hardware_app, name="hardware")


def fail(message: str, code: int = 2):
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code)


#: When the console entry started (the time limit counts from there); None under a test runner.
ENTRY: list = [None]
#: Exit code of a bug in solverfuse (BSD sysexits' EX_SOFTWARE).
EXIT_BUG = 70
REPORT = "this is a bug in solverfuse; please report it with the command and input that caused it"


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def handles_errors(fn):
    """One line and an exit code for every way a command can fail (no traceback, ever):
    user errors 2, bugs 70, SIGINT 130, SIGTERM 143 (both raise :class:`Interrupted`)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        old = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old[s] = signal.signal(s, _raise_interrupted)
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except SolverfuseError as e:
            fail(str(e))
        except (Interrupted, KeyboardInterrupt) as e:
            signum = getattr(e, "signum", signal.SIGINT)
            fail(f"interrupted{'; ' + e.detail if getattr(e, 'detail', None) else ''}", 128 + signum)
        except RecursionError:
            fail("input too deeply nested")
        except MemoryError:
            fail("out of memory")
        except OSError as e:  # the library names paths in its errors; this is the safety net
            fail(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")
        except Exception as e:  # noqa: BLE001 -- InternalError and anything unexpected is a bug
            first = (str(e).splitlines() or [""])[0][:300]
            fail(f"internal error: {type(e).__name__}: {first} ({REPORT})", EXIT_BUG)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    return wrapper


def load_input_graph(path: Path):
    """A graph from JSON/ONNX, or from a saved ExportedProgram (``.pt2``, needs solverfuse[torch])."""
    if path.suffix.lower() == ".pt2":
        _torch_or_fail(path)
    from .sources import load_graph
    return load_graph(path)


def _torch_or_fail(path: Path):
    try:
        from . import torch as sf_torch
    except ImportError as e:
        fail(f"{path}: reading a .pt2 file needs torch (pip install 'solverfuse[torch]'): {e}")
    return sf_torch


def emit_json(obj) -> None:
    typer.echo(json.dumps(obj, indent=1, ensure_ascii=False))


@app.command()
@handles_errors
def schema(what: str = typer.Argument("graph", help="graph or plan")):
    """Print the JSON Schema of the graph (or plan) format."""
    from .graph import graph_schema
    from .plans import Plan
    if what == "graph":
        emit_json(graph_schema())
    elif what == "plan":
        emit_json(Plan.model_json_schema())
    else:
        fail(f"unknown schema {what!r} (graph or plan)")


@hardware_app.command("list")
@handles_errors
def hardware_list():
    """List the bundled hardware profiles."""
    from .hardware import list_hardware, load_hardware
    for name in list_hardware():
        typer.echo(f"{name:18s} {load_hardware(name).description}")


@hardware_app.command("show")
@handles_errors
def hardware_show(name: str = typer.Argument(..., help="profile name or JSON file")):
    """Print one hardware profile as JSON (with its sources)."""
    from .hardware import load_hardware
    emit_json(load_hardware(name).model_dump(mode="json"))


@hardware_app.command("detect")
@handles_errors
def hardware_detect():
    """Print a CPU profile of this host (cores and caches from the OS)."""
    from .hardware import detect
    emit_json(detect().model_dump(mode="json"))


@app.command("inspect")
@handles_errors
def inspect_cmd(graph: Path = typer.Argument(..., help="graph JSON or ONNX model"),
                as_json: bool = typer.Option(False, "--json", help="machine-readable output")):
    """Ops by category, tensor bytes, Q_min, unfused traffic, the largest tensors."""
    from .sources import load_graph
    from .summary import format_inspect, inspect_graph
    s = inspect_graph(load_graph(graph))
    emit_json(s) if as_json else typer.echo(format_inspect(s))


@app.command("import")
@handles_errors
def import_cmd(model: Path = typer.Argument(..., help="ONNX model"),
               output: Optional[Path] = typer.Option(None, "-o", "--output", help="graph JSON to write (default: stdout)"),
               dim: list[str] = typer.Option([], "--dim", help="NAME=VALUE for a symbolic input dimension (repeatable)")):
    """Convert an ONNX model to solverfuse-graph/1 JSON.

    With -o, every constant's data goes with it: small ones inline, the rest into one weights file
    beside the JSON (<stem>.safetensors, referenced with sha256). On stdout, large constants refer
    to the model file itself."""
    from .graph import save_graph
    from .onnx_import import import_onnx
    dims = {}
    for d in dim:
        name, _, value = d.rpartition("=")
        if not name or not value.strip().isdigit():
            fail(f"--dim {d!r}: expected NAME=VALUE with an integer VALUE")
        dims[name] = int(value)
    stats: dict = {}
    graph = import_onnx(model, dims=dims, stats=stats)
    if output:
        weights = save_graph(graph, output)
        typer.echo(f"wrote {output}" + (f" and {weights}" if weights else "") +
                   f" ({stats['folded_nodes']} constant nodes folded)", err=True)
    else:
        typer.echo(graph.to_json())


@app.command("run")
@handles_errors
def run_cmd(graph: Path = typer.Argument(..., help="graph JSON or ONNX model"),
            plan: Optional[Path] = typer.Option(None, "--plan", help="plan JSON to execute (default: plan now)"),
            strategy: str = typer.Option("optimal", "--strategy", help="optimal or a greedy baseline name"),
            hardware: str = typer.Option("nvidia-h100", "--hardware", help="hardware profile (for planning)"),
            inputs: Optional[Path] = typer.Option(None, "--inputs", help=".npz keyed by input name (default: seeded random)"),
            output: Optional[Path] = typer.Option(None, "-o", "--output", help=".npz to write the outputs to"),
            threads: int = typer.Option(1, "--threads", min=1, help="OpenMP threads"),
            check: bool = typer.Option(False, "--check", help="compare with ONNX's reference / ONNX Runtime"),
            engine: str = typer.Option("auto", "--engine", help="reference engine: auto, reference, onnxruntime"),
            rtol: float = typer.Option(1e-3, "--rtol", help="relative tolerance of --check"),
            atol: float = typer.Option(1e-4, "--atol", help="absolute tolerance of --check"),
            time: bool = typer.Option(False, "--time", help="median wall time of the kernels over repeats"),
            repeats: int = typer.Option(10, "--repeats", min=1, help="runs for --time"),
            seed: int = typer.Option(0, "--seed", help="seed of random inputs/constants and the solver"),
            time_limit: float = typer.Option(10.0, "--time-limit", help="solver time limit (seconds)"),
            seeded_weights: bool = typer.Option(False, "--seeded-weights", help="a light ONNX model's placeholder weights (ConstantOfShape) get seeded random data, in the run and the check alike"),
            as_json: bool = typer.Option(False, "--json", help="print one JSON object")):
    """Compile a plan to C, run it, write outputs; optionally check numerics and time it.

    Exit code 1 when --check finds an output beyond tolerance."""
    from .arguments import check_seed, check_time_limit
    from .runner import format_result, run_graph
    check_time_limit(time_limit)
    check_seed(seed)
    if plan is not None and strategy != "optimal":
        fail("give either --plan or --strategy, not both")
    if engine not in ("auto", "reference", "onnxruntime"):
        fail(f"unknown engine {engine!r} (auto, reference, onnxruntime)")
    result = run_graph(graph, plan_path=plan, strategy=strategy, hardware=hardware, inputs=inputs,
                       output=output, seed=seed, threads=threads, check=check, engine=engine,
                       rtol=rtol, atol=atol, time=time, repeats=repeats, time_limit=time_limit,
                       seeded_weights=seeded_weights)
    result.pop("arrays", None)
    emit_json(result) if as_json else typer.echo(format_result(result))
    if check and not result["check"]["ok"]:
        raise typer.Exit(1)


@app.command("compare")
@handles_errors
def compare_cmd(graph: Path = typer.Argument(..., help="graph JSON, ONNX model or saved ExportedProgram (.pt2)"),
                hardware: str = typer.Option("nvidia-h100", "--hardware", help="hardware profile"),
                time_limit: float = typer.Option(10.0, "--time-limit", help="solver time limit (seconds)"),
                workers: int = typer.Option(2, "--workers", help="CP-SAT workers"),
                seed: int = typer.Option(0, "--seed", help="solver seed"),
                as_json: bool = typer.Option(False, "--json", help='print {"rows": [...]}'),
                markdown: bool = typer.Option(False, "--markdown", help="print a Markdown table"),
                plans_dir: Optional[Path] = typer.Option(None, "--plans", help="also write every plan JSON into this folder"),
                recompute: bool = typer.Option(False, "--recompute", help="also solve for the optimum with recomputation (a 'covering' row) and check recomputing rows against it"),
                objective: str = typer.Option("traffic", "--objective", help="traffic, or time: also the time objective's rows (optimal-time; covering-time with --recompute)")):
    """Optimal vs every greedy baseline vs no fusion: one table."""
    from .compare import format_markdown, format_table, plan_all, real_plans, rows_for, rows_json
    from .sources import load_graph
    from .hardware import load_hardware
    from .arguments import check_seed, check_time_limit, check_workers
    from .plans import save_plan
    check_time_limit(time_limit)
    check_seed(seed)
    check_workers(workers)
    if as_json and markdown:
        fail("give either --json or --markdown, not both")
    if objective not in ("traffic", "time"):
        fail(f"unknown objective {objective!r} (traffic or time)")
    if plans_dir is not None and not plans_dir.is_dir():
        fail(f"{plans_dir}: no such folder")
    hw = load_hardware(hardware)
    extra = {}
    if graph.suffix.lower() == ".pt2":  # the real torch.compile plan, beside its reproduction
        real = _torch_or_fail(graph).real_plan_from_pt2(graph, hw)
        g, extra["inductor-real"] = real.graph, (real.plan, real.seconds)
    else:
        g = load_graph(graph)
        extra = real_plans(graph, g, hw)
    plans = plan_all(g, hw, time_limit=time_limit, workers=workers, seed=seed, extra=extra, covering=recompute,
                     objective=objective)
    rows = rows_for(g, hw, plans)
    if plans_dir is not None:
        for name, (p, _) in plans.items():
            save_plan(p, plans_dir / f"{graph.stem}.{name}.plan.json")
    title = f"{g.name} on {hw.name}"
    if as_json:
        typer.echo(rows_json(rows, g, hw.name))
    else:
        typer.echo(format_markdown(rows, title) if markdown else format_table(rows, title))


@app.command("show")
@handles_errors
def show_cmd(plans: list[Path] = typer.Argument(..., help="one plan JSON, or two to draw side by side"),
             output: Path = typer.Option(..., "-o", "--output", help="picture to write: .svg, .png or .pdf")):
    """Draw a plan (or two side by side): groups as coloured clusters, cut tensors with bytes."""
    from .draw import draw_plans
    from .plans import load_plan
    if len(plans) > 2:
        fail(f"show draws one or two plans, got {len(plans)}")
    draw_plans([load_plan(p) for p in plans], output)
    typer.echo(f"wrote {output}", err=True)


@app.command("explain")
@handles_errors
def explain_cmd(plan: Path = typer.Argument(..., help="plan JSON"),
                as_json: bool = typer.Option(False, "--json", help="machine-readable output")):
    """Per group: which limit is tight; per cut edge: what fusing it would save, or why it is illegal."""
    from .explain import explain, format_explain
    from .plans import load_plan
    e = explain(load_plan(plan))
    emit_json(e) if as_json else typer.echo(format_explain(e))


@app.command("emit")
@handles_errors
def emit_cmd(plan: Path = typer.Argument(..., help="plan JSON"),
             output: Path = typer.Option(..., "-o", "--output", help="directory for model.c, model.h, buffers.json"),
             threads: int = typer.Option(1, "--threads", help="OpenMP threads (1: plain C, no OpenMP)"),
             counters: bool = typer.Option(False, "--counters", help="instrumented build counting global bytes")):
    """Write a plan's C: one function per group, a driver running them in plan order, and the
    constants' data in weights.safetensors (layout in solverfuse.emit.data.write_program_weights)."""
    from .emit.data import write_program_weights
    from .emit.program import render, write_source
    from .plans import load_plan
    p = load_plan(plan)
    files = render(p, threads=threads, counters=counters)
    output.mkdir(parents=True, exist_ok=True)
    weights = write_program_weights(p.graph, output / "weights.safetensors")
    for path in write_source(files, output):
        typer.echo(f"wrote {path}", err=True)
    typer.echo(f"wrote {weights}", err=True)


@app.command("plan")
@handles_errors
def plan_cmd(graph: Path = typer.Argument(..., help="graph JSON, ONNX model or saved ExportedProgram (.pt2)"),
             hardware: str = typer.Option("nvidia-h100", "--hardware", help="profile name or JSON file"),
             time_limit: float = typer.Option(10.0, "--time-limit", help="limit of the whole command (seconds)"),
             workers: int = typer.Option(2, "--workers", help="CP-SAT workers"),
             seed: int = typer.Option(0, "--seed", help="solver seed (fixed seed + workers = same plan)"),
             output: Optional[Path] = typer.Option(None, "-o", "--output", help="plan JSON to write"),
             keep_partial: bool = typer.Option(False, "--keep-partial", help="on SIGINT/SIGTERM, write the best plan so far to -o"),
             recompute: bool = typer.Option(False, "--recompute", help="allow recomputation and looped reductions (solverfuse-plan/2)"),
             objective: str = typer.Option("traffic", "--objective", help="traffic or time (least predicted run time; with --recompute over plans that recompute)"),
             jobs: int = typer.Option(1, "--jobs", help="solve independent parts in this many processes (0: one per core)"),
             ray: Optional[str] = typer.Option(None, "--ray", help="solve parts on a Ray cluster: auto or ADDRESS (solverfuse[ray])"),
             as_json: bool = typer.Option(False, "--json", help="print the plan JSON instead of the summary")):
    """Optimal fusion plan (CP-SAT): groups, traffic vs unfused vs Q_min, status, bound, gap.

    --time-limit bounds the whole command (loading, hints, solve, validation) plus about a
    second; a solver crash or hang still gives the best plan found (status feasible, with why)."""
    start = ENTRY[0] if ENTRY[0] is not None else _time.monotonic()
    ENTRY[0] = None
    from .arguments import check_seed, check_time_limit, check_workers
    check_time_limit(time_limit)
    check_seed(seed)
    check_workers(workers)
    from .distribute import check_jobs, check_ray
    jobs, ray = check_jobs(jobs), check_ray(ray)
    if objective not in ("traffic", "time"):
        fail(f"unknown objective {objective!r} (traffic or time)")
    from .worker import prestart
    child = prestart(graph)  # its imports (OR-Tools: a second or more) overlap the graph's loading
    try:
        _plan_with(child, graph, hardware, time_limit, workers, seed, output, keep_partial, recompute,
                   objective, as_json, start, jobs, ray)
    finally:
        child.close()


def _plan_with(child, graph, hardware, time_limit, workers, seed, output, keep_partial, recompute, objective,
               as_json, start, jobs=1, ray=None):
    from .hardware import load_hardware
    from .plans import build_plan, plan_to_json, save_plan
    from .summary import format_plan, human_bytes
    from .worker import file_stamp, solve_in_worker
    g = load_input_graph(graph)
    stamp = file_stamp(graph)
    hw = load_hardware(hardware)
    live = sys.stderr.isatty()

    def progress(seconds: float, traffic: int, bound: int) -> None:
        gap = (traffic - bound) / traffic if traffic else 0.0
        sys.stderr.write(f"\r  {seconds:6.2f} s  traffic {human_bytes(traffic):>11s}  "
                         f"bound {human_bytes(bound):>11s}  gap {100 * gap:6.2f}%\x1b[K")
        sys.stderr.flush()

    try:
        report = solve_in_worker(g, hw, time_limit=time_limit, workers=workers, seed=seed,
                                 progress=progress if live else None, started=start, covering=recompute,
                                 objective=objective, worker=child, source_stamp=stamp, jobs=jobs, ray=ray)
    except Interrupted as e:
        groups = getattr(e, "groups", None)
        if groups is None:
            e.detail = "no plan yet, nothing written"
        elif keep_partial and output:
            signal.signal(e.signum, signal.SIG_IGN)  # a second signal must not cut the write short
            p = build_plan(g, hw, groups, strategy="optimal", status="feasible",
                           solve_seconds=_time.monotonic() - start)
            p.reason = "interrupted; the best plan found so far"
            save_plan(p, output)
            e.detail = f"best plan so far ({p.traffic_bytes} bytes of traffic) written to {output}"
        else:
            e.detail = "best plan so far not written" + ("" if not output else " (--keep-partial writes it)")
        raise
    finally:
        if live:
            sys.stderr.write("\r\x1b[K")
    plan = report.plan
    if output:
        save_plan(plan, output)
    if as_json:
        typer.echo(plan_to_json(plan))
    else:
        typer.echo(format_plan(plan))
        if report.parts:
            typer.echo(f"{report.parts} independent parts (largest {report.largest_part} ops), "
                       f"{report.variables} variables")
        if plan.reason:
            typer.echo(f"note: {plan.reason}")
    if output:
        typer.echo(f"wrote {output}", err=True)


@app.command("sweep")
@handles_errors
def sweep_cmd(graphs: list[Path] = typer.Argument(..., help="graph JSON or ONNX files"),
              hardware: list[str] = typer.Option(["nvidia-h100"], "--hardware", help="profile name or JSON file (repeatable)"),
              strategy: str = typer.Option("optimal", "--strategy", help="optimal, covering or a greedy baseline name"),
              time_limit: float = typer.Option(10.0, "--time-limit", help="limit of each plan (seconds)"),
              workers: int = typer.Option(1, "--workers", help="CP-SAT workers of each plan"),
              seed: int = typer.Option(0, "--seed", help="solver seed"),
              jobs: int = typer.Option(0, "--jobs", help="plans at once on this machine (0: one per core)"),
              ray: Optional[str] = typer.Option(None, "--ray", help="run the plans on a Ray cluster: auto or ADDRESS"),
              output: Optional[Path] = typer.Option(None, "-o", "--output", help="folder to write every plan JSON into")):
    """Plan every graph on every hardware profile (models x hardware), in parallel: one line each."""
    from .api import sweep
    from .plans import save_plan
    from .summary import human_bytes
    if output is not None and not output.is_dir():
        fail(f"{output}: no such folder")
    plans = sweep(graphs, hardware, strategy=strategy, time_limit=time_limit, workers=workers, seed=seed,
                  jobs=jobs, ray=ray)
    names: list[Path] = []
    typer.echo(f"{'graph':24s} {'hardware':18s} {'status':9s} {'traffic':>11s} {'bound':>11s}  note")
    for k, p in enumerate(plans):
        path = graphs[k // len(hardware)]
        bound = human_bytes(p.bound_bytes) if p.bound_bytes is not None else "-"
        typer.echo(f"{path.stem[:24]:24s} {p.hardware[:18]:18s} {p.status:9s} {human_bytes(p.traffic_bytes):>11s} "
                   f"{bound:>11s}  {p.reason or ''}".rstrip())
        if output is not None:
            name = output / f"{path.stem}.{p.hardware}.plan.json"
            names.append(name if name not in names else output / f"{path.stem}.{p.hardware}.{k}.plan.json")
    written: list[Path] = []
    try:  # all the plans or none: a write that fails takes the earlier ones back
        for p, name in zip(plans, names):
            save_plan(p, name)
            written.append(name)
    except BaseException:
        for name in written:
            name.unlink(missing_ok=True)
        raise
    for name in written:
        typer.echo(f"wrote {name}", err=True)


def _exit(code: int) -> None:
    """Flush and leave at once: tearing down a 20k-op graph's objects takes seconds at exit, and
    every child was already joined (no atexit work is left)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _exit_on_signal(signum, frame):  # pragma: no cover - console entry
    os._exit(128 + signum)


def _quiet_exit_on_signal() -> None:
    """While the one line of an interruption is written: a second signal only exits."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _exit_on_signal)


def main(argv: Optional[list] = None) -> None:  # pragma: no cover - console entry
    """The console entry: usage errors are one line too (``error: ...``, exit 2), and a signal
    before a command starts is one line as well."""
    ENTRY[0] = _time.monotonic()
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, _raise_interrupted)
        code = app(args=argv, standalone_mode=False)
    except (Interrupted, KeyboardInterrupt) as e:
        _quiet_exit_on_signal()
        typer.echo("error: interrupted", err=True)
        code = 128 + getattr(e, "signum", signal.SIGINT)
    except typer.Abort:
        _quiet_exit_on_signal()
        typer.echo("error: interrupted", err=True)
        code = 130
    except typer.Exit as e:
        code = e.exit_code
    except typer.TyperException as e:  # a usage error: unknown option, bad value, ...
        msg = e.format_message() if hasattr(e, "format_message") else str(e)
        typer.echo(f"error: {' '.join(msg.split())}", err=True)
        code = getattr(e, "exit_code", 2)
    _exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
