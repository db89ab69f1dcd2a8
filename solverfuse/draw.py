"""Pictures of plans: the graph in topological layers, each group a coloured cluster.

:func:`draw_plans` draws one plan, or two side by side on the same layout (e.g. optimal vs xla),
with matplotlib only. Ops are boxes labelled with their op type (and name on small graphs),
laid out top to bottom by longest-path layer; each group is a translucent convex hull in its own
colour and its ops' boxes carry the same colour; every tensor that crosses a group boundary is a
dark arrow labelled with its size, edges inside a group are light; what an op reads from the
graph's inputs and weights ("in") and writes to its outputs ("out") is labelled beside it. Each panel's title gives the
strategy, the traffic and the number of kernels; each group is tagged with its name and traffic.
The figure grows with the graph (ResNet-50's ~170 ops make a tall, legible picture).

>>> import tempfile, os
>>> from solverfuse.graph import load_graph
>>> from solverfuse.greedy import greedy_plan
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> plans = [greedy_plan(g, "nvidia-h100", "unfused"), greedy_plan(g, "nvidia-h100", "xla")]
>>> path = os.path.join(tempfile.mkdtemp(), "p.svg")
>>> draw_plans(plans, path); os.path.getsize(path) > 1000
True
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence, Union

from .errors import PlanError
from .files import atomic_path
from .graph import Graph
from .plans import Plan
from .summary import human_bytes

FORMATS = (".svg", ".png", ".pdf")
#: Inches per layout unit (one op box is about 1 x 0.4 units).
UNIT_X, UNIT_Y = 1.25, 0.62
MAX_PIXELS = 32000  # keep PNGs under matplotlib's and viewers' limits


def layers(graph: Graph) -> dict[str, int]:
    """Layer of every op: its longest path from the sources, then pushed down as late as its
    consumers allow (so a side branch sits next to where it joins, not at the top).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["y"]},
    ...               {"name": "b", "op": "Add", "inputs": ["x", "y"], "outputs": ["z"]}]})
    >>> layers(g)
    {'a': 0, 'b': 1}
    """
    out: dict[str, int] = {}
    for v in graph.index.order:
        out[v] = 1 + max((out[u] for u in graph.index.preds[v]), default=-1)
    for v in reversed(graph.index.order):
        if graph.index.succs[v]:
            out[v] = min(out[w] for w in graph.index.succs[v]) - 1
    return out


def layout(graph: Graph, groups: Sequence[Sequence[str]] = ()) -> dict[str, tuple[float, float]]:
    """(x, y) of every op: y = -layer; x orders each layer by the mean x of its producers
    (two barycentre sweeps), keeping ops of one group next to each other."""
    layer = layers(graph)
    gid = {v: i for i, g in enumerate(groups) for v in g}
    rows: dict[int, list[str]] = {}
    for v in graph.index.order:
        rows.setdefault(layer[v], []).append(v)
    x = {v: float(i) for r in rows.values() for i, v in enumerate(r)}
    for sweep in range(2):
        for k in sorted(rows):
            r = rows[k]

            def key(v):
                ps = graph.index.preds[v] if sweep == 0 or not graph.index.succs[v] else \
                    graph.index.preds[v] + graph.index.succs[v]
                bary = sum(x[p] for p in ps) / len(ps) if ps else x[v]
                return (bary, gid.get(v, -1), graph.index.position[v])
            r.sort(key=key)
            # group ops of one group together when their barycentres tie or interleave
            grouped: dict[int, list[str]] = {}
            for v in r:
                grouped.setdefault(gid.get(v, -1 - graph.index.position[v]), []).append(v)
            r[:] = [v for members in grouped.values() for v in members]
            width = max(len(rr) for rr in rows.values())
            offset = (width - len(r)) / 2.0
            for i, v in enumerate(r):
                x[v] = offset + i
    return {v: (x[v], -float(layer[v])) for v in graph.index.order}


def _hull(points):
    """Convex hull (Andrew's monotone chain) of 2-D points, counter-clockwise."""
    pts = sorted(set(points))
    if len(pts) <= 2:
        return pts

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    lower, upper = [], []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return lower[:-1] + upper[:-1]


def _panel(ax, plan: Plan, graph: Graph, pos, small: bool, font: float) -> None:
    import matplotlib.patches as mpatches
    from matplotlib import colormaps
    cmap = colormaps["tab20"]
    gid = {v: i for i, g in enumerate(plan.groups) for v in g.nodes}
    bw, bh = 0.42, 0.2  # half box sizes
    for i, grp in enumerate(plan.groups):
        color = cmap(i % 20)
        corners = [(pos[v][0] + dx, pos[v][1] + dy) for v in grp.nodes
                   for dx in (-bw - 0.08, bw + 0.08) for dy in (-bh - 0.1, bh + 0.1)]
        ax.add_patch(mpatches.Polygon(_hull(corners), closed=True, facecolor=color, alpha=0.28,
                                      edgecolor=color, linewidth=1.2, zorder=1))
        top = max(grp.nodes, key=lambda v: (pos[v][1], -pos[v][0]))
        ax.text(pos[top][0] - bw - 0.06, pos[top][1] + bh + 0.12,
                f"{grp.name} {human_bytes(grp.traffic_bytes)}", fontsize=font * 0.8,
                color="0.25", ha="left", va="bottom", zorder=5)
    outputs = set(graph.outputs)
    labelled: set[str] = set()
    for v in graph.index.order:
        node = graph.index.node[v]
        for t in dict.fromkeys(x for x in node.inputs if x):
            u = graph.index.producer.get(t)
            if u is None:
                continue
            (x0, y0), (x1, y1) = pos[u], pos[v]
            cut = gid[u] != gid[v]
            style = dict(lw=1.1 if cut else 0.6, color="0.15" if cut else "0.6")
            start = (x0, y0 - bh)
            if y0 - y1 > 1:
                # an edge skipping layers runs down beside the boxes, not through them
                side = x0 + (0.62 if x1 > x0 else -0.62)
                lane = [start, (side, y0 - 0.5), (side, y1 + 0.5)]
                ax.plot([p[0] for p in lane], [p[1] for p in lane], zorder=2, **style)
                start = lane[-1]
            ax.annotate("", xy=(x1, y1 + bh), xytext=start,
                        arrowprops=dict(arrowstyle="-|>", shrinkA=0, shrinkB=0,
                                        mutation_scale=6 + font / 2, **style), zorder=2)
            if cut and t not in labelled:
                labelled.add(t)
                ax.text(x0, y0 - bh - 0.12, human_bytes(graph.nbytes(t)),
                        fontsize=font * 0.75, color="#8b0000", ha="center", va="center", zorder=6,
                        bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none", alpha=0.8))
    for v in graph.index.order:
        x, y = pos[v]
        node = graph.index.node[v]
        ax.add_patch(mpatches.FancyBboxPatch((x - bw, y - bh), 2 * bw, 2 * bh,
                                             boxstyle="round,pad=0.02", facecolor=cmap(gid[v] % 20),
                                             edgecolor="0.2", linewidth=0.6, zorder=3))
        label = f"{node.op}\n{_short(v)}" if small else node.op
        ax.text(x, y, label, fontsize=font, ha="center", va="center", zorder=4)
        sources = [t for t in dict.fromkeys(node.inputs) if t and graph.is_source(t)]
        if sources:  # graph inputs and weights this op reads from memory
            ax.text(x + bw + 0.04, y + bh, "in " + human_bytes(sum(graph.nbytes(t) for t in sources)),
                    fontsize=font * 0.75, color="0.35", ha="left", va="bottom", zorder=6)
        written = [t for t in node.outputs if t in outputs]
        if written:
            ax.text(x + bw + 0.04, y - bh, "out " + human_bytes(sum(graph.nbytes(t) for t in written)),
                    fontsize=font * 0.75, color="#00008b", ha="left", va="top", zorder=6)
    title = (f"{plan.strategy} ({plan.status}) on {plan.hardware}\n"
             f"{human_bytes(plan.traffic_bytes)} traffic, {len(plan.groups)} kernels")
    ax.set_title(title, fontsize=max(9.0, font * 1.4))


def _short(name: str, n: int = 14) -> str:
    return name if len(name) <= n else name[: n - 1] + "\u2026"


def draw_plans(plans: Sequence[Plan], path: Union[str, os.PathLike], graphs: Sequence[Graph] = ()) -> None:
    """Draw one or two plans side by side into ``path`` (.svg, .png or .pdf), atomically.

    ``graphs`` gives each plan's graph when it is not embedded in the plan. Two plans of the same
    graph share one layout (made from the first plan's groups), so the difference shows at a glance.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise PlanError(f"{path}: the picture must end in {', '.join(FORMATS)}")
    if not path.parent.is_dir():
        raise PlanError(f"{path.parent}: no such folder")
    if not 1 <= len(plans) <= 2:
        raise PlanError(f"show draws one or two plans, got {len(plans)}")
    gs = list(graphs) or [p.graph for p in plans]
    if any(g is None for g in gs):
        raise PlanError("a plan without its graph cannot be drawn")
    positions = []
    for i, (p, g) in enumerate(zip(plans, gs)):
        same = i > 0 and g.digest() == gs[0].digest()
        positions.append(positions[0] if same else layout(g, p.group_nodes()))
    widths = [max(x for x, _ in pos.values()) + 1 for pos in positions]
    depth = max(-min(y for _, y in pos.values()) + 1 for pos in positions)
    n_ops = max(len(g.nodes) for g in gs)
    small = n_ops <= 40
    font = 7.0 if small else 5.5
    widths = [w + 2 for w in widths]  # room for the bowed long edges on both sides
    fig_w = sum(max(3.0, w * UNIT_X) for w in widths) + 0.5
    fig_h = max(2.5, depth * UNIT_Y + 1.2)
    dpi = max(40, min(150, int(MAX_PIXELS / max(fig_w, fig_h))))
    fig, axes = plt.subplots(1, len(plans), figsize=(fig_w, fig_h), squeeze=False,
                             gridspec_kw={"width_ratios": [max(3.0, w) for w in widths]})
    try:
        for ax, p, g, pos, w in zip(axes[0], plans, gs, positions, widths):
            _panel(ax, p, g, pos, small, font)
            ax.set_xlim(-1.8, w - 1.2)
            ax.set_ylim(-depth + 0.4, 0.9)
            ax.set_axis_off()
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format=path.suffix[1:].lower())
    finally:
        plt.close(fig)
