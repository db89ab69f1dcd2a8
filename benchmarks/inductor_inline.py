"""Inductor with its lowering's recomputation (``inductor-recompute``) against real torch.compile and
against the covering optimum, written to ``benchmarks/results/inductor_inline.md``.

1. For every model of :data:`solverfuse.torch.models.MODELS`: the real kernels read as a partition
   (``RealPlan.plan``) and as a covering (``RealPlan.covering``: an op Inductor computes in several
   loops is in each), the edge agreement of the ``inductor`` partition with the first and of
   ``inductor-recompute`` with the second (:func:`solverfuse.torch.edge_agreement`), their traffic
   under the one cost model, and what our rules changed in a real kernel. ``BEFORE`` holds the
   partition agreement on main before this change (``benchmarks/results/torch.md``).
2. Never below the optimum of its space: ``inductor-recompute`` traffic vs the covering optimum's
   proven bound (``api.plan(strategy="covering")``, 2 workers, 10 s) on the torch models' graphs, the
   example graphs and the ONNX light models, with the partition ``inductor`` and the partition
   optimum beside it, and the predicted time (``cost.covering_time_ps``: recomputed flops counted).

Usage: ``python benchmarks/inductor_inline.py [--quick]`` (``--quick``: section 1 only; about
half a minute; the full run about two minutes on 2 shared cores). Needs torch + transformers.
"""
from __future__ import annotations

import os
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

import solverfuse.torch as st  # noqa: E402
from solverfuse import cost  # noqa: E402
from solverfuse.greedy import greedy_plan, recomputing_plan  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.plans import plan_kernels  # noqa: E402
from solverfuse.api import plan as make_plan  # noqa: E402
from solverfuse.torch.models import MODELS  # noqa: E402

#: (agree, edges, ops moved out) of the partition reading on main before this change
#: (benchmarks/results/torch.md, "agreement" and "ops moved out by our rules").
BEFORE = {"bert": (92, 92, 1), "gpt2": (88, 88, 0), "llama": (127, 128, 6), "t5": (99, 101, 0),
          "distilbert": (85, 85, 1), "vit": (88, 88, 0), "convnext": (82, 82, 1), "resnet": (123, 123, 0)}
#: (agree, edges, ops changed) of the covering reading before non-convex kernels were allowed (both
#: the real reading and ``inductor-recompute`` kept every kernel convex; rerun of this script at
#: commit 7a518c4, same machine and day).
BEFORE_COVER = {"bert": (92, 92, 1), "gpt2": (88, 88, 2), "llama": (127, 128, 4), "t5": (99, 101, 2),
                "distilbert": (85, 85, 1), "vit": (88, 88, 2), "convnext": (82, 82, 1), "resnet": (123, 123, 0)}


def pct(a: int, n: int) -> str:
    return f"{a}/{n} = {100 * a / max(n, 1):.1f}%"


def recomputed(plan) -> int:
    seen: dict[str, int] = {}
    for grp in plan.groups:
        for v in grp.nodes:
            seen[v] = seen.get(v, 0) + 1
    return sum(1 for n in seen.values() if n > 1)


def load() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def real_section(hw) -> tuple[list[str], list]:
    lines = ["## Real torch.compile vs the reproductions", "",
             "Agreement: producer->consumer edges on which two plans agree. Partition: `inductor` vs the real",
             "kernels read as a partition (an op Inductor computes in several loops held by the first);",
             "before: the same on main before this change. Covering: `inductor-recompute` vs the real",
             "kernels read as a covering (the op in every kernel computing it); an edge's state is, over",
             "the kernels computing the consumer, whether each computes the producer too. Recomputed: ops",
             "in more than one kernel. Changed: ops our rules moved out of a real kernel (partition:",
             "convexity) / read from memory instead of recomputed or written by a kernel of their own",
             "(covering; kernels need not be convex). Covering before: with convex kernels only (both",
             "readings), the changed ops in parentheses.", "",
             "| model | ops | agreement partition (before) | partition | covering (before, changed) | covering "
             "| real traffic partition / covering | repro partition / covering | recomputed real / repro "
             "| changed partition / covering |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes, graphs = [], []
    for name, build in MODELS.items():
        model, inputs = build()
        real = st.inductor_plan(model, inputs, hw, name=name)
        g = real.graph
        part = greedy_plan(g, hw, "inductor")
        cover = recomputing_plan(g, hw, "inductor")
        a1, n = st.edge_agreement(g, real.plan.group_nodes(), part.group_nodes())
        rc = real.covering
        a2 = st.edge_agreement(g, rc.group_nodes(), cover.group_nodes())[0] if rc else None
        b, bc = BEFORE.get(name), BEFORE_COVER.get(name)
        lines.append(f"| {name} | {len(g.nodes)} | {pct(b[0], b[1]) if b else '-'} | {pct(a1, n)} | "
                     f"{f'{pct(bc[0], bc[1])} ({bc[2]})' if bc else '-'} | "
                     f"{pct(a2, n) if a2 is not None else 'no reading'} | {real.plan.traffic_bytes:,} / "
                     f"{rc.traffic_bytes if rc else 0:,} | {part.traffic_bytes:,} / {cover.traffic_bytes:,} | "
                     f"{recomputed(rc) if rc else '-'} / {recomputed(cover)} | "
                     f"{len(real.repaired)} / {len(real.covering_repaired)} |")
        notes += [f"- {name}: {r[:220]}" for r in real.covering_repaired]
        graphs.append((f"torch {name}", g, rc.traffic_bytes if rc else None))
        print(name, a1, a2, n, flush=True)
    lines += ["", "What our rules change in a real kernel of the covering reading (an op read from memory",
              "instead of recomputed, or written by a kernel of its own when every kernel computing it also",
              "reads a value computed from it):", ""] + (notes or ["- nothing"])
    return lines, graphs


def optimum_section(hw, graphs, limit: float) -> list[str]:
    lines = ["## Never below the covering optimum", "",
             f"Traffic in bytes; the optima from `solverfuse.api.plan` (strategy `optimal` / `covering`, {limit:g} s,",
             "2 workers, hinted with the greedy partitions; the covering's proven bound beside it). Time: `cost.covering_time_ps` of each plan's kernels",
             "(recomputed flops counted in every kernel holding them), in microseconds.", "",
             "Real: the real torch.compile kernels read as a covering (`RealPlan.covering`, torch models only).", "",
             "| graph | partition optimum | covering optimum (bound) | inductor | inductor-recompute | real covering "
             "| recomputed ops | time inductor / -recompute us | >= bound |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, g, *real in graphs:
        real_bytes = real[0] if real else None
        opt = make_plan(g, hw, strategy="optimal", time_limit=limit, workers=2)
        cov = make_plan(g, hw, strategy="covering", time_limit=limit, workers=2)
        part = greedy_plan(g, hw, "inductor")
        rec = recomputing_plan(g, hw, "inductor")
        bound = cov.bound_bytes if cov.bound_bytes is not None else cov.traffic_bytes
        tp = cost.covering_time_ps(g, plan_kernels(part), hw) / 1e6
        tr = cost.covering_time_ps(g, plan_kernels(rec), hw) / 1e6
        ok = "yes" if min(rec.traffic_bytes, part.traffic_bytes, real_bytes or bound) >= bound else "**NO**"
        lines.append(f"| {name} | {opt.traffic_bytes:,} | {cov.traffic_bytes:,} ({bound:,}, {cov.status}) | "
                     f"{part.traffic_bytes:,} | {rec.traffic_bytes:,} | "
                     f"{f'{real_bytes:,}' if real_bytes is not None else '-'} | {recomputed(rec)} | "
                     f"{tp:.2f} / {tr:.2f} | {ok} |")
        print(name, rec.traffic_bytes, bound, flush=True)
    return lines


def main(argv: list[str]) -> None:
    hw = load_hardware("detect")
    start, before = time.monotonic(), load()
    lines = ["# Inductor's lowering recomputation (`inductor-recompute`)", "",
             "Written by `benchmarks/inductor_inline.py`; hardware profile `detect` (this machine). "
             f"Load average before: {before}."]
    body, graphs = real_section(hw)
    lines += [""] + body
    if "--quick" not in argv:
        from recompute import graphs as onnx_graphs
        more = list(onnx_graphs())  # (name, graph)
        lines += [""] + optimum_section(hw, graphs + more, 10.0)
    lines += ["", f"Load average after: {load()}; wall {time.monotonic() - start:.0f} s (a shared 2-core machine)."]
    out = HERE / "results" / "inductor_inline.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
