"""Per fused kernel of the optimal plan: its time against the summed times of the unfused kernels
(one op each) it replaces, both measured with the driver's per-call time-stamp counter
(``transformers_speed.profile``), to find fused kernels slower than no fusion. ``--compare``
writes benchmarks/results/fusespeed.md from two ``transformers_speed.py`` result files (the tree
before and after the emitter changes, run one after the other): optimal/unfused per model.

    PYTHONPATH=. python benchmarks/fusespeed.py --models gpt2_ts,efficientnet_ts [--threads 1,2] [--top 6]
    PYTHONPATH=. python benchmarks/fusespeed.py --compare before.md after.md [--out results/fusespeed.md]
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


def _rows(path: str) -> tuple[dict, str]:
    """(model, threads) -> (optimal µs, unfused µs, ORT µs) of a transformers_speed.py result file
    (its last section), and that section's noise line."""
    text = Path(path).read_text().split("# Exported transformers")[-1]
    noise = next((ln for ln in text.splitlines() if ln.startswith("**Noise:**")), "")
    out = {}
    for ln in text.splitlines():
        c = [x.strip() for x in ln.strip().strip("|").split("|")]
        if len(c) == 10 and c[1].isdigit() and "error" not in ln:
            out[(c[0], int(c[1]))] = (float(c[5]), float(c[6]), float(c[4]))
    return out, noise


def compare_tables(before: str, after: str) -> list[str]:
    """The markdown of the before/after comparison (median and worst optimal/unfused per thread
    count, then every model)."""
    import statistics
    b, nb = _rows(before)
    a, na = _rows(after)
    keys = sorted(set(b) & set(a), key=lambda k: (k[1], k[0]))
    out = ["| threads | models | median optimal/unfused before | after | worst before | worst after | "
           "above 1.10 before | after | median optimal/ORT before | after |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for th in sorted({k[1] for k in keys}):
        ks = [k for k in keys if k[1] == th]
        rb = {k: b[k][0] / b[k][1] for k in ks}
        ra = {k: a[k][0] / a[k][1] for k in ks}
        wb, wa = max(ks, key=rb.get), max(ks, key=ra.get)
        med_b, med_a = statistics.median(rb.values()), statistics.median(ra.values())
        out.append(f"| {th} | {len(ks)} | {med_b:.2f} | {med_a:.2f} | "
                   f"{rb[wb]:.2f} ({wb[0]}) | {ra[wa]:.2f} ({wa[0]}) | {sum(x > 1.1 for x in rb.values())} | "
                   f"{sum(x > 1.1 for x in ra.values())} | {statistics.median(b[k][0] / b[k][2] for k in ks):.2f} | "
                   f"{statistics.median(a[k][0] / a[k][2] for k in ks):.2f} |")
    out += ["", "| model | threads | before: optimal µs | unfused µs | optimal/unfused | after: optimal µs | "
            "unfused µs | optimal/unfused |", "|---|---|---|---|---|---|---|---|"]
    for k in keys:
        (ob, ub, _), (oa, ua, _) = b[k], a[k]
        out.append(f"| {k[0]} | {k[1]} | {ob:.1f} | {ub:.1f} | {ob / ub:.2f} | {oa:.1f} | {ua:.1f} | {oa / ua:.2f} |")
    return ["Before: " + nb.replace("**Noise:** ", ""), "", "After: " + na.replace("**Noise:** ", ""), ""] + out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--out", default=str(HERE / "results" / "fusespeed.md"))
    ap.add_argument("--title", default="")
    ap.add_argument("--note", default="", help="a line under the title (how the runs were made)")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--top", type=int, default=6)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-transformers-speed"))
    args = ap.parse_args()
    if args.compare:
        from report import write_results
        text = [f"# Fused vs unfused C, before/after ({args.title or ''})", "",
                "Written by `benchmarks/fusespeed.py --compare` from two `benchmarks/transformers_speed.py` runs, "
                "one after the other on the same machine (plans cached, so the same plans): the tree before "
                "and after the emitter changes. Read the ratios within each run; the loads differ.", "",
                *([args.note, ""] if args.note else []), *compare_tables(*args.compare)]
        print(write_results(args.out, text, True))
        return 0
    for name in args.models.split(","):
        for th in map(int, args.threads.split(",")):
            rows, (to, tu) = compare(name, th, Path(args.cache))
            load = os.getloadavg()[0]
            print(f"== {name} {th}t: kernels optimal {to:.1f} µs, unfused {tu:.1f} µs (load {load:.1f})")
            for o, u, gi, ops in rows[:args.top]:
                print(f"  g{gi}: fused {o:.2f} µs vs unfused {u:.2f} µs (+{o - u:.2f}) [{ops[:110]}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
