"""The one way solverfuse writes a file: atomically, with the mode the umask gives.

Every output (plan, graph, emitted C, ``run -o`` arrays, pictures, ``compare --plans``) goes
through :func:`atomic_path`: the data is written to a temporary file in the target's directory,
flushed to disk, given mode ``0o666 & ~umask`` (``mkstemp`` makes 0600), then renamed over the
target. A reader never sees half a file, and a failure (or an interrupt) leaves nothing behind.
Any ``OSError`` becomes a :class:`~solverfuse.errors.FileError` naming the path.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> write_atomic(os.path.join(d, "a.txt"), "hello\\n")
>>> open(os.path.join(d, "a.txt")).read(), sorted(os.listdir(d))
('hello\\n', ['a.txt'])
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, Union

from .errors import FileError

PathLike = Union[str, os.PathLike]


def umask_mode() -> int:
    """The mode a newly created file gets under the current umask (0o644 under 022).

    >>> old = os.umask(0o022); m = umask_mode(); _ = os.umask(old); oct(m)
    '0o644'
    """
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``path``; when the block ends without an exception the file
    there is synced, given the umask's mode and renamed to ``path``; otherwise it is removed.

    >>> d = tempfile.mkdtemp()
    >>> with atomic_path(os.path.join(d, "b.bin")) as tmp:
    ...     _ = open(tmp, "wb").write(b"xy")
    >>> sorted(os.listdir(d))
    ['b.bin']
    """
    path = Path(path)
    if path.is_dir():
        raise FileError(f"{path}: cannot write (it is a directory)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileError(f"{path}: cannot write (no such directory {str(parent)!r})")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as e:
        raise FileError(f"{path}: cannot write ({_why(e)})") from None
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, umask_mode())
        os.replace(tmp, path)
    except OSError as e:
        raise FileError(f"{path}: cannot write ({_why(e)})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_atomic(path: PathLike, data: Union[str, bytes]) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically (see :func:`atomic_path`)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        try:
            with open(tmp, "wb") as f:
                f.write(raw)
        except OSError as e:
            raise FileError(f"{path}: cannot write ({_why(e)})") from None


def read_text(path: PathLike, error=FileError) -> str:
    """A file's UTF-8 text; ``error`` (a SolverfuseError subclass) names the path on any problem
    (missing, a directory, unreadable, not UTF-8).

    >>> read_text("/nonexistent/x.json")
    Traceback (most recent call last):
    ...
    solverfuse.errors.FileError: /nonexistent/x.json: no such file
    """
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({_why(e)})") from None


__all__ = ["atomic_path", "write_atomic", "read_text", "umask_mode"]
