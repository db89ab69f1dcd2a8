"""Range checks of the numeric arguments every entry point takes (CLI and library alike).

One place, so ``plan``, ``compare``, ``run`` and ``solverfuse.plan()`` reject the same values
with the same one line (an :class:`~solverfuse.errors.ArgumentError`).

>>> check_time_limit(2)
2.0
>>> check_time_limit(float("nan"))
Traceback (most recent call last):
...
solverfuse.errors.ArgumentError: time limit must be a finite number of seconds >= 0, got nan
"""
from __future__ import annotations

import math
import numbers

from .errors import ArgumentError

#: CP-SAT's random seed is a 32-bit signed integer.
MAX_SEED = 2**31 - 1
#: A week: anything longer is a typo (and would overflow timer arithmetic in some places).
MAX_TIME_LIMIT = 7 * 24 * 3600.0


def check_time_limit(seconds) -> float:
    """``seconds`` as a float; rejects negative, nan, inf, bools and non-numbers."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise ArgumentError(f"time limit must be a number of seconds, got {seconds!r}"[:200])
    x = float(seconds)
    if not math.isfinite(x) or x < 0:
        raise ArgumentError(f"time limit must be a finite number of seconds >= 0, got {seconds!r}")
    if x > MAX_TIME_LIMIT:
        raise ArgumentError(f"time limit must be at most {MAX_TIME_LIMIT:g} s, got {seconds!r}")
    return x


def check_seed(seed) -> int:
    """``seed`` as an int in ``[0, 2**31 - 1]`` (CP-SAT's range).

    >>> check_seed(2**70)
    Traceback (most recent call last):
    ...
    solverfuse.errors.ArgumentError: seed must be an integer in [0, 2147483647], got 1180591620717411303424
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        raise ArgumentError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}"[:200])
    return int(seed)


def check_workers(workers) -> int:
    """``workers`` as an int in ``[1, 256]`` (CP-SAT threads).

    >>> check_workers(4)
    4
    """
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or not 1 <= workers <= 256:
        raise ArgumentError(f"workers must be an integer in [1, 256], got {workers!r}"[:200])
    return int(workers)


__all__ = ["check_time_limit", "check_seed", "check_workers", "MAX_SEED"]
