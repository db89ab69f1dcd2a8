"""What every formulation provides, so the solver drives them all the same way.

A formulation module has a ``NAME`` and a ``build(graph, hw, pre, part, *, max_groups)`` that
returns a :class:`Formulation` -- the CP-SAT model of one presolve part plus the means to read a
solution back -- or None when it declines the part (too large for it); :mod:`solverfuse.solve`
tries the modules of :data:`solverfuse.solve.FORMULATIONS` in order.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol, Sequence

from ortools.sat.python import cp_model

from ..graph import Graph
from ..hardware import Hardware
from .presolve import Presolve

#: Reads one variable's value in a solution (``CpSolver.Value`` or a callback's ``Value``).
ValueOf = Callable[[cp_model.IntVar], int]


class Formulation(Protocol):
    """A built model of one part, its decoder and its exact objective."""
    name: str
    model: cp_model.CpModel
    nodes: list[str]

    def decode(self, value: ValueOf) -> list[list[str]]:
        """The groups of a solution (lists of op names in graph order)."""

    def objective_value(self, value: ValueOf) -> int:
        """The objective of a solution in exact integer arithmetic (= its plan's traffic)."""

    def hint(self, groups: Sequence[Sequence[str]]) -> None:
        """Replace the model's hint by this part's groups (executable order, ops in graph order)."""

    def forbid(self, cycle: Sequence[Sequence[str]]) -> None:
        """Cut off solutions picking all these groups, which form a cycle in the quotient graph."""


class Builder(Protocol):
    """``build`` of a formulation module."""

    def __call__(self, graph: Graph, hw: Hardware, pre: Presolve, part: Sequence[str], *,
                 max_groups: int) -> Optional[Formulation]: ...
