"""Paired per-kernel A/B of two source trees on one model: each tree builds the model's plan as
instrumented C (:func:`zoo_profile.instrument`, in a subprocess with that tree first on the path),
then this process loads both libraries and runs them in alternation (each first in every other
round), keeping each kernel's fastest
time (the calling thread's CPU time at 1 thread). Load and other jobs shift both sides alike, so
the per-kernel ratio after/before is steadier than two separate zoo_profile runs.

    PYTHONPATH=. python benchmarks/conv_ab.py light:resnet50 --before /path/to/other/tree [--top 30]

At 1 thread only: with two libraries' thread teams in one process, the per-kernel times of a
2-thread run did not add up (ShuffleNet: kernels summing to 1.3 ms of a 3.4 ms run, its stem at
7 us); ``zoo_profile.py --threads 2`` profiles one library at a time.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Run in a subprocess with a tree first on sys.path: build its instrumented library, print JSON.
BUILD = r"""
import json, sys
from pathlib import Path
tree, spec, threads, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path[:0] = [tree + "/benchmarks", tree]
from zoo_profile import instrument, HW
from gemm_speed import graph_for as make_graph
from solverfuse import api, cost
from solverfuse.emit.build import build
from solverfuse.emit.program import buffer_table, render
g = make_graph(spec)
plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
files = render(plan, g, threads=threads)
files.pop("buffers.json")
files["model.c"] = instrument(files["model.c"], "CLOCK_THREAD_CPUTIME_ID" if threads == 1 else "CLOCK_MONOTONIC")
so = str(build(files, threads=threads, cache_dir=cache))
groups = []
for grp in plan.groups:
    ops = [g.index.node[v].op for v in grp.nodes]
    shape = g.tensors[grp.writes[0]].shape if grp.writes else ()
    groups.append({"ops": "+".join(dict.fromkeys(ops)), "shape": list(shape), "flops": cost.group_flops(g, grp.nodes),
                   "name": grp.nodes[0]})
table = [{"role": b.role, "tensor": b.tensor, "dtype": b.dtype, "shape": list(b.shape)} for b in buffer_table(plan, g)]
print(json.dumps({"so": so, "groups": groups, "table": table}))
"""


def build_tree(tree: str, spec: str, threads: int, cache: str) -> dict:
    """The instrumented library of ``tree``'s plan of ``spec`` (path, groups, buffer table)."""
    r = subprocess.run([sys.executable, "-c", BUILD, tree, spec, str(threads), cache], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": tree}, check=False)
    if r.returncode:
        raise SystemExit(f"building {spec} in {tree} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def runner(info: dict, spec: str):
    """(run once, seconds array) of a built library, with seeded inputs and constants."""
    from bound import bind_buffers
    from solverfuse.emit.data import constants, random_inputs
    from gemm_speed import graph_for as make_graph
    g = make_graph(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    arrays, ptrs = bind_buffers(info["table"], x, cs)
    lib = ctypes.CDLL(info["so"])
    lib.sf_init()
    n = len(info["groups"])
    secs = (ctypes.c_double * (n + 1)).in_dll(lib, "sf_group_secs")
    lib.sf_run(ptrs)  # packs the weights

    def run() -> list[float]:
        for i in range(n):
            secs[i] = 0.0
        if lib.sf_run(ptrs):
            raise RuntimeError("run failed")
        return [secs[i] for i in range(n)]
    run.keep = (lib, arrays, ptrs)
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--before", required=True, help="the other source tree (its solverfuse and benchmarks)")
    ap.add_argument("--threads", type=int, default=1, choices=[1], help="1 only (see the module's docstring)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-gemm-speed"))
    args = ap.parse_args(argv)
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    infos = [build_tree(t, args.spec, args.threads, args.cache) for t in (args.before, str(HERE.parent))]
    if [g["name"] for g in infos[0]["groups"]] != [g["name"] for g in infos[1]["groups"]]:
        print("note: the two trees' plans differ; kernels are matched by first node")
    runs = [runner(i, args.spec) for i in infos]
    best = [dict() for _ in runs]
    for rnd in range(args.rounds):
        for side in ((0, 1) if rnd % 2 == 0 else (1, 0)):  # each side first in every other round
            for i, s in enumerate(runs[side]()):
                name = infos[side]["groups"][i]["name"]
                best[side][name] = min(best[side].get(name, float("inf")), s)
    tot = [sum(b.values()) for b in best]
    print(f"{args.spec} {args.threads} thread(s), {args.rounds} alternating rounds (load {os.getloadavg()[0]:.1f}): "
          f"kernel sum before {1e3 * tot[0]:.2f} ms, after {1e3 * tot[1]:.2f} ms, after/before {tot[1] / tot[0]:.3f}")
    print("| first node | ops | out shape | before ms | after ms | after/before | after GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    groups = {g["name"]: g for g in infos[1]["groups"]}
    common = [n for n in best[1] if n in best[0]]
    for n in sorted(common, key=lambda n: -best[0][n])[:args.top]:
        g, a, b = groups[n], best[0][n], best[1][n]
        gf = f"{g['flops'] / b / 1e9:.1f}" if g["flops"] and b else "-"
        ratio = f"{b / a:.3f}" if a else "-"
        print(f"| {n} | {g['ops']} | {g['shape']} | {1e3 * a:.3f} | {1e3 * b:.3f} | {ratio} | {gf} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
