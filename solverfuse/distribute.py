"""Independent tasks run in parallel: local worker processes, or a Ray cluster (``solverfuse[ray]``).

An *executor* runs ``target(context, *args)`` (``target`` is ``"module:function"``) for each
submitted task and hands back a :class:`~solverfuse.tasks.Outcome` per task as it finishes: its value, or --
when the process running it died (a native abort, an out-of-memory kill) or raised -- ``ok``
False and the reason in one line. ``context`` (e.g. the graph's structure and the hardware) is
sent once per worker process, not once per task. The solver uses it for the parts of a
decomposed graph (:func:`solverfuse.solve.solve_report` with ``jobs``/``ray``) and
:func:`solverfuse.api.sweep` for models x hardware profiles.

* :class:`LocalExecutor`: ``jobs`` persistent worker processes forked by :mod:`solverfuse.zygote`
  (a clean interpreter: never a fork of a multi-threaded caller), each serving tasks one at a
  time over a pipe. A dead worker is replaced on the next submit.
* Ray (:mod:`solverfuse.ray_executor`, imported only when ``ray`` is given): ``ray.remote`` tasks
  on the cluster at ``address`` (``"auto"``: the one this machine belongs to).

Nothing here imports OR-Tools; the targets do, in the worker processes.

>>> ex = open_executor(1, jobs=2)
>>> ex.submit("a", "operator:add", (1,)); ex.submit("b", "operator:truediv", (0,))
>>> sorted((o.key, o.ok, o.value, o.reason) for o in ex.wait_all(30))
[('a', True, 2, None), ('b', False, None, 'ZeroDivisionError: division by zero')]
>>> ex.close()
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import signal
import tempfile
import time
from multiprocessing.connection import Connection, wait as wait_connections
from typing import Any, Optional, Protocol

from . import tasks, zygote
from .errors import ArgumentError, InternalError


class Executor(Protocol):
    """What the solver and the sweep need from an executor."""
    slots: int          # tasks that run at once
    task_workers: int   # CP-SAT threads each task may use

    def submit(self, key: Any, target: str, args: tuple) -> None: ...
    def idle(self) -> int: ...
    def wait(self, timeout: float) -> list[tasks.Outcome]: ...
    def wait_all(self, timeout: float) -> list[tasks.Outcome]: ...
    def cancel_all(self, reason: str) -> list[tasks.Outcome]: ...
    def close(self) -> None: ...


def check_ray(ray: Optional[str]) -> Optional[str]:
    """``ray`` (None, ``"auto"`` or a cluster address) if usable here, else an
    :class:`~solverfuse.errors.ArgumentError` in one line (the package is an optional extra).

    >>> check_ray(None) is None
    True
    """
    if ray is None:
        return None
    if not isinstance(ray, str) or not ray.strip():
        raise ArgumentError(f"ray must be 'auto' or a cluster address, got {ray!r}"[:200])
    if importlib.util.find_spec("ray") is None:
        raise ArgumentError("--ray needs the ray package: pip install 'solverfuse[ray]'")
    return ray.strip()


def check_jobs(jobs) -> int:
    """``jobs`` as a count of worker processes: 0 means one per CPU core.

    >>> check_jobs(0) == (os.cpu_count() or 1), check_jobs(3)
    (True, 3)
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 0 <= jobs <= 1024:
        raise ArgumentError(f"jobs must be an integer in [0, 1024] (0: one per core), got {jobs!r}"[:200])
    return jobs or (os.cpu_count() or 1)


def open_executor(context: Any, *, jobs: int = 0, ray: Optional[str] = None, workers: int = 1,
                  warm: Optional[str] = None) -> "Executor":
    """An executor for tasks sharing ``context``: on the Ray cluster at ``ray`` when given, else
    ``jobs`` local worker processes (0: one per core). ``workers``: the CP-SAT threads the caller
    would use in one process; locally they are split over the jobs (at least one each) so the
    total stays about the core count, on Ray each task gets them. ``warm``: a target each worker
    process runs once, ``warm(context)``, before its first task (lazy imports and caches, kept
    out of the first task's time limit)."""
    ray = check_ray(ray)
    if ray is not None:
        from .ray_executor import RayExecutor
        return RayExecutor(context, ray, workers, warm)
    jobs = check_jobs(jobs)
    return LocalExecutor(context, jobs, max(1, min(workers, (os.cpu_count() or 1) // jobs)), warm)


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def deadline_token(until: float) -> tuple:
    """The caller's deadline (``time.monotonic()`` seconds) in a form :func:`task_deadline`
    can use on the same machine (``CLOCK_MONOTONIC`` is shared by its processes, not by others).

    >>> task_deadline(60, deadline_token(time.monotonic() + 1)) - time.monotonic() <= 1
    True
    """
    return (_boot_id(), until)


def task_deadline(seconds: float, token: Optional[tuple]) -> float:
    """When a task given ``seconds`` must end: ``seconds`` from now, and on the caller's machine
    never past the caller's deadline (a task that started late, behind a worker's start-up, then
    stops in time instead of being killed with its results)."""
    end = time.monotonic() + seconds
    if token is not None and token[0] is not None and token[0] == _boot_id():
        end = min(end, token[1])
    return end


def prestart() -> None:
    """Start the local workers' interpreter now, in the background (:func:`zygote.prestart`), so
    its imports overlap the caller's own work.

    >>> prestart()
    """
    zygote.prestart()


class _Slot:
    """One local worker process and the task it runs."""

    def __init__(self, blob: bytes):
        self.errfile = tempfile.TemporaryFile()
        r, w = os.pipe()
        task_r, task_w = os.pipe()
        try:
            self.proc = zygote.launch("solverfuse.distribute:serve", (), msg_fd=w,
                                      err_fd=self.errfile.fileno(), in_fd=task_r)
        except BaseException:
            for fd in (r, task_w):
                os.close(fd)
            self.errfile.close()
            raise
        finally:
            os.close(w)
            os.close(task_r)
        self.recv = Connection(r, writable=False)
        self.send = Connection(task_w, readable=False)
        self.key: Any = None
        self.busy = False
        self.dead = self.closed = False
        try:
            self.send.send_bytes(blob)
        except OSError:
            self.dead = True

    def death(self) -> str:
        code = self.proc.wait()
        if code is not None and code < 0:
            try:
                how = signal.Signals(-code).name
            except ValueError:
                how = f"signal {-code}"
        else:
            how = f"exit code {code}"
        native = ""
        try:
            self.errfile.seek(0)
            lines = [ln.strip() for ln in self.errfile.read(65536).decode("utf-8", "replace").splitlines()]
            native = next((ln for ln in lines if "Check failed" in ln or "what():" in ln), "") or \
                next((ln for ln in reversed(lines) if ln), "")
        except OSError:
            pass
        return f"the worker process died ({how}{': ' + native[:200] if native else ''})"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.proc.kill()
        self.proc.release()
        for c in (self.send, self.recv):
            try:
                c.close()
            except OSError:
                pass
        self.errfile.close()


class LocalExecutor:
    """``jobs`` worker processes on this machine (see the module doc)."""

    def __init__(self, context: Any, jobs: int, task_workers: int = 1, warm: Optional[str] = None):
        self.slots, self.task_workers = jobs, task_workers
        self.blob = pickle.dumps((context, warm), protocol=pickle.HIGHEST_PROTOCOL)
        self.pool: list[_Slot] = []

    def idle(self) -> int:
        return self.slots - sum(s.busy for s in self.pool)

    def submit(self, key: Any, target: str, args: tuple) -> None:
        """Run ``target(context, *args)`` in an idle worker (started now if none is idle)."""
        slot = next((s for s in self.pool if not s.busy and not s.dead), None)
        if slot is None:
            for s in [s for s in self.pool if s.dead]:
                s.close()
            self.pool = [s for s in self.pool if not s.dead]
            if len(self.pool) >= self.slots:
                raise InternalError("bug: a task was submitted with no idle worker")
            slot = _Slot(self.blob)
            self.pool.append(slot)
        fault = tasks.take_fault()
        slot.key, slot.busy = key, True
        try:
            slot.send.send((key, target, args, fault))
        except OSError:
            slot.dead = True  # wait() reports its death

    def _finish(self, slot: _Slot) -> Optional[tasks.Outcome]:
        try:
            status, key, value = slot.recv.recv()
        except (EOFError, OSError, pickle.UnpicklingError):
            slot.dead = True
            if not slot.busy:
                return None
            slot.busy = False
            return tasks.Outcome(slot.key, False, reason=slot.death())
        slot.busy = False
        return tasks.Outcome(key, True, value) if status == "ok" else tasks.Outcome(key, False, reason=value)

    def wait(self, timeout: float) -> list[tasks.Outcome]:
        """The tasks that finish within ``timeout`` seconds (at least one, unless time runs out)."""
        out = []
        for s in self.pool:
            if s.dead and s.busy:
                s.busy = False
                out.append(tasks.Outcome(s.key, False, reason=s.death()))
        if out:
            return out
        live = {s.recv: s for s in self.pool if s.busy}
        if not live:
            return []
        for conn in wait_connections(list(live), max(0.0, timeout)):
            o = self._finish(live[conn])
            if o is not None:
                out.append(o)
        return out

    def wait_all(self, timeout: float) -> list[tasks.Outcome]:
        """Every running task's outcome, waiting up to ``timeout`` seconds; the ones still running
        then are stopped (``ok`` False)."""
        end = time.monotonic() + timeout
        out: list[tasks.Outcome] = []
        while any(s.busy for s in self.pool) and time.monotonic() < end:
            out += self.wait(end - time.monotonic())
        return out + self.cancel_all(f"did not finish within {timeout:g} s; stopped")

    def cancel_all(self, reason: str) -> list[tasks.Outcome]:
        """Stop every running task (its worker is killed); their outcomes say ``reason``."""
        out = []
        for s in self.pool:
            if s.busy:
                s.close()
                s.dead, s.busy = True, False
                out.append(tasks.Outcome(s.key, False, reason=reason))
        self.pool = [s for s in self.pool if not s.dead]
        return out

    def close(self) -> None:
        """Stop every worker."""
        for s in self.pool:
            s.close()
        self.pool = []


def serve(fd: int) -> None:
    """A local worker's loop (the zygote forks it): the context, then tasks on stdin until it
    closes; one ``(status, key, value)`` reply per task on ``fd``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the whole group
    inbox, out = Connection(0, writable=False), Connection(fd, readable=False)
    try:
        context, warm = pickle.loads(inbox.recv_bytes())
        tasks.warm_up(context, warm)
        while True:
            key, target, args, fault = inbox.recv()
            try:
                reply = ("ok", key, tasks.run_task(context, target, args, fault))
            except Exception as e:  # noqa: BLE001 -- the caller decides what a failed task means
                reply = ("error", key, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            out.send(reply)
    except (EOFError, OSError):
        pass
    finally:
        os._exit(0)


__all__ = ["Executor", "LocalExecutor", "open_executor", "prestart", "deadline_token", "task_deadline",
           "check_ray", "check_jobs", "serve"]
