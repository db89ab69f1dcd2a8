"""Turn the raw benchmark results (a dict, also saved as JSON) into RESULTS.md and PNG plots.

Nothing here measures: every number printed comes from ``results``; ratios are computed from
medians of the same run. ``analysis.md`` beside this file (written by a person after reading a
run) is included verbatim under "Analysis", so the explanation of missed targets stays with
the numbers it explains.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
MB = 1e6


def _fmt_bytes(b: Optional[float]) -> str:
    if b is None:
        return "—"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.2f} {unit}"
    return f"{int(b)} B"


def _fmt_bin(b: Optional[float]) -> str:
    if b is None:
        return "—"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size:
            return f"{b / size:.1f} {unit}".replace(".0 ", " ")
    return f"{int(b)} B"


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a and b else None


def _x(r: Optional[float]) -> str:
    return "—" if r is None else f"{r:.2f}×"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _gmean(xs: list[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


# ------------------------------------------------------------------ sections

def machine_md(m: dict, settings: dict) -> str:
    v = m["versions"]
    return "\n".join([
        "## Machine", "",
        f"- date: {m['date_utc']}",
        f"- CPU: {m['cpu']} ({m['machine']}), {m['cores']} cores visible, SIMD: {', '.join(m['simd']) or '—'}",
        f"- caches (per core unless shared, from sysfs): L1d {_fmt_bin(m['l1d_bytes'])}, "
        f"L2 {_fmt_bin(m['l2_bytes'])}, L3 {_fmt_bin(m['l3_bytes'])}; memory {_fmt_bin(m['memory_bytes'])}",
        f"- OS: {m['os']}; Python {m['python']}; compiler: {m['compiler']}",
        f"- numpy {v['numpy']}, onnx {v['onnx']}, onnxruntime {v['onnxruntime']}, ortools {v['ortools']}, "
        f"torch {v['torch'] if v['torch'] != 'not installed' else m.get('torch', 'not installed')}",
        f"- valgrind: {'installed' if m['valgrind'] else 'not installed'}",
        f"- settings: planning profile `{settings['hardware']}`, CP-SAT time limit {settings['time_limit']:.0f} s "
        f"with {settings['workers']} workers; runtime threads {settings['threads']} (C, ONNX Runtime and "
        f"torch alike); motif tensors {settings['factor']:g}× the last-level cache",
        "",
        "The machine is shared with other developers while the benchmark runs: absolute times are "
        "noisy, so every comparison below is a ratio of medians measured side by side in one run "
        "(the variants of one graph are interleaved round by round, so noise hits every side alike).",
    ])


def _proven(row: dict):
    """The optimal plan's traffic when the solver proved it optimal, else None."""
    o = row.get("optimal") or {}
    return o.get("traffic") if o.get("status") == "optimal" else None


def planning_md(rows: list[dict], results_dir: Path) -> str:
    from solverfuse.greedy import STRATEGIES
    strategies = [s for s in STRATEGIES if s != "unfused"]
    scal, qual = [], []
    for r in rows:
        if "error" in r and "optimal" not in r:
            scal.append([r["graph"], "—", f"error: {r['error']}", "", "", "", ""])
            continue
        o = r["optimal"]
        if "error" in o:
            scal.append([r["graph"], r["ops"], f"error: {o['error']}", "", "", "", ""])
        else:
            proven = f"{o['solve_seconds']:.2f}" if o["status"] == "optimal" else "not proven"
            gap = "0" if o["status"] == "optimal" else ("—" if o["gap"] is None else f"{100 * o['gap']:.2f}%")
            scal.append([r["graph"], r["ops"], o["status"], proven, f"{o['seconds']:.2f}", gap,
                         _fmt_bytes(o["traffic"])])
        opt = _proven(r)
        label = r["graph"]
        if opt is None:       # no proven optimum: compare with the best plan any strategy found
            found = [st["traffic"] for st in r["strategies"].values() if "traffic" in st]
            found += [o["traffic"]] if "traffic" in o else []
            opt = min(found) if found else None
            label += " †"
        cells = [label, _fmt_bytes(r["q_min"]), _fmt_bytes(o.get("traffic")), _x(_ratio(r["q_min"], opt))]
        for s in strategies:
            st = r["strategies"].get(s, {})
            cells.append(_x(_ratio(st.get("traffic"), opt)) if "traffic" in st else "timed out"
                         if "timed out" in st.get("error", "") else "error")
        cells.append(_x(_ratio(r["unfused"], opt)))
        qual.append(cells)
    gm = ["**geometric mean**", "", "", _x(_gmean([_ratio(r.get("q_min"), _proven(r)) for r in rows]))]
    for s in strategies:
        gm.append(_x(_gmean([_ratio(r.get("strategies", {}).get(s, {}).get("traffic"), _proven(r))
                             for r in rows])))
    gm.append(_x(_gmean([_ratio(r.get("unfused"), _proven(r)) for r in rows])))
    qual.append(gm)
    _plot_scaling(rows, results_dir / "solve_scaling.png")
    _plot_quality(rows, strategies, results_dir / "plan_quality.png")
    return "\n".join([
        "## 1. Solve scaling", "",
        "`solverfuse.plan(graph, hw, strategy=\"optimal\")`: status, CP-SAT time to the proven optimum "
        "(`solve_seconds`), wall time of the whole call (greedy hints + model build + solve + "
        "validation), and the gap (traffic − proven bound) / traffic when the limit stopped it.", "",
        _table(["graph", "ops", "status", "time to proven optimum (s)", "wall (s)", "gap", "optimal traffic"], scal),
        "", "![solve time against op count](results/solve_scaling.png)", "",
        "## 2. Plan quality", "",
        "Traffic (global-memory bytes, `cost.plan_traffic`) of every strategy divided by the optimal "
        "plan's, on the same graphs (1.00× = as good as optimal; Q_min/optimal ≤ 1 shows how far the "
        "optimum itself is from the lower bound). The same cost model scores every plan.", "",
        _table(["graph", "Q_min", "optimal", "Q_min / opt"] + [f"{s} / opt" for s in strategies] +
               ["unfused / opt"], qual),
        "", "† no proven optimum (the solver stopped at its limit with a feasible plan, or did not "
        "return): ratios are to the best plan any strategy found, the solver's included. The "
        "geometric means cover only the graphs with a proven optimum.", "",
        "Wall time of each strategy (s; each ran in a child process killed after its time-out):", "",
        _table(["graph", "ops"] + list(STRATEGIES) + ["optimal"], [
            [r["graph"], r.get("ops", "—")] +
            [_secs(r.get("strategies", {}).get(s, {})) for s in STRATEGIES] + [_secs(r.get("optimal", {}))]
            for r in rows]),
        "", "![traffic of each strategy relative to optimal](results/plan_quality.png)",
    ])


def _secs(x: dict) -> str:
    if "error" in x:
        return "timed out" if "timed out" in x["error"] else "error"
    return f"{x['seconds']:.2f}" if "seconds" in x else "—"


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _plot_scaling(rows: list[dict], path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for status, marker, color in (("optimal", "o", "tab:green"), ("feasible", "s", "tab:orange"),
                                  ("unknown", "x", "tab:red"), ("infeasible", "x", "tab:red")):
        pts = [(r["ops"], r["optimal"]["seconds"], r["graph"]) for r in rows
               if isinstance(r.get("optimal"), dict) and r["optimal"].get("status") == status]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color,
                       label=f"{status}", s=40, zorder=3)
            for x, y, name in pts:
                ax.annotate(name.split(" (")[0], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    late = [(r["ops"], r["optimal"]["seconds"], r["graph"]) for r in rows
            if "timed out" in r.get("optimal", {}).get("error", "") and "seconds" in r["optimal"]]
    if late:
        ax.scatter([p[0] for p in late], [p[1] for p in late], marker="^", color="tab:red", s=50,
                   label="timed out (killed)", zorder=3)
        for x, y, name in late:
            ax.annotate(name.split(" (")[0], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ops in the graph")
    ax.set_ylabel("wall time of the optimal planner (s)")
    ax.set_title("Solve time against graph size")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title="status")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_quality(rows: list[dict], strategies: list[str], path: Path) -> None:
    plt = _plt()
    good = [r for r in rows if r.get("optimal", {}).get("traffic")]
    series = strategies + ["unfused"]
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(good) + 2), 4.8))
    width = 0.8 / (len(series) + 1)
    for i, s in enumerate(series):
        vals = []
        for r in good:
            t = r["unfused"] if s == "unfused" else r["strategies"].get(s, {}).get("traffic")
            vals.append((t / r["optimal"]["traffic"]) if t else 0)
        ax.bar([j + i * width for j in range(len(good))], vals, width, label=s)
    ax.scatter([j + len(series) * width / 2 for j in range(len(good))],
               [r["q_min"] / r["optimal"]["traffic"] for r in good], color="black", marker="_", s=200,
               label="Q_min", zorder=3)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([j + len(series) * width / 2 for j in range(len(good))])
    ax.set_xticklabels([r["graph"].split(" (")[0] + ("" if r["optimal"].get("status") == "optimal" else " *")
                        for r in good], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("traffic / optimal traffic")
    ax.set_title("Plan traffic relative to the optimal plan (lower is better; optimal = 1; "
                 "* = best found, optimality not proven)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _variant_order(variants: dict) -> list[str]:
    first = ["optimal", "unfused"]
    rest = [k for k in variants if k not in first + ["onnxruntime", "torch.compile"]]
    return [k for k in first + rest + ["onnxruntime", "torch.compile"] if k in variants]


def runtime_md(rt: dict, results_dir: Path, torch_note: str) -> str:
    if "error" in rt and "motifs" not in rt:
        return f"## 3. Runtime\n\nfailed: {rt['error']}"
    triad = rt.get("triad", {})
    tri = triad.get("median_gbs")
    lines = ["## 3. Runtime", "",
             f"Motifs with each large tensor ≈ {rt['factor']:g}× the last-level cache "
             f"({_fmt_bin(rt['llc_bytes'])}); plans for this host (`hardware detect`); "
             f"{rt['threads']} thread(s) for the C, ONNX Runtime (all graph optimisations on, "
             f"`intra_op_num_threads`) and torch.compile alike; median of interleaved rounds.", ""]
    if tri:
        lines += [f"STREAM-style triad (benchmarks/triad.c, same compiler flags `{' '.join(triad['flags'])}`, "
                  f"{triad['threads']} thread(s), 3 × {_fmt_bytes(triad['n'] * 4)}), run alone before the "
                  f"motifs: median **{tri:.1f} GB/s**, best {triad['best_gbs']:.1f} GB/s. The same triad also runs "
                  "as one more variant inside every motif's interleaved rounds (column *triad GB/s (same "
                  "rounds)*); achieved bandwidth is compared with that one, measured under the same load.", ""]
    else:
        lines += [f"triad failed: {triad.get('error')}", ""]
    rows, speed = [], {}
    for m in rt["motifs"]:
        if "variants" not in m:
            rows.append([m["graph"], f"error: {m.get('error')}"] + [""] * 9)
            continue
        v = m["variants"]
        opt = v.get("optimal", {}).get("median_s")
        greedy = {k: x for k, x in v.items() if k not in ("optimal", "unfused", "onnxruntime", "torch.compile")}
        best_greedy = min((x["median_s"] for x in greedy.values() if "median_s" in x), default=None)
        gbs = v.get("optimal", {}).get("gbs")
        mtri = m.get("triad", {}).get("gbs")
        r = {"unfused": _ratio(v.get("unfused", {}).get("median_s"), opt),
             "greedy": _ratio(best_greedy, opt),
             "ort": _ratio(v.get("onnxruntime", {}).get("median_s"), opt),
             "torch": _ratio(v.get("torch.compile", {}).get("median_s"), opt)}
        speed[m["graph"]] = r
        rows.append([m["graph"], _fmt_bytes(m["input_bytes"]),
                     f"{1e3 * opt:.1f}" if opt else v.get("optimal", {}).get("error", "—"),
                     _x(r["unfused"]), _x(r["greedy"]), _x(r["ort"]),
                     _x(r["torch"]) if "torch.compile" in v else torch_note,
                     f"{gbs:.1f}" if gbs else "—", f"{mtri:.1f}" if mtri else "—",
                     f"{100 * gbs / mtri:.0f}%" if gbs and mtri else "—",
                     _err(m.get("max_rel_error_vs_ort"))])
    lines += ["Times are relative to the optimal plan's C (ratio > 1 means the optimal C is faster).", "",
              _table(["motif", "input", "optimal C (ms)", "unfused C / opt", "best greedy C / opt",
                      "ONNX Runtime / opt", "torch.compile / opt", "achieved GB/s", "triad GB/s (same rounds)",
                      "of triad",
                      "max rel. err vs ORT"], rows), ""]
    detail = []
    for m in rt["motifs"]:
        if "variants" not in m:
            continue
        for k in _variant_order(m["variants"]):
            x = m["variants"][k]
            timed = (f"{1e3 * x['median_s']:.1f}" if "median_s" in x else x.get("error", "—")) + \
                (f" (same plan as {x['same_plan_as']})" if "same_plan_as" in x else "")
            detail.append([m["graph"], k, _fmt_bytes(x.get("traffic")) if "traffic" in x else "—",
                           x.get("groups", "—"), timed,
                           f"{x['gbs']:.1f}" if x.get("gbs") else "—"])
    lines += ["<details><summary>every variant (median ms, predicted traffic, GB/s)</summary>", "",
              _table(["motif", "variant", "predicted traffic", "kernels", "median ms", "GB/s"], detail),
              "", "</details>", ""]
    med = {k: statistics.median([r[k] for r in speed.values() if r[k]]) if any(r[k] for r in speed.values())
           else None for k in ("unfused", "greedy", "ort", "torch")}
    fr = [m["variants"]["optimal"]["gbs"] / m["triad"]["gbs"] for m in rt["motifs"]
          if m.get("variants", {}).get("optimal", {}).get("gbs") and m.get("triad", {}).get("gbs")]
    frac = statistics.median(fr) if fr else None
    lines += ["**Against the targets** (median over the motifs):", "",
              _table(["target", "measured", "met?"], [
                  ["fused C ≥ 2× faster than unfused C", _x(med["unfused"]), _met(med["unfused"], 2)],
                  ["fused C ≥ 2× faster than ONNX Runtime", _x(med["ort"]), _met(med["ort"], 2)],
                  ["fused C faster than torch.compile (C++)", _x(med["torch"]) if med["torch"] else torch_note,
                   _met(med["torch"], 1.0, strict=True)],
                  ["achieved bandwidth ≥ 75% of the triad", f"{100 * frac:.0f}%" if frac else "—", _met(frac, 0.75)],
              ]), ""]
    _plot_runtime(rt, results_dir / "runtime.png")
    _plot_bandwidth(rt, tri, results_dir / "bandwidth.png")
    lines += ["![run time of every variant relative to the optimal plan](results/runtime.png)", "",
              "![achieved bandwidth of the optimal plan against the triad](results/bandwidth.png)", ""]
    mrows = []
    for m in rt.get("models", []):
        if "variants" not in m:
            mrows.append([m["graph"], f"error: {m.get('error')}", "", "", "", ""])  # 6 columns
            continue
        v = m["variants"]
        opt = v.get("optimal", {}).get("median_s")
        ort = v.get("onnxruntime", {}).get("median_s")
        mrows.append([m["graph"], m["ops"],
                      f"{1e3 * opt:.1f}" if opt else v.get("optimal", {}).get("error", "—"),
                      f"{1e3 * ort:.1f}" if ort else v.get("onnxruntime", {}).get("error", "—"),
                      _x(_ratio(opt, ort)), _err(m.get("max_rel_error_vs_ort"))])
    slow = [_ratio(m["variants"]["optimal"].get("median_s"), m["variants"].get("onnxruntime", {}).get("median_s"))
            for m in rt.get("models", []) if "variants" in m and "optimal" in m["variants"]]
    slow = [s for s in slow if s]
    lines += ["### The light models end-to-end", "",
              "Optimal plan's C against ONNX Runtime (all optimisations on) at the same thread count; "
              "here a ratio > 1 means the C is *slower*.", "",
              _table(["model", "ops", "optimal C (ms)", "ONNX Runtime (ms)", "C / ORT",
                      "max rel. err vs ORT"], mrows), "",
              f"Target: no more than 2× slower than ONNX Runtime: median {_x(statistics.median(slow)) if slow else '—'} "
              f"({_met(2 / statistics.median(slow) if slow else None, 1)} for the median); "
              f"{sum(x <= 2 for x in slow)} of {len(slow)} models within 2×, worst {_x(max(slow)) if slow else '—'}."]
    return "\n".join(lines)


def _err(e) -> str:
    return f"{e:.1e}" if isinstance(e, float) else ("—" if e is None else "check failed")


def _met(value: Optional[float], target: float, strict: bool = False) -> str:
    if value is None:
        return "not measured"
    ok = value > target if strict else value >= target
    return "yes" if ok else f"**no** (missed by {100 * (1 - value / target):.0f}%)"


def _plot_runtime(rt: dict, path: Path) -> None:
    plt = _plt()
    motifs = [m for m in rt["motifs"] if m.get("variants", {}).get("optimal", {}).get("median_s")]
    if not motifs:
        return
    names = []
    for m in motifs:
        for k in _variant_order(m["variants"]):
            if k not in names and "median_s" in m["variants"][k]:
                names.append(k)
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(names)
    for i, k in enumerate(names):
        vals = [m["variants"].get(k, {}).get("median_s", 0) / m["variants"]["optimal"]["median_s"] for m in motifs]
        # bars start at 1 (= the optimal plan): up = slower than optimal, down = faster
        ax.bar([j + i * width for j in range(len(motifs))], [v - 1 if v else 0 for v in vals], width,
               bottom=1, label=k)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([j + (len(names) - 1) * width / 2 for j in range(len(motifs))])
    ax.set_xticklabels([m["graph"] for m in motifs], rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time / optimal plan's C time (log scale)")
    ax.set_title(f"Motifs, {rt['threads']} thread(s): wall time relative to the optimal plan (lower is better)")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_bandwidth(rt: dict, triad: Optional[float], path: Path) -> None:
    """Optimal and unfused plans' achieved GB/s per motif, with the triad of the same rounds."""
    plt = _plt()
    motifs = [m for m in rt["motifs"] if m.get("variants", {}).get("optimal", {}).get("gbs")]
    if not motifs:
        return
    fig, ax = plt.subplots(figsize=(10.5, 4.2))
    ax.bar(range(len(motifs)), [m["variants"]["optimal"]["gbs"] for m in motifs], color="tab:green",
           label="optimal plan (predicted bytes / time)")
    unf = [m["variants"].get("unfused", {}).get("gbs", 0) for m in motifs]
    ax.scatter(range(len(motifs)), unf, color="tab:red", marker="D", label="unfused plan", zorder=3)
    mt = [m.get("triad", {}).get("gbs") for m in motifs]
    if any(mt):
        ax.scatter(range(len(motifs)), [x or 0 for x in mt], color="black", marker="_", s=600,
                   label="triad, same rounds", zorder=4)
        ax.scatter(range(len(motifs)), [0.75 * (x or 0) for x in mt], color="gray", marker="_", s=600,
                   label="75% of that triad", zorder=4)
    if triad:
        ax.axhline(triad, color="black", ls=":", lw=0.8, label=f"triad alone {triad:.1f} GB/s")
    ax.set_xticks(range(len(motifs)))
    ax.set_xticklabels([m["graph"] for m in motifs], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("GB/s")
    ax.set_title("Achieved bandwidth of the emitted C")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fidelity_md(fd: dict) -> str:
    if "error" in fd and "counters" not in fd:
        return f"## 4. Model fidelity\n\nfailed: {fd['error']}"
    rows = []
    for r in fd["counters"]:
        if "error" in r:
            rows.append([r["graph"], f"error: {r['error']}", "", "", ""])
        else:
            rows.append([r["graph"], r["predicted"], r["counted"], f"{r['groups_equal']}/{r['groups']}",
                         _x(_ratio(r["counted"], r["predicted"]))])
    lines = ["## 4. Model fidelity", "",
             "Predicted bytes (`cost.group_traffic` per kernel of the optimal plan) against the bytes the "
             "instrumented C build counts (`compile_plan(..., counters=True)`: every global load and store "
             "of a tensor crossing a group boundary, counted once per element as the model does).", "",
             _table(["graph", "predicted bytes", "counted bytes", "kernels exactly equal", "counted / predicted"],
                    rows)]
    mism = [(r["graph"], x) for r in fd["counters"] for x in r.get("mismatches", [])]
    if mism:
        lines += ["", "Kernels whose counted bytes differ from the prediction (first few per graph):", "",
                  _table(["graph", "kernel", "ops", "predicted", "counted read", "counted written"],
                         [[g, x["group"], x["ops"], x["predicted"], x["read"], x["written"]] for g, x in mism])]
    cg = fd.get("cachegrind")
    if cg:
        lines += ["", "### Cachegrind: last-level misses vs predicted DRAM bytes", ""]
        if "error" in cg:
            lines.append(f"failed: {cg['error']}")
        else:
            lines += [cg["description"], "",
                      _table(["plan", "predicted bytes", "LL read misses × 64", "LL write misses × 64",
                              "LL misses × 64", "measured / predicted"],
                             [[k, v["predicted"], v["read_miss_bytes"], v["write_miss_bytes"],
                               v["miss_bytes"], _x(_ratio(v["miss_bytes"], v["predicted"]))]
                              for k, v in cg["plans"].items()])]
    return "\n".join(lines)


def write(results: dict, out: Path) -> None:
    """Write ``out/RESULTS.md`` and ``out/results/*.png`` from ``results``."""
    from solverfuse.files import write_atomic
    rd = out / "results"
    rd.mkdir(parents=True, exist_ok=True)
    m = results["machine"]
    torch_note = "not installed" if m.get("torch") != "installed" else "—"
    parts = ["# solverfuse benchmarks", "",
             "Generated by `python benchmarks/run.py`" + (" --quick (smoke run: sizes below the cache, "
                                                          "numbers not meaningful)" if results.get("quick") else "")
             + f" in {results.get('wall_seconds', 0) / 60:.1f} minutes; raw numbers in "
               "`results/results.json`."
             + (f" Sections carried over from an earlier run on this machine: {', '.join(results['carried_over'])}."
                if results.get("carried_over") else ""),
             "", "Reproduce: `python benchmarks/run.py` (add `--torch-path DIR` after "
             "`pip install --target DIR torch==2.13.0` to include torch.compile; `--quick` for a smoke run).",
             "", machine_md(m, results["settings"])]
    if "planning" in results:
        parts += ["", planning_md(results["planning"], rd)]
    if "runtime" in results:
        parts += ["", runtime_md(results["runtime"], rd, torch_note)]
    if "fidelity" in results:
        parts += ["", fidelity_md(results["fidelity"])]
    analysis = HERE / "analysis.md"
    if analysis.exists() and not results.get("quick"):
        parts += ["", "## Analysis", "", analysis.read_text().strip()]
    parts += topic_sections(rd)
    write_atomic(out / "RESULTS.md", "\n".join(parts) + "\n")


#: The per-topic benchmark scripts' reports (each script writes results/<name>.md with its own
#: machine description), in the order RESULTS.md shows them.
TOPICS = [("models", "The exported transformers set: import, plan, traffic (`benchmarks/models.py`)"),
          ("rules", "Costs as compilers execute: traffic before/after (`benchmarks/rules_traffic.py`)"),
          ("perf", "Solve time on the exported set (`benchmarks/perf.py`)"),
          ("recomp", "Recomputation and looped reductions: partition vs covering optimum (`benchmarks/recompute.py`)"),
          ("loops", "Looped kernels in C: the softmax over 16M-float rows (`benchmarks/softmax_loops.py`)"),
          ("time_rank", "The time model against measured C times: rank correlation (`benchmarks/time_rank.py`)"),
          ("objectives", "Partition vs covering optimum, and both objectives' plans measured in C (`benchmarks/objectives.py`)"),
          ("covtime", "The time objective with recomputation: traffic vs time covering (`benchmarks/covtime.py`)"),
          ("host_profile", "This host's cache bandwidths and kernel-call cost, for the time model (`benchmarks/host_profile.py`)"),
          ("inductor_inline", "Inductor's lowering recomputation vs real torch.compile kernels (`benchmarks/inductor_inline.py`)"),
          ("emit", "Emitted C vs ONNX Runtime (`benchmarks/emit_speed.py`)"),
          ("gemm", "GEMM, convolution and pooling kernels vs ONNX Runtime/MLAS (`benchmarks/gemm_speed.py`)"),
          ("zoo", "All nine ONNX light models in C vs ONNX Runtime at 1 and 2 threads (`benchmarks/gemm_speed.py --section zoo`, `benchmarks/zoo_report.py`)"),
          ("corun", "Thread-scaling ceiling: each runtime at 1 thread beside a copy of itself on the other core (`benchmarks/corun.py`)"),
          ("transformers", "The exported transformers and the motifs in C vs ONNX Runtime (`benchmarks/transformers_speed.py`)"),
          ("fusespeed", "Fused kernels vs the unfused kernels they replace (`benchmarks/fusespeed.py`)"),
          ("motifbw", "Memory-bound motifs vs the STREAM triad, and their compute per element (`benchmarks/motifbw.py`)"),
          ("softmax", "Softmax rows: vector exps, streamed outputs, before/after (`benchmarks/motifbw.py`, `benchmarks/gemm_speed.py`)"),
          ("gelu", "LayerNorm + GELU rows: erf, two-pass statistics, prefetch, before/after (`benchmarks/motifbw.py`)"),
          ("omp", "One OpenMP region per run, its barrier, the tile loops' thread shares: light models at 1 and 2 threads before/after (`benchmarks/omp_speed.py`, `benchmarks/concat_speed.py`, `benchmarks/barrier_load.py`)"),
          ("conv", "Conv tiles at 1 thread before/after (`benchmarks/conv_speed.sh`)"),
          ("fcgemv", "Matrix-vector Gemm, Concat slices and the cold build before/after (`benchmarks/fcgemv.py`)"),
          ("convk", "Conv micro-kernels: paired per-kernel A/B and shapes vs MLAS (`benchmarks/convk_results.sh`, `benchmarks/conv_ab.py`)"),
          ("convs", "Conv tiles at 1 thread, per model before/after: 48-position passes, 13-position and padded 32-channel tiles (`benchmarks/convs_report.py`, `benchmarks/conv_ab.py`)"),
          ("concat", "Concat + BatchNorm passes, one-position convs, same-size pooling before/after (`benchmarks/concat_speed.py`)"),
          ("fused", "Fused vs unfused C before/after: inlined conv copies, math materialised at its own shape (`benchmarks/fused_ab.py`, `benchmarks/fused_groups.py`)"),
          ("motifs", "Motifs' compute per element: lane sums, GELU, shared-input parts before/after (`benchmarks/motif_ab.py`, `benchmarks/motifbw.py`)"),
          ("export_ab", "The exported models' C before/after an emitter change, interleaved (`benchmarks/export_ab.py`)"),
          ("scaling", "Thread scaling: how much 2 threads can gain on this host, against ours and ORT's (`benchmarks/scaling_bound.py`)"),
          ("thresholds", "The emitter's beyond-the-L2 thresholds, A/B against lower ones (`benchmarks/threshold_ab.py`)"),
          ("torch", "Inside PyTorch: inductor-real agreement and the solverfuse backend (`benchmarks/torch_bench.py`)"),
          ("fix", "Inside PyTorch after the rule fixes: real Inductor kernels vs our rules (`benchmarks/fix_agreement.py`)"),
          ("tvm", "Inside TVM: tvm-real agreement and TVM built along the plan (`benchmarks/tvm_bench.py`)"),
          ("fuzz", "Bad input and time limits (`benchmarks/fuzz.py`)"),
          ("scale", "Time limits at scale: baselines, presolve and overshoot on 1k-20k-op graphs (`benchmarks/scale.py`)"),
          ("parallel", "Parts in parallel worker processes (`benchmarks/parallel.py`)"),
          ("struct", "Graph-side speed before/after the DAG toolkit (`benchmarks/speed.py`)")]


def write_results(out: str | Path, lines: list[str], append: bool = False) -> str:
    """Write a topic script's report (``lines``) to ``out`` -- after what is there, below a rule,
    when ``append`` -- and return this run's text.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "t.md"
    >>> _ = write_results(f, ["a"]); _ = write_results(f, ["b"], append=True); f.read_text()
    'a\\n\\n---\\n\\nb'
    """
    out = Path(out)
    text = "\n".join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    old = out.read_text() if append and out.exists() else None
    out.write_text(text if old is None else "\n".join([old, "", "---", "", text]))
    return text


def topic_sections(rd: Path) -> list[str]:
    """RESULTS.md sections holding each topic script's report (its headings pushed two levels down).

    Sections 1-4 above come from one full ``run.py`` run; these were measured by their own scripts,
    each side by side within its run, on the same kind of shared machine."""
    parts = ["", "## Per-topic results", "",
             "Sections 1-4 come from the last full `run.py` run (dated in the Machine section); where that "
             "run predates a change to the cost model or a baseline, its traffic numbers are the old "
             "model's. The sections below were measured by the per-topic scripts after those changes; "
             "each compares its variants side by side within one run, on a 2-core machine shared with "
             "other jobs, and says so."]
    for i, (name, title) in enumerate(TOPICS, start=5):
        f = rd / f"{name}.md"
        if not f.exists():
            continue
        lines = f.read_text().strip().splitlines()
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        body = "\n".join("##" + ln if ln.startswith("#") else ln for ln in lines).strip()
        parts += ["", f"## {i}. {title}", "", body]
    return parts
