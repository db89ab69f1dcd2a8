"""CP-SAT formulations of one presolve part, behind one :class:`~.protocol.Formulation` protocol.

``set_partition`` (enumerated groups, lazy cycle cuts; declines parts with too many groups) is
tried first, ``assign`` (representative assignment) takes every part. The math of each is in
``formulations/*.md`` at the repository root; :mod:`.presolve` is shared by both.
"""
