"""Where a model's time goes in the emitted C: time per kernel (group) of one plan, side by side
with ONNX Runtime's per-node profile of the same graph at the same thread count.

The plan's C is rendered as usual, then every kernel call of ``sf_run`` is wrapped in
``clock_gettime`` (the thread's CPU time at 1 thread, else wall time; a benchmark-only edit of the rendered text: the library is otherwise the one
``compile_plan`` builds), run ``--rounds`` times, and the fastest time of each kernel kept. The
table lists the kernels by time, with their ops, output shape and GFLOP/s (2 x multiply-adds).
With threads, a kernel of the team is timed by each thread from its leaving the barrier before to
its arrival at the barrier after; the kernel's time in a round is its slowest thread's arrival,
and the last column is each thread's fastest arrival: two equal arrivals, a work share split
evenly; one near zero, a thread that got none of the kernel's tiles (on a loaded machine, usually
a thread still waking from the barrier before while the other took every tile of a dynamic
schedule).

    PYTHONPATH=. python benchmarks/zoo_profile.py light:squeezenet --threads 2 [--top 25] [--ort]
    PYTHONPATH=. python benchmarks/zoo_profile.py model:mobilenet_v2_dynamo --rounds 50  (tests/data/models)

With ``--classes N`` it profiles both runtimes at 1 and at N threads instead and sums the times by
kind of kernel (:func:`op_class`: Conv, Gemm, LRN, ...): which kinds give each runtime its speed-up
from 1 to N threads. A model whose whole-run speed-up is below ONNX Runtime's (the zoo's thread
scaling table) can so be told apart: kernels of ours that gain less than ORT's same kind (room in
our threaded code), or ORT's speed-up coming from a kind where its 1-thread kernel is slow and
ours is not (its LRN on AlexNet) or from a matrix-vector product streaming weights that our one
thread already reads at the memory's rate (a second thread cannot add bandwidth that is not there).

    PYTHONPATH=. python benchmarks/zoo_profile.py light:bvlc_alexnet --classes 2 --rounds 20
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import functools
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))


import machine  # noqa: E402  (benchmarks/machine.py)
from bound import bind_buffers  # noqa: E402
from emit_speed import HW  # noqa: E402
from gemm_speed import graph_for  # noqa: E402  (its specs: make_graph's, pools, the transformer parts)
from report import write_results  # noqa: E402

from solverfuse import api, cost  # noqa: E402
from solverfuse.emit.build import build  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.emit.program import buffer_table, render  # noqa: E402
from solverfuse.greedy import greedy_plan  # noqa: E402

PROBE = r"""
double sf_group_secs[SF_NUM_GROUPS + 1];
double sf_arrive_secs[SF_NUM_GROUPS + 1][8];  /* per thread of a team: kernel start -> its return */
double sf_at[SF_NUM_GROUPS + 1][8][2];  /* per thread of a team: the clock at its kernel start, at its return */
int sf_cpu_at[SF_NUM_GROUPS + 1][8];  /* per thread of a team: the CPU it returned from its kernel on */
static double sf_now(void)
{
    struct timespec t;
    clock_gettime(SF_PROBE_CLOCK, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static SF_UNUSED int sf_cpu(void)
{
#if defined(_OPENMP) && defined(__linux__) && defined(SYS_futex) && defined(SYS_getcpu)
    unsigned c = 0;  /* the prelude declares syscall() where it has the futex */
    return syscall(SYS_getcpu, &c, (void *)0, (void *)0) ? -1 : (int)c;
#else
    return -1;
#endif
}
"""


def instrument(model_c: str, clock: str = "CLOCK_MONOTONIC") -> str:
    """Wrap each kernel call of ``sf_run`` in a timer (``clock``) adding to ``sf_group_secs[group]``."""
    out, shared = [], None
    for ln in model_c.splitlines():
        c = re.match(r"\s*/\* group (\d+): the same code as k\d+ \*/$", ln)
        m = re.match(r"    if \(\(rc = ((k(\d+))\(.*\))\)\) return rc;$", ln)
        # a kernel of the run's team (emit.team): thread 0 times it from the barrier before it (the
        # region's start) to the barrier after it: its own call may start late (descheduled)
        t = re.match(r"(\s*)if \((sf_sync\(\(r = (?:me \? 0 : )?(k(\d+))\(.*\)\) \|\| SF_ERROR\(\)\))\) break;$", ln)
        if m:
            gi = shared if shared is not None else m.group(3)
            ln = (f"    {{ double t0 = sf_now(); rc = {m.group(1)}; sf_group_secs[{gi}] += sf_now() - t0; "
                  "if (rc) return rc; }")
        elif t:
            gi = shared if shared is not None else t.group(4)
            # each thread's arrival at the barrier after the kernel (from its return of the
            # barrier before): how evenly the kernel's work is shared
            call = t.group(2)[len("sf_sync((r = "):-len(") || SF_ERROR())")]
            ln = (f"{t.group(1)}{{ r = {call}; const double sf_ta = sf_now(); "
                  f"sf_arrive_secs[{gi}][SF_TID() & 7] += sf_ta - sf_ts; "
                  f"sf_at[{gi}][SF_TID() & 7][0] = sf_ts; sf_at[{gi}][SF_TID() & 7][1] = sf_ta; "
                  f"sf_cpu_at[{gi}][SF_TID() & 7] = sf_cpu(); "
                  "const int stop = sf_sync(r || SF_ERROR()); sf_ts = sf_now(); "
                  f"if (SF_TID() == 0) {{ const double t1 = sf_now(); sf_group_secs[{gi}] += t1 - sf_t0; sf_t0 = t1; }} "
                  "if (stop) break; }")
        elif ln == "        int r = 0;":
            ln += " double sf_t0 = sf_now(); double sf_ts = sf_t0;"
        shared = c.group(1) if c else None
        out.append(ln)
    text = "\n".join(out)
    probe = f"#define SF_PROBE_CLOCK {clock}\n" + PROBE
    return text.replace("int sf_run(void *const *B)", probe + "int sf_run(void *const *B)", 1)


@functools.lru_cache(maxsize=None)
def planned(spec: str, strategy: str):
    """The graph of ``spec`` and its plan by ``strategy``, made once per process: ``--classes``
    merges the same groups across its passes, and a solve stopped by its time limit could return
    another partition the next time."""
    g = graph_for(spec)
    return g, (api.plan(g, HW, strategy="optimal", time_limit=20, workers=1) if strategy == "optimal"
               else greedy_plan(g, HW, strategy))


def profile(spec: str, threads: int, rounds: int, strategy: str, cache: str) -> list[dict]:
    """Per group: fastest seconds over ``rounds`` runs, ops, output shape, flops."""
    g, plan = planned(spec, strategy)
    files = render(plan, g, threads=threads)
    files.pop("buffers.json")
    # at 1 thread the calling thread's CPU time: it leaves out the time other jobs held the core
    files["model.c"] = instrument(files["model.c"], "CLOCK_THREAD_CPUTIME_ID" if threads == 1 else "CLOCK_MONOTONIC")
    lib = ctypes.CDLL(str(build(files, threads=threads, cache_dir=cache)))
    table = buffer_table(plan, g)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    arrays, ptrs = bind_buffers([dataclasses.asdict(b) for b in table], x, cs)
    lib.sf_init()
    n = len(plan.groups)
    secs = (ctypes.c_double * (n + 1)).in_dll(lib, "sf_group_secs")
    arrive = ((ctypes.c_double * 8) * (n + 1)).in_dll(lib, "sf_arrive_secs")
    best = [float("inf")] * n
    first = [[float("inf")] * threads for _ in range(n)]  # per thread: fastest arrival
    lib.sf_run(ptrs)  # packs the weights
    for _ in range(rounds):
        for i in range(n):
            secs[i] = 0.0
            for j in range(8):
                arrive[i][j] = 0.0
        if lib.sf_run(ptrs):
            raise RuntimeError("run failed")
        # a team kernel: its slowest thread's arrival (each timed from its own barrier exit), not
        # thread 0's barrier-to-barrier time, which a vCPU taken away between a barrier and its
        # clock read moves to the next kernel (a 67 MB matrix-vector product read as 8 us)
        span = [max(arrive[i][j] for j in range(threads)) if threads > 1 and any(arrive[i][j] for j in range(threads))
                else secs[i] for i in range(n)]
        best = [min(b, span[i]) for i, b in enumerate(best)]
        first = [[min(f[j], arrive[i][j]) for j in range(threads)] for i, f in enumerate(first)]
    rows = []
    for i, grp in enumerate(plan.groups):
        ops = [g.index.node[v].op for v in grp.nodes]
        outs = [t for t in grp.writes]
        shape = g.tensors[outs[0]].shape if outs else ()
        rows.append({"group": i, "secs": best[i], "ops": "+".join(dict.fromkeys(ops)), "nodes": len(grp.nodes),
                     "shape": list(shape), "flops": cost.group_flops(g, grp.nodes), "name": grp.nodes[0],
                     "bytes": cost.group_traffic(g, grp.nodes),
                     "arrive": first[i] if threads > 1 and any(first[i]) else None})
    return rows


#: The ops that name a kernel's kind (the first of them among its ops), and ONNX Runtime's node
#: types by the op they run (its fused nodes; its NCHWc layout conversions).
ANCHORS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
ORT_OPS = {"FusedConv": "Conv", "FusedGemm": "Gemm", "FusedMatMul": "MatMul", "ReorderInput": "layout",
           "ReorderOutput": "layout"}


def op_class(ops: str) -> str:
    """The kind of a kernel of ours from its ops (``"Conv+Relu"``) or of an ONNX Runtime node from
    its type: the first anchor op among them, else the first op.

    >>> op_class("Conv+Relu"), op_class("FusedGemm"), op_class("MaxPool"), op_class("ReorderInput")
    ('Conv', 'Gemm', 'MaxPool', 'layout')
    """
    parts = [ORT_OPS.get(p, p) for p in ops.split("+")]
    return next((p for p in parts if p in ANCHORS), parts[0])


def by_class(rows: list[dict]) -> dict[str, float]:
    """Seconds summed by :func:`op_class` over :func:`profile`'s rows (``ops``) or
    :func:`ort_profile`'s (``op``).

    >>> by_class([{"ops": "Conv+Relu", "secs": 1.0}, {"op": "FusedConv", "secs": 0.5}, {"op": "LRN", "secs": 2.0}])
    {'Conv': 1.5, 'LRN': 2.0}
    """
    out: dict[str, float] = {}
    for r in rows:
        c = op_class(r["ops"] if "ops" in r else r["op"])
        out[c] = out.get(c, 0.0) + r["secs"]
    return out


#: Passes over the four profiles of ``--classes`` (each ``--rounds`` / PASSES runs).
PASSES = 3


def fastest(rows: list[dict], more: list[dict], key: str) -> list[dict]:
    """``rows`` with each row's ``secs`` the least of its own and that of the row of ``more`` with
    the same ``key`` (rows only in ``more`` are added).

    >>> fastest([{"group": 0, "secs": 2.0}], [{"group": 0, "secs": 1.0}, {"group": 1, "secs": 3.0}], "group")
    [{'group': 0, 'secs': 1.0}, {'group': 1, 'secs': 3.0}]
    """
    out = {r[key]: r for r in rows}
    for r in more:
        if r[key] not in out or r["secs"] < out[r[key]]["secs"]:
            out[r[key]] = r
    return list(out.values())


def class_table(ours: dict[int, dict], ort: dict[int, dict], threads: int) -> list[str]:
    """Markdown table: per kind, our and ONNX Runtime's times at 1 and ``threads`` threads
    (``ours[t]`` / ``ort[t]``: :func:`by_class` of each runtime's profile at t threads) and each
    runtime's speed-up; our largest kinds first, then ORT's other kinds, then the totals.

    >>> t = class_table({1: {"Conv": 0.004}, 2: {"Conv": 0.002}}, {1: {"Conv": 0.004, "LRN": 0.006},
    ...                 2: {"Conv": 0.002, "LRN": 0.003}}, 2)
    >>> t[2], t[-1]
    ('| Conv | 4.000 | 2.000 | 2.00 | 4.000 | 2.000 | 2.00 |', '| total | 4.000 | 2.000 | 2.00 | 10.000 | 5.000 | 2.00 |')
    """
    kinds = sorted(ours[1], key=lambda c: -ours[1][c]) + sorted(set(ort[1]) - set(ours[1]), key=lambda c: -ort[1][c])

    def cells(side: dict, key) -> str:
        a, b = (key(side[1]), key(side[threads]))
        if not a or not b:
            return f"{1e3 * a:.3f} | {1e3 * b:.3f} | -" if a or b else "- | - | -"
        return f"{1e3 * a:.3f} | {1e3 * b:.3f} | {a / b:.2f}"

    head = [f"| kind | ours 1t ms | ours {threads}t ms | ours speed-up | ORT 1t ms | ORT {threads}t ms | ORT speed-up |",
            "|---|---|---|---|---|---|---|"]
    rows = [f"| {c} | {cells(ours, lambda d: d.get(c, 0.0))} | {cells(ort, lambda d: d.get(c, 0.0))} |" for c in kinds]
    return head + rows + [f"| total | {cells(ours, lambda d: sum(d.values()))} | {cells(ort, lambda d: sum(d.values()))} |"]


def ort_profile(spec: str, threads: int, rounds: int) -> list[dict]:
    """ONNX Runtime's per-node times (its profiler; the fastest of ``rounds`` runs per node) of the
    same graph and weights as :func:`profile`: which of its kernels beat ours."""
    import onnxruntime as ort

    from solverfuse.emit.reference import to_onnx
    g = graph_for(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.gettempdir()) / "sf_ort_profile")
    sess = ort.InferenceSession(to_onnx(g, cs).SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {i.name: x[i.name] for i in sess.get_inputs()}
    for _ in range(rounds + 1):
        sess.run(None, feeds)
    path = sess.end_profiling()
    best: dict[str, dict] = {}
    for ev in json.loads(Path(path).read_text()):
        if ev.get("cat") != "Node" or not ev["name"].endswith("_kernel_time"):
            continue
        name = ev["name"][:-len("_kernel_time")]
        r = best.setdefault(name, {"name": name, "op": ev["args"].get("op_name", "?"), "secs": float("inf")})
        r["secs"] = min(r["secs"], ev["dur"] * 1e-6)
    os.unlink(path)
    return sorted(best.values(), key=lambda r: -r["secs"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--strategy", default="optimal")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", help="write all rows here")
    ap.add_argument("--ort", action="store_true", help="also ONNX Runtime's per-node profile")
    ap.add_argument("--classes", type=int, metavar="N",
                    help="both runtimes at 1 and N threads, times summed by kind of kernel (instead of the kernel list)")
    ap.add_argument("--out", help="with --classes: markdown file to write the table to")
    ap.add_argument("--append", action="store_true", help="with --out: add this run's section")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-gemm-speed"))
    args = ap.parse_args(argv)
    if args.classes:
        # the four profiles in turn, PASSES times: a host moment that slows one of them (a vCPU
        # taken away for a second) then costs it one pass, not its only one
        n, each = args.classes, max(1, args.rounds // PASSES)
        started, load0 = time.time(), os.getloadavg()[0]
        ours: dict[int, list] = {1: [], n: []}
        ort: dict[int, list] = {1: [], n: []}
        for _ in range(PASSES):
            for t in (1, n):
                ours[t] = fastest(ours[t], profile(args.spec, t, each, args.strategy, args.cache), "group")
                ort[t] = fastest(ort[t], ort_profile(args.spec, t, each), "name")
        table = class_table({t: by_class(r) for t, r in ours.items()}, {t: by_class(r) for t, r in ort.items()}, n)
        lines = machine.section(f"{args.spec}: speed-up from 1 to {n} threads by kind of kernel",
                                f"Written by `benchmarks/zoo_profile.py --classes {n}`: per kernel (ours: a group "
                                f"of the {args.strategy} plan; ORT: a node of its profile) the fastest of {PASSES} "
                                f"passes x {each} runs, the four profiles in turn each pass; summed by kind.",
                                started, load0, machine.describe()["cpu"], table, level="###")
        if args.out:
            write_results(args.out, lines, append=args.append)
        print("\n".join(lines))
        return 0
    rows = profile(args.spec, args.threads, args.rounds, args.strategy, args.cache)
    total = sum(r["secs"] for r in rows)
    print(f"{args.spec} {args.threads} thread(s): {len(rows)} kernels, sum of fastest {1e3 * total:.2f} ms "
          f"(load {os.getloadavg()[0]:.1f})")
    print("| group | ms | % | GFLOP/s | ops | out shape | first node | threads' arrival ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: -r["secs"])[:args.top]:
        gf = f"{r['flops'] / r['secs'] / 1e9:.1f}" if r["flops"] and r["secs"] else "-"
        arr = " / ".join(f"{1e3 * a:.3f}" for a in r["arrive"]) if r["arrive"] else "serial"
        print(f"| {r['group']} | {1e3 * r['secs']:.3f} | {100 * r['secs'] / total:.1f} | {gf} | {r['ops']} "
              f"| {r['shape']} | {r['name']} | {arr} |")
    if args.ort:
        ort_rows = ort_profile(args.spec, args.threads, args.rounds)
        tot = sum(r["secs"] for r in ort_rows)
        print(f"\nONNX Runtime: {len(ort_rows)} nodes, sum of fastest {1e3 * tot:.2f} ms")
        print("| node | op | ms | % |\n|---|---|---|---|")
        for r in ort_rows[:args.top]:
            print(f"| {r['name']} | {r['op']} | {1e3 * r['secs']:.3f} | {100 * r['secs'] / tot:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
