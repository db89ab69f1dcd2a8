"""Real torch.compile vs solverfuse, written to ``benchmarks/results/torch.md``.

Two parts:

* agreement (every model of :data:`solverfuse.torch.models.MODELS`): the real Inductor plan
  (``inductor-real``, read from its scheduler) vs our ``inductor`` reproduction -- edge agreement,
  kernels, planned traffic -- and what our rules made us change in the real plan;
* timing (``--timing``, a few models): default ``torch.compile`` vs ``torch.compile(backend=
  "solverfuse")`` driven by the optimal plan, CPU, 1 and 2 threads (Inductor bakes the thread
  count into its OpenMP kernels at compile time, so each count is compiled separately): kernels,
  planned traffic, median time of ``repeats`` calls.

Usage: ``python benchmarks/torch_bench.py [--timing MODEL,...] [--repeats N]``.
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
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="sf-inductor-"))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import solverfuse.torch as st  # noqa: E402
from machine import describe  # noqa: E402
from solverfuse.api import plan as make_plan  # noqa: E402
from solverfuse.greedy import greedy_plan  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.torch.models import MODELS  # noqa: E402


def agreement(hw) -> list[dict]:
    rows = []
    for name, build in MODELS.items():
        model, inputs = build()
        real = st.inductor_plan(model, inputs, hw, name=name)
        repro = greedy_plan(real.graph, hw, "inductor")
        best = make_plan(real.graph, hw, strategy="optimal", time_limit=10, workers=1)
        agree, edges = st.edge_agreement(real.graph, real.plan.group_nodes(), repro.group_nodes())
        rows.append(dict(model=name, ops=len(real.graph.nodes), edges=edges, agree=agree,
                         kernels=sum(k.kind != "nop" for k in real.kernels),
                         real_groups=len(real.plan.groups), repro_groups=len(repro.groups),
                         real_bytes=real.plan.traffic_bytes, repro_bytes=repro.traffic_bytes,
                         optimal_bytes=best.traffic_bytes, repaired=real.repaired, illegal=real.illegal))
        print(f"{name}: {agree}/{edges}", flush=True)
    return rows


def _median_seconds(fn, inputs, repeats: int) -> float:
    with torch.no_grad():
        for _ in range(3):
            fn(*inputs)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(*inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def timing(names: list[str], hw, repeats: int) -> list[dict]:
    rows = []
    for name in names:
        model, inputs = MODELS[name]()
        real = st.inductor_plan(model, inputs, hw, name=name)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch._dynamo.reset()
            t0 = time.perf_counter()
            default = torch.compile(model)
            eager_s = _median_seconds(model, inputs, repeats)
            default_s = _median_seconds(default, inputs, repeats)
            default_compile = time.perf_counter() - t0
            torch._dynamo.reset()
            t0 = time.perf_counter()
            ours = torch.compile(model, backend="solverfuse", options={"hardware": hw, "time_limit": 10})
            ours_s = _median_seconds(ours, inputs, repeats)
            ours_compile = time.perf_counter() - t0
            rep = st.last_report()
            multi = [g for g in rep.groups if len(g.nodes) > 1]
            rows.append(dict(model=name, threads=threads, eager_s=eager_s, default_s=default_s, ours_s=ours_s,
                             default_kernels=sum(k.kind != "nop" for k in real.kernels),
                             ours_kernels=sum(k.kind != "nop" for k in rep.kernels),
                             real_bytes=real.plan.traffic_bytes, ours_bytes=rep.plan.traffic_bytes,
                             fused_groups=sum(g.fused for g in multi), multi_groups=len(multi),
                             not_fused=[f"{g.group}: {'; '.join(dict.fromkeys(g.reasons))}"
                                        for g in multi if not g.fused][:3],
                             compile_s=(default_compile, ours_compile)))
            print(f"{name} x{threads}: default {default_s * 1e6:.0f} us, ours {ours_s * 1e6:.0f} us", flush=True)
    return rows


def render(machine: dict, agree: list[dict], times: list[dict], repeats: int) -> str:
    kib = lambda b: f"{b / 1024:.1f} KiB"  # noqa: E731
    out = ["# torch.compile (Inductor, CPU) vs solverfuse", "",
           "Written by `benchmarks/torch_bench.py`. Machine: "
           f"{machine['cpu']}, {machine['cores']} cores, SIMD {', '.join(machine['simd'])}, "
           f"L1d {machine['l1d_bytes']} B, L2 {machine['l2_bytes']} B, L3 {machine['l3_bytes']} B; "
           f"torch {machine['versions']['torch']}; {machine['date_utc']}. A shared 2-core box: other "
           "jobs ran at the same time, so times are noisy (medians shown).", "",
           "## Real Inductor plan vs our `inductor` reproduction", "",
           "Edge agreement: producer->consumer edges on which the two plans agree (both fuse or both "
           "cut). Kernels: the scheduler nodes Inductor generates (generated loops + extern calls). "
           "Traffic: the one cost model on each plan (hardware `detect`).", "",
           "| model | ops | edges | agreement | Inductor kernels | real groups | repro groups | "
           "real traffic | repro traffic | optimal traffic | ops moved out by our rules |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in agree:
        out.append(f"| {r['model']} | {r['ops']} | {r['edges']} | {r['agree']}/{r['edges']} = "
                   f"{100 * r['agree'] / max(r['edges'], 1):.1f}% | {r['kernels']} | {r['real_groups']} | "
                   f"{r['repro_groups']} | {kib(r['real_bytes'])} | {kib(r['repro_bytes'])} | "
                   f"{kib(r['optimal_bytes'])} | {len(r['repaired'])} |")
    rules = sorted({x.split("(", 1)[1].split("'")[0] + "..." if "(" in x else x
                    for r in agree for x in r["repaired"]})
    out += ["", "Rules of ours that rejected part of a real kernel (each is a bug in our rules, "
            "see the report):", ""]
    seen = set()
    for r in agree:
        for x in r["repaired"] + r["illegal"]:
            why = x.split("(", 1)[-1]
            kind = why.split("'")[0] + "..." + (why.split("'")[2] if why.count("'") >= 4 else "")
            if kind not in seen:
                seen.add(kind)
                out.append(f"- {r['model']}: {x}")
    del rules
    if times:
        out += ["", f"## Default torch.compile vs torch.compile driven by the optimal plan", "",
                f"Median of {repeats} calls after 3 warm-up calls; each thread count compiled separately.", "",
                "| model | threads | eager | default torch.compile | solverfuse backend | kernels default / ours "
                "| traffic real / planned | planned groups made one kernel |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in times:
            out.append(f"| {r['model']} | {r['threads']} | {r['eager_s'] * 1e6:.0f} us | "
                       f"{r['default_s'] * 1e6:.0f} us | {r['ours_s'] * 1e6:.0f} us | "
                       f"{r['default_kernels']} / {r['ours_kernels']} | {kib(r['real_bytes'])} / "
                       f"{kib(r['ours_bytes'])} | {r['fused_groups']}/{r['multi_groups']} |")
        out += ["", "Planned groups Inductor did not make one kernel (first three per model):", ""]
        for r in times:
            if r["threads"] == 1:
                for x in r["not_fused"]:
                    out.append(f"- {r['model']}: {x}")
    out += ["", "## What explains the differences", "",
            "- **Planned traffic is not what Inductor runs.** The optimal plan fuses each GEMM/conv "
            "with its epilogue (bias, activation, residual add) -- our op table lets an anchor take "
            "an epilogue. Inductor on CPU calls GEMM and convolution as extern library kernels "
            "(`extern_kernels.addmm/mm/convolution`, no `max_autotune` templates), which take no "
            "epilogue, so every such planned group becomes two kernels (the 'did not make one "
            "kernel' list) and the run moves about as many bytes as default Inductor. The "
            "solverfuse backend therefore mostly reproduces Inductor's own kernels (kernel counts "
            "within 0-2), and times differ by noise plus the few places where the plan cut or "
            "merged differently.",
            "- **Fewer kernels where the plan merges more memory-bound ops** (bert 12 -> 11, llama "
            "20 -> 18): the plan joins LayerNorm/RMSNorm and residual chains Inductor's score-based "
            "pairing leaves apart; at these tiny sizes (hidden 32, 8 tokens) the saving is below "
            "the timer noise.",
            "- **Inductor inlines pointwise producers into consumers while lowering** (before any "
            "fusion decision), so a plan can ask for fewer kernels but not for a cut Inductor's "
            "lowering already removed; the report lists such groups as sharing a kernel.",
            "- **2-thread times are not comparable.** Inductor's kernels and ATen run OpenMP teams of "
            "2 threads on a 2-core box shared with other jobs; when a core is taken, a team waits "
            "(milliseconds instead of microseconds: the 300-440 ms medians above, eager included). "
            "The 1-thread rows are the meaningful ones; a slower result is reported as measured.",
            "- **Agreement below 95%** (llama, t5, resnet; gpt2 and vit at 94%) comes from two "
            "sources: (1) our rules reject parts of real Inductor kernels (listed above: the index "
            "of a Gather computed inside its kernel, several Gathers in one kernel, and the register "
            "estimate counting view ops and weight-only subexpressions, e.g. resnet's two "
            "BatchNorms + residual + ReLU kernel at 42 'registers' > 32), so the real plan is "
            "split there and the reproduction, bound by the same rules, groups those ops "
            "differently; (2) Inductor realises the inputs of its SDPA call in kernels with no FX "
            "origin of their own (llama's rotary embedding, t5's relative position bias), which "
            "the reading maps through the call's arguments, approximately.",
            ]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timing", default="", help="comma-separated models to time (default: none)")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--out", default=str(HERE / "results" / "torch.md"))
    args = ap.parse_args()
    hw = load_hardware("detect")
    agree = agreement(hw)
    times = timing([n for n in args.timing.split(",") if n], hw, args.repeats)
    Path(args.out).write_text(render(describe(), agree, times, args.repeats))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
