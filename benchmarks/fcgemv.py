"""Before/after of one tree's emitted C against another's and ONNX Runtime, interleaved in one
process: each tree (``--before`` / ``--after``: a checkout's root, imported by a subprocess with
that ``PYTHONPATH``) renders and builds the plan's library; this process loads both libraries
and an ONNX Runtime session of the same graph and weights, and times them round-robin, so that
the load of a shared machine hits all three alike. Wall time; per case and thread count the
median and the fastest of ``--rounds`` rounds; ratios are medians over medians.

    PYTHONPATH=. python benchmarks/fcgemv.py --before /work/main --after . \\
        --threads 1,2 gemm:1x25088x4096 light:vgg19 [--cold light:densenet121] [--md benchmarks/results/fcgemv.md]

``--cold SPEC``: also the cold build of SPEC (``emit_speed.cold_builds``: empty cache, one unit and
the units ``compile_plan`` picks; wall and compiler CPU seconds), before and after alternately.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py


from bound import Lib, interleaved, medians  # noqa: E402  (benchmarks/bound.py)


def worker(spec: str, threads: int, strategy: str, cache: str) -> dict:
    """In the tree on ``PYTHONPATH``: the plan's library path and its buffer table."""
    import solverfuse  # noqa: F401 -- first: emit_speed puts this script's own tree ahead of PYTHONPATH
    from emit_speed import HW
    from emit_speed_cases import make_graph

    from solverfuse import api
    from solverfuse.emit.build import build
    from solverfuse.emit.program import buffer_table, render
    from solverfuse.greedy import greedy_plan
    g = make_graph(spec)
    plan = (api.plan(g, HW, strategy="optimal", time_limit=20, workers=1) if strategy == "optimal"
            else greedy_plan(g, HW, strategy))
    files = render(plan, g, threads=threads)
    files.pop("buffers.json", None)
    lib = build(files, threads=threads, cache_dir=cache)
    return {"lib": str(lib), "groups": len(plan.groups),
            "table": [{"role": b.role, "tensor": b.tensor, "shape": list(b.shape), "dtype": b.dtype}
                      for b in buffer_table(plan, g)]}


def _cold(tree: str, spec: str) -> list[str]:
    """The cold-build table rows of ``spec`` built by ``tree``'s emitter."""
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import emit_speed; print(emit_speed.cold_builds({spec!r}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if ln.startswith(f"| {spec}")]


def _built(tree: str, spec: str, threads: int, strategy: str, cache: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    out = subprocess.run([sys.executable, __file__, "--worker", spec, str(threads), strategy, cache],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(spec: str, threads: int, before: str, after: str, rounds: int, strategy: str, cache: str,
            clock: str = "wall") -> dict:
    """Interleaved times (seconds per run) of before, after and ONNX Runtime: wall time, or with
    ``clock`` "cpu" at 1 thread the calling thread's CPU time (all three compute on it; it leaves
    out the time other jobs of a loaded machine held the core)."""
    now = time.thread_time if clock == "cpu" and threads == 1 else time.perf_counter
    from emit_speed_cases import make_graph
    from run import ort_model_session  # here, not at the top: run.py puts its own tree first on
    # sys.path, and the --worker processes must import the tree on their PYTHONPATH

    from solverfuse.emit.data import constants, random_inputs
    from solverfuse.emit.reference import to_onnx
    g = make_graph(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    libs = {"before": Lib(_built(before, spec, threads, strategy, cache), x, cs),
            "after": Lib(_built(after, spec, threads, strategy, cache), x, cs)}
    sess = ort_model_session(to_onnx(g, cs).SerializeToString(), threads)
    times = interleaved(libs, sess, {i.name: x[i.name] for i in sess.get_inputs()}, rounds, now)
    return {"spec": spec, "threads": threads, "load": os.getloadavg()[0], **medians(times)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--worker", nargs=4, metavar=("SPEC", "THREADS", "STRATEGY", "CACHE"))
    ap.add_argument("--before", default="/work/main")
    ap.add_argument("--after", default=str(HERE.parent))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--strategy", default="optimal")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-fcgemv"))
    ap.add_argument("--json", help="append the rows here (one JSON object a line)")
    ap.add_argument("--cold", action="append", default=[], help="also the cold build of this case")
    ap.add_argument("--md", help="write the tables here (markdown)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time at 1 thread (wall at 2)")
    ap.add_argument("--title", default="Before/after vs ONNX Runtime")
    ap.add_argument("--note", action="append", default=[], help="a paragraph after the tables")
    args = ap.parse_args(argv)
    if args.worker:
        spec, threads, strategy, cache = args.worker
        print(json.dumps(worker(spec, int(threads), strategy, cache)))
        return 0
    out = [f"# {args.title}", "",
           f"Written by `benchmarks/fcgemv.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
           f"{os.cpu_count()} cores shared with other jobs; load average {os.getloadavg()[0]:.1f} at the start): "
           f"before = `{args.before}`, after = `{args.after}`, each plan ({args.strategy}) rendered and built by "
           f"its own tree, timed interleaved with ONNX Runtime in one process, {args.rounds} rounds, "
           f"{'thread CPU time at 1 thread, wall at 2' if args.clock == 'cpu' else 'wall time'}, "
           "median ms; `load` is the 1-minute load average when the row finished.", "",
           "| case | threads | load | ORT ms | before ms | after ms | before/ORT | after/ORT | after/before |",
           "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(out[-2:]), flush=True)
    for spec in args.specs:
        for t in [int(v) for v in args.threads.split(",")]:
            r = measure(spec, t, args.before, args.after, args.rounds, args.strategy, args.cache, args.clock)
            out.append(f"| {spec} | {t} | {r['load']:.1f} | {1e3 * r['ort_med']:.2f} | {1e3 * r['before_med']:.2f} "
                       f"| {1e3 * r['after_med']:.2f} | {r['before_med'] / r['ort_med']:.2f} "
                       f"| {r['after_med'] / r['ort_med']:.2f} | {r['after_med'] / r['before_med']:.2f} |")
            print(out[-1], flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    for spec in args.cold:
        out += ["", f"Cold build of {spec} (load average {os.getloadavg()[0]:.1f}), before and after alternately, twice:", "",
                "| tree | case | groups | translation units | wall s | compiler CPU s |", "|---|---|---|---|---|---|"]
        for _ in range(2):
            for name, tree in (("before", args.before), ("after", args.after)):
                out += [f"| {name} {ln}" for ln in _cold(tree, spec)]
                print(out[-1], flush=True)
    for note in args.note:
        out += ["", note]
    if args.md:
        Path(args.md).write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
