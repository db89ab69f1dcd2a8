"""TVM with its own FuseOps partition vs TVM with solverfuse's optimal plan; the reproduction's
agreement with the real FuseOps. Writes ``benchmarks/results/tvm.md`` (+ ``tvm.json``).

For each model (the nine ONNX light models with seeded weights, and the transformer exports under
``tests/data/models`` that solverfuse imports):

* **agreement** -- edge agreement of ``greedy.tvm`` with ``tvm-real`` (TVM 0.27 Relax FuseOps mapped
  onto our node names), and each one's planned traffic and gap to the optimal plan (nvidia-h100
  profile, as ``solverfuse compare``);
* **build** -- the same pre-fusion Relax module fused by FuseOps or along the optimal plan
  (``apply_plan``), FuseTIR and the same later passes, ``llvm``, run in the Relax VM with the same
  threads (``TVM_NUM_THREADS``, default 1): kernels, planned traffic, median time, and the largest
  error against ONNX Runtime.

Usage: ``python benchmarks/tvm_bench.py [--models a,b] [--no-build] [--repeat N]``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from importlib.metadata import version  # noqa: E402

from benchmarks.machine import describe  # noqa: E402
from solverfuse import greedy  # noqa: E402
from solverfuse.api import plan as make_plan  # noqa: E402
from solverfuse.errors import SolverfuseError  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.plans import build_plan  # noqa: E402
from solverfuse.tvm import (apply_plan, build, count_kernels, edge_agreement, fuse_ops,  # noqa: E402
                            fuseops_partition, median_seconds, partition_problems, prepare, run)
from solverfuse.light import seeded_weights  # noqa: E402
from solverfuse.tvm.build import seeded_inputs  # noqa: E402

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]
EXPORTS = ROOT / "tests" / "data" / "models"
OUT = ROOT / "benchmarks" / "results"
HW = load_hardware("nvidia-h100")


def model_paths(names: list[str] | None) -> list[tuple[str, Path]]:
    light_dir = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    out = [(n, light_dir / f"light_{n}.onnx") for n in LIGHT]
    out += [(p.stem, p) for p in sorted(EXPORTS.glob("*.onnx"))]
    return [(n, p) for n, p in out if not names or n in names]


def bench(name: str, path: Path, do_build: bool, repeat: int) -> dict:
    model = seeded_weights(onnx.load(path), seed=0)
    t0 = time.perf_counter()
    prep = prepare(model)
    g = prep.graph
    real = fuseops_partition(prep)
    read_s = time.perf_counter() - t0
    ours = greedy.tvm(g, HW)
    agree, differ = edge_agreement(g, real.groups, ours)
    problems = partition_problems(g, real.groups, HW)
    opt = make_plan(g, HW, strategy="optimal", time_limit=10, workers=1)
    row = dict(model=name, ops=len(g.nodes), edges=sum(len(g.index.succs[v]) for v in g.index.order),
               agreement=agree, differ=len(differ), real_groups=len(real.groups), repro_groups=len(ours),
               folded=len(real.folded), split=len(real.split), problems=problems, read_seconds=read_s,
               optimal_bytes=opt.traffic_bytes, optimal_status=opt.status,
               repro_bytes=build_plan(g, HW, ours, strategy="tvm").traffic_bytes)
    row["real_bytes"] = build_plan(g, HW, real.groups, strategy="tvm-real").traffic_bytes if not problems else None
    row["why"] = cut_edges(g, real.groups, opt.group_nodes())
    if not do_build:
        return row
    xs = seeded_inputs(g, seed=0)
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    want = ort.InferenceSession(prep.model.SerializeToString(), opts).run(None, dict(zip(g.inputs, xs)))
    for label, mod in (("fuseops", fuse_ops(prep.pre)), ("plan", apply_plan(prep, opt))):
        exe = build(mod)
        got = run(exe, xs)
        err = max(float(np.abs(a - b).max() / (np.abs(b).max() or 1.0)) for a, b in zip(got, want))
        row[f"{label}_kernels"] = count_kernels(mod)
        row[f"{label}_rel_err"] = err
        row[f"{label}_seconds"] = median_seconds(exe, xs, repeat=repeat, number=1)
    return row


def cut_edges(g, real: list[list[str]], best: list[list[str]], top: int = 3) -> str:
    """The op pairs whose edges TVM cuts and the optimal plan fuses (most bytes first): what the
    real partition's extra traffic is made of."""
    from collections import Counter
    gr = {v: i for i, grp in enumerate(real) for v in grp}
    gb = {v: i for i, grp in enumerate(best) for v in grp}
    nbytes: Counter = Counter()
    count: Counter = Counter()
    for u in g.index.order:
        for w in g.index.succs[u]:
            if gr[u] != gr[w] and gb[u] == gb[w]:
                key = f"{g.index.node[u].op}->{g.index.node[w].op}"
                nbytes[key] += sum(g.nbytes(t) for t in g.index.node[u].outputs if t)
                count[key] += 1
    return ", ".join(f"{k} x{count[k]}" for k, _ in nbytes.most_common(top)) or "-"


def pct(a, b) -> str:
    return "n/a" if a is None or not b else f"{100.0 * (a - b) / b:.1f}"


def mib(b) -> str:
    return "n/a" if b is None else f"{b / 2**20:.2f}"


def markdown(rows: list[dict], machine: dict, threads: str) -> str:
    lines = ["# TVM: the real FuseOps partition, its reproduction, and TVM built along the optimal plan", "",
             f"Apache TVM {machine.get('apache-tvm', '?')} Relax, `llvm`, opt level 3; "
             f"TVM_NUM_THREADS={threads}. Machine: {machine.get('cpu', '?')}, shared with other jobs "
             "(timings are noisy: medians of repeated runs, compare within a row only). "
             "Written by `benchmarks/tvm_bench.py`.", "",
             "## Agreement of the `tvm` reproduction with TVM's real FuseOps", "",
             "Edge agreement = share of producer->consumer edges both partitions fuse or both cut. Traffic is "
             "the cost model's (nvidia-h100 profile, as `solverfuse compare`); gap = traffic above the optimal plan.", "",
             "| model | ops | edges | real kernels | repro groups | agreement % | folded | split | optimal | tvm-real | gap % | repro (`tvm`) | gap % | edges TVM cuts, the optimum fuses (by bytes) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ops']} | {r['edges']} | {r['real_groups']} | {r['repro_groups']} | "
                     f"{100 * r['agreement']:.1f} | {r['folded']} | {r['split']} | {mib(r['optimal_bytes'])} MiB | "
                     f"{mib(r['real_bytes'])} MiB | {pct(r['real_bytes'], r['optimal_bytes'])} | {mib(r['repro_bytes'])} MiB | "
                     f"{pct(r['repro_bytes'], r['optimal_bytes'])} | {r.get('why', '')} |")
    built = [r for r in rows if "plan_seconds" in r]
    if built:
        lines += ["", "## TVM-FuseOps vs TVM with the optimal plan", "",
                  "Same pre-fusion module, same passes after fusion, same target and threads: only the partition "
                  "differs. Kernels = `call_tir` launches after FuseTIR; planned traffic = the cost model's bytes of "
                  "each partition; error = max |TVM - ONNX Runtime| / max |ONNX Runtime| on seeded weights and inputs.", "",
                  "| model | kernels FuseOps | kernels plan | traffic FuseOps | traffic plan | median FuseOps | median plan | plan/FuseOps | error FuseOps | error plan |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in built:
            lines.append(f"| {r['model']} | {r['fuseops_kernels']} | {r['plan_kernels']} | {mib(r['real_bytes'])} MiB | "
                         f"{mib(r['optimal_bytes'])} MiB | {1e3 * r['fuseops_seconds']:.2f} ms | {1e3 * r['plan_seconds']:.2f} ms | "
                         f"{r['plan_seconds'] / r['fuseops_seconds']:.2f} | {r['fuseops_rel_err']:.1e} | {r['plan_rel_err']:.1e} |")
    lines += ["", "## What explains the differences", "", *FINDINGS]
    if built:
        ratios = [r["plan_seconds"] / r["fuseops_seconds"] for r in built]
        geo = float(np.exp(np.mean(np.log(ratios))))
        lines += ["", f"Over the {len(built)} built models the geometric mean of plan/FuseOps time is {geo:.2f} "
                  f"(range {min(ratios):.2f}-{max(ratios):.2f}); kernels fall from "
                  f"{sum(r['fuseops_kernels'] for r in built)} to {sum(r['plan_kernels'] for r in built)} in all."]
    return "\n".join(lines) + "\n"


FINDINGS = [
    "* **Agreement.** `greedy.tvm` now reproduces Relax FuseOps edge for edge on every model above. "
    "What made the difference was giving each op the pattern kind TVM's `AnnotateTIROpPattern` gives "
    "its *legalized* PrimFunc, not the Relay registration: binary broadcast ops are kElemWise "
    "(so a reduction's epilogue keeps fusing through `x * rsqrt(mean)`), batch_norm is kInjective "
    "(a Conv never absorbs it: every `Conv->BatchNormalization` edge is cut), mean/softmax/layer_norm/"
    "pooling are kOutEWiseFusable (they fuse what follows, never what precedes), `take` is kOpaque, "
    "n-ary Sum/Max/Min/Mean are broadcast_to + stack + a reduction, and constant-only subgraphs are "
    "folded before fusion (t5_ts: 24 nodes).",
    "* **Traffic (tvm-real vs optimal).** The last column lists the edges TVM cuts that the optimal plan "
    "fuses, heaviest first. CNNs: Conv->BatchNormalization (batch_norm is a tuple-returning injective "
    "kernel), BatchNormalization->Sum->Relu (the residual Sum is a reduction over a stack, which ends "
    "its group), Relu->Concat and Conv->Concat (an injective concat is not an elemwise post-dominator). "
    "Transformers: Add->Reshape and MatMul->Reshape (a group led by a MatMul, kOutEWiseFusable, grows only "
    "through elemwise edges, so it stops at the injective Reshape/Transpose that splits heads), Add->LayerNormalization and Pow->ReduceMean (nothing fuses "
    "into a kOutEWiseFusable op), MatMul->Softmax. Where the gap is 0 (AlexNet, VGG19, ZFNet-512, the "
    "small ResNet/MobileNet exports) TVM already makes an optimal partition under the cost model.",
    "* **Time.** The planned-traffic savings do not become time on this target. `tvm.compile`'s default "
    "llvm pipeline schedules nothing: FuseTIR writes one PrimFunc whose member loop nests run one after "
    "the other, and each intermediate stays a full-size buffer allocated inside it (checked on the "
    "fused PrimFuncs: one `alloc_buffer` per internal tensor), so a fused kernel reads and "
    "writes the same bytes as the kernels it replaced. What fusion does remove is VM calls and "
    "graph-level allocations; on these models that is a few percent either way, within the noise of a "
    "shared 2-core machine (single runs for the large light models). Turning planned bytes into time "
    "needs a schedule that inlines producers (MetaSchedule/dlight on a GPU target), which this build "
    "does not use; only the partition differs between the two columns.",
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--no-build", action="store_true", help="agreement and traffic only")
    ap.add_argument("--build-models", default="", help="build only these (default: all selected)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--merge", action="store_true", help="update the rows of an existing tvm.json")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    builds = set(n for n in args.build_models.split(",") if n)
    machine = describe()
    machine["apache-tvm"] = version("apache-tvm")
    old = {}
    if args.merge and (OUT / "tvm.json").exists():
        old = {r["model"]: r for r in json.loads((OUT / "tvm.json").read_text())["rows"]}
    OUT.mkdir(parents=True, exist_ok=True)
    for name, path in model_paths(names):
        try:
            do_build = not args.no_build and (not builds or name in builds)
            row = bench(name, path, do_build, args.repeat)
        except SolverfuseError as e:  # a model solverfuse or TVM cannot import: listed, not fatal
            print(f"{name}: skipped ({e})", file=sys.stderr)
            continue
        old[name] = {**old.get(name, {}), **row}
        print(json.dumps(row), flush=True)
        rows = list(old.values())  # written after every model: a long sweep keeps what it measured
        (OUT / "tvm.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
        (OUT / "tvm.md").write_text(markdown(rows, machine, os.environ["TVM_NUM_THREADS"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
