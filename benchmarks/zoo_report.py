"""Before/after tables of the ONNX-zoo light models (issue 15) from ``gemm_speed.py --section zoo``
runs: per model and thread count, the optimal plan's C / ONNX Runtime before and after, the
unfused plan's C / ORT and optimal / unfused after, the medians, and the thread scaling (time at
1 thread / at 2) of both runtimes. Each run is read from the row lines ``gemm_speed.py`` prints
(its stdout, saved to a file); ``--note`` lines (load, clock, cold builds) go above the tables.

    PYTHONPATH=. python benchmarks/zoo_report.py --before B.log --after A.log --title "..." \\
        [--note "..."] [--out benchmarks/results/zoo.md] [--append]
"""
from __future__ import annotations

import argparse
import ast
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from report import write_results  # noqa: E402  (benchmarks/report.py)


def read_rows(path: str) -> dict[tuple[str, int], dict]:
    """(case, threads) -> the row dict ``gemm_speed.py`` printed for it (rows with an error kept)."""
    rows = {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("{'case'"):
            r = ast.literal_eval(line)
            rows[(r["case"], r["threads"])] = r
    return rows


def ratio(r: dict | None, a: str, b: str = "ort_ms") -> float | None:
    return r[a] / r[b] if r and a in r and b in r else None


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def tables(before: dict, after: dict) -> list[str]:
    """The per-model table, the medians per thread count and the thread scaling."""
    keys = sorted(set(before) | set(after), key=lambda k: (k[1], list(dict.fromkeys(c for c, _ in after)).index(k[0])
                                                           if k[0] in {c for c, _ in after} else 99))
    out = ["| model | threads | ORT ms | after: optimal ms | before: optimal/ORT | after: optimal/ORT | "
           "after: unfused/ORT | after: optimal/unfused |", "|---|---|---|---|---|---|---|---|"]
    for k in keys:
        b, a = before.get(k), after.get(k)
        if a and "error" in a:
            out.append(f"| {k[0]} | {k[1]} | error: {a['error']} | | | | | |")
            continue
        out.append(f"| {k[0]} | {k[1]} | {fmt(a and a.get('ort_ms'))} | {fmt(a and a.get('optimal_ms'))} | "
                   f"{fmt(ratio(b, 'optimal_ms'))} | {fmt(ratio(a, 'optimal_ms'))} | {fmt(ratio(a, 'unfused_ms'))} | "
                   f"{fmt(ratio(a, 'optimal_ms', 'unfused_ms'))} |")
    med = ["| threads | models | median optimal/ORT before | after | worst after (model) | models above 1.0 after |",
           "|---|---|---|---|---|---|"]
    for th in sorted({k[1] for k in keys}):
        bs = [v for k, r in before.items() if k[1] == th and (v := ratio(r, "optimal_ms")) is not None]
        avs = {k[0]: v for k, r in after.items() if k[1] == th and (v := ratio(r, "optimal_ms")) is not None}
        if not avs:
            continue
        worst = max(avs, key=avs.get)
        med.append(f"| {th} | {len(avs)} | {fmt(statistics.median(bs)) if bs else '-'} | {fmt(statistics.median(avs.values()))} | "
                   f"{avs[worst]:.2f} ({worst}) | {sum(v > 1.0 for v in avs.values())} |")
    sc = ["| model | ORT 1t/2t | ours before 1t/2t | ours after 1t/2t |", "|---|---|---|---|"]
    for case in dict.fromkeys(k[0] for k in keys):
        a1, a2, b1, b2 = after.get((case, 1)), after.get((case, 2)), before.get((case, 1)), before.get((case, 2))
        if a1 and a2 and "ort_ms" in a1 and "ort_ms" in a2:
            sc.append(f"| {case} | {a1['ort_ms'] / a2['ort_ms']:.2f} | {fmt(ratio(b1, 'optimal_ms') and b1['optimal_ms'] / b2['optimal_ms'] if b1 and b2 and 'optimal_ms' in b2 else None)} | "
                      f"{a1['optimal_ms'] / a2['optimal_ms']:.2f} |")
    return [*med, "", *out, ""] + (["Thread scaling (time at 1 thread / time at 2 threads, the same run):", "", *sc, ""]
                                   if len(sc) > 2 else [])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--title", required=True)
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--out", default=str(HERE / "results" / "zoo.md"))
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args(argv)
    text = [f"# {args.title}", "", "Written by `benchmarks/zoo_report.py` from two `benchmarks/gemm_speed.py "
            "--section zoo` runs (before: the tree the branch started from; after: this branch), each timing "
            "the optimal plan's C, the unfused plan's C and ONNX Runtime interleaved, the fastest of its rounds.", ""]
    for n in args.note:
        text += [n, ""]
    text += tables(read_rows(args.before), read_rows(args.after))
    print(write_results(args.out, text, args.append))
    return 0


if __name__ == "__main__":
    sys.exit(main())
