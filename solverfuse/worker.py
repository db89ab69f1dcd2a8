"""The optimal planner run in a worker process, so nothing inside CP-SAT can take the caller down.

:func:`solve_in_worker` starts one child that computes the greedy hints (cheapest first,
:data:`HINT_ORDER`), sends each better legal one back, then runs
:func:`solverfuse.solve.solve_report` and sends the plan. The parent validates the best plan it
holds in a background thread meanwhile (the fallback) and otherwise only waits. Whatever happens
in the child -- a native abort (OR-Tools ``Check failed``), an out-of-memory kill, a hang past the
time limit -- the parent returns a validated plan: the solver's, or else the best plan it has (the
best greedy hint, named, or every op alone), with status ``feasible`` and ``plan.reason`` saying
what happened in one line. After a crash with time left, the solve is retried once with one
CP-SAT worker (the known abort class needs several).

Time: the whole call, from ``started`` (the caller's clock, e.g. before loading the graph), is
bounded by ``time_limit + GRACE`` plus, when the child had to be stopped, at most
``FALLBACK_WAIT`` for the validation of the newest hint (else an earlier validated one is
returned) -- except that the very first fallback (every op alone) is always waited for. The
baselines share :data:`HINT_SHARE` of the time; the child skips the solve when no time is left
for it (message ``skip``) and is told to stop early enough to validate its own plan inside the
limit. ``plan.solve_seconds`` is the wall time from ``started`` to the returned plan. A caller
may :func:`prestart` the child before it loads the graph: the child's imports (OR-Tools, a
second or more) and, for a JSON file, its own load of the graph then overlap the caller's.

Processes: the child is forked from :mod:`solverfuse.zygote` (a clean single-threaded
interpreter started once per caller process, which has imported OR-Tools and the solver), never
from the caller itself, which is often multi-threaded (see that module for why, and why not
multiprocessing). It reads its arguments (the graph's structure, :meth:`Graph.structure_copy`,
without weights) pickled on stdin and sends length-prefixed pickled messages on a pipe of its
own; its stdout and stderr (OR-Tools' native messages) go to a file the parent reads when it dies.

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
from importlib import import_module
from typing import Callable, Optional, Union

from . import cost, distribute, errors, greedy, tasks, zygote
from .arguments import check_seed, check_time_limit, check_workers
from .errors import InternalError, Interrupted, SolverfuseError
from .graph import Graph
from .hardware import Hardware, load_hardware
from .plans import Plan, build_plan

#: Seconds the parent waits past the time limit before it stops the worker.
GRACE = 1.0
#: Share of the time limit the child keeps for decoding and validating its plan (and at least
#: ``VALIDATE_PER_OP`` seconds per op).
RESERVE = 0.2
VALIDATE_PER_OP = 100e-6
MIN_RESERVE = 0.3
#: Seconds the solve needs at least to be worth starting after the hints (else the best hint,
#: which the parent validates meanwhile, is the plan).
MIN_SOLVE = 0.5
#: Seconds the parent waits, past the deadline, for the validation of the latest hint before it
#: returns an earlier one already validated.
FALLBACK_WAIT = 1.0
#: Share of the time left the greedy baselines (hints) may take, together, before the solve
#: starts. On graphs of a few hundred ops they take milliseconds and the share does not matter;
#: it binds on graphs of thousands of ops, where CP-SAT proves nothing in seconds either and the
#: best baseline is most of the plan's quality.
HINT_SHARE = 0.6
#: The order the child runs the baselines in: cheapest first (measured on random DAGs of
#: 5,000-20,000 ops, ``benchmarks/scale.py``), so the hint budget cuts off the slow ones, not a
#: good cheap one; each better hint reaches the parent at once.
HINT_ORDER = ("unfused", "tvm", "xla", "guide", "inductor")
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


class WorkerProcess:
    """A solver worker started ahead of its work (:func:`prestart`): forked by the zygote (which,
    on a process's first call, imports solverfuse, OR-Tools and the rest -- a second or more --
    while the caller still loads its graph), it then waits for its arguments. :meth:`close` ends
    it if it was never used."""

    def __init__(self, source=None):
        # a graph JSON file the worker may load itself, in parallel with the caller: its
        # (size, mtime) now, which the caller checks again after its own load (file_stamp)
        self.stamp = file_stamp(source) if source is not None and str(source).endswith(".json") else None
        self.errfile = tempfile.TemporaryFile()
        r, w = os.pipe()
        args_r, args_w = os.pipe()
        try:
            self.proc = zygote.launch("solverfuse.worker:child_main",
                                      (os.fspath(source) if self.stamp else None, self.stamp),
                                      msg_fd=w, err_fd=self.errfile.fileno(), in_fd=args_r)
        except BaseException:
            for fd in (r, args_w):
                os.close(fd)
            self.errfile.close()
            raise
        finally:
            os.close(w)
            os.close(args_r)
        self.stdin = os.fdopen(args_w, "wb")
        self.recv = _Receiver(r)
        self.used = False

    def send_args(self, args: tuple) -> None:
        """Hand the worker its arguments (once)."""
        self.used = True
        try:
            self.stdin.write(pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL))
            self.stdin.close()
        except BrokenPipeError:  # it died before reading: the caller sees the death
            pass

    def close(self) -> None:
        """Kill the worker if it still runs; release its pipes and error file."""
        self.proc.kill()
        self.proc.release()
        try:
            self.stdin.close()
        except (OSError, BrokenPipeError):
            pass
        if self.recv.fd >= 0:
            self.recv.close()
            self.recv.fd = -1
        self.errfile.close()


def prestart(source=None) -> WorkerProcess:
    """Start a solver worker now, for :func:`solve_in_worker` to use later (``worker=``): its
    start-up then overlaps whatever the caller does meanwhile (loading the graph). ``source``: the
    graph JSON file the caller is about to load; the worker loads it too, at the same time, and
    is then sent no graph if the file did not change in between (pickling a 20,000-op graph
    across and unpickling it took seconds).

    >>> w = prestart(); w.close()
    """
    return WorkerProcess(source)


def file_stamp(path) -> Optional[str]:
    """The size and modification time of a file (None if it cannot be read): a file whose stamp
    is the same before and after a load was not changed during it."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"


def child_main(fd: int, source: Optional[str], stamp: Optional[str]) -> None:
    """The child's entry point (the zygote forks it): loads ``source`` itself when its
    :func:`file_stamp` is ``stamp``, reads its arguments on stdin, runs :func:`_child` sending on ``fd``."""
    conn = _Sender(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the whole group
    own = None
    if source is not None and file_stamp(source) == stamp:
        try:
            own = import_module("solverfuse.sources").load_graph(source)
        except Exception:  # noqa: BLE001 -- the caller loads it too and reports the error
            own = None
        if file_stamp(source) != stamp:  # changed while it was read
            own = None
    try:
        args = pickle.load(sys.stdin.buffer)
    except (EOFError, pickle.UnpicklingError):  # the caller closed us before sending any work
        os._exit(0)
    if args[0] is None:  # the caller found the file unchanged: this worker's own copy is the graph
        if own is None:
            conn.send(("bug", "the worker could not load the graph file the caller loaded"))
            conn.close()
            os._exit(0)
        args = (own,) + tuple(args[1:])
    _child(conn, *args)


def _child(conn, graph: Graph, hw: Hardware, deadline: float, workers: int, seed: int,
           with_hints: bool, hint: Optional[list], fault: Optional[str], covering: bool = False,
           objective: str = "traffic", jobs: int = 1, ray: Optional[str] = None,
           part_fault: Optional[str] = None) -> None:
    from .solve import best_hint, solve_report
    from .time_objective import solve_covering_time, solve_time
    faulthandler.disable()
    tasks.FAULT = part_fault
    try:
        if ray is None and jobs != 1 and objective == "traffic" and not covering:
            distribute.prestart()  # the part workers' interpreter imports while the hints run
        best = best_hint(graph, hw, [hint] if hint else [])
        best_traffic = cost.plan_traffic(graph, best)  # the parent has this one already
        if with_hints:
            # the baselines get at most HINT_SHARE of the time between them (their own running
            # time: checking a hint is not counted); one that runs over is cut off by SIGALRM
            # (nothing else runs in this process yet) and the solve starts from the best hint so far
            alarm = {signal.SIGALRM}
            signal.pthread_sigmask(signal.SIG_BLOCK, alarm)  # only a baseline itself is cut off
            signal.signal(signal.SIGALRM, _out_of_hint_time)
            budget = HINT_SHARE * (deadline - time.monotonic())
            todo = sorted(greedy.STRATEGIES, key=lambda n: (HINT_ORDER + (n,)).index(n))
            try:
                for name in list(todo):
                    if budget <= 1e-3:
                        raise _HintTimeout()
                    began = time.monotonic()
                    signal.setitimer(signal.ITIMER_REAL, budget)
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, alarm)
                    h = greedy.STRATEGIES[name](graph, hw)
                    signal.pthread_sigmask(signal.SIG_BLOCK, alarm)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.sigtimedwait(alarm, 0)  # an alarm that came just as it returned: spent
                    budget -= time.monotonic() - began
                    todo.remove(name)
                    better = best_hint(graph, hw, [best, h])
                    t = cost.plan_traffic(graph, better)
                    if t < best_traffic:
                        best, best_traffic = better, t
                        conn.send(("hint", best, name))
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
        if left - reserve < MIN_SOLVE:  # the parent validates the best hint already: no second copy
            conn.send(("skip", f"no time was left to solve after the hints ({max(left, 0):.1f} s of "
                               f"{reserve:.1f} s needed to validate)"))
            return
        if objective == "time":
            solver = solve_covering_time if covering else solve_time
            plan = solver(graph, hw, time_limit=max(0.0, left - reserve), workers=workers, seed=seed,
                          hints=[best]).model_copy(update={"graph": None})
            conn.send(("done", plan, 0, 0, 0))
            return
        report = solve_report(graph, hw, time_limit=max(0.0, left - reserve), workers=workers, seed=seed,
                              hints=[best], progress=lambda s, t, b: conn.send(("progress", t, b)),
                              covering=covering, jobs=1 if covering else jobs, ray=None if covering else ray)
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


def fallback_plan(graph: Graph, hw: Hardware, groups: list) -> Plan:
    """The plan of a legal partition ``groups`` returned when the solver could not finish:
    strategy ``optimal``, status ``feasible``, bound the graph's floor (``cost.q_min``)."""
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
                plan = fallback_plan(self.graph, self.hw, groups)
            except Exception:  # noqa: BLE001 -- get() rebuilds in the caller and raises there
                return
            with self.lock:
                self.built = (groups, plan)

    def get(self, groups: list, wait: Optional[float] = None) -> tuple[list, Plan]:
        """The plan of ``groups`` -- or, when its validation is under way but not done within
        ``wait`` seconds, of the latest groups already validated (an earlier, worse hint): the
        caller is past its deadline. Returns (groups, plan)."""
        with self.lock:
            thread = self.thread if self.latest is groups else None
        if thread is not None:
            thread.join(wait)  # it is validating these very groups: wait rather than start over
            with self.lock:
                nothing = self.built[0] is None
            if nothing and thread.is_alive():
                thread.join()  # no earlier plan to return, and a second build would halve both
        with self.lock:
            if self.built[0] is groups or (self.built[0] is not None and thread is not None and thread.is_alive()):
                return self.built[0], self.built[1].model_copy()
        return groups, fallback_plan(self.graph, self.hw, groups)


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
                    objective: str = "traffic", worker: Optional[WorkerProcess] = None,
                    source_stamp: Optional[str] = None, jobs: int = 1, ray: Optional[str] = None) -> WorkerResult:
    """The optimal plan of ``graph``, solved in a child process; never dies with the solver.

    ``hints``: compute every greedy baseline as a hint (in the child). ``progress(seconds,
    traffic, bound)`` sees every incumbent. ``started``: ``time.monotonic()`` when the caller's
    clock started (default: now); the time limit counts from there. ``covering``: allow
    recomputation and looped reductions (``formulations/covering.md``); the fallbacks stay partitions.
    ``objective="time"``: least predicted run time (:func:`solverfuse.time_objective.solve_time`).
    ``worker``: a worker :func:`prestart` started earlier, used for the first attempt (and closed);
    ``source_stamp``: :func:`file_stamp` of the graph's file right after the caller loaded it --
    equal to the worker's, the worker uses the copy it loaded itself. ``jobs`` (0: one per core)
    and ``ray`` (a Ray cluster address or ``"auto"``): the child solves the graph's parts in
    parallel (:mod:`solverfuse.distribute`); a part whose worker dies keeps its hint and
    ``plan.reason`` says so.
    """
    start = time.monotonic() if started is None else started
    time_limit = check_time_limit(time_limit)
    workers, seed = check_workers(workers), check_seed(seed)
    jobs, ray = distribute.check_jobs(jobs), distribute.check_ray(ray)
    hw = load_hardware(hw)
    alone = [[v] for v in graph.index.order]
    deadline = start + time_limit
    best: list = alone  # every op alone is always legal: the fallback before any hint arrives
    result: Optional[WorkerResult] = None
    reason: Optional[str] = None
    attempts = 0
    log: list = []
    cut: list[str] = []  # baselines the hint budget cut off
    names = {id(alone): "every op alone"}  # id of a partition -> where it came from
    structure = graph.structure_copy()
    # the fallback's validation starts first, in a thread, while the child starts and reads
    # its arguments (it computes the graph's digest itself: nothing is done twice in a row)
    spare = _Spare(graph, hw)
    spare.offer(best)
    while result is None and attempts < 2:
        attempts += 1
        n_workers = workers if attempts == 1 else 1
        child = None
        try:
            child = worker if attempts == 1 and worker is not None and not worker.used else WorkerProcess()
            proc, recv, errfile = child.proc, child.recv, child.errfile
            same = child.stamp is not None and child.stamp == source_stamp
            child.send_args((None if same else structure, hw, deadline, n_workers, seed, hints and attempts == 1,
                             best, _fault_for(attempts), covering, objective, jobs, ray,
                             tasks.FAULT if attempts == 1 else None))
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
                    names[id(best)] = f"the best greedy plan ({msg[2]})"
                    spare.offer(best)
                elif msg[0] == "skip":
                    reason = msg[1]
                    break
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
            if child is not None:
                child.close()
        if result is None and (time.monotonic() >= deadline or reason.startswith(("the solver did not stop", "no time"))):
            break
    if result is None:
        used, plan = spare.get(best, max(FALLBACK_WAIT, deadline + GRACE - time.monotonic()))
        what = names.get(id(used), "the best greedy plan")
        if used is alone:
            what += " (no better hint was ready)"
        elif used is not best:
            what += f" (validating the better {names.get(id(best), 'hint')} did not finish in time)"
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


__all__ = ["solve_in_worker", "fallback_plan", "prestart", "file_stamp", "WorkerProcess", "WorkerResult", "GRACE", "FAULT"]
