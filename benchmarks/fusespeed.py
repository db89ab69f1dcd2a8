"""Per fused kernel of the optimal plan: its time against the summed times of the unfused kernels
(one op each) it replaces, both measured with the driver's per-call time-stamp counter
(``transformers_speed.profile``), to find fused kernels slower than no fusion.

    PYTHONPATH=. python benchmarks/fusespeed.py --models gpt2_ts,efficientnet_ts [--threads 1,2] [--top 6]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import transformers_speed as ts  # noqa: E402
from tests.model_set import MODELS_DIR, load_inputs, materialise  # noqa: E402

from solverfuse.emit.data import constants  # noqa: E402
from solverfuse.onnx_import import import_onnx  # noqa: E402


def compare(name: str, threads: int, cache: Path, repeats: int = 50) -> list[tuple]:
    """(optimal kernel µs, unfused µs of its ops, group index, ops) per optimal kernel, worst
    ratio first, and the two totals."""
    import onnx
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.onnx"
        onnx.save(materialise(MODELS_DIR / f"{name}.onnx", seed=1), str(path))
        g = import_onnx(path)
        feeds, consts = load_inputs(name), constants(g, 0)
        plans = ts.get_plans(name, g, cache / "plans")
        prof = {k: ts.profile(p, g, feeds, consts, threads, str(cache / "c"), repeats) for k, p in plans.items()}
    per_node = {}
    for s, gi, _ in prof["unfused"]:
        for v in plans["unfused"].groups[gi].nodes:
            per_node[v] = s
    rows = []
    for s, gi, ops in prof["optimal"]:
        u = sum(per_node.get(v, 0.0) for v in plans["optimal"].groups[gi].nodes)
        rows.append((1e6 * s, 1e6 * u, gi, ops))
    tot = (sum(r[0] for r in rows), 1e6 * sum(s for s, _, _ in prof["unfused"]))
    return sorted(rows, key=lambda r: r[1] - r[0]), tot


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-transformers-speed"))
    args = ap.parse_args()
    for name in args.models.split(","):
        for th in map(int, args.threads.split(",")):
            rows, (to, tu) = compare(name, th, Path(args.cache))
            print(f"== {name} {th}t: kernels optimal {to:.1f} µs, unfused {tu:.1f} µs (load {os.getloadavg()[0]:.1f})")
            for o, u, gi, ops in rows[:args.top]:
                print(f"  g{gi}: fused {o:.2f} µs vs unfused {u:.2f} µs (+{o - u:.2f}) [{ops[:110]}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
