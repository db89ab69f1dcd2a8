"""Exception types: every user-facing failure is one of these, with a one-line message.

The CLI turns any :class:`SolverfuseError` into ``error: <message>`` and exit code 2.
"""


class SolverfuseError(ValueError):
    """Base class: a problem with user input, reported as one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class GraphError(SolverfuseError):
    """The graph is malformed: bad JSON, unknown tensor, cycle, shape mismatch, ..."""


class HardwareError(SolverfuseError):
    """A hardware profile is unknown or invalid."""


class PlanError(SolverfuseError):
    """A plan is illegal for its graph and hardware (validator rejection) or malformed."""


class EmitError(SolverfuseError):
    """The C emitter or its build/run harness cannot handle the request."""
