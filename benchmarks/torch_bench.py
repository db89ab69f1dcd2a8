"""Real torch.compile vs solverfuse, written to ``benchmarks/results/torch.md``.

Two parts:

* agreement (every model of :data:`solverfuse.torch.models.MODELS`): the real Inductor plan
  (``inductor-real``, read from its scheduler) vs our ``inductor`` reproduction -- edge agreement,
  kernels, planned traffic -- and what our rules made us change in the real plan;
* timing: eager vs default ``torch.compile`` vs ``torch.compile(backend="solverfuse")`` driven by
  the optimal plan vs our own C (``solverfuse run``'s compiled plan), CPU, 1 and 2 threads
  (Inductor bakes the thread count into its OpenMP kernels at compile time, so each count is
  compiled separately); interleaved rounds, medians; kernels, planned traffic, errors vs eager.

Usage: ``python benchmarks/torch_bench.py [--models all|A,B] [--timing all|none|A,B] [--rounds N]
[--calls N]``. Inductor's cache lives in the temp dir (``solverfuse-torch-bench``): the first run
builds every kernel (about 10 minutes on 2 busy cores), later runs take about 5.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
# A persistent Inductor cache: a second run skips the C++ builds of unchanged kernels.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / "solverfuse-torch-bench"))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import solverfuse.torch as st  # noqa: E402
from machine import describe  # noqa: E402
from solverfuse.api import plan as make_plan  # noqa: E402
from solverfuse.greedy import greedy_plan  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.torch.models import MODELS  # noqa: E402


#: Edge agreement (agree, edges) of the reproduction on main before this branch (after the rule
#: fixes of benchmarks/results/fix.md), and before those (the first torch.md).
BEFORE = {"bert": ((88, 92), (92, 92)), "gpt2": ((83, 88), (86, 88)), "llama": ((109, 128), (111, 128)),
          "t5": ((68, 101), (99, 101)), "distilbert": ((82, 85), (85, 85)), "vit": ((83, 88), (85, 88)),
          "convnext": ((82, 82), (82, 82)), "resnet": ((89, 123), (123, 123))}


def agreement(hw, names: list[str], time_limit: float) -> tuple[list[dict], dict]:
    """Rows of the agreement table, and name -> (real plan, optimal plan) for the timing."""
    rows, plans = [], {}
    for name in names:
        model, inputs = MODELS[name]()
        real = st.inductor_plan(model, inputs, hw, name=name)
        repro = greedy_plan(real.graph, hw, "inductor")
        best = make_plan(real.graph, hw, strategy="optimal", time_limit=time_limit, workers=1)
        plans[name] = (real, best)
        agree, edges = st.edge_agreement(real.graph, real.plan.group_nodes(), repro.group_nodes())
        rows.append(dict(model=name, ops=len(real.graph.nodes), edges=edges, agree=agree,
                         kernels=sum(k.kind != "nop" for k in real.kernels),
                         real_groups=len(real.plan.groups), repro_groups=len(repro.groups),
                         real_bytes=real.plan.traffic_bytes, repro_bytes=repro.traffic_bytes,
                         optimal_bytes=best.traffic_bytes, optimal_status=best.status,
                         repaired=real.repaired, illegal=real.illegal))
        print(f"{name}: {agree}/{edges}", flush=True)
    return rows, plans


def _calls_for(fn, target_s: float, most: int) -> int:
    """Calls per sample so that one sample takes about ``target_s`` (1 to ``most``)."""
    start = time.perf_counter()
    fn()
    return max(1, min(most, int(target_s / max(time.perf_counter() - start, 1e-7))))


def _mean_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _max_error(got, want) -> float:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    return max(float((torch.as_tensor(g) - w).abs().max()) for g, w in zip(got, want))


def timing(names: list[str], hw, plans: dict, rounds: int, calls: int, time_limit: float) -> list[dict]:
    """Per model and thread count: eager, default torch.compile, torch.compile(backend="solverfuse")
    and our C (the optimal plan compiled by ``solverfuse.emit``), each timed as the mean of ``calls``
    calls, ``rounds`` rounds interleaved (the variants' order rotates each round), medians."""
    from solverfuse.emit.build import compile_plan
    from solverfuse.emit.data import constants
    from solverfuse.errors import SolverfuseError
    rows = []
    for name in names:
        model, inputs = MODELS[name]()
        real, best = plans[name]
        graph = real.graph
        user = [x for x in graph.inputs if not graph.tensors[x].constant]
        feeds = {x: v.numpy() for x, v in zip(user, inputs)}
        consts = constants(graph)
        with torch.no_grad():
            want = model(*inputs)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch._dynamo.reset()
            row = dict(model=name, threads=threads, default_kernels=sum(k.kind != "nop" for k in real.kernels),
                       real_bytes=real.plan.traffic_bytes, best_bytes=best.traffic_bytes,
                       c_groups=sum(g.traffic_bytes > 0 for g in best.groups), c_note="")
            with torch.no_grad():
                t0 = time.perf_counter()
                default = torch.compile(model)
                err_default = _max_error(default(*inputs), want)
                row["default_compile_s"] = time.perf_counter() - t0
                t0 = time.perf_counter()
                ours = torch.compile(model, backend="solverfuse",
                                     options={"hardware": hw, "time_limit": time_limit})
                err_ours = _max_error(ours(*inputs), want)
                row["ours_compile_s"] = time.perf_counter() - t0
                rep = st.last_report()
                variants = {"eager": lambda: model(*inputs), "default": lambda: default(*inputs),
                            "ours": lambda: ours(*inputs)}
                prog = None
                try:
                    prog = compile_plan(best, graph, threads=threads)
                    outs = prog.run(feeds, consts)
                    row["err_c"] = _max_error([outs[o] for o in graph.outputs], want)
                    variants["c"] = None  # timed inside C (below)
                    variants["c_call"] = lambda: prog.run(feeds, consts)
                except SolverfuseError as e:
                    row["c_note"] = str(e).split(":", 1)[-1].strip() if "not supported" in str(e) else str(e)
                samples: dict[str, list[float]] = {k: [] for k in variants}
                keys = list(variants)
                n = {k: _calls_for(variants[k] or variants["c_call"], 0.01, calls) for k in keys}
                for r in range(rounds):
                    for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                        if k == "c":
                            samples[k].append(statistics.fmean(prog.time(feeds, consts, repeats=n[k])))
                        else:
                            samples[k].append(_mean_call(variants[k], n[k]))
            multi = [g for g in rep.groups if len(g.nodes) > 1]
            row.update({f"{k}_s": statistics.median(v) for k, v in samples.items()},
                       err_default=err_default, err_ours=err_ours,
                       ours_kernels=sum(k.kind != "nop" for k in rep.kernels), ours_bytes=rep.plan.traffic_bytes,
                       fused_groups=sum(g.fused for g in multi), multi_groups=len(multi),
                       not_fused=[f"{g.group}: {'; '.join(dict.fromkeys(g.reasons))}" for g in multi if not g.fused][:3])
            rows.append(row)
            c = f"{row['c_call_s'] * 1e6:.0f} us ({row['c_s'] * 1e6:.0f} in C)" if "c_s" in row else row["c_note"]
            print(f"{name} x{threads}: eager {row['eager_s'] * 1e6:.0f} us, default {row['default_s'] * 1e6:.0f} us, "
                  f"ours {row['ours_s'] * 1e6:.0f} us, C {c}", flush=True)
    return rows


def _pct(a: int, e: int) -> str:
    return f"{a}/{e} = {100 * a / max(e, 1):.1f}%"


def render(machine: dict, agree: list[dict], times: list[dict], args, load: tuple) -> str:
    kib = lambda b: f"{b / 1024:.1f} KiB"  # noqa: E731
    us = lambda x: f"{x * 1e6:.0f} us"  # noqa: E731
    out = ["# torch.compile (Inductor, CPU) vs solverfuse", "",
           "Written by `benchmarks/torch_bench.py`. Machine: "
           f"{machine['cpu']}, {machine['cores']} cores, SIMD {', '.join(machine['simd'])}, "
           f"L1d {machine['l1d_bytes']} B, L2 {machine['l2_bytes']} B, L3 {machine['l3_bytes']} B; "
           f"{machine['compiler']}; torch {machine['versions']['torch']}; {machine['date_utc']}. "
           f"Load average (1/5/15 min) at the start {load[0][0]:.2f} / {load[0][1]:.2f} / {load[0][2]:.2f}, "
           f"at the end {load[1][0]:.2f} / {load[1][1]:.2f} / {load[1][2]:.2f}: a shared 2-core box, other "
           "jobs ran at the same time, so times are noisy.", "",
           "## Real Inductor plan vs our `inductor` reproduction", "",
           "Edge agreement: producer->consumer edges on which the two plans agree (both fuse or both "
           "cut). Before: the reproduction on main before the lowering model (after the rule fixes of "
           "`fix.md`), and the first measurement. Kernels: the scheduler nodes Inductor generates "
           "(generated loops + extern calls). Traffic: the one cost model on each plan (hardware `detect`).", "",
           "| model | ops | edges | agreement | before | first | Inductor kernels | real groups | repro groups | "
           "real traffic | repro traffic | optimal traffic | ops moved out by our rules |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in agree:
        first, before = BEFORE.get(r["model"], (None, None))
        out.append(f"| {r['model']} | {r['ops']} | {r['edges']} | {_pct(r['agree'], r['edges'])} | "
                   f"{_pct(*before) if before else '-'} | {_pct(*first) if first else '-'} | {r['kernels']} | "
                   f"{r['real_groups']} | {r['repro_groups']} | {kib(r['real_bytes'])} | {kib(r['repro_bytes'])} | "
                   f"{kib(r['optimal_bytes'])} ({r['optimal_status']}) | {len(r['repaired'])} |")
    out += ["", "What our rules still change in a real kernel (convexity only: no fusion rule or "
            "capacity limit rejects one):", ""]
    notes = [f"- {r['model']}: {x}" for r in agree for x in r["repaired"] + r["illegal"]]
    out += notes or ["- nothing"]
    if times:
        out += ["", "## Default torch.compile vs torch.compile driven by the optimal plan vs our C", "",
                f"Per model and thread count (`torch.set_num_threads`, the C built with OpenMP for 2): "
                f"each variant timed as the mean of up to {args.calls} calls (as many as fit in about 10 ms), "
                f"{args.rounds} rounds interleaved "
                "(the order rotates each round); the table shows the median round. torch variants are "
                "timed from Python (`perf_counter` around the call: dynamo's guards and the wrapper "
                "included); our C both from Python (`Program.run`: a ctypes call, outputs allocated, like a "
                "torch call) and inside C (`clock_gettime` around the kernels only). "
                "Kernels: Inductor's (default / driven by the plan) and the C's planned groups that move "
                "bytes (a view-only group is no kernel). Error: "
                "max |output - eager|.", "",
                "| model | threads | eager | default torch.compile | solverfuse backend | our C (Python call) | our C (in C) | "
                "kernels default / backend / C | traffic real / planned | groups made one kernel | max error default / backend / C |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in times:
            c = (us(r["c_call_s"]) + " | " + us(r["c_s"])) if "c_s" in r else "n/a | n/a"
            ce = f"{r['err_c']:.1e}" if "err_c" in r else "-"
            out.append(f"| {r['model']} | {r['threads']} | {us(r['eager_s'])} | {us(r['default_s'])} | "
                       f"{us(r['ours_s'])} | {c} | {r['default_kernels']} / {r['ours_kernels']} / {r['c_groups']} | "
                       f"{kib(r['real_bytes'])} / {kib(r['best_bytes'])} | {r['fused_groups']}/{r['multi_groups']} | "
                       f"{r['err_default']:.1e} / {r['err_ours']:.1e} / {ce} |")
        missing = {r["model"]: r["c_note"] for r in times if r["c_note"]}
        if missing:
            out += ["", "Our C could not run (`n/a`): " + "; ".join(f"{m}: {why}" for m, why in missing.items())
                    + " -- the C emitter has no kernel for these ATen rows yet (outside this benchmark's scope)."]
        out += ["", "Planned groups Inductor did not make one kernel (first three per model):", ""]
        for r in times:
            if r["threads"] == 1:
                out += [f"- {r['model']}: {x}" for x in r["not_fused"]]
        out += ["", "Compile times (s, default / backend, first thread count): " + ", ".join(
            f"{r['model']} {r['default_compile_s']:.0f} / {r['ours_compile_s']:.0f}" for r in times if r["threads"] == 1)]
    out += ["", "## What explains the differences", "", *EXPLAIN]
    return "\n".join(out) + "\n"


EXPLAIN = [
    "- **Agreement.** The reproduction models Inductor's lowering before its scheduler: only realised "
    "values (reductions, extern/concat arguments, outputs, values several consumers read whose "
    "expression reads more than 4 buffers) are scheduler nodes; everything else runs inside its "
    "consumer's loop (recomputed in each when several read it: a partition keeps it in the first). The "
    "CPU backend fuses two nodes only over one loop size, so llama's rotary halves (8 columns), the "
    "two-head query and the one-head key stay apart; `split` is slice views. Remaining disagreements "
    "(t5): a clone Inductor removes as a no-op when its strides equal its input's (strides are not in "
    "our graph). The ops still moved out of real kernels are views Inductor computes in two kernels, "
    "which a partition holds once (convexity), never a fusion rule or a capacity limit.",
    "- **Planned traffic is not what Inductor runs.** The optimal plan fuses GEMM/conv epilogues; "
    "Inductor on CPU calls GEMM and convolution as extern library kernels (no `max_autotune` "
    "templates) that take no epilogue, so such a planned group becomes two kernels (the list above) "
    "and the backend's run moves about the bytes default Inductor moves. Where the plan merges more "
    "memory-bound ops (LayerNorm/RMSNorm with residual chains) the backend makes one or two kernels "
    "fewer; at these sizes (hidden 32, 8 tokens) that is within the noise: the backend's median is "
    "below default's on most rows, but medians of the same variant moved by 2-7x between runs of "
    "this benchmark on a loaded box, so read single rows with care.",
    "- **Our C** runs every model of the set and every motif (the ATen-only rows -- VarMean, Rsqrt, "
    "Silu, scaled-dot-product attention -- have C kernels; `n/a` would mark a graph it cannot run). "
    "'in C' is the kernels alone (`clock_gettime` inside the library): microseconds on the motifs, "
    "tens on the models, against hundreds for a torch.compile call, most of which is dynamo's "
    "guards and the Python wrapper, not kernels. The like-for-like column is 'Python call' "
    "(`Program.run`: a ctypes call whose Python side checks every input/weight buffer and allocates "
    "the outputs), which is itself most of the time at these sizes.",
    "- **2 threads.** At these sizes a kernel is microseconds of work, so a second thread buys "
    "little and its fork/join costs show (2-thread rows are often slower, ours included). On a 2-core "
    "box shared with other jobs (load average above) a team of 2 also waits for a busy core: "
    "2-thread medians then jump to milliseconds, eager included. A slower result is reported as "
    "measured.",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="all", help="comma-separated models for the agreement (default all)")
    ap.add_argument("--timing", default="all", help="comma-separated models to time, 'all' or 'none'")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--time-limit", type=float, default=5.0, help="CP-SAT seconds per plan")
    ap.add_argument("--out", default=str(HERE / "results" / "torch.md"))
    args = ap.parse_args()
    load0 = os.getloadavg()
    hw = load_hardware("detect")
    names = list(MODELS) if args.models == "all" else args.models.split(",")
    timed = [] if args.timing == "none" else names if args.timing == "all" else args.timing.split(",")
    agree, plans = agreement(hw, sorted(set(names) | set(timed), key=list(MODELS).index), args.time_limit)
    agree = [r for r in agree if r["model"] in names]
    times = timing(timed, hw, plans, args.rounds, args.calls, args.time_limit)
    Path(args.out).write_text(render(describe(), agree, times, args, (load0, os.getloadavg())))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
