"""How well the run-time model ranks plans: predicted time vs measured C time (issue 12).

For each graph -- the memory-bound motifs of :mod:`solverfuse.zoo` and a few of the exported
models of ``tests/data/models`` -- several legal plans are made: every greedy baseline (``unfused``
among them) and XLA's with producer duplication (``xla-recompute``), the traffic-optimal plan (``solve``), the time-optimal plan (``solve_time``; also under
:func:`old_profile`) and the
covering-optimal plan (recomputation and looped kernels allowed: ``solve_report(covering=True)``).
Plans with the same groups are measured once (their names are joined). Every distinct plan is
compiled (one thread) and timed inside C, interleaved with the graph's other plans over
``--rounds`` rounds (medians of warm runs). Planning and prediction use the profile of this
machine (``detect``: the same numbers the time objective would use here).

Reported: per graph, Spearman's rho and Kendall's tau-b between predicted time
(``cost.plan_time_ps``) and measured median, under this machine's profile and -- on the same
measurements -- under the profile ``detect`` had before cache-level bandwidths were modelled
(:func:`old_profile`: 8 GB/s DRAM per core for every working set, 2 us per kernel); overall, Kendall's tau over all pairs of plans of the
same graph and Spearman's rho of the per-graph ranks pooled; and the time objective's plan vs the
traffic objective's plan, measured. Rank statistics are computed here with numpy (ties get
average ranks). Writes ``benchmarks/results/time_rank.md``.

    PYTHONPATH=. python benchmarks/time_rank.py [--rounds 5] [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
import run as bench  # noqa: E402  (benchmarks/run.py: runners and interleaving)
from solverfuse import cost, greedy, zoo  # noqa: E402
from solverfuse.emit.build import compile_plan  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.files import write_atomic  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.plans import plan_kernels  # noqa: E402
from solverfuse.solve import solve, solve_report  # noqa: E402
from solverfuse.time_objective import solve_time  # noqa: E402
from solverfuse.sources import load_graph  # noqa: E402

MODELS = HERE.parent / "tests" / "data" / "models"
ROWS, COLS = 4096, 2048  # 32 MiB per float tensor: beyond this machine's LLC


def graphs(quick: bool):
    """(name, graph) of the memory-bound motifs and a few exported models."""
    motifs = [("softmax_rows", zoo.softmax_rows(ROWS, COLS)),
              ("residual_layernorm_gelu", zoo.residual_layernorm_gelu(ROWS, COLS)),
              ("elementwise_chain", zoo.elementwise_chain(ROWS, COLS)),
              ("branches", zoo.branches(ROWS, COLS)),
              ("center", zoo.center(ROWS, COLS)),
              ("l1_overflow", zoo.l1_overflow(ROWS, "detect")),
              # rows of 2 MiB, beyond L1 and L2: the covering optimum is a looped kernel
              ("softmax_long_rows", zoo.softmax_rows(16, 1 << 19))]
    yield from motifs[:3] if quick else motifs
    for name in (["bert_ts"] if quick else ["bert_ts", "gpt2_ts", "resnet_ts"]):
        yield name, load_graph(MODELS / f"{name}.onnx")


def old_profile(hw):
    """``detect`` as it was before issue 12's time model: DRAM bandwidth (estimated 8 GB/s per
    core) for every kernel whatever its working set, and a 2 us launch per kernel."""
    return hw.model_copy(update={"dram_bandwidth": 8e9 * hw.cores, "l2_bandwidth": None, "l3_bandwidth": None,
                                 "launch_overhead_s": 2e-6})


def ranks(x) -> np.ndarray:
    """Ranks 1..n of ``x``, ties sharing their average rank.

    >>> ranks([3.0, 1.0, 3.0]).tolist()
    [2.5, 1.0, 2.5]
    """
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        same = x == v
        r[same] = r[same].mean()
    return r


def spearman(a, b) -> float:
    """Spearman's rho: Pearson's correlation of the ranks (nan when either side is constant).

    >>> round(spearman([1, 2, 3, 4], [10, 20, 40, 30]), 3)
    0.8
    """
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def pair_counts(a, b) -> tuple[int, int, int, int]:
    """(concordant, discordant, tied in a only, tied in b only) over all pairs i < j."""
    c = d = ta = tb = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
            if da == 0 and db == 0:
                continue
            if da == 0:
                ta += 1
            elif db == 0:
                tb += 1
            elif da == db:
                c += 1
            else:
                d += 1
    return c, d, ta, tb


def kendall(a, b) -> float:
    """Kendall's tau-b (nan when either side is constant).

    >>> round(kendall([1, 2, 3, 4], [10, 20, 40, 30]), 3)
    0.667
    """
    c, d, ta, tb = pair_counts(list(a), list(b))
    den = ((c + d + ta) * (c + d + tb)) ** 0.5
    return float("nan") if den == 0 else (c - d) / den


def plans_for(g, hw, time_limit: float) -> dict[str, object]:
    """Distinct plans of ``g`` by groups: name (names joined by '=') -> plan."""
    made = [(name, greedy.greedy_plan(g, hw, name)) for name in greedy.STRATEGIES]
    lean = solve(g, hw, time_limit=time_limit, workers=1)
    made.append(("traffic-opt", lean))
    # hinted with the traffic plan, so neither time plan starts from a worse one
    made.append(("time-opt", solve_time(g, hw, time_limit=time_limit, workers=1, hints=[lean.group_nodes()])))
    made.append(("time-opt-old-profile", solve_time(g, old_profile(hw), time_limit=time_limit, workers=1,
                                                    hints=[lean.group_nodes()])))
    made.append(("xla-recompute", greedy.recomputing_plan(g, hw, "xla")))
    made.append(("covering-opt", solve_report(g, hw, time_limit=time_limit, workers=1, covering=True).plan))
    by_groups: dict[frozenset, list] = {}
    for name, p in made:
        key = frozenset((frozenset(grp.nodes), frozenset(grp.writes), grp.passes) for grp in p.groups)
        by_groups.setdefault(key, [[], p])[0].append(name)
    return {"=".join(names): p for names, p in by_groups.values()}


def runner(prog, ins: dict, cs: dict):
    """Seconds of one warm run of ``prog``: the median of the runs of one call to ``Program.time``
    after its first, with as many runs as take ~20 ms (a graph of a few KB runs in microseconds,
    where one run is all timer noise)."""
    first = prog.time(ins, cs, repeats=2)[1]
    n = int(min(500, max(2, 0.02 / max(first, 1e-7))))
    return lambda: statistics.median(prog.time(ins, cs, repeats=n + 1)[1:])


def predicted_ps(g, plan, hw) -> int:
    """The time model's prediction of any plan (a covering's kernels with their stated writes and
    passes; for a partition this is ``cost.plan_time_ps``)."""
    return cost.covering_time_ps(g, plan_kernels(plan), hw)


def shape_of(plan) -> str:
    """Kernels of a plan, with its looped kernels and recomputed ops when it has any."""
    seen: dict[str, int] = {}
    for grp in plan.groups:
        for v in grp.nodes:
            seen[v] = seen.get(v, 0) + 1
    dup, loops = sum(n > 1 for n in seen.values()), sum(grp.passes > 1 for grp in plan.groups)
    extra = ", ".join(x for x in ([f"{loops} looped"] if loops else []) + ([f"{dup} ops recomputed"] if dup else []))
    return f"{len(plan.groups)}" + (f" ({extra})" if extra else "")


def tau_of(counts) -> float:
    """Kendall's tau-b from pooled (concordant, discordant, tied in a, tied in b) counts.

    >>> tau_of((3, 1, 0, 0))
    0.5
    """
    c, d, ta, tb = counts
    den = ((c + d + ta) * (c + d + tb)) ** 0.5
    return (c - d) / den if den else float("nan")


def fmt(x: float) -> str:
    return "n/a" if x != x else f"{x:+.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "time_rank.md"))
    a = ap.parse_args(argv)
    start, load0 = time.monotonic(), os.getloadavg()[0]
    hw = load_hardware("detect")
    cache = tempfile.mkdtemp(prefix="sf_time_rank_")
    detail, summary = [], []
    pooled_pairs = [0, 0, 0, 0]
    pooled0 = [0, 0, 0, 0]
    by_kind = {"motif": [0, 0, 0, 0], "model": [0, 0, 0, 0]}
    by_kind_old = {"motif": [0, 0, 0, 0], "model": [0, 0, 0, 0]}
    hw_old = old_profile(hw)
    hw0 = hw.model_copy(update={"launch_overhead_s": 0.0})
    pooled_ranks: tuple[list, list] = ([], [])
    for gname, g in graphs(a.quick):
        plans = plans_for(g, hw, a.time_limit)
        ins, cs = random_inputs(g, seed=0), constants(g, seed=0)
        progs = {name: compile_plan(p, g, cache_dir=cache) for name, p in plans.items()}
        times = bench.time_side_by_side({n: runner(pr, ins, cs) for n, pr in progs.items()}, a.rounds)
        del progs
        names = list(plans)
        pred = [predicted_ps(g, plans[n], hw) for n in names]
        meas = [statistics.median(times[n]) for n in names]
        rho, tau = spearman(pred, meas), kendall(pred, meas)
        bare = [predicted_ps(g, plans[n], hw0) for n in names]
        rho0, tau0 = spearman(bare, meas), kendall(bare, meas)
        c0 = pair_counts(bare, meas)
        pooled0 = [x + y for x, y in zip(pooled0, c0)]
        c = pair_counts(pred, meas)
        kind = "model" if gname.endswith(("_ts", "_dynamo")) else "motif"
        by_kind[kind] = [x + y for x, y in zip(by_kind[kind], c)]
        old = [predicted_ps(g, plans[n], hw_old) for n in names]
        c_old = pair_counts(old, meas)
        by_kind_old[kind] = [x + y for x, y in zip(by_kind_old[kind], c_old)]
        tau_old = kendall(old, meas)
        pooled_pairs = [x + y for x, y in zip(pooled_pairs, c)]
        if len(names) > 1:
            pooled_ranks[0].extend(ranks(pred) / len(names))
            pooled_ranks[1].extend(ranks(meas) / len(names))
        fname = next(n for n in names if "traffic-opt" in n.split("="))

        def versus(key):
            n = next(n for n in names if key in n.split("="))
            return "same plan" if n == fname else \
                f"{meas[names.index(n)] * 1e6:.0f} vs {meas[names.index(fname)] * 1e6:.0f} us " \
                f"(x{meas[names.index(n)] / meas[names.index(fname)]:.2f})"
        vs = f"{versus('time-opt')} | {versus('covering-opt')}"
        summary.append(f"| {gname} | {len(g.nodes)} | {len(names)} | {fmt(rho)} | {fmt(tau)} | {c[0]} / {c[1]} | {fmt(rho0)} / {fmt(tau0)} | {fmt(tau_old)} | {vs} |")
        detail += [f"### {gname}", "", "| plan | kernels | traffic B | predicted us | without launch us | measured us (median) | rounds us |",
                   "|---|---:|---:|---:|---:|---:|---|"]
        for n, pr, b0, m in sorted(zip(names, pred, bare, meas), key=lambda t: t[1]):
            detail.append(f"| {n} | {shape_of(plans[n])} | {plans[n].traffic_bytes:,} | {pr / 1e6:.1f} | {b0 / 1e6:.1f} | "
                          f"{m * 1e6:.1f} | {', '.join(f'{s * 1e6:.0f}' for s in times[n])} |")
        detail.append("")
        print(summary[-1], f"[{time.monotonic() - start:.0f} s]", flush=True)
    c, d, ta, tb = pooled_pairs
    den = ((c + d + ta) * (c + d + tb)) ** 0.5
    tau_all = (c - d) / den if den else float("nan")
    rho_all = spearman(*pooled_ranks) if pooled_ranks[0] else float("nan")
    c0, d0, ta0, tb0 = pooled0
    den0 = ((c0 + d0 + ta0) * (c0 + d0 + tb0)) ** 0.5
    tau0_all = (c0 - d0) / den0 if den0 else float("nan")
    m = machine.describe()
    lines = [
        "# The time model's ranking of plans vs measured C time", "",
        f"`PYTHONPATH=. python benchmarks/time_rank.py --rounds {a.rounds}{' --quick' if a.quick else ''}` -- "
        f"profile `detect` of this machine (DRAM {hw.dram_bandwidth / 1e9:.1f} GB/s, L3 "
        f"{(hw.l3_bandwidth or 0) / 1e9:.1f} GB/s, L2 {(hw.l2_bandwidth or 0) / 1e9:.1f} GB/s by working set, "
        f"{hw.peak('float32') / 1e9:.0f} GFLOP/s, {hw.launch_overhead_s * 1e9:.0f} ns launch); motifs at "
        f"[{ROWS}, {COLS}] float32; C at 1 thread, median of {a.rounds} interleaved rounds, each the median of warm runs (as many as take ~20 ms); "
        f"solver limit {a.time_limit:g} s.",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['compiler']}; {m['date_utc']}; load average "
        f"{load0:.2f} before, {os.getloadavg()[0]:.2f} after -- shared with other jobs, so times are noisy; "
        f"run took {time.monotonic() - start:.0f} s.", "",
        "## Summary", "",
        f"Overall: Kendall's tau over all same-graph pairs of plans **{fmt(tau_all)}** "
        f"({c} concordant, {d} discordant, {ta} tied in prediction only, {tb} tied in measurement only); "
        f"Spearman's rho of per-graph ranks pooled **{fmt(rho_all)}**. The same prediction without the "
        f"profile's launch overhead (roofline terms only): Kendall's tau **{fmt(tau0_all)}** ({c0} / {d0}). "
        + "; ".join(f"{k}s only: Kendall's tau **{fmt(tau_of(v))}** ({v[0]} / {v[1]})" for k, v in by_kind.items())
        + ".", "",
        "Before / after the cache-level time model (same plans, same measurements; *before*: the old `detect` "
        f"profile, {hw_old.dram_bandwidth / 1e9:.0f} GB/s for every working set and "
        f"{hw_old.launch_overhead_s * 1e6:.0f} us per kernel; *after*: this profile): "
        + "; ".join(f"{k}s Kendall's tau **{fmt(tau_of(by_kind_old[k]))} -> {fmt(tau_of(by_kind[k]))}** "
                    f"({by_kind_old[k][0]} / {by_kind_old[k][1]} -> {by_kind[k][0]} / {by_kind[k][1]} conc. / disc.)"
                    for k in by_kind) + ".", "",
        "| graph | ops | distinct plans | Spearman rho | Kendall tau-b | pairs conc. / disc. | rho / tau without launch overhead | tau, old profile | time-opt vs traffic-opt, measured | covering-opt vs traffic-opt, measured |",
        "|---|---:|---:|---:|---:|---|---|---:|---|---|"] + summary + ["", "## Per graph", ""] + detail
    write_atomic(Path(a.out), "\n".join(lines) + "\n")
    print("\n".join(lines[:12 + len(summary)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
