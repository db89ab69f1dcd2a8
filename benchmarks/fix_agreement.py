"""Real Inductor plans under our rules: what the rules reject, and how far the ``inductor``
reproduction agrees, written to ``benchmarks/results/fix.md``.

For every model of :data:`solverfuse.torch.models.MODELS`: the ops of real kernels our rules made
us move out (``.repaired``) or reject (``.illegal``), and the edge agreement of the ``inductor``
reproduction with ``inductor-real``. ``BEFORE`` holds the numbers measured on the integration
branch before the rule fixes (benchmarks/results/torch.md, same models and hardware profile).

Usage: ``python benchmarks/fix_agreement.py`` (about half a minute on 2 cores; needs torch).
"""
from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="sf-inductor-"))
warnings.filterwarnings("ignore")

import solverfuse.torch as st  # noqa: E402
from solverfuse.greedy import greedy_plan  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.torch.models import MODELS  # noqa: E402

#: (agree, edges, ops moved out) per model before the fixes (benchmarks/results/torch.md on integ).
BEFORE = {"bert": (88, 92, 8), "gpt2": (83, 88, 4), "llama": (109, 128, 6), "t5": (68, 101, 30),
          "distilbert": (82, 85, 3), "vit": (83, 88, 0), "convnext": (82, 82, 1), "resnet": (89, 123, 37)}


def main() -> None:
    hw = load_hardware("detect")
    lines = ["# Real Inductor kernels under our rules (helper `fix`)", "",
             "Written by `benchmarks/fix_agreement.py`; hardware profile `detect`. Before: the integration",
             "branch's `benchmarks/results/torch.md`. Moved out: ops of a real kernel our rules made us",
             "move out of its group (`.repaired`); illegal: real groups rejected outright (`.illegal`).", "",
             "| model | agreement before | agreement after | moved out before | moved out after | illegal after |",
             "|---|---:|---:|---:|---:|---:|"]
    notes = []
    for name, build in MODELS.items():
        model, inputs = build()
        real = st.inductor_plan(model, inputs, hw, name=name)
        repro = greedy_plan(real.graph, hw, "inductor")
        agree, edges = st.edge_agreement(real.graph, real.plan.group_nodes(), repro.group_nodes())
        b = BEFORE.get(name)
        before = f"{b[0]}/{b[1]} = {100 * b[0] / b[1]:.1f}%" if b else "-"
        lines.append(f"| {name} | {before} | {agree}/{edges} = {100 * agree / max(edges, 1):.1f}% | "
                     f"{b[2] if b else '-'} | {len(real.repaired)} | {len(real.illegal)} |")
        notes += [f"- {name}: {r}" for r in real.repaired + real.illegal]
        print(name, agree, edges, flush=True)
    lines += ["", "What is still moved out: no fusion rule or capacity limit any more -- convexity only: a view",
              "or copy Inductor lists in a kernel whose other ops are reached from it through another",
              "kernel (an extern call, or a view Inductor inlines into several kernels, which a partition",
              "holds in one group only):", ""] + (notes or ["- nothing"])
    out = HERE / "results" / "fix.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
