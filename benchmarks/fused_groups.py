"""Where a fused plan loses to the unfused one, group by group: every kernel of both plans timed
with ``transformers_speed.profile`` (a time-stamp counter around each kernel call, the fewest
cycles over the runs), and each fused group of the optimal plan set beside the sum of the unfused
kernels of its nodes. A ratio above 1 is a group whose C is slower than running its nodes apart.

    PYTHONPATH=. python benchmarks/fused_groups.py convnext_dynamo clip_vision_ts [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))

from transformers_speed import loaded, profile  # noqa: E402

from solverfuse.emit.build import translation_units  # noqa: E402


def compare(name: str, threads: int, cache: Path, repeats: int) -> list[dict]:
    """One row per fused group of ``name``'s optimal plan: its time and its nodes' unfused time."""
    with loaded(name, cache) as (_, g, feeds, consts, plans):
        # each plan in the translation units compile_plan gives it (they change GCC's specialisation)
        times = {k: {gi: s for s, gi, _ in profile(p, g, feeds, consts, threads, str(cache / "c"), repeats,
                                                   translation_units(len(p.groups)))}
                 for k, p in plans.items()}
    node_secs = {}
    for gi, grp in enumerate(plans["unfused"].groups):
        for v in grp.nodes:
            node_secs[v] = times["unfused"].get(gi, 0.0)
    rows = []
    for gi, grp in enumerate(plans["optimal"].groups):
        apart = sum(node_secs.get(v, 0.0) for v in grp.nodes)
        rows.append({"group": gi, "ops": "+".join(g.index.node[v].op for v in grp.nodes),
                     "first": grp.nodes[0], "fused_us": 1e6 * times["optimal"].get(gi, 0.0),
                     "apart_us": 1e6 * apart})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-transformers-speed"))
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}")
    for name in args.models:
        rows = compare(name, args.threads, Path(args.cache), args.repeats)
        fused, apart = sum(r["fused_us"] for r in rows), sum(r["apart_us"] for r in rows)
        print(f"\n{name} ({args.threads} thread): fused {fused:.1f} us, its nodes apart {apart:.1f} us")
        print("| group | fused µs | apart µs | ratio | ops | first node |\n|---|---|---|---|---|---|")
        for r in sorted(rows, key=lambda r: r["apart_us"] - r["fused_us"]):
            ratio = r["fused_us"] / r["apart_us"] if r["apart_us"] else float("nan")
            print(f"| {r['group']} | {r['fused_us']:.2f} | {r['apart_us']:.2f} | {ratio:.2f} | {r['ops']} | {r['first']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
