"""``torch.compile(model, backend="solverfuse")``: plan the graph, make Inductor fuse along the plan.

The backend runs torch.compile's own pipeline (``compile_fx``: AOT autograd with Inductor's
decompositions, post-grad passes, lowering, scheduling, code generation) and hooks two places:

* the inner compiler receives the ATen graph Inductor lowers; :func:`~solverfuse.torch.fx_import.
  from_graph_module` imports it and :func:`solverfuse.plan` plans it (``strategy``, ``hardware``,
  ``time_limit`` from ``options``);
* an :class:`~torch._inductor.choices.InductorChoices` subclass, installed with
  ``V.set_choices_handler`` for the compile, refuses every fusion of two scheduler nodes whose
  results belong to different planned groups (the node each buffer was lowered from, its
  ``origin_node``, names our node), and otherwise lets Inductor's own checks decide.

Inductor can only fuse less than the plan, never more: a planned group Inductor does not make one
kernel is listed in the :class:`Report` with Inductor's reasons (its ``WhyNoFuse`` messages), e.g.
a GEMM epilogue (extern library calls take none on CPU).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional
from unittest import mock


from ..plans import Plan
from .fx_import import from_graph_module
from .inductor_real import Kernel, record_kernels

_LAST: list["Report"] = []
#: Plans made in this process, by (graph digest, hardware, strategy, time limit, workers): torch
#: compiles one model again for each thread count or dynamo reset; the plan does not change.
_PLANS: dict[tuple, Plan] = {}


@dataclass
class GroupOutcome:
    """One planned group: the kernels Inductor made for it and, when several, why."""
    group: str
    nodes: list[str]
    kernels: list[str]
    reasons: list[str] = field(default_factory=list)
    #: other planned groups whose ops landed in one of this group's kernels (Inductor inlines
    #: pointwise producers into consumers while lowering, before any fusion decision)
    merged_with: list[str] = field(default_factory=list)

    @property
    def fused(self) -> bool:
        return len(self.kernels) <= 1


@dataclass
class Report:
    """What the solverfuse backend planned and what Inductor made of it."""
    plan: Plan
    kernels: list[Kernel]
    groups: list[GroupOutcome]
    plan_seconds: float

    def summary(self) -> str:
        """A few lines: planned groups, how many became one kernel, the rest with reasons."""
        multi = [g for g in self.groups if len(g.nodes) > 1]
        ok = [g for g in multi if g.fused]
        lines = [f"solverfuse plan ({self.plan.strategy}, {self.plan.status}, {self.plan.hardware}): "
                 f"{len(self.plan.groups)} groups, {self.plan.traffic_bytes} bytes planned; "
                 f"Inductor made {sum(k.kind != 'nop' for k in self.kernels)} kernels",
                 f"{len(ok)} of {len(multi)} multi-op groups became one kernel"]
        for g in multi:
            if not g.fused:
                why = "; ".join(dict.fromkeys(g.reasons)) or "no reason recorded"
                lines.append(f"  {g.group} ({len(g.nodes)} ops) -> {len(g.kernels)} kernels: {why}")
        merged = [g for g in self.groups if g.merged_with]
        if merged:
            lines.append(f"{len(merged)} groups share a kernel with another group (Inductor inlined "
                         f"them while lowering): " + ", ".join(g.group for g in merged[:12]))
        return "\n".join(lines)


def last_report() -> Optional[Report]:
    """The report of the most recent graph the ``solverfuse`` backend compiled (None before)."""
    return _LAST[-1] if _LAST else None


def _group_of_snode(snode, group_of: dict[str, int], producer: dict[str, str]) -> set[int]:
    out = set()
    for s in snode.get_nodes():
        ir = getattr(s, "node", None)
        o = ir.get_origin_node() if ir is not None and hasattr(ir, "get_origin_node") else None
        if o is not None:
            name = o.name if o.name in group_of else producer.get(o.name)
            if name in group_of:
                out.add(group_of[name])
    return out


def _choices(group_of: dict[str, int], producer: dict[str, str]):
    from torch._inductor.choices import InductorChoices

    class PlanChoices(InductorChoices):
        """Inductor's choices, except: no fusion across the plan's groups."""

        @staticmethod
        def can_fuse(scheduler, node1, node2, shared_data_score):
            ga = _group_of_snode(node1, group_of, producer)
            gb = _group_of_snode(node2, group_of, producer)
            if len(ga | gb) > 1:
                return False
            return InductorChoices.can_fuse(scheduler, node1, node2, shared_data_score)

    return PlanChoices()


def _outcomes(plan: Plan, kernels: list[Kernel], producer: dict[str, str],
              refusals: list[tuple[str, str, str]]) -> list[GroupOutcome]:
    group_of = {v: g.name for g in plan.groups for v in g.nodes}
    made: dict[str, list[str]] = {g.name: [] for g in plan.groups}
    for k in kernels:
        if k.kind == "nop":
            continue
        for v in k.writes:
            name = v if v in group_of else producer.get(v)
            if name in group_of and k.name not in made[group_of[name]]:
                made[group_of[name]].append(k.name)
    groups_of_kernel: dict[str, set[str]] = {}
    for gname, ks in made.items():
        for k in ks:
            groups_of_kernel.setdefault(k, set()).add(gname)
    out = []
    for g in plan.groups:
        ks = made[g.name]
        reasons = []
        if len(ks) > 1:
            parts = set(ks)
            for a, b, why in refusals:
                if any(p in a for p in parts) and any(p in b for p in parts):
                    reasons.append(why)
            kinds = {k.name: k.kind for k in kernels}
            if any(kinds.get(k) == "extern" for k in ks):
                reasons.insert(0, "an extern library call (GEMM/conv/attention) takes no fused epilogue")
            if not reasons:  # Inductor's scheduler never asked can_fuse about these kernels
                reasons.append("Inductor never proposed fusing these kernels (not a fusion candidate "
                               "of its scheduler: no shared buffer it scores, or it split them at lowering)")
        merged = sorted({o for k in ks for o in groups_of_kernel[k]} - {g.name})
        out.append(GroupOutcome(g.name, list(g.nodes), ks, reasons, merged))
    return out


def solverfuse_backend(gm: "torch.fx.GraphModule", example_inputs, options: Optional[dict] = None, **_):
    """The ``solverfuse`` torch.compile backend (see the module docstring).

    ``options``: ``hardware`` (profile name, default ``detect``), ``strategy`` (``optimal`` or a
    greedy baseline), ``time_limit`` (seconds for CP-SAT, default 10), ``workers`` (default 1).
    """
    from torch._inductor import scheduler as S
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    from torch._inductor.virtualized import V

    from ..api import plan as make_plan
    opts = dict(options or {})
    hardware = opts.get("hardware", "detect")
    strategy = opts.get("strategy", "optimal")
    time_limit = float(opts.get("time_limit", 10.0))
    workers = int(opts.get("workers", 1))

    def inner(gm2, example_inputs2, **kwargs):
        graph = from_graph_module(gm2, {}, name="torch_compile")
        start = time.perf_counter()
        key = (graph.digest(), str(getattr(hardware, "name", hardware)), strategy, time_limit, workers)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _PLANS[key] = make_plan(graph, hardware, strategy=strategy, time_limit=time_limit,
                                           workers=workers)
            if len(_PLANS) > 64:
                del _PLANS[next(iter(_PLANS))]
        seconds = time.perf_counter() - start
        group_of = {v: i for i, g in enumerate(plan.groups) for v in g.nodes}
        producer = graph.index.producer
        seen: list[list[Kernel]] = []
        refusals: list[tuple[str, str, str]] = []
        original_init, original_why = S.Scheduler.__init__, S.WhyNoFuse.__call__

        def init(self, *a, **k):
            original_init(self, *a, **k)
            seen.append(record_kernels(self.nodes))

        def why(self, reason, *args):
            try:
                refusals.append((self.name1, self.name2, reason % args if args else reason))
            except Exception:  # a message that does not format is still a refusal
                refusals.append((self.name1, self.name2, str(reason)))
            return original_why(self, reason, *args)

        with mock.patch.object(S.Scheduler, "__init__", init), \
                mock.patch.object(S.WhyNoFuse, "__call__", why), \
                V.set_choices_handler(_choices(group_of, producer)):
            compiled = compile_fx_inner(gm2, example_inputs2, **kwargs)
        kernels = seen[-1] if seen else []
        _LAST.append(Report(plan, kernels, _outcomes(plan, kernels, producer, refusals), seconds))
        del _LAST[:-4]
        return compiled

    # Inductor's caches key on the graph, not on our fusion hook: a hit would skip the plan.
    from torch._functorch import config as functorch_config
    from torch._inductor import config
    with config.patch(fx_graph_cache=False, fx_graph_remote_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        return compile_fx(gm, example_inputs, inner_compile=inner)


def register() -> None:
    """Register the backend under the name ``solverfuse`` (done on ``import solverfuse.torch``)."""
    from torch._dynamo import list_backends, register_backend
    if "solverfuse" not in list_backends(exclude_tags=()):
        register_backend(name="solverfuse")(solverfuse_backend)
