"""GEMM/convolution kernels and whole plans of the emitted C, side by side with ONNX Runtime (MLAS).

Two sections, both at 1 and 2 threads, each case timed interleaved with ONNX Runtime (every graph
optimisation, IO binding, the same intra-op thread count, workers not spinning) in rotated order:

* **kernels**: one GEMM/conv with a ReLU epilogue per case (``emit_speed_cases.kernel_flops``
  shapes: FC layers, attention's QK^T, 1x1/3x3/grouped/depthwise convs of ResNet/ShuffleNet/
  SqueezeNet), GFLOP/s of ours and of ORT on the same shape;
* **plans**: memory-bound motifs and the ONNX light models, the optimal plan's C and the unfused
  plan's C (one op per kernel) against ORT: is fusion ever slower than no fusion?

``--section zoo`` runs the plans of all 9 ONNX light models (:data:`ZOO_LIGHT`; ``zoo_report.py``
turns two such runs into before/after tables). Thread scaling (time at 1 thread / time at 2) is
reported for both runtimes. Results go to
``benchmarks/results/gemm.md``; a full run takes 2-3 minutes (the compile cache under ``--cache``
makes reruns faster).

    PYTHONPATH=. python benchmarks/gemm_speed.py [--rounds 9] [--section kernels|plans|all]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from report import write_results  # noqa: E402  (benchmarks/report.py)
import run as bench  # noqa: E402  (benchmarks/run.py: ORT runner, interleaving)
from emit_speed import HW  # noqa: E402
from run import ort_session  # noqa: E402
from emit_speed_cases import CASES, KERNELS, kernel_flops, make_graph  # noqa: E402

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import compile_plan  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.greedy import greedy_plan  # noqa: E402

#: Kernel shapes: emit_speed's set plus the grouped 1x1 and strided depthwise convs of ShuffleNet,
#: its 3-channel stem, a SqueezeNet expand conv, and the pooling windows of ShuffleNet/SqueezeNet
#: (no GFLOP/s: times only); small planes: SqueezeNet's last conv and a 13x13 expand conv, a 7x7
#: depthwise conv.
GEMM_KERNELS = KERNELS + ["conv:136x28x28x136x1x1x4", "conv:272x14x14x272x1x1x4", "conv:544x7x7x544x1x1x4",
                          "conv:112x56x56x112x3x2x112", "conv:272x14x14x272x3x2x272",
                          "conv:3x224x224x24x3x2x1", "conv:16x55x55x64x3x1x1",
                          "pool:max:24x112x112x3x2", "pool:max:96x109x109x3x2", "pool:avg:136x28x28x3x2",
                          "conv:512x13x13x1000x1x1x1", "conv:64x13x13x256x3x1x1", "conv:544x7x7x544x3x1x544"]


#: Plan cases: emit_speed's motifs and light models, T5's MatMul + RMSNorm (the group the issue
#: saw run 30% slower fused) and a one-layer BERT block.
PLAN_CASES = CASES + ["t5:matmul_rmsnorm", "zoo:bert_block"]

#: ``--section zoo``: all 9 ONNX light models shipped with the onnx package (the ONNX-zoo set of
#: issue 15), plans only; VGG-19 and the other big ones take ~1 s a run, so few rounds.
ZOO_LIGHT = ["light:squeezenet", "light:shufflenet", "light:inception_v1", "light:inception_v2", "light:resnet50",
             "light:densenet121", "light:bvlc_alexnet", "light:zfnet512", "light:vgg19"]


def t5_matmul_rmsnorm(rows: int = 256, hidden: int = 512):
    """T5's feed-forward output projection + RMSNorm as exported: MatMul, Pow, ReduceMean over the
    last axis, Add eps, Sqrt, Reciprocal, Mul, Mul by the norm's weight."""
    from solverfuse.graph import load_graph
    sq = {"shape": [], "constant": True}
    ts = {"x": {"shape": [rows, hidden]}, "w": {"shape": [hidden, hidden], "constant": True},
          "two": sq, "eps": sq, "g": {"shape": [hidden], "constant": True}}
    chain = [("mm", "MatMul", ["x", "w"], {}), ("pw", "Pow", ["mm", "two"], {}),
             ("mean", "ReduceMean", ["pw"], {"axes": [-1], "keepdims": 1}), ("ad", "Add", ["mean", "eps"], {}),
             ("sq", "Sqrt", ["ad"], {}), ("rc", "Reciprocal", ["sq"], {}), ("nm", "Mul", ["mm", "rc"], {}),
             ("y", "Mul", ["nm", "g"], {})]
    nodes = [{"name": n, "op": op, "inputs": ins, "outputs": [n + "_o" if n != "y" else "y"], "attributes": at}
             for n, op, ins, at in chain]
    for nd in nodes:
        nd["inputs"] = [i + "_o" if i in dict((c[0], 1) for c in chain) else i for i in nd["inputs"]]
    return load_graph({"name": "t5_matmul_rmsnorm", "tensors": ts, "inputs": ["x"], "outputs": ["y"], "nodes": nodes})


def pool_graph(spec: str):
    """``pool:max|avg:CxHxWxkxstride`` (batch 1, padding k//2) with a ReLU epilogue."""
    from solverfuse.graph import load_graph
    _, kind, dims = spec.split(":")
    c, h, w, k, s = (int(v) for v in dims.split("x"))
    op = "MaxPool" if kind == "max" else "AveragePool"
    at = {"kernel_shape": [k, k], "strides": [s, s], "pads": [k // 2] * 4}
    return load_graph({"name": spec.replace(":", "_"), "tensors": {"a": {"shape": [1, c, h, w]}}, "inputs": ["a"],
                       "outputs": ["y"], "nodes": [{"name": "p", "op": op, "inputs": ["a"], "outputs": ["h"], "attributes": at},
                                                   {"name": "r", "op": "Relu", "inputs": ["h"], "outputs": ["y"]}]})


def graph_for(spec: str):
    if spec.startswith("pool:"):
        return pool_graph(spec)
    if spec == "t5:matmul_rmsnorm":
        return t5_matmul_rmsnorm()
    if spec == "zoo:bert_block":
        from solverfuse import zoo
        return zoo.bert_block(layers=1)
    return make_graph(spec)


def cpu_warm(fn):
    """A runner that executes ``fn`` twice and returns the CPU time of the calling thread in the
    second execution: at 1 thread both runtimes compute on the calling thread, and its CPU time
    does not count the time other jobs of a loaded machine hold the core (wall time does)."""
    def run() -> float:
        fn()
        t = time.thread_time()
        fn()
        return time.thread_time() - t
    return run


def time_case(spec: str, threads: int, rounds: int, cache: str, variants: tuple, cc: str | None = None,
              clock: str = "wall") -> dict:
    """Median ms of each plan variant's C and of ORT on one case (``clock`` "cpu": the calling
    thread's CPU time, 1 thread only)."""
    g = graph_for(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    row = {"case": spec, "threads": threads}
    runners = {}
    cpu = clock == "cpu" and threads == 1
    for name in variants:
        plan = (api.plan(g, HW, strategy="optimal", time_limit=20, workers=1) if name == "optimal"
                else greedy_plan(g, HW, "unfused"))
        row[name + "_groups"] = len(plan.groups)
        prog = compile_plan(plan, g, threads=threads, cache_dir=cache, cc=cc)
        runners[name] = (lambda prog=prog: prog.time(x, cs, repeats=2, cpu=cpu)[1])
    sess = ort_session(g, cs, threads)
    runners["ort"] = cpu_warm(bench.ort_call(sess, x)) if cpu else bench.ort_runner(sess, x)
    for k, v in bench.time_side_by_side(runners, rounds).items():
        # the fastest round: on a shared machine other jobs only ever add time, so the minimum
        # is the steadiest estimate of what the code takes (the median moved 2x between runs)
        row[k + "_ms"] = 1e3 * min(v)
        row[k + "_median_ms"] = 1e3 * statistics.median(v)
    return row


def kernel_table(rows: list[dict]) -> str:
    out = ["| kernel | threads | ORT ms | ours ms | ours/ORT | ORT GFLOP/s | ours GFLOP/s |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | {r['threads']} | error: {r['error']} | | | | |")
            continue
        fl = kernel_flops(r["case"]) / 1e6
        o, a = r["ort_ms"], r["optimal_ms"]
        gf = f"{fl / o:.1f} | {fl / a:.1f}" if fl else "- | -"
        out.append(f"| {r['case']} | {r['threads']} | {o:.3f} | {a:.3f} | {a / o:.2f} | {gf} |")
    return "\n".join(out)


def plan_table(rows: list[dict]) -> str:
    out = ["| case | threads | groups opt/unf | ORT ms | optimal ms | unfused ms | optimal/ORT | unfused/ORT | optimal/unfused |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | {r['threads']} | error: {r['error']} | | | | | | |")
            continue
        o, a, u = r["ort_ms"], r["optimal_ms"], r["unfused_ms"]
        out.append(f"| {r['case']} | {r['threads']} | {r['optimal_groups']}/{r['unfused_groups']} | {o:.2f} | {a:.2f} "
                   f"| {u:.2f} | {a / o:.2f} | {u / o:.2f} | {a / u:.2f} |")
    return "\n".join(out)


def scaling(rows: list[dict]) -> str:
    """Per case: time at 1 thread / time at 2 threads, ours (optimal plan) and ORT; then the
    medians over the cases and the number of cases where ours scales at least as ORT does.

    >>> print(scaling([{"case": c, "threads": t, "ort_ms": o, "optimal_ms": u}
    ...                for c, t, o, u in (("a", 1, 4, 4), ("a", 2, 2, 2.5), ("b", 1, 4, 4), ("b", 2, 2, 2))]))
    | case | ORT 1t/2t | ours 1t/2t |
    |---|---|---|
    | a | 2.00 | 1.60 |
    | b | 2.00 | 2.00 |
    | median of 2 cases | 2.00 | 1.80 |
    | cases where ours >= ORT's | | 1 of 2 |
    """
    by = {(r["case"], r["threads"]): r for r in rows if "error" not in r}
    out = ["| case | ORT 1t/2t | ours 1t/2t |", "|---|---|---|"]
    pairs = []
    for (case, th), r in by.items():
        r2 = by.get((case, 2))
        if th == 1 and r2:
            pairs.append((r["ort_ms"] / r2["ort_ms"], r["optimal_ms"] / r2["optimal_ms"]))
            out.append(f"| {case} | {pairs[-1][0]:.2f} | {pairs[-1][1]:.2f} |")
    if pairs:
        out.append(f"| median of {len(pairs)} cases | {statistics.median(p[0] for p in pairs):.2f} | "
                   f"{statistics.median(p[1] for p in pairs):.2f} |")
        out.append(f"| cases where ours >= ORT's | | {sum(round(u, 2) >= round(o, 2) for o, u in pairs)} of {len(pairs)} |")
    return "\n".join(out)


def summary(rows: list[dict], kinds) -> str:
    out = ["| set | threads | cases | median optimal/ORT | median unfused/ORT | median optimal/unfused | worst optimal/unfused |",
           "|---|---|---|---|---|---|---|"]
    for kind, pred in kinds:
        for th in (1, 2):
            sel = [r for r in rows if pred(r["case"]) and r["threads"] == th and "error" not in r]
            if not sel:
                continue
            med = lambda f: f"{statistics.median(f(r) for r in sel):.2f}"  # noqa: E731
            unf = [r for r in sel if "unfused_ms" in r]
            out.append(f"| {kind} | {th} | {len(sel)} | {med(lambda r: r['optimal_ms'] / r['ort_ms'])} | "
                       + (f"{statistics.median(r['unfused_ms'] / r['ort_ms'] for r in unf):.2f} | "
                          f"{statistics.median(r['optimal_ms'] / r['unfused_ms'] for r in unf):.2f} | "
                          f"{max(r['optimal_ms'] / r['unfused_ms'] for r in unf):.2f} |" if unf else "n/a | n/a | n/a |"))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--section", default="all", choices=["kernels", "plans", "all", "zoo"],
                    help="zoo: the plans of all 9 ONNX light models (ZOO_LIGHT)")
    ap.add_argument("--cases", help="comma-separated specs instead of the section's set")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-gemm-speed"))
    ap.add_argument("--out", default=str(HERE / "results" / "gemm.md"))
    ap.add_argument("--append", action="store_true", help="add this run's section to --out")
    ap.add_argument("--cc", help="C compiler for our C (e.g. a wrapper adding -mno-avx512f: the AVX2 tiles)")
    ap.add_argument("--title", default="GEMM/conv kernels and plans of the emitted C vs ONNX Runtime")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="cpu: 1-thread rows timed by the calling thread's CPU time (both runtimes compute on it), "
                         "not counting the time other jobs hold the core; 2-thread rows stay wall time")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    started, load0 = time.time(), os.getloadavg()
    text = [f"# {args.title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
            "", "Written by `benchmarks/gemm_speed.py`. Times: the fastest of "
            f"{args.rounds} interleaved rounds (rotated order; on this shared machine other jobs only add time, and "
            "medians moved 2x between runs), each the second of two back-to-back runs, timed "
            "inside C for ours; ONNX Runtime with all graph optimisations, IO binding, the same intra-op thread "
            "count; worker threads of neither runtime spin between runs. Ours = the optimal plan's C (kernels: "
            "one group, the GEMM/conv with its ReLU epilogue); GFLOP/s = 2 x multiply-adds / time."
            + (f" Our C compiled with `{args.cc}`." if args.cc else "")
            + (" **1-thread rows: CPU time of the calling thread** (both runtimes compute on it at 1 thread; "
               "ORT's includes its Python binding's call), which leaves out the time other jobs held the core; "
               "2-thread rows: wall time." if args.clock == "cpu" else ""), ""]
    sections = []
    scale_caption = ("Thread scaling (time at 1 thread / time at 2 threads):" if args.clock == "wall" else
                     "Thread scaling (1-thread CPU time / 2-thread wall time: with other jobs holding the cores "
                     "the 2-thread wall time includes their time, so this is no speed-up of either runtime):")
    if args.section in ("kernels", "all"):
        specs = args.cases.split(",") if args.cases else GEMM_KERNELS
        rows = []
        for spec in specs:
            for th in threads:
                try:
                    rows.append(time_case(spec, th, args.rounds, args.cache, ("optimal",), args.cc, args.clock))
                except Exception as e:  # report the case, keep measuring the others
                    rows.append({"case": spec, "threads": th, "error": str(e)[:120]})
                print(rows[-1], flush=True)
        sections += ["## Kernels", "", summary(rows, [("kernels", lambda c: True)]), "", kernel_table(rows), "",
                     scale_caption, "", scaling(rows), ""]
    if args.section in ("plans", "all", "zoo"):
        specs = (args.cases.split(",") if args.cases and args.section in ("plans", "zoo")
                 else ZOO_LIGHT if args.section == "zoo" else PLAN_CASES)
        rows = []
        for spec in specs:
            for th in threads:
                try:
                    rows.append(time_case(spec, th, args.rounds, args.cache, ("optimal", "unfused"), args.cc, args.clock))
                except Exception as e:
                    rows.append({"case": spec, "threads": th, "error": str(e)[:120]})
                print(rows[-1], flush=True)
        sections += ["## Plans: optimal vs unfused vs ORT", "",
                     summary(rows, [("motifs", lambda c: c.startswith("zoo:") and c != "zoo:bert_block"),
                                    ("light models", lambda c: c.startswith("light:")),
                                    ("transformer parts", lambda c: c in ("t5:matmul_rmsnorm", "zoo:bert_block"))]), "",
                     plan_table(rows), "", scale_caption, "",
                     scaling(rows), ""]
    load1 = os.getloadavg()
    text += [f"Machine: {json.dumps(machine.describe())}", "",
             f"**Noise:** a shared machine (2 cores, other jobs running): load average {load0[0]:.1f} at the start, "
             f"{load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at the end; run time {time.time() - started:.0f} s. "
             "With a load above 2 single rows can be off by 2x; ratios of interleaved runs less so.", "", *sections]
    print(write_results(args.out, text, args.append))
    return 0


if __name__ == "__main__":
    sys.exit(main())
