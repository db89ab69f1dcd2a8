"""Exception types: every user-facing failure is one of these, with a one-line message.

The CLI turns any :class:`SolverfuseError` into ``error: <message>`` and exit code 2, an
:class:`InternalError` (a bug in solverfuse, never the user's input) into one line asking for a
report and exit code 70, and an :class:`Interrupted` (SIGINT/SIGTERM) into one line and exit code
128 + the signal number.

>>> str(GraphError("node 'a':   bad\\n shape"))
"node 'a': bad shape"
>>> issubclass(InternalError, SolverfuseError), issubclass(FileError, SolverfuseError)
(False, True)
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


class ArgumentError(SolverfuseError):
    """An argument value is out of range (time limit, seed, workers, ...)."""


class FileError(SolverfuseError):
    """A file cannot be read or written; the message names the path."""


class ResourceError(SolverfuseError):
    """The request needs more of the machine (memory) than it has; the message gives the numbers."""


class InternalError(RuntimeError):
    """A bug in solverfuse (an invariant broke), not a problem with the input. Not a
    :class:`SolverfuseError`: callers catching user errors must not swallow it."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (a BaseException, like KeyboardInterrupt, so ``except Exception``
    does not swallow it). ``signum`` is the signal; exit code 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum
