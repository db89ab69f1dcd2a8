"""What a parallel task is, wherever it runs: its :class:`Outcome`, how a worker process runs it
(:func:`run_task`, after the test hook :data:`FAULT`) and warms up for it (:func:`warm_up`).
Shared by :mod:`solverfuse.distribute` (local workers) and :mod:`solverfuse.ray_executor`.

>>> run_task(2, "operator:mul", (21,))
42
"""
from __future__ import annotations

import importlib
import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Optional

#: Test hook: "kill", "abort" or "hang" makes the worker running the next submitted task fail
#: that way before it runs it (once: :func:`take_fault` clears it).
FAULT: Optional[str] = None


@dataclass
class Outcome:
    """What became of one task: ``value`` when ``ok``, else ``reason`` (one line)."""
    key: Any
    ok: bool
    value: Any = None
    reason: Optional[str] = None


def take_fault() -> Optional[str]:
    """:data:`FAULT`, cleared (an executor sends it with the next task)."""
    global FAULT
    fault, FAULT = FAULT, None
    return fault


def run_task(context: Any, target: str, args: tuple, fault: Optional[str] = None) -> Any:
    """``target(context, *args)`` (``target`` is ``"module:function"``), after the test hook
    ``fault`` (see :data:`FAULT`)."""
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "abort":
        os.abort()
    elif fault == "hang":
        time.sleep(1e6)
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(context, *args)


def warm_up(context: Any, warm: Optional[str]) -> None:
    """Run ``warm(context)`` if given; a failure there is left to the first task to meet."""
    if warm:
        try:
            run_task(context, warm, ())
        except Exception:  # noqa: BLE001
            pass


__all__ = ["Outcome", "FAULT", "take_fault", "run_task", "warm_up"]
