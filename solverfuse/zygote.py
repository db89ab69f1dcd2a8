"""A clean process to fork workers from: started once per caller process, forks one child per call.

Why not ``os.fork()`` of the caller: a caller is often multi-threaded (a test runner, ONNX
Runtime's or torch's thread pools, a host compiler), and a forked child inherits every lock another
thread held at that instant -- seen as a solver child deadlocked in pydantic's serializer until the
time limit. Why not a fresh interpreter per call: importing OR-Tools, numpy and pydantic takes
0.6 s of CPU (seconds on a loaded machine), out of the user's time limit, on every call. Why not
multiprocessing's forkserver or spawn: both re-run the caller's ``__main__`` script in the child,
so every script calling the library would need an ``if __name__ == "__main__"`` guard.

So the *zygote* is a fresh interpreter (``python -m solverfuse.zygote``) that imports the worker
code once and then serves requests on a Unix socket: each request carries the target (a
``module:function`` name), pickled arguments and four descriptors -- the child's message pipe, its
stdin, the file its stdout/stderr go to, and a status pipe on which the zygote writes the child's
pid when it forks it and its exit status (``Popen.returncode`` style) once it has reaped it. A
request returns at once: a caller may ask for a child while the zygote is still importing. The zygote is single-threaded (BLAS and OpenMP
pools are pinned to one thread) so its forks are safe; it exits when the caller closes its end
(the caller exited or died), and its children die with it (``PR_SET_PDEATHSIG``).

>>> import os, tempfile
>>> r, w = os.pipe()
>>> nothing = os.open(os.devnull, os.O_RDONLY)
>>> with tempfile.TemporaryFile() as err:
...     child = launch("os:write", (b"hi",), msg_fd=w, err_fd=err.fileno(), in_fd=nothing)
...     child.wait(), os.read(r, 2)
(0, b'hi')
>>> for fd in (r, w, nothing): os.close(fd)
"""
from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from typing import Optional

from .errors import InternalError

_LEN = struct.Struct("<Q")
_STATUS = struct.Struct("<i")
#: Modules the zygote imports before serving (what every solver child needs).
PRELOAD = ("solverfuse.worker", "solverfuse.solve")
#: Thread pools pinned in the zygote: a fork must not copy a pool's threads' locks.
_SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class Child:
    """A ``subprocess.Popen``-like handle of a child the zygote forks: ``pid``, ``poll``,
    ``wait`` (the exit code, negative for a signal), ``kill`` and ``release``. Nothing blocks
    until the zygote has forked it except :attr:`pid` and :meth:`wait`."""

    def __init__(self, status_fd: int):
        self._fd: Optional[int] = status_fd
        self._buf = b""
        self._pid: Optional[int] = None
        self.returncode: Optional[int] = None

    def _pump(self, until=None) -> None:
        """Read the status pipe (the pid, then the exit status) until ``until()`` holds; with
        no ``until``, only what is there already."""
        while self._fd is not None and (until is None or not until()):
            if until is None and not select.select([self._fd], [], [], 0)[0]:
                return
            chunk = os.read(self._fd, 64)
            self._buf += chunk
            if self._pid is None and len(self._buf) >= _LEN.size:
                self._pid = _LEN.unpack_from(self._buf)[0]
            if len(self._buf) >= _LEN.size + _STATUS.size:
                self.returncode = _STATUS.unpack_from(self._buf, _LEN.size)[0]
            elif not chunk:  # no status: the zygote died, and its children with it
                self.returncode = -signal.SIGKILL
            if self.returncode is not None:
                self.release()

    @property
    def pid(self) -> Optional[int]:
        self._pump(lambda: self._pid is not None)
        return self._pid

    def poll(self) -> Optional[int]:
        self._pump()
        return self.returncode

    def wait(self) -> int:
        self._pump(lambda: False)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it if it runs. One the zygote has not forked yet is left alone: it finds its
        input closed and exits at once (and dies with the zygote in any case)."""
        if self.poll() is None and self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def release(self) -> None:
        """Close the status pipe (the caller will not wait for this child)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _Server:
    """The caller's side of one zygote."""

    def __init__(self) -> None:
        import solverfuse
        root = os.path.dirname(os.path.dirname(os.path.abspath(solverfuse.__file__)))
        env = dict(os.environ, **_SINGLE_THREADED, PYTHONPATH=os.pathsep.join(
            [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        env.pop("PYTHONFAULTHANDLER", None)  # a fault handler would print a child's abort's traceback
        self.sock, theirs = socket.socketpair()
        self.log = tempfile.TemporaryFile()
        self.pid = os.getpid()
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "solverfuse.zygote", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                         stdout=self.log, stderr=self.log)
        finally:
            theirs.close()

    def request(self, target: str, args: tuple, fds: list[int]) -> None:
        payload = pickle.dumps((target, args), protocol=pickle.HIGHEST_PROTOCOL)
        socket.send_fds(self.sock, [_LEN.pack(len(payload))], fds)
        self.sock.sendall(payload)

    def why_dead(self) -> str:
        self.log.seek(0)
        lines = self.log.read(65536).decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:200] if lines else f"exit code {self.proc.poll()}"

    def close(self) -> None:
        self.sock.close()
        self.log.close()


_lock = threading.Lock()
_server: Optional[_Server] = None


def _forget_in_child() -> None:
    """A caller that forks gives its child a copy of the zygote socket; without this the zygote
    would live on until that child exits too. The child starts its own zygote when it needs one."""
    global _server, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    if _server is not None:
        _server.close()
        _server = None


os.register_at_fork(after_in_child=_forget_in_child)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("the zygote closed its socket")
        data += chunk
    return data


def prestart() -> None:
    """Start this process's zygote now (in the background), so its imports overlap the caller's
    own work (loading a graph) instead of the time limit.

    >>> prestart()
    """
    global _server
    with _lock:
        if _server is None or _server.pid != os.getpid() or _server.proc.poll() is not None:
            _server = _Server()


def launch(target: str, args: tuple, *, msg_fd: int, err_fd: int, in_fd: int) -> Child:
    """Ask this process's zygote (started on first use) for a child that runs
    ``target(msg_fd, *args)`` (``target`` is ``"module:function"``) with stdin on ``in_fd`` and
    stdout and stderr on ``err_fd``. Returns at once, even while the zygote is still starting. The
    child owns its copies of the descriptors; the caller closes its own."""
    global _server
    status_r, status_w = os.pipe()
    try:
        for attempt in (1, 2):
            prestart()
            with _lock:
                server = _server
                try:
                    server.request(target, args, [msg_fd, err_fd, status_w, in_fd])
                    return Child(status_r)
                except OSError as e:  # a dead zygote (killed, out of memory): start a new one, once
                    server.proc.kill()
                    server.proc.wait()
                    why = server.why_dead() or str(e)
                    server.close()
                    _server = None
            if attempt == 2:
                raise InternalError(f"the solver's zygote process died: {why}")
    except BaseException:
        os.close(status_r)
        raise
    finally:
        os.close(status_w)
    raise AssertionError("unreachable")


def _reap(children: dict) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        fd = children.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, _STATUS.pack(os.waitstatus_to_exitcode(status)))
            except OSError:  # the caller stopped listening (released the child)
                pass
            os.close(fd)


def _run_child(sock: socket.socket, children: dict, fds: list[int], payload: bytes) -> None:
    """In the forked child: set up descriptors and run the target; never returns."""
    try:
        sock.close()
        for fd in children.values():
            os.close(fd)
        msg_fd, err_fd, status_fd, in_fd = fds
        os.close(status_fd)
        os.dup2(in_fd, 0)
        os.dup2(err_fd, 1)
        os.dup2(err_fd, 2)
        os.close(in_fd)
        os.close(err_fd)
        import ctypes
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        target, args = pickle.loads(payload)
        module, name = target.split(":")
        getattr(importlib.import_module(module), name)(msg_fd, *args)
    finally:
        os._exit(0)


def _serve(fd: int) -> None:
    """The zygote's loop (``python -m solverfuse.zygote FD``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the caller's to handle
    sock = socket.socket(fileno=fd)
    for module in PRELOAD:
        importlib.import_module(module)
    children: dict[int, int] = {}
    while True:
        _reap(children)
        if not select.select([sock], [], [], 0.05)[0]:
            continue
        head, fds, _, _ = socket.recv_fds(sock, _LEN.size, 4)
        if not head:
            os._exit(0)  # the caller is gone (no slow interpreter shutdown); our children die with us
        head += _recv_exactly(sock, _LEN.size - len(head))
        payload = _recv_exactly(sock, _LEN.unpack(head)[0])
        pid = os.fork()
        if pid == 0:
            _run_child(sock, children, fds, payload)
        msg_fd, err_fd, status_fd, in_fd = fds
        for fd in (msg_fd, err_fd, in_fd):
            os.close(fd)
        try:
            os.write(status_fd, _LEN.pack(pid))
        except OSError:
            pass
        children[pid] = status_fd


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
