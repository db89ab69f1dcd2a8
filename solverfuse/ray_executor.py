"""The Ray side of :mod:`solverfuse.distribute` (``solverfuse[ray]``): tasks as ``ray.remote``
calls on a cluster. The only module that imports ``ray``.

The context goes into the object store once (``ray.put``); each task reserves ``workers`` CPUs
and runs :func:`solverfuse.tasks.run_task` in a Ray worker process. A task whose worker
dies (``WorkerCrashedError``, an out-of-memory kill) or raises comes back as an
:class:`~solverfuse.tasks.Outcome` with ``ok`` False and the reason; Ray does not retry it
(``max_retries=0``: the caller has a fallback and a deadline). The cluster is joined with
``ray.init(address=...)`` and left as it was found: a driver that started nothing stops nothing.
solverfuse must be importable on every node (installed there, or on ``PYTHONPATH``).
"""
from __future__ import annotations

import socket
import time
from typing import Any

import ray

from . import tasks
from .errors import ArgumentError


#: Seconds to wait for a TCP connection to a cluster address before giving up.
CONNECT_TIMEOUT = 3.0


#: Warm-up targets this Ray worker process has run (it is reused across tasks).
_warmed: set = set()


@ray.remote(max_retries=0)
def _remote(context: Any, target: str, args: tuple, fault: Any, warm: Any) -> Any:
    if warm and warm not in _warmed:
        tasks.warm_up(context, warm)
        _warmed.add(warm)
    return tasks.run_task(context, target, args, fault)


def _reachable(address: str) -> None:
    """A ``HOST:PORT`` address nothing listens on is one line at once (``ray.init`` would retry
    for minutes); ``auto`` is left to Ray, which fails fast when no cluster runs here."""
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        raise ArgumentError(f"--ray {address}: cannot join the Ray cluster: {e.strerror or e}") from None


class RayExecutor:
    """Tasks on the Ray cluster at ``address`` (``"auto"``: the one this machine belongs to)."""

    def __init__(self, context: Any, address: str, workers: int = 1, warm: Any = None):
        if not ray.is_initialized():
            _reachable(address)
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise ArgumentError(f"--ray {address}: cannot join the Ray cluster: "
                                    f"{(str(e).splitlines() or [''])[0][:200]}") from None
        self.task_workers, self.warm = workers, warm
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.slots = max(1, cpus // workers)
        self.context = ray.put(context)
        self.running: dict = {}  # ObjectRef -> key

    def idle(self) -> int:
        return self.slots - len(self.running)

    def submit(self, key: Any, target: str, args: tuple) -> None:
        fault = tasks.take_fault()
        ref = _remote.options(num_cpus=self.task_workers).remote(self.context, target, args, fault, self.warm)
        self.running[ref] = key

    def wait(self, timeout: float) -> list[tasks.Outcome]:
        if not self.running:
            return []
        done, _ = ray.wait(list(self.running), num_returns=1, timeout=max(0.0, timeout))
        if done:  # everything else finished by now too
            done, _ = ray.wait(list(self.running), num_returns=len(self.running), timeout=0)
        out = []
        for ref in done:
            key = self.running.pop(ref)
            try:
                out.append(tasks.Outcome(key, True, ray.get(ref)))
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if getattr(e, "cause", None) is not None else e
                out.append(tasks.Outcome(key, False, reason=f"{type(cause).__name__}: "
                                              f"{(str(cause).splitlines() or [''])[0][:300]}"))
            except ray.exceptions.RayError as e:  # the worker died (crash, OOM kill, node lost)
                out.append(tasks.Outcome(key, False, reason=f"the Ray worker died ({type(e).__name__})"))
        return out

    def wait_all(self, timeout: float) -> list[tasks.Outcome]:
        end = time.monotonic() + timeout
        out: list[tasks.Outcome] = []
        while self.running and time.monotonic() < end:
            out += self.wait(end - time.monotonic())
        return out + self.cancel_all(f"did not finish within {timeout:g} s; stopped")

    def cancel_all(self, reason: str) -> list[tasks.Outcome]:
        out = []
        for ref, key in self.running.items():
            ray.cancel(ref, force=True)
            out.append(tasks.Outcome(key, False, reason=reason))
        self.running = {}
        return out

    def close(self) -> None:
        self.cancel_all("closed")


__all__ = ["RayExecutor"]
