"""The optimal planner run in a worker process, so nothing inside CP-SAT can take the caller down.

:func:`solve_in_worker` forks one child that computes the greedy hints, sends the best legal one
back, then runs :func:`solverfuse.solve.solve_report` and sends the plan. The parent only waits.
Whatever happens in the child -- a native abort (OR-Tools ``Check failed``), an out-of-memory
kill, a hang past the time limit -- the parent returns a validated plan: the solver's, or else the
best plan it has (the best greedy hint, or every op alone), with status ``feasible`` and
``plan.reason`` saying what happened in one line. After a crash with time left, the solve is
retried once with one CP-SAT worker (the known abort class needs several).

Time: the whole call, from ``started`` (the caller's clock, e.g. before loading the graph), is
bounded by ``time_limit + GRACE`` plus the time to validate a fallback plan; the child is told to
stop early enough to validate its own plan inside the limit. ``plan.solve_seconds`` is the wall
time from ``started`` to the returned plan.

Processes: the child is forked from :mod:`solverfuse.zygote` (a clean single-threaded
interpreter started once per caller process), never from the caller itself, which is often
multi-threaded (see that module for why, and why not multiprocessing). It receives its arguments
pickled (the graph's structure, :meth:`Graph.structure_copy`, without weights) and sends
length-prefixed pickled messages on a pipe of its own; its stdout and stderr (OR-Tools' native
messages) go to a file the parent reads when it dies.

Interrupts: a :class:`~solverfuse.errors.Interrupted` (or KeyboardInterrupt) raised while
waiting kills the child before it propagates; ``Interrupted.groups`` then holds the best
partition known so far (at worst every op alone), so the caller may write it. The child ignores SIGINT (a terminal's
Ctrl-C reaches the whole process group) and dies with the zygote, which exits with the caller.

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [1024]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> r = solve_in_worker(g, "nvidia-h100", time_limit=5, workers=1)
>>> r.plan.status, [grp.nodes for grp in r.plan.groups], r.plan.reason
('optimal', [['a', 'b']], None)
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from . import cost, errors, greedy, zygote
from .arguments import check_seed, check_time_limit, check_workers
from .errors import InternalError, Interrupted, SolverfuseError
from .graph import Graph
from .hardware import Hardware, load_hardware
from .plans import Plan, build_plan
from .solve import best_hint, solve_report, solve_time  # the zygote imports them once

#: Seconds the parent waits past the time limit before it stops the worker.
GRACE = 1.0
#: Share of the time limit the child keeps for decoding and validating its plan (and at least
#: ``VALIDATE_PER_OP`` seconds per op).
RESERVE = 0.2
VALIDATE_PER_OP = 100e-6
MIN_RESERVE = 0.3
#: Share of the time limit the greedy baselines (hints) may take before the solve starts.
HINT_SHARE = 0.4
#: Test hook: "abort", "kill" or "hang" makes the child fail that way once it has sent its hints
#: (every attempt; with a "-once" suffix only the first).
FAULT: Optional[str] = None


@dataclass
class WorkerResult:
    """The plan plus what the worker saw (the fields of ``solve.SolveReport`` the CLI prints)."""
    plan: Plan
    parts: int = 0
    largest_part: int = 0
    variables: int = 0
    attempts: int = 0
    log: list = field(default_factory=list)


class _HintTimeout(Exception):
    pass


def _out_of_hint_time(signum, frame):
    raise _HintTimeout()


def _fault(kind: Optional[str]) -> None:
    if kind == "abort":
        os.abort()
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(1e6)


def _fault_for(attempt: int) -> Optional[str]:
    if FAULT and FAULT.endswith("-once"):
        return FAULT[: -len("-once")] if attempt == 1 else None
    return FAULT


_FRAME = struct.Struct("<Q")


class _Sender:
    """The child's end of the message pipe: one length-prefixed pickle per message."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, msg: tuple) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_FRAME.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        os.close(self.fd)


class _Receiver:
    """The parent's end: :meth:`poll` waits up to a timeout for a whole message."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.eof = fd, bytearray(), False

    def _whole(self) -> bool:
        return len(self.buf) >= _FRAME.size and len(self.buf) >= _FRAME.size + _FRAME.unpack_from(self.buf)[0]

    def poll(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self._whole() and not self.eof:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return False
            chunk = os.read(self.fd, 1 << 20)
            self.buf += chunk
            self.eof = not chunk
        return True

    def recv(self) -> tuple:
        if not self._whole():
            raise EOFError("the worker closed its pipe")
        n = _FRAME.unpack_from(self.buf)[0]
        msg = pickle.loads(bytes(self.buf[_FRAME.size:_FRAME.size + n]))
        del self.buf[:_FRAME.size + n]
        return msg

    def close(self) -> None:
        os.close(self.fd)


def _start(args: tuple, errfile) -> tuple[zygote.Child, _Receiver]:
    """A solver child running :func:`_child` on ``args`` (module doc, *Processes*)."""
    r, w = os.pipe()
    try:
        child = zygote.launch("solverfuse.worker:child_main", args, msg_fd=w, err_fd=errfile.fileno())
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return child, _Receiver(r)


def child_main(fd: int, *args) -> None:
    """The solver child's entry point (the zygote calls it): :func:`_child` sending on ``fd``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the whole group
    _child(_Sender(fd), *args)


def _child(conn, graph: Graph, hw: Hardware, deadline: float, workers: int, seed: int,
           with_hints: bool, hint: Optional[list], fault: Optional[str], covering: bool = False,
           objective: str = "traffic") -> None:
    faulthandler.disable()
    try:
        best = best_hint(graph, hw, [hint] if hint else [])
        best_traffic = cost.plan_traffic(graph, best)  # the parent has this one already
        if with_hints:
            # the baselines get at most HINT_SHARE of the time; one that runs over is cut off
            # by SIGALRM (nothing else runs in this process yet) and the solve starts from the
            # best hint so far
            alarm = {signal.SIGALRM}
            signal.pthread_sigmask(signal.SIG_BLOCK, alarm)  # only a baseline itself is cut off
            signal.signal(signal.SIGALRM, _out_of_hint_time)
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, HINT_SHARE * (deadline - time.monotonic())))
            todo = list(greedy.STRATEGIES)
            try:
                for name, make in greedy.STRATEGIES.items():
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, alarm)
                    h = make(graph, hw)
                    signal.pthread_sigmask(signal.SIG_BLOCK, alarm)
                    todo.remove(name)
                    better = best_hint(graph, hw, [best, h])
                    t = cost.plan_traffic(graph, better)
                    if t < best_traffic:
                        best, best_traffic = better, t
                        conn.send(("hint", best))
            except _HintTimeout:
                conn.send(("cut", todo))
            finally:
                signal.pthread_sigmask(signal.SIG_BLOCK, alarm)
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, signal.SIG_IGN)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, alarm)
        _fault(fault)
        left = deadline - time.monotonic()
        reserve = max(RESERVE * left, MIN_RESERVE + VALIDATE_PER_OP * len(graph.nodes))
        if objective == "time":
            plan = solve_time(graph, hw, time_limit=max(0.0, left - reserve), workers=workers, seed=seed,
                              hints=[best]).model_copy(update={"graph": None})
            conn.send(("done", plan, 0, 0, 0))
            return
        report = solve_report(graph, hw, time_limit=max(0.0, left - reserve), workers=workers, seed=seed,
                              hints=[best], progress=lambda s, t, b: conn.send(("progress", t, b)),
                              covering=covering)
        plan = report.plan.model_copy(update={"graph": None})
        conn.send(("done", plan, report.parts, report.largest_part, report.variables))
    except SolverfuseError as e:
        conn.send(("user-error", type(e).__name__, str(e)))
    except BaseException as e:  # noqa: BLE001 -- reported to the parent as a bug
        conn.send(("bug", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()
        sys.stdout.flush()
        os._exit(0)


def _fallback_plan(graph: Graph, hw: Hardware, groups: list) -> Plan:
    return build_plan(graph, hw, groups, strategy="optimal", status="feasible",
                      bound_bytes=min(cost.q_min(graph), cost.plan_traffic(graph, groups)))


class _Spare:
    """Builds (validates) the fallback plan of the latest hint in a background thread while the
    parent only waits, so a fallback at the deadline costs no validation time (seconds at 20k ops)."""

    def __init__(self, graph: Graph, hw: Hardware):
        self.graph, self.hw = graph, hw
        self.lock = threading.Lock()
        self.latest: Optional[list] = None
        self.built: tuple = (None, None)  # (groups, plan)
        self.thread: Optional[threading.Thread] = None

    def offer(self, groups: list) -> None:
        with self.lock:
            self.latest = groups
            if self.thread is not None and self.thread.is_alive():
                return
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def _run(self) -> None:
        while True:
            with self.lock:
                groups = self.latest
                if self.built[0] is groups:
                    return
            try:
                plan = _fallback_plan(self.graph, self.hw, groups)
            except Exception:  # noqa: BLE001 -- get() rebuilds in the caller and raises there
                return
            with self.lock:
                self.built = (groups, plan)

    def get(self, groups: list) -> Plan:
        with self.lock:
            thread = self.thread if self.latest is groups else None
        if thread is not None:
            thread.join()  # it is validating these very groups: wait rather than start over
        with self.lock:
            if self.built[0] is groups:
                return self.built[1].model_copy()
        return _fallback_plan(self.graph, self.hw, groups)


def _native_message(errfile) -> str:
    """The first telling line the child wrote to stderr (OR-Tools' ``Check failed ...``)."""
    try:
        errfile.seek(0)
        lines = [ln.strip() for ln in errfile.read(65536).decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    for ln in lines:
        if "Check failed" in ln or "terminate called" in ln or "what():" in ln:
            return ln[:200]
    return next((ln[:200] for ln in lines if ln), "")


def _death(exitcode: Optional[int], errfile) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            how = signal.Signals(-exitcode).name
        except ValueError:
            how = f"signal {-exitcode}"
        if how == "SIGKILL":
            how += ", out of memory?"
    else:
        how = f"exit code {exitcode}"
    native = _native_message(errfile)
    return f"the solver worker died ({how}{': ' + native if native else ''})"


def solve_in_worker(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0,
                    workers: int = 2, seed: int = 0, hints: bool = True,
                    progress: Optional[Callable[[float, int, int], None]] = None,
                    started: Optional[float] = None, covering: bool = False,
                    objective: str = "traffic") -> WorkerResult:
    """The optimal plan of ``graph``, solved in a child process; never dies with the solver.

    ``hints``: compute every greedy baseline as a hint (in the child). ``progress(seconds,
    traffic, bound)`` sees every incumbent. ``started``: ``time.monotonic()`` when the caller's
    clock started (default: now); the time limit counts from there. ``covering``: allow
    recomputation and looped reductions (``formulations/covering.md``); the fallbacks stay partitions.
    ``objective="time"``: least predicted run time (:func:`solverfuse.solve.solve_time`).
    """
    start = time.monotonic() if started is None else started
    time_limit = check_time_limit(time_limit)
    workers, seed = check_workers(workers), check_seed(seed)
    hw = load_hardware(hw)
    alone = [[v] for v in graph.index.order]
    deadline = start + time_limit
    best: list = alone  # every op alone is always legal: the fallback before any hint arrives
    result: Optional[WorkerResult] = None
    reason: Optional[str] = None
    attempts = 0
    log: list = []
    cut: list[str] = []  # baselines the hint budget cut off
    spare = _Spare(graph, hw)
    graph.digest()  # once, here: the cached digest travels with the copy the child receives
    structure = graph.structure_copy()
    while result is None and attempts < 2:
        attempts += 1
        n_workers = workers if attempts == 1 else 1
        errfile = tempfile.TemporaryFile()
        proc = recv = None
        try:
            proc, recv = _start((structure, hw, deadline, n_workers, seed, hints and attempts == 1, best,
                                 _fault_for(attempts), covering, objective), errfile)
            if attempts == 1:
                spare.offer(best)
            while True:
                wait = deadline + GRACE - time.monotonic()
                if wait <= 0:
                    reason = f"the solver did not stop within {time_limit:g} s + {GRACE:g} s; stopped it"
                    break
                if not recv.poll(min(wait, 0.25)):
                    if proc.poll() is None or recv.poll(0):
                        continue
                    reason = _death(proc.wait(), errfile)
                    break
                try:
                    msg = recv.recv()
                except (EOFError, OSError, pickle.UnpicklingError):
                    reason = _death(proc.wait(), errfile)
                    break
                if msg[0] == "hint":
                    best = msg[1]
                    spare.offer(best)
                elif msg[0] == "cut":
                    cut = msg[1]
                elif msg[0] == "progress":
                    log.append((round(time.monotonic() - start, 6), msg[1], msg[2]))
                    if progress:
                        progress(time.monotonic() - start, msg[1], msg[2])
                elif msg[0] == "done":
                    plan = msg[1]
                    if plan.graph is None and graph is not None:
                        plan.graph = graph
                    result = WorkerResult(plan, msg[2], msg[3], msg[4])
                    break
                elif msg[0] == "user-error":
                    kind = getattr(errors, msg[1], SolverfuseError)
                    raise (kind if isinstance(kind, type) and issubclass(kind, SolverfuseError)
                           else SolverfuseError)(msg[2])
                else:
                    raise InternalError(f"in the solver worker: {msg[1]}")
        except (Interrupted, KeyboardInterrupt) as e:
            e.groups = best  # type: ignore[attr-defined]
            raise
        finally:
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            if recv is not None:
                recv.close()
            errfile.close()
        if result is None and (time.monotonic() >= deadline or reason.startswith("the solver did not stop")):
            break
    if result is None:
        plan = spare.get(best)
        what = "the best greedy plan" if best is not alone else "every op alone (no better hint was ready)"
        plan.reason = f"{reason}; returned {what}"
        result = WorkerResult(plan)
    result.attempts, result.log = attempts, log
    if result.plan.reason is None and attempts > 1:
        result.plan.reason = f"{reason}; solved again with one CP-SAT worker"
    if cut and result.plan.status != "optimal":
        note = f"baselines not tried as hints for lack of time: {', '.join(cut)}"
        result.plan.reason = f"{result.plan.reason}; {note}" if result.plan.reason else note
    result.plan.solve_seconds = round(time.monotonic() - start, 6)
    return result


__all__ = ["solve_in_worker", "WorkerResult", "GRACE", "FAULT"]

