"""Before/after of the kernels around the convolutions (Concat, BatchNorm, ReLU, the 1x1-plane
classifier conv) per kernel and per model, two trees side by side in one process.

Per kernel: each tree (``--before`` / ``--after``: a checkout's root, imported by a subprocess
with that ``PYTHONPATH``) plans the model, renders its C with every kernel call timed
(:func:`zoo_profile.instrument`) and builds it; this process loads both libraries and runs them
alternately, ``--rounds`` times each, keeping each kernel's fastest time (the calling thread's
CPU time at 1 thread, wall time at 2). Kernels are matched by their group's nodes; a kernel whose
group differs between the trees is listed as such. The kernels listed are those whose ops contain
one of ``--ops`` (default Concat and the classifier, ``Conv`` with a 1x1 output plane), plus
the sum over the whole model.

Per model (``--models``): before, after and ONNX Runtime interleaved, median ms (:func:`models`).

    PYTHONPATH=. python benchmarks/concat_speed.py --before /tmp/before --after . \\
        --threads 1,2 light:densenet121 light:inception_v2 [--models] [--md benchmarks/results/concat.md]
"""
from __future__ import annotations

import argparse
import ctypes
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

import numpy as np  # noqa: E402

from bound import Lib, interleaved, medians  # noqa: E402  (benchmarks/bound.py)


def worker(spec: str, threads: int, cache: str, probe: bool = True) -> dict:
    """In the tree on ``PYTHONPATH``: the library of the optimal plan (``probe``: instrumented),
    its buffer table and its groups (nodes, ops, output shape)."""
    import solverfuse  # first: emit_speed puts this script's own tree ahead of PYTHONPATH
    from emit_speed import HW
    from emit_speed_cases import make_graph
    from zoo_profile import instrument

    from solverfuse import api
    from solverfuse.emit.build import build
    from solverfuse.emit.program import buffer_table, render
    g = make_graph(spec)
    plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
    files = render(plan, g, threads=threads)
    files.pop("buffers.json", None)
    if probe:
        files["model.c"] = instrument(files["model.c"], "CLOCK_THREAD_CPUTIME_ID" if threads == 1 else "CLOCK_MONOTONIC")
    lib = build(files, threads=threads, cache_dir=cache)
    groups = [{"nodes": list(grp.nodes), "ops": "+".join(dict.fromkeys(g.index.node[v].op for v in grp.nodes)),
               "shape": list(g.tensors[grp.writes[0]].shape) if grp.writes else []} for grp in plan.groups]
    return {"lib": str(lib), "groups": groups, "solverfuse": solverfuse.__file__,
            "table": [{"role": b.role, "tensor": b.tensor, "shape": list(b.shape), "dtype": b.dtype}
                      for b in buffer_table(plan, g)]}


def _built(tree: str, spec: str, threads: int, cache: str, probe: bool = True) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    out = subprocess.run([sys.executable, __file__, "--worker", spec, str(threads), cache, str(int(probe))],
                         env=env, check=True, capture_output=True, text=True).stdout
    built = json.loads(out.strip().splitlines()[-1])
    if not built["solverfuse"].startswith(str(Path(tree).resolve()) + "/"):
        raise RuntimeError(f"the worker for {tree} imported {built['solverfuse']}")
    return built


def kernels(spec: str, threads: int, before: str, after: str, rounds: int, cache: str) -> dict:
    """Fastest seconds per kernel of each tree's plan, the two run alternately."""
    from emit_speed_cases import make_graph

    from solverfuse.emit.data import constants, random_inputs
    g = make_graph(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    built = {name: _built(tree, spec, threads, cache) for name, tree in (("before", before), ("after", after))}
    libs = {name: Lib(b, x, cs) for name, b in built.items()}
    best = {name: [float("inf")] * len(b["groups"]) for name, b in built.items()}
    for lib in libs.values():
        lib()  # packs the weights
    for _ in range(rounds):
        for name, lib in libs.items():
            secs = (ctypes.c_double * (len(built[name]["groups"]) + 1)).in_dll(lib.lib, "sf_group_secs")
            for i in range(len(built[name]["groups"])):
                secs[i] = 0.0
            lib()
            best[name] = [min(b, secs[i]) for i, b in enumerate(best[name])]
    for a, b in zip(libs["before"].outputs, libs["after"].outputs):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-3)
    return {"spec": spec, "threads": threads, "load": os.getloadavg()[0], "built": built, "best": best}


def models(spec: str, threads: int, before: str, after: str, rounds: int, cache: str) -> dict:
    """Median seconds per run of before, after and ONNX Runtime, interleaved (the calling
    thread's CPU time at 1 thread: all three compute on it; wall time at 2)."""
    from emit_speed_cases import make_graph
    from run import ort_model_session  # here, not at the top: run.py puts its own tree first on
    # sys.path, and the --worker processes must import the tree on their PYTHONPATH

    from solverfuse.emit.data import constants, random_inputs
    from solverfuse.emit.reference import to_onnx
    now = time.thread_time if threads == 1 else time.perf_counter
    g = make_graph(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    libs = {name: Lib(_built(tree, spec, threads, cache, probe=False), x, cs)
            for name, tree in (("before", before), ("after", after))}
    sess = ort_model_session(to_onnx(g, cs).SerializeToString(), threads)
    times = interleaved(libs, sess, {i.name: x[i.name] for i in sess.get_inputs()}, rounds, now)
    return {"spec": spec, "threads": threads, "load": os.getloadavg()[0], **medians(times)}


def kernel_rows(r: dict, ops: list[str]) -> list[str]:
    """Table rows of the kernels whose ops contain one of ``ops`` (or are a conv with a 1x1 plane)."""
    bg, ag = r["built"]["before"]["groups"], r["built"]["after"]["groups"]
    after = {tuple(grp["nodes"]): i for i, grp in enumerate(ag)}
    rows, tb, ta = [], 0.0, 0.0
    for i, grp in enumerate(bg):
        j = after.get(tuple(grp["nodes"]))
        classifier = grp["ops"] == "Conv" and grp["shape"][2:] == [1, 1]
        if not (classifier or any(op in grp["ops"].split("+") for op in ops)):
            continue
        b = r["best"]["before"][i]
        if j is None:
            rows.append(f"| {r['spec']} | {r['threads']} | {i} | {grp['ops']} | {grp['shape']} | {1e3 * b:.3f} | (other group) | |")
            continue
        a = r["best"]["after"][j]
        tb, ta = tb + b, ta + a
        rows.append(f"| {r['spec']} | {r['threads']} | {i} | {grp['ops']} | {grp['shape']} | {1e3 * b:.3f} | {1e3 * a:.3f} | {a / b:.2f} |")
    sb, sa = sum(r["best"]["before"]), sum(r["best"]["after"])
    rows.append(f"| {r['spec']} | {r['threads']} | listed | {len(rows)} kernels | | {1e3 * tb:.3f} | {1e3 * ta:.3f} | {ta / tb if tb else 1:.2f} |")
    rows.append(f"| {r['spec']} | {r['threads']} | all | {len(bg)}/{len(ag)} kernels | load {r['load']:.1f} | {1e3 * sb:.3f} | {1e3 * sa:.3f} | {sa / sb:.2f} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--worker", nargs=4, metavar=("SPEC", "THREADS", "CACHE", "PROBE"))
    ap.add_argument("--before", required=False)
    ap.add_argument("--after", default=str(HERE.parent))
    ap.add_argument("--threads", default="1,2", help="thread counts of the whole-model rows")
    ap.add_argument("--kernel-threads", default="1", help="thread counts of the per-kernel rows (at 2 threads the "
                    "team's kernels are timed barrier to barrier by thread 0: only the model rows are meaningful)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--ops", default="Concat", help="comma-separated: list the kernels with one of these ops")
    ap.add_argument("--models", action="store_true", help="also whole-model times with ONNX Runtime (bound.interleaved)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-concat"))
    ap.add_argument("--md", help="write the tables here (markdown)")
    ap.add_argument("--note", action="append", default=[], help="a paragraph after the tables")
    args = ap.parse_args(argv)
    if args.worker:
        spec, threads, cache, probe = args.worker
        print(json.dumps(worker(spec, int(threads), cache, probe == "1")))
        return 0
    threads = [int(v) for v in args.threads.split(",")]
    out = ["# Kernels around the convolutions: before/after per kernel and per model", "",
           f"Written by `benchmarks/concat_speed.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
           f"{os.cpu_count()} cores shared with other jobs; load average {os.getloadavg()[0]:.1f} at the start): "
           f"before = `{args.before}`, after = `{args.after}`, each tree plans (optimal), renders and builds its own "
           f"C; {args.rounds} rounds run alternately in one process; per kernel the fastest round (thread CPU time at "
           "1 thread, wall at 2).", "",
           "| case | threads | group | ops | out shape | before ms | after ms | after/before |",
           "|---|---|---|---|---|---|---|---|"]
    print("\n".join(out[-2:]), flush=True)
    for spec in args.specs:
        for t in [int(v) for v in args.kernel_threads.split(",") if v]:
            for ln in kernel_rows(kernels(spec, t, args.before, args.after, args.rounds, args.cache), args.ops.split(",")):
                out.append(ln)
                print(ln, flush=True)
    if args.models:
        out += ["", "Whole models, before / after / ONNX Runtime interleaved (thread CPU time at 1 thread, wall at "
                "2; median ms of the rounds):", "",
                "| case | threads | load | ORT ms | before ms | after ms | before/ORT | after/ORT | after/before |",
                "|---|---|---|---|---|---|---|---|---|"]
        for spec in args.specs:
            for t in threads:
                r = models(spec, t, args.before, args.after, args.rounds, args.cache)
                out.append(f"| {spec} | {t} | {r['load']:.1f} | {1e3 * r['ort_med']:.2f} | {1e3 * r['before_med']:.2f} "
                           f"| {1e3 * r['after_med']:.2f} | {r['before_med'] / r['ort_med']:.2f} "
                           f"| {r['after_med'] / r['ort_med']:.2f} | {r['after_med'] / r['before_med']:.2f} |")
                print(out[-1], flush=True)
    for note in args.note:
        out += ["", note]
    if args.md:
        Path(args.md).write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
