"""What the benchmark ran on, and the machine's bandwidth limit measured in the same run.

:func:`describe` collects the CPU model, cores, caches (sysfs, via ``hardware.detect``), the C
compiler, library versions and the date. :func:`triad` compiles ``triad.c`` (a STREAM-style
triad) with the emitter's own compiler flags and returns its best and median bandwidth.
"""
from __future__ import annotations

import datetime
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence

HERE = Path(__file__).resolve().parent


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def compiler() -> str:
    """``cc --version`` first line (the compiler the emitter uses)."""
    cc = os.environ.get("CC", "cc")
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.splitlines()[0].strip() if out else cc
    except (OSError, subprocess.TimeoutExpired):
        return f"{cc}: not found"


def section(heading: str, written: str, started: float, load0: float, host: str, body: list[str],
            level: str = "##") -> list[str]:
    """A topic script's section: ``## heading (date)`` (``level``: the heading's hashes), the
    sentence ``written`` (how it was measured) with the load average at the start and now (read
    here) and the run time, ``Machine: host``, then ``body``.

    >>> section("T", "Written by x.", 0.0, 0.5, "AMD EPYC", ["| a |"])[0].startswith("## T (")
    True
    """
    return [f"{level} {heading} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            f"{written} Load {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; run time "
            f"{time.time() - started:.0f} s.", "", f"Machine: {host}", ""] + body


def describe() -> dict:
    """Machine description for RESULTS.md (every field read, none assumed)."""
    from solverfuse.hardware import detect
    hw = detect()
    model = hw.description.split(":", 1)[-1].rsplit(",", 1)[0].strip()
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    simd = [f for f in ("avx512f", "avx2", "fma", "neon", "sve") if f" {f}" in flags]
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model, "cores": hw.cores, "simd": simd, "machine": platform.machine(),
        "l1d_bytes": hw.l1_bytes, "l2_bytes": hw.l2_bytes, "l3_bytes": hw.l3_bytes,
        "memory_bytes": mem, "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(), "compiler": compiler(),
        "versions": {p: _version(p) for p in ("numpy", "onnx", "onnxruntime", "ortools", "torch")},
        "valgrind": shutil.which("valgrind") is not None,
    }


def triad(n: int, repeats: int, threads: int, cflags: Sequence[str], cc: str = "cc",
          workdir: Optional[Path] = None) -> dict:
    """Compile and run the triad on ``n`` floats per array; GB/s by STREAM's 3-array count."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        exe = Path(tmp) / "triad"
        flags = list(cflags)
        if threads > 1 and "-fopenmp" not in flags:
            flags.append("-fopenmp")
        subprocess.run([cc, *flags, str(HERE / "triad.c"), "-o", str(exe)], check=True,
                       capture_output=True, text=True, timeout=120)
        out = subprocess.run([str(exe), str(n), str(repeats), str(threads)], check=True,
                             capture_output=True, text=True, timeout=600).stdout
    times = [float(x) for x in out.split()][1:] or [float(x) for x in out.split()]  # first pass warms up
    nbytes = 3 * n * 4
    return {"n": n, "bytes": nbytes, "threads": threads, "flags": flags, "seconds": times,
            "best_gbs": nbytes / min(times) / 1e9, "median_gbs": nbytes / statistics.median(times) / 1e9}


class TriadLib:
    """The triad as a shared library on preallocated arrays: one call = one pass, so it can be
    timed as one more variant inside a benchmark's interleaved rounds."""

    def __init__(self, n: int, threads: int, cflags: Sequence[str], cc: str = "cc"):
        import ctypes
        import numpy as np
        self._tmp = tempfile.TemporaryDirectory()
        so = Path(self._tmp.name) / "triad.so"
        flags = [f for f in cflags if f != "-shared"] + ["-DTRIAD_LIB", "-shared", "-fPIC"]
        if threads > 1 and "-fopenmp" not in flags:
            flags.append("-fopenmp")
        subprocess.run([cc, *flags, str(HERE / "triad.c"), "-o", str(so)], check=True,
                       capture_output=True, text=True, timeout=120)
        self.lib = ctypes.CDLL(str(so))
        f = ctypes.c_void_p
        self.lib.sf_triad.argtypes = [f, f, f, ctypes.c_long, ctypes.c_float]
        self.lib.sf_read.argtypes = [f, ctypes.c_long]
        self.lib.sf_read.restype = ctypes.c_float
        self.n, self.nbytes, self.read_bytes = n, 3 * n * 4, n * 4
        self.a = np.zeros(n, np.float32)
        self.b = np.ones(n, np.float32)
        self.c = np.full(n, 2.0, np.float32)

    def __call__(self) -> None:
        self.lib.sf_triad(self.a.ctypes.data, self.b.ctypes.data, self.c.ctypes.data, self.n, 3.0)

    def read(self) -> float:
        """One read-only pass over ``b`` (``n * 4`` bytes: :attr:`read_bytes`), its sum."""
        return self.lib.sf_read(self.b.ctypes.data, self.n)
