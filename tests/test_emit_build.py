"""A program's kernels spread over several translation units, compiled in parallel and cached one
object per unit: the same results as the single-file build, and a rebuild reuses unchanged units;
and what a unit costs to parse (the intrinsic headers it includes)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from solverfuse.emit.build import Program, build
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.program import buffer_table, render
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, graph, unfused


def _chain(n):
    ops = ["Relu", "Neg", "Exp", "Abs", "Sigmoid", "Tanh", "Sqrt", "Floor"]
    t = {"x": [16, 40]}
    nodes = [(f"n{i}", ops[i % len(ops)], [f"t{i}" if i else "x"], [f"t{i + 1}" if i < n - 1 else "y"])
             for i in range(n)]
    return graph(t, ["x"], ["y"], nodes)


def test_split_build_matches_reference_and_reuses_objects(tmp_path):
    g = _chain(20)
    plan = build_plan(g, HW, unfused(g), strategy="t")
    x, cs = random_inputs(g, seed=3), constants(g, seed=3)
    want = reference_outputs(g, x, cs, engine="onnxruntime")["y"]
    table = buffer_table(plan, g)
    for threads in (1, 2):
        files = render(plan, g, threads=threads, units=3)
        assert sorted(files) == ["buffers.json", "kernels0.c", "kernels1.c", "kernels2.c", "model.c", "model.h"]
        assert "static int k" not in files["model.c"]  # every kernel lives in a unit of its own file
        files.pop("buffers.json")
        path = build(files, threads=threads, strict=True, cache_dir=tmp_path)
        prog = Program(plan, g, table, path, sanitize=False, counters=False, threads=threads)
        np.testing.assert_allclose(prog.run(x, cs)["y"], want, rtol=1e-5, atol=1e-6)
    objects = set((tmp_path / "obj").iterdir())
    assert len(objects) == 8  # 4 units x 2 thread settings
    # the same kernels with a changed driver unit: the three kernel units come from the cache
    files = render(plan, g, threads=1, units=3)
    files.pop("buffers.json")
    files["model.c"] += "\n/* a change to the driver only */\n"
    build(files, strict=True, cache_dir=tmp_path)
    assert len(set((tmp_path / "obj").iterdir()) - objects) == 1


def test_cpu_time_of_a_run_is_the_calling_threads(tmp_path):
    """``Program.time(cpu=True)`` (sf_time_cpu) returns one CPU time per repeat, each no longer
    than the same run's wall time measured around it from Python (a 1-thread run's CPU time
    cannot exceed its wall time) and positive."""
    import time

    from solverfuse.emit.build import compile_plan
    g = _chain(8)
    prog = compile_plan(build_plan(g, HW, unfused(g), strategy="t"), g, cache_dir=tmp_path)
    x, cs = random_inputs(g, seed=3), constants(g, seed=3)
    t0 = time.perf_counter()
    cpu = prog.time(x, cs, repeats=3, cpu=True)
    wall = time.perf_counter() - t0
    assert len(cpu) == 3 and all(c > 0 for c in cpu) and sum(cpu) <= wall


def _wrapper(tmp_path, body):
    """A compiler wrapper script around the real ``cc`` that logs every call's flags."""
    import stat
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho \"$*\" >> " + str(tmp_path / "cc.log") + "\n" + body)
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    return str(cc)


def test_a_compiler_without_march_native_builds_generic_code_with_a_warning(tmp_path):
    """A compiler that rejects ``-march=native`` (as some cross or old compilers do) gets one
    retry without it, and the build warns that it lost the host's vector extensions."""
    import pytest
    g = _chain(3)
    plan = build_plan(g, HW, unfused(g), strategy="t")
    files = render(plan, g, threads=1)
    files.pop("buffers.json")
    cc = _wrapper(tmp_path, 'for a in "$@"; do [ "$a" = -march=native ] && '
                  '{ echo "cc1: error: bad value (native) for -march= switch" >&2; exit 1; }; done\nexec cc "$@"\n')
    with pytest.warns(RuntimeWarning, match="rejects -march=native"):
        path = build(files, cc=cc, strict=True, cache_dir=tmp_path / "cache")
    x, cs = random_inputs(g, seed=1), constants(g, seed=1)
    prog = Program(plan, g, buffer_table(plan, g), path, sanitize=False, counters=False, threads=1)
    want = reference_outputs(g, x, cs, engine="onnxruntime")["y"]
    np.testing.assert_allclose(prog.run(x, cs)["y"], want, rtol=1e-5, atol=1e-6)


def test_a_compile_error_is_reported_once_not_retried_without_march(tmp_path):
    """Any other compiler error is not hidden behind a second build without ``-march=native``:
    one call per unit, the compiler's own message in the EmitError."""
    import pytest

    from solverfuse.errors import EmitError
    files = {"model.h": "", "model.c": "int f(void) { return undeclared_name; }\n"}
    cc = _wrapper(tmp_path, 'exec cc "$@"\n')
    with pytest.raises(EmitError, match="undeclared_name"):
        build(files, cc=cc, cache_dir=tmp_path / "cache")
    calls = (tmp_path / "cc.log").read_text().splitlines()
    assert len(calls) == 1 and "-march=native" in calls[0]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs GCC (-H lists the headers a unit includes)")
def test_an_avx2_unit_parses_the_avx2_intrinsic_headers_not_all_of_immintrin(tmp_path):
    """Built for AVX2 + FMA without AVX-512 (GCC), a unit of a conv program (whose tile helpers use
    AVX2 intrinsics) includes the SSE-AVX2 and FMA headers, not <immintrin.h> and its AVX-512
    headers (0.38 s more parsing per unit); compiling it needs nothing else."""
    g = graph({"x": [1, 8, 12, 12], "w": {"shape": [16, 8, 3, 3], "constant": True}}, ["x"], ["y"],
              [("c", "Conv", ["x", "w"], ["h"], {"pads": [1, 1, 1, 1]}), ("r", "Relu", ["h"], ["y"])])
    files = render(build_plan(g, HW, [["c", "r"]], strategy="t"), g)
    for name in ("model.c", "model.h"):
        (tmp_path / name).write_text(files[name])
    assert "_mm256_fmadd_ps" in files["model.c"]
    r = subprocess.run(["gcc", "-O1", "-std=c11", "-mavx2", "-mfma", "-mno-avx512f", "-H", "-c", "model.c", "-o", "model.o"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    headers = {Path(ln.lstrip(". ").strip()).name for ln in r.stderr.splitlines() if ln.startswith(".")}
    assert {"avx2intrin.h", "fmaintrin.h", "avxintrin.h"} <= headers, sorted(headers)
    assert "immintrin.h" not in headers and not any(h.startswith("avx512") for h in headers), sorted(headers)
