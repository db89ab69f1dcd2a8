"""Build, load, run and time the C of a plan: ``compile_plan(plan) -> Program``.

The source from :func:`solverfuse.emit.program.render` is compiled with ``cc -O3 -march=native`` (retried
without ``-march``, with a warning, only if the compiler rejects that flag; ``-fopenmp`` when ``threads > 1``) into a shared
library, cached under a content hash of the source, compiler and flags, and loaded with ctypes.
``sanitize=True`` builds a standalone executable under ``-fsanitize=address,undefined`` instead
(an ASan library cannot be loaded into a plain Python); ``run`` then exchanges buffers through
files. ``counters=True`` builds the instrumented variant whose per-kernel byte counts
(:attr:`Program.counters`) must equal ``cost.group_reads``/``group_writes`` bytes.

>>> import numpy as np
>>> from solverfuse.graph import load_graph
>>> from solverfuse.plans import build_plan
>>> g = load_graph({"tensors": {"x": {"shape": [3]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
>>> import tempfile
>>> plan = build_plan(g, "nvidia-h100", [["r"]], strategy="m")
>>> prog = compile_plan(plan, counters=True, cache_dir=tempfile.mkdtemp())
>>> prog.run({"x": np.array([-1, 2, -3], dtype=np.float32)})["y"].tolist(), prog.counters
([0.0, 2.0, 0.0], [{'group': 'k0', 'read_bytes': 12, 'written_bytes': 12}])
"""
from __future__ import annotations

import ctypes
import hashlib
import itertools
import os
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from ..dtypes import np_dtype
from ..errors import EmitError
from ..graph import Graph
from .ctext import RC_MESSAGES
from .data import aligned_empty
from .program import BufferInfo, buffer_table, render

# -fopenmp-simd: honour ``#pragma omp simd`` (vectorised reductions) without the OpenMP runtime
BASE_FLAGS = ["-O3", "-std=c11", "-fPIC", "-fno-math-errno", "-fopenmp-simd", "-Wall", "-Wextra"]
SANITIZE_FLAGS = ["-O1", "-g", "-std=c11", "-fopenmp-simd", "-Wall", "-Wextra", "-DSF_SEPARATE_SLOTS",
                  "-fsanitize=address,undefined",
                  "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
#: Exit code the sanitizers use in the standalone build (distinct from the kernels' codes).
SANITIZER_EXIT = 86

HARNESS = r"""#include <stdio.h>
#include <stdlib.h>
#include "model.h"

/* Standalone runner for sanitizer builds: buffer i is read from DIR/i.in (inputs, constants)
   and written to DIR/i.out (everything else). */
int main(int argc, char **argv)
{
    static void *B[SF_NUM_BUFFERS + 1];
    char path[4096];
    int rc = 0;
    if (argc < 2) return 64;
    for (int i = 0; i < SF_NUM_BUFFERS; i++) {
        size_t n = (size_t)(sf_numel[i] * sf_isize[i]);
        B[i] = calloc(n ? n : 1, 1);
        if (!B[i]) return 65;
        if (!sf_is_input[i]) continue;
        snprintf(path, sizeof path, "%s/%d.in", argv[1], i);
        FILE *f = fopen(path, "rb");
        if (!f) return 66;
        size_t got = fread(B[i], 1, n, f);
        fclose(f);
        if (got != n) return 67;
    }
    rc = sf_run(B);
    for (int i = 0; i < SF_NUM_BUFFERS && !rc; i++) {
        if (sf_is_input[i]) continue;
        size_t n = (size_t)(sf_numel[i] * sf_isize[i]);
        snprintf(path, sizeof path, "%s/%d.out", argv[1], i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(B[i], 1, n, f) != n) rc = 68;
        if (f) fclose(f);
    }
    for (int i = 0; i < SF_NUM_BUFFERS; i++) free(B[i]);
    sf_release();
    return rc;
}
"""


def default_cache_dir() -> Path:
    """``$SOLVERFUSE_CACHE``, else ``~/.cache/solverfuse``."""
    env = os.environ.get("SOLVERFUSE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "solverfuse"


def _compile(cc: str, flags: list[str], sources: list[str], out: str, cwd: str, link: bool = True) -> Optional[str]:
    """Run the compiler; None on success, else its first error lines."""
    try:
        r = subprocess.run([cc, *flags, "-o", out, *sources] + (["-lm"] if link else []), cwd=cwd,
                           capture_output=True, text=True, timeout=600)
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        raise EmitError(f"C compiler {cc!r} not found (set CC or pass cc=)") from None
    except subprocess.TimeoutExpired:
        return "compiler timed out"
    if r.returncode == 0:
        return None
    errs = [ln for ln in r.stderr.splitlines() if "error" in ln] or r.stderr.splitlines() or ["(no output)"]
    return "; ".join(errs[:3])


def _compile_native(cc: str, flags: list[str], sources: list[str], out: str, cwd: str, link: bool = True) -> None:
    """Compile with ``-march=native``; only a compiler that rejects that flag gets a second try
    without it (with a warning: the code is then built for the generic target). Any other error
    is an EmitError with the compiler's own first lines."""
    err = _compile(cc, flags + ["-march=native"], sources, out, cwd, link)
    if err is None:
        return
    if "march" not in err:
        raise EmitError(f"C compiler {cc!r} failed: {err}")
    warnings.warn(f"C compiler {cc!r} rejects -march=native ({err}); building for its generic target, "
                  "without this host's vector extensions", RuntimeWarning, stacklevel=2)
    err = _compile(cc, flags, sources, out, cwd, link)
    if err is not None:
        raise EmitError(f"C compiler {cc!r} failed: {err}")


#: Optimisation level of ``model.c`` in a library whose kernels are in units of their own: it
#: holds the arena, the weight packing (run once per set of weights) and the driver that calls
#: the kernels, nothing per element, and took 0.7 of DenseNet-121's 7.8 s of compiler CPU at
#: -O3 (0.4 at -O1).
MAIN_UNIT_OPT = "-O1"


def unit_flags(flags: list[str], name: str, units: int) -> list[str]:
    """The compiler flags of one translation unit ``name`` of a library of ``units`` units.

    >>> unit_flags(["-O3", "-fPIC"], "model.c", 5), unit_flags(["-O3", "-fPIC"], "kernels0.c", 5)
    (['-O1', '-fPIC'], ['-O3', '-fPIC'])
    >>> unit_flags(["-O3", "-fPIC"], "model.c", 1)  # the kernels are in model.c
    ['-O3', '-fPIC']
    """
    if name != "model.c" or units < 2:
        return list(flags)
    return [MAIN_UNIT_OPT if f == "-O3" else f for f in flags]


def _objects(cc: str, flags: list[str], files: dict[str, str], units: list[str], root: Path, tmp: str) -> list[str]:
    """Compile each translation unit to an object, in parallel (one process per CPU), each cached
    under ``root/obj`` by its own text, ``model.h``, compiler and flags: a program that changes one
    kernel recompiles one unit. Returns the object paths."""
    objdir = root / "obj"
    objdir.mkdir(parents=True, exist_ok=True)

    def one(name: str) -> str:
        fl = unit_flags(flags, name, len(units))
        h = hashlib.sha256(repr((cc, fl)).encode() + files["model.h"].encode() + b"\0" + files[name].encode())
        obj = objdir / (h.hexdigest()[:32] + ".o")
        if not obj.exists():
            part = Path(tempfile.mkdtemp(dir=tmp, prefix="unit-"))
            for n in (name, "model.h"):
                (part / n).write_text(files[n], encoding="utf-8")
            _compile_native(cc, fl + ["-c"], [name], "unit.o", str(part), link=False)
            os.replace(part / "unit.o", obj)  # atomic: a concurrent build writes the same bytes
        return str(obj)
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return list(pool.map(one, units))


def build(files: dict[str, str], *, cc: Optional[str] = None, threads: int = 1, sanitize: bool = False,
          strict: bool = False, cache_dir: Union[str, os.PathLike, None] = None) -> Path:
    """Compile rendered files (cached by content hash); returns the library or executable path.
    Every ``*.c`` file is a translation unit; a library's units compile in parallel."""
    cc = cc or os.environ.get("CC") or "cc"
    flags = list(SANITIZE_FLAGS if sanitize else BASE_FLAGS) + (["-Werror"] if strict else [])
    if threads > 1 and not sanitize:
        flags.append("-fopenmp")
    files = dict(files)
    sources = sorted(n for n in files if n.endswith(".c"))
    if sanitize:
        files["harness.c"] = HARNESS
        sources.append("harness.c")
    artifact = "program" if sanitize else "model.so"
    h = hashlib.sha256(repr((cc, flags, sanitize)).encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    final = root / h.hexdigest()[:32]
    if (final / artifact).exists():
        return final / artifact
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=root, prefix=".build-")
    except OSError as e:
        raise EmitError(f"cannot use build cache {root} ({e.strerror or e}); set SOLVERFUSE_CACHE") from None
    try:
        for name, text in files.items():
            Path(tmp, name).write_text(text, encoding="utf-8")
        if sanitize:
            _compile_native(cc, flags, sources, artifact, tmp)
        else:
            objs = _objects(cc, flags, files, sources, root, tmp)
            link = flags + ["-shared"]
            err = _compile(cc, link, objs, artifact, tmp)
            if err is not None:
                raise EmitError(f"C compiler {cc!r} failed to link: {err}")
        for d in Path(tmp).glob("unit-*"):
            shutil.rmtree(d, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:  # another process built the same program first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final / artifact


#: library path -> token of the Program that last ran it: two Programs loaded from one cached
#: library share its arena and packed weights, so a switch between them packs again.
_LAST_USER: dict[str, int] = {}
_TOKENS = itertools.count()


def _pointers(arrays):
    """The ``void *B[]`` of a run: each array's data (NULL for an arena-resident intermediate)."""
    return (ctypes.c_void_p * (len(arrays) + 1))(*[None if a is None else a.ctypes.data for a in arrays])


class Program:
    """A compiled plan: ``run`` it on inputs, ``time`` it, read per-kernel byte ``counters``."""

    def __init__(self, plan, graph: Graph, table: list[BufferInfo], path: Path, *, sanitize: bool,
                 counters: bool, threads: int):
        self.plan, self.graph, self.table, self.path = plan, graph, table, path
        self.sanitize, self.instrumented, self.threads = sanitize, counters, threads
        self._counters: Optional[list[dict]] = None
        self._token = next(_TOKENS)
        self._held: dict[str, tuple] = {}  # constant -> (the caller's object, the array passed to C)
        self.lib = None
        if not sanitize:
            self.lib = ctypes.CDLL(str(path))
            self.lib.sf_run.argtypes = [ctypes.c_void_p]
            self.lib.sf_time.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            self.lib.sf_counters.argtypes = [ctypes.c_void_p]
            self.lib.sf_init.argtypes = []
            self.lib.sf_invalidate.argtypes = []
            self._check(self.lib.sf_init())  # the arena: allocated at load, never per run

    @property
    def counters(self) -> list[dict]:
        """Per group of the last run: ``{group, read_bytes, written_bytes}`` (needs counters=True)."""
        if not self.instrumented:
            raise EmitError("byte counters need a build with counters=True")
        if self._counters is None:
            raise EmitError("no run yet: call run() before reading counters")
        return self._counters

    def _arrays(self, inputs: Mapping[str, np.ndarray], constants: Optional[Mapping[str, np.ndarray]]):
        if constants is None:
            from .data import constants as make_constants
            constants = make_constants(self.graph)
        arrays = []
        for b in self.table:
            want = np_dtype(b.dtype)
            if b.role in ("input", "constant"):
                source = inputs if b.role == "input" else constants
                if b.tensor not in source:
                    raise EmitError(f"missing {b.role} {b.tensor!r}")
                held = self._held.get(b.tensor) if b.role == "constant" else None
                if held is not None and held[0] is source[b.tensor]:
                    arrays.append(held[1])  # the same weights: same pointer, packs stay valid
                    continue
                arr = np.asarray(source[b.tensor], dtype=want, order="C")
                if arr.shape != b.shape and [d for d in arr.shape if d != 1] == [d for d in b.shape if d != 1]:
                    arr = arr.reshape(b.shape)  # only size-1 dims differ (e.g. [1] for a scalar)
                if arr.shape != b.shape:
                    raise EmitError(f"{b.role} {b.tensor!r} has shape {list(arr.shape)}, expected {list(b.shape)}")
                if b.role == "constant":
                    # held while this Program lives: another array cannot take its address, so
                    # the C side's pointer check sees any change of weights (not in-place writes)
                    self._held[b.tensor] = (source[b.tensor], arr)
            elif b.role == "output":
                arr = aligned_empty(b.shape, want)
            else:
                arr = None  # an intermediate: it lives in the program's arena
            arrays.append(arr)
        return arrays, constants

    def __del__(self):
        # give the arena back; a Program still using this library allocates and packs again
        lib = getattr(self, "lib", None)
        if lib is not None:
            try:
                lib.sf_release.argtypes = []
                lib.sf_release()
            except Exception:  # interpreter shutdown
                pass

    def _claim(self) -> None:
        """Make the packed weights this Program's (see ``_LAST_USER``)."""
        if _LAST_USER.get(str(self.path)) != self._token:
            self.lib.sf_invalidate()
            _LAST_USER[str(self.path)] = self._token

    def _check(self, rc: int) -> None:
        if rc:
            raise EmitError(f"generated program failed (code {rc}): {RC_MESSAGES.get(rc, 'unknown error')}")

    def run(self, inputs: Mapping[str, np.ndarray],
            constants: Optional[Mapping[str, np.ndarray]] = None) -> dict[str, np.ndarray]:
        """Execute every kernel once; graph outputs keyed by tensor name."""
        arrays, constants = self._arrays(inputs, constants)
        if self.sanitize:
            self._run_standalone(arrays)
        else:
            self._claim()
            self._check(self.lib.sf_run(_pointers(arrays)))
            if self.instrumented:
                cnt = (ctypes.c_longlong * (2 * len(self.plan.groups) + 1))()
                self.lib.sf_counters(cnt)
                self._counters = [dict(group=g.name, read_bytes=int(cnt[2 * i]), written_bytes=int(cnt[2 * i + 1]))
                                  for i, g in enumerate(self.plan.groups)]
        where = {b.tensor: i for i, b in enumerate(self.table)}
        out = {}
        for t in self.graph.outputs:
            if t in where:
                out[t] = arrays[where[t]]
            else:  # a graph output that is an input or constant: no kernel touches it
                src = inputs if t in inputs else constants
                out[t] = np.array(src[t], dtype=np_dtype(self.graph.tensors[t].dtype))
        return out

    def _run_standalone(self, arrays) -> None:
        with tempfile.TemporaryDirectory(prefix="solverfuse-run-") as d:
            for i, (b, a) in enumerate(zip(self.table, arrays)):
                if b.role in ("input", "constant"):
                    a.tofile(os.path.join(d, f"{i}.in"))
            env = dict(os.environ, ASAN_OPTIONS=f"exitcode={SANITIZER_EXIT}:detect_leaks=1",
                       UBSAN_OPTIONS=f"exitcode={SANITIZER_EXIT}:print_stacktrace=1:halt_on_error=1")
            r = subprocess.run([str(self.path), d], capture_output=True, text=True, env=env, timeout=600)
            if r.returncode:
                if r.returncode in RC_MESSAGES:
                    self._check(r.returncode)
                tail = " | ".join(r.stderr.strip().splitlines()[:4])
                raise EmitError(f"sanitized program failed (exit {r.returncode}): {tail}")
            for i, (b, a) in enumerate(zip(self.table, arrays)):
                if b.role == "output":
                    a[...] = np.fromfile(os.path.join(d, f"{i}.out"), dtype=a.dtype).reshape(a.shape)

    def time(self, inputs: Mapping[str, np.ndarray], constants: Optional[Mapping[str, np.ndarray]] = None,
             repeats: int = 10, cpu: bool = False) -> list[float]:
        """Seconds per full run of the kernels, measured inside C (clock_gettime), one per repeat:
        wall time, or with ``cpu`` the calling thread's CPU time (the whole run when built for 1
        thread; on a loaded machine it leaves out the time other jobs held the core)."""
        if self.sanitize:
            raise EmitError("timing a sanitizer build is meaningless; build without sanitize")
        arrays, _ = self._arrays(inputs, constants)
        ptrs = _pointers(arrays)
        self._claim()
        secs = (ctypes.c_double * max(1, repeats))()
        self._check((self.lib.sf_time_cpu if cpu else self.lib.sf_time)(ptrs, int(repeats), secs))
        return [float(secs[i]) for i in range(repeats)]


def translation_units(groups: int, cpus: Optional[int] = None) -> int:
    """How many translation units :func:`compile_plan` splits a plan of ``groups`` kernels into:
    one per 8 kernels, at most one per CPU (they compile in parallel). Each unit compiles the
    helpers its kernels call (and GCC's clones of them for constant geometries) again, so a unit
    more than the CPUs can run at once costs compile time and gains no parallelism: DenseNet-121's
    cold build on 2 cores, 4 kernel units against 2, 4.9-5.7 s against 4.0-4.8 s wall (compiler
    CPU 9.3-10.7 s against 7.5-9.3 s; 4 alternated pairs, Zen 3). The split changes what GCC
    specialises (a static helper called with one geometry in its unit), so benchmarks that time
    kernels one by one build with the same split.

    >>> translation_units(5, 2), translation_units(38, 2), translation_units(700, 2), translation_units(700, 8)
    (1, 2, 2, 8)
    """
    return max(1, min(cpus or os.cpu_count() or 1, groups // 8))


def compile_plan(plan, graph: Optional[Graph] = None, *, threads: int = 1, counters: bool = False,
                 sanitize: bool = False, cc: Optional[str] = None,
                 cache_dir: Union[str, os.PathLike, None] = None, strict: bool = False) -> Program:
    """Render, compile (cached) and load a plan. ``strict`` adds ``-Werror`` (used by the tests)."""
    graph = graph or plan.graph
    if graph is None:
        raise EmitError("plan has no embedded graph and none was given")
    threads = 1 if counters else max(1, int(threads))
    units = 1 if (counters or sanitize) else translation_units(len(plan.groups))
    files = render(plan, graph, threads=threads, counters=counters, units=units)
    files.pop("buffers.json")
    path = build(files, cc=cc, threads=threads, sanitize=sanitize, strict=strict, cache_dir=cache_dir)
    return Program(plan, graph, buffer_table(plan, graph), path, sanitize=sanitize, counters=counters,
                   threads=threads)
