"""The exported transformers set (tests/data/models) through our C vs ONNX Runtime, 1 and 2 threads.

For every exported model (materialised with seeded weights, ``tests/model_set.py``) whose optimal
plan's C passes ``run --check`` against ONNX Runtime on the model file itself: the optimal plan's C,
the unfused plan's C (one op per kernel) and ONNX Runtime on the same model file (every graph
optimisation, IO binding, the same intra-op thread count, workers not spinning), interleaved
round by round in rotated order. Each round of a runtime is the median of ``--batch``
back-to-back warm runs (the models are tiny: a run takes tens of microseconds); the table gives
the median over rounds and the ratios. ``--profile`` adds, per model, the share of our time in
each kernel (the plan rendered with a clock around every kernel call of the driver), to find
where our C loses. Plans are cached under ``--cache`` (the solver is deterministic with one
worker). Results go to ``benchmarks/results/transformers.md``.

    PYTHONPATH=. python benchmarks/transformers_speed.py [--rounds 7] [--models bert_ts,t5_dynamo] [--profile]
    PYTHONPATH=. python benchmarks/transformers_speed.py --models none --motifs --append
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
from report import write_results  # noqa: E402  (benchmarks/report.py)
import run as bench  # noqa: E402  (benchmarks/run.py: interleaving)
from run import ort_model_session  # noqa: E402
from tests.model_set import MODELS_DIR, load_inputs, materialise, model_names  # noqa: E402

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import Program, build, compile_plan  # noqa: E402
from solverfuse.emit.data import constants  # noqa: E402
from solverfuse.emit.program import buffer_table, render, view_aliases  # noqa: E402
from solverfuse.greedy import greedy_plan  # noqa: E402
from solverfuse.onnx_import import import_onnx  # noqa: E402
from solverfuse.plans import load_plan, save_plan  # noqa: E402
from solverfuse.runner import compare_outputs, model_outputs  # noqa: E402

HW = "nvidia-h100"


def ort_batch(sess, feeds: dict, batch: int):
    """A runner: median seconds of ``batch`` warm IO-bound runs."""
    call = bench.ort_call(sess, feeds)

    def run() -> float:
        ts = []
        for _ in range(batch):
            t = time.perf_counter()
            call()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)
    return run


def c_batch(prog, feeds: dict, consts: dict, batch: int):
    return lambda: statistics.median(prog.time(feeds, consts, repeats=batch)[1:])


def model_stamp() -> str:
    """A hash of the cost model's sources: a cached plan solved under another cost model is stale
    (its recorded bytes no longer validate, or it is no longer optimal)."""
    import hashlib
    import solverfuse
    root = Path(solverfuse.__file__).parent
    h = hashlib.sha256()
    for f in ("cost.py", "rules.py", "ops.py", "mapping.py", "hardware.py"):
        h.update((root / f).read_bytes())
    return h.hexdigest()[:12]


def get_plans(name: str, g, cache: Path) -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    p = cache / f"{name}.{model_stamp()}.optimal.json"
    if p.exists():
        opt = load_plan(p, g)
    else:
        opt = api.plan(g, HW, strategy="optimal", time_limit=30, workers=1)
        save_plan(opt, p)
    return {"optimal": opt, "unfused": greedy_plan(g, HW, "unfused")}


def profile(plan, g, feeds: dict, consts: dict, threads: int, cache: str, repeats: int = 50,
            units: int = 1) -> list[tuple]:
    """(seconds per run, group index, ops) of every kernel call, slowest first: the plan's C with a
    time-stamp counter read around each call of the driver (one translation unit), the fewest
    cycles of each call over ``repeats`` runs (other jobs only add time); their shares scale the
    program's fastest run. x86-64 + GCC only. ``units``: translation units of the kernels (the
    library ``compile_plan`` builds has ``min(2 * CPUs, groups // 8)``)."""
    files = render(plan, g, threads=threads, units=units)
    files.pop("buffers.json")
    head, sep, body = files["model.c"].partition("int sf_run(void *const *B)")
    calls = []

    def wrap(m):
        calls.append(m.group(1))
        i = len(calls) - 1
        return ("{ unsigned long long sf_a = __builtin_ia32_rdtsc(); rc = " + m.group(1)
                + "; sf_a = __builtin_ia32_rdtsc() - sf_a; if (!sf_prof[" + str(i) + "] || sf_a < sf_prof[" + str(i)
                + "]) sf_prof[" + str(i) + "] = sf_a; if (rc) return rc; }")
    body = re.sub(r"if \(\(rc = (k\d+\([^;]*\))\)\) return rc;", wrap, body)
    files["model.c"] = head + f"unsigned long long sf_prof[{max(1, len(calls))}];\n" + sep + body
    path = build(files, threads=threads, cache_dir=cache)
    prog = Program(plan, g, buffer_table(plan, g), path, sanitize=False, counters=False, threads=threads)
    prog.time(feeds, consts, repeats=5)
    arr = (ctypes.c_ulonglong * max(1, len(calls))).in_dll(prog.lib, "sf_prof")
    for i in range(len(calls)):
        arr[i] = 0
    total = min(prog.time(feeds, consts, repeats=repeats))
    cycles = sum(arr[i] for i in range(len(calls))) or 1
    alias = view_aliases(plan, g)
    kernels = [gi for gi, grp in enumerate(plan.groups) if not any(t in alias for t in grp.writes)]
    out = []
    for i, gi in enumerate(kernels[:len(calls)]):
        ops = ",".join(g.index.node[v].op for v in plan.groups[gi].nodes)
        out.append((total * arr[i] / cycles, gi, ops))
    return sorted(out, reverse=True)


@contextlib.contextmanager
def loaded(name: str, cache: Path):
    """The exported model ``name`` with its seeded weights, while the block runs: (path of the
    materialised ONNX file, graph, feeds, constants, its optimal and unfused plans)."""
    import onnx
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.onnx"
        onnx.save(materialise(MODELS_DIR / f"{name}.onnx", seed=1), str(path))
        g = import_onnx(path)
        yield path, g, load_inputs(name), constants(g, 0), get_plans(name, g, cache / "plans")


def measure(name: str, threads_list: list[int], rounds: int, batch: int, cache: Path, prof: bool) -> list[dict]:
    rows = []
    with loaded(name, cache) as (path, g, feeds, consts, plans):
        want = model_outputs(path, feeds, g.outputs)
        for th in threads_list:
            row = {"model": name, "threads": th, "nodes": len(g.nodes),
                   "groups": {k: len(p.groups) for k, p in plans.items()}}
            runners = {}
            for k, plan in plans.items():
                prog = compile_plan(plan, g, threads=th, cache_dir=str(cache / "c"))
                outs = prog.run(feeds, consts)
                chk = compare_outputs({t: np.asarray(outs[t]) for t in g.outputs}, want)
                if not chk["ok"]:
                    row["error"] = f"{k} plan fails --check"
                runners[k] = c_batch(prog, feeds, consts, batch)
            if "error" in row:
                rows.append(row)
                continue
            runners["ort"] = ort_batch(ort_model_session(path, th), feeds, batch)
            for k, v in bench.time_side_by_side(runners, rounds).items():
                row[k + "_us"] = 1e6 * statistics.median(v)
            if prof:
                row["profile"] = profile(plans["optimal"], g, feeds, consts, th, str(cache / "c"))
            rows.append(row)
            print({k: v for k, v in row.items() if k != "profile"}, flush=True)
    return rows


def tables(rows: list[dict], threads_list: list[int]) -> list[str]:
    ok = [r for r in rows if "error" not in r]
    out = ["| set | threads | models | median optimal/ORT | median unfused/ORT | worst optimal/ORT | models above 2.0 |"
           " median optimal/unfused |", "|---|---|---|---|---|---|---|---|"]
    for th in threads_list:
        sel = [r for r in ok if r["threads"] == th]
        if not sel:
            continue
        ro = [r["optimal_us"] / r["ort_us"] for r in sel]
        worst = max(sel, key=lambda r: r["optimal_us"] / r["ort_us"])
        out.append(f"| all | {th} | {len(sel)} | {statistics.median(ro):.2f} | "
                   f"{statistics.median(r['unfused_us'] / r['ort_us'] for r in sel):.2f} | "
                   f"{max(ro):.2f} ({worst['model']}) | {sum(x > 2.0 for x in ro)} | "
                   f"{statistics.median(r['optimal_us'] / r['unfused_us'] for r in sel):.2f} |")
    out += ["", "| model | threads | nodes | kernels opt/unf | ORT µs | optimal µs | unfused µs | optimal/ORT | "
            "unfused/ORT | optimal/unfused |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['threads']} | {r['nodes']} | | error: {r['error']} | | | | | |")
            continue
        o, a, u = r["ort_us"], r["optimal_us"], r["unfused_us"]
        out.append(f"| {r['model']} | {r['threads']} | {r['nodes']} | {r['groups']['optimal']}/{r['groups']['unfused']} "
                   f"| {o:.1f} | {a:.1f} | {u:.1f} | {a / o:.2f} | {u / o:.2f} | {a / u:.2f} |")
    profs = [r for r in ok if r.get("profile")]
    if profs:
        out += ["", "Where our time goes (optimal plan, the 4 slowest kernels of each model: µs per run, "
                "share of the summed kernel time, ops of the group):", ""]
        for r in profs:
            tot = sum(p[0] for p in r["profile"]) or 1.0
            cells = "; ".join(f"g{gi} {1e6 * s:.1f} µs {100 * s / tot:.0f}% [{ops[:60]}]" for s, gi, ops in r["profile"][:4])
            out.append(f"- {r['model']} ({r['threads']} thread{'s' if r['threads'] > 1 else ''}): {cells}")
    return out


def motif_bandwidth(threads: int, rounds: int, factor: float, cache: str) -> list[str]:
    """Achieved GB/s of each memory-bound motif's optimal plan (predicted bytes, which the byte
    counters equal, over the median time) against a STREAM triad timed in the same rounds."""
    from solverfuse.emit.build import BASE_FLAGS
    from solverfuse.emit.data import random_inputs
    from solverfuse.hardware import detect
    hw = detect()
    llc = hw.l3_bytes or hw.l2_bytes
    triad = machine.TriadLib(int(factor * llc) // 4, threads, BASE_FLAGS + ["-march=native"])
    out = [f"Memory-bound motifs at {threads} thread(s), tensors {factor:g}x the last-level cache "
           f"({llc / 1e6:.1f} MB): optimal plan's C, predicted bytes / median time, against a STREAM triad "
           f"(`benchmarks/triad.c`, the emitter's flags) timed in the same {rounds} interleaved rounds.", "",
           "| motif | kernels | predicted bytes | C ms | achieved GB/s | triad GB/s | of triad |", "|---|---|---|---|---|---|---|"]
    for name, g in bench.motif_graphs(llc, factor, hw):
        if name == "matmul_bias_relu":
            continue  # a GEMM (compute-bound at k = 64), not a streaming kernel: see gemm.md
        plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
        prog = compile_plan(plan, g, threads=threads, cache_dir=cache)
        x, cs = random_inputs(g, 0), constants(g, 0)
        times = bench.time_side_by_side({"c": lambda: prog.time(x, cs, repeats=2)[1], "triad": bench.warm(triad)},
                                        rounds)
        c, t = statistics.median(times["c"]), statistics.median(times["triad"])
        gbs, tgbs = plan.traffic_bytes / c / 1e9, triad.nbytes / t / 1e9
        out.append(f"| {name} | {len(plan.groups)} | {plan.traffic_bytes / 1e6:.1f} MB | {1e3 * c:.1f} | {gbs:.1f} "
                   f"| {tgbs:.1f} | {100 * gbs / tgbs:.0f}% |")
        print(out[-1], flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", help="comma-separated stems (default: every exported model; 'none': no model)")
    ap.add_argument("--profile", action="store_true", help="per-kernel times of the optimal plan")
    ap.add_argument("--motifs", action="store_true", help="also the motifs' achieved bandwidth vs the triad")
    ap.add_argument("--factor", type=float, default=2.0, help="motif tensor size / LLC")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-transformers-speed"))
    ap.add_argument("--out", default=str(HERE / "results" / "transformers.md"))
    ap.add_argument("--append", action="store_true", help="add this run's text to --out")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    names = [] if args.models == "none" else args.models.split(",") if args.models else model_names()
    started, load0 = time.time(), os.getloadavg()
    rows = []
    motifs = motif_bandwidth(1, args.rounds, args.factor, str(Path(args.cache) / "c")) if args.motifs else []
    for name in names:
        try:
            rows += measure(name, threads, args.rounds, args.batch, Path(args.cache), args.profile)
        except Exception as e:  # report the model, keep measuring the others
            rows.append({"model": name, "threads": 0, "nodes": "", "error": str(e).splitlines()[0][:120]})
            print(rows[-1], flush=True)
    load1 = os.getloadavg()
    text = [f"# Exported transformers: our C vs ONNX Runtime ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            "Written by `benchmarks/transformers_speed.py`. Every model of `tests/data/models` materialised with "
            "seed 1; our C checked against ONNX Runtime on the model file before timing (a failing plan is "
            f"reported, not timed). Times: median over {args.rounds} interleaved rounds (rotated order) of the median "
            f"of {args.batch} back-to-back warm runs; ours timed inside C, ONNX Runtime (all graph optimisations, IO "
            "binding, the same intra-op thread count, non-spinning workers) timed around `run_with_iobinding` "
            "from Python (a few µs of call overhead included on its side).", "",
            f"**Noise:** a shared machine (2 cores, other jobs running): load average {load0[0]:.1f} at the start, "
            f"{load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at the end; run time {time.time() - started:.0f} s. "
            "Absolute times are not comparable between runs; read the ratios of one run.", "",
            f"Machine: {machine.describe().get('cpu', '')}", ""]
    text += tables(rows, threads) if rows else []
    text += ["", "## Memory-bound motifs: achieved bandwidth", "", *motifs] if motifs else []
    print(write_results(args.out, text, args.append))
    return 0


if __name__ == "__main__":
    sys.exit(main())
