"""Traffic of the unfused and the optimal plan of every ONNX "light" model under the cost model of
the checkout on PYTHONPATH (helper `rules`: views free, gather-aware reads, streaming reductions).

Usage: ``python benchmarks/rules_traffic.py OUT.json [--before BEFORE.json --md OUT.md]``: writes the
numbers as JSON, and with ``--before`` a markdown table comparing them with an earlier run.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx

from solverfuse import cost
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.solve import solve

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def measure() -> dict:
    hw = load_hardware("nvidia-h100")
    out = {}
    for path in sorted(LIGHT.glob("light_*.onnx")):
        g = load_graph(path)
        plan = solve(g, hw, workers=1, time_limit=60)
        out[path.stem[len("light_"):]] = {"ops": len(g.nodes), "unfused": cost.unfused_traffic(g),
                                          "optimal": plan.traffic_bytes, "status": plan.status,
                                          "q_min": cost.q_min(g)}
        print(path.stem, out[path.stem[len("light_"):]], flush=True)
    return out


def table(before: dict, after: dict) -> str:
    lines = ["| model | ops | unfused before | unfused after | optimal before | optimal after | Q_min before | Q_min after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, a in after.items():
        b = before.get(name, {})
        lines.append(f"| {name} | {a['ops']} | {b.get('unfused', 0):,} | {a['unfused']:,} | "
                     f"{b.get('optimal', 0):,} ({b.get('status', '-')}) | {a['optimal']:,} ({a['status']}) | "
                     f"{b.get('q_min', 0):,} | {a['q_min']:,} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = sys.argv[1:]
    res = measure()
    Path(args[0]).write_text(json.dumps(res, indent=1))
    if "--before" in args:
        before = json.loads(Path(args[args.index("--before") + 1]).read_text())
        md = Path(args[args.index("--md") + 1])
        md.write_text("# Light ONNX models: traffic before / after the compiler-reality cost rules\n\n"
                      "nvidia-h100 profile, bytes, `solve(workers=1, time_limit=60)`.\n"
                      "Written by `benchmarks/rules_traffic.py`.\n\n" + table(before, res))
