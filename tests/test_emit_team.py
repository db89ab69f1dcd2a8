"""One OpenMP parallel region per run (solverfuse.emit.team): a multi-kernel plan at 2 threads
opens exactly one region, its kernels share loops with orphaned ``omp for`` and meet at the
team's barrier; results against ONNX Runtime, errors raised by any thread (a parameter check, an
out-of-range gather index) leave the run with the right message and the next run is right again,
serial code inside a parallel kernel runs on thread 0, a kernel the team cannot run runs between
two regions, and the same C built without OpenMP (the sanitizer build) gives the same outputs."""
from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import pytest

from solverfuse.emit import sharing
from solverfuse.emit.kernel import Kernel
from solverfuse.emit.program import render
from solverfuse.emit.reference import reference_outputs
from solverfuse.errors import EmitError
from solverfuse.emit.team import team_body
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, graph, run_plan

#: the 2-thread kernels here are sized for a 2^18 work threshold (see the fixture)
pytestmark = pytest.mark.usefixtures("small_kernels_parallel")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-team-cache")


def _net(gather: bool = True):
    """conv 3x3 + ReLU (a padded input copy, then tiles), a view (Reshape, parameter-checked),
    Exp of it and a small Add (both under the serial threshold), a large Gather (index-checked)."""
    t = {"x": [1, 16, 28, 28], "w": {"shape": [32, 16, 3, 3], "constant": True},
         "sh": {"shape": [2], "dtype": "int64", "constant": True, "value": [32, 784]},
         "a": [4, 8], "b": [4, 8], "e": [512, 1024], "i": {"shape": [300], "dtype": "int64"}}
    nodes = [("c", "Conv", ["x", "w"], ["h"], {"pads": [1, 1, 1, 1]}),
             ("r", "Relu", ["h"], ["hr"]),
             ("rs", "Reshape", ["hr", "sh"], ["v"]),
             ("ex", "Exp", ["v"], ["y"]),
             ("ad", "Add", ["a", "b"], ["s"])]
    if not gather:
        return graph({k: v for k, v in t.items() if k not in "ei"}, ["x", "a", "b"], ["y", "s"], nodes)
    # the Gather between the conv and the rest: a kernel in the middle of the run
    return graph(t, ["x", "a", "b", "e", "i"], ["y", "s", "z"],
                 nodes[:2] + [("ga", "Gather", ["e", "i"], ["z"], {"axis": 0})] + nodes[2:])


GROUPS = [["c", "r"], ["rs"], ["ex"], ["ad"], ["ga"]]


def test_a_multi_kernel_plan_opens_one_region_per_run(cache):
    g = _net()
    src = render(build_plan(g, HW, GROUPS, strategy="t"), g, threads=2)["model.c"]
    assert src.count("#pragma omp parallel") == 1, re.findall(r"#pragma omp parallel.*", src)
    assert "#pragma omp parallel num_threads(2)" in src
    # the kernels' loops are shared among the team: the conv's input copy and its tiles, the Gather
    assert src.count("#pragma omp for") == 3
    # Exp and the small Add, under the serial threshold: after the region, on the calling thread
    # with no barrier (a barrier per tiny serial kernel made BERT at 2 threads 13x slower)
    run = src[src.index("int sf_run("):]
    assert run.count("if ((rc = k") == 2 and run.index("if ((rc = k") > run.index("if ((rc = sf_team_rc))")
    check(g, GROUPS, cache, threads=2, engine="onnxruntime", rtol=1e-4, atol=1e-4)


def test_errors_from_any_thread_end_the_run_and_the_next_run_is_right(cache):
    g = _net()
    plan, prog, out, ins, cs = run_plan(g, GROUPS, cache, threads=2)
    assert sharing.PARALLEL_MIN_WORK <= 300 * 1024  # the Gather is shared among the threads
    with pytest.raises(EmitError, match="parameter tensor differs"):
        prog.run(ins, dict(cs, sh=np.array([784, 32])))
    for bad in (0, 299):  # an index out of range in the first thread's rows, then in the last's
        idx = np.array(ins["i"])
        idx[bad] = 512
        with pytest.raises(EmitError, match="out-of-range index"):
            prog.run(dict(ins, i=idx), cs)
    again = prog.run(ins, cs)
    for t in g.outputs:
        np.testing.assert_array_equal(again[t], out[t])
    np.testing.assert_array_equal(out["z"], ins["e"][ins["i"]])


def test_serial_statistics_run_on_thread_0_inside_the_team(cache):
    # a Softmax over one long row: its statistics are a serial accumulation at the kernel's top
    # level (locals of thread 0), between two parallel loops over the row
    t = {"x": [1, 1 << 18], "w": {"shape": [16, 16, 3, 3], "constant": True}, "p": [1, 16, 28, 28]}
    g = graph(t, ["x", "p"], ["y", "q"], [("sm", "Softmax", ["x"], ["y"], {"axis": -1}),
                                        ("c", "Conv", ["p", "w"], ["hq"], {"pads": [1, 1, 1, 1]}),
                                        ("r", "Relu", ["hq"], ["q"])])
    groups = [["c", "r"], ["sm"]]
    src = render(build_plan(g, HW, groups, strategy="t"), g, threads=2)["model.c"]
    assert src.count("#pragma omp parallel") == 1 and "if (SF_TID() == 0) {" in src
    check(g, groups, cache, threads=2, engine="onnxruntime", rtol=1e-4, atol=1e-6)


def test_a_const_of_a_serial_local_stays_serial_and_an_arena_view_is_replicated():
    # an arena view (the same pointer on every thread), a shared loop filling it, then serial
    # statistics and a const scale computed from one of their locals, used by a serial loop
    body = ["    float (*const T)[64] = (float (*)[64])s3;",
            "    #pragma omp parallel for schedule(dynamic) num_threads(2)",
            "    for (long i = 0; i < 64; i++) {", "        T[0][i] = b0[i];", "    }",
            "    double s = 0;", "    for (long i = 0; i < 64; i++) {", "        s += T[0][i];", "    }",
            "    const float r = (float)(1.0 / s);",
            "    for (long i = 0; i < 64; i++) {", "        b1[i] = T[0][i] * r;", "    }"]
    out = team_body(body)
    assert out is not None and out[0] == body[0]
    assert out[1] == "    #pragma omp for schedule(dynamic) nowait"
    # the const joins thread 0's run (as a replicated line it would read s, thread 0's local)
    serial = out[out.index("    if (SF_TID() == 0) {"):]
    assert serial.count("    if (SF_TID() == 0) {") == 1 and "    const float r = (float)(1.0 / s);" in serial
    # a const of the inputs only is still computed by every thread
    assert team_body(["    const float r = b0[0] * 2;", "    float acc = 0;", "    b1[0] = acc + r;"])[0] \
        == "    const float r = b0[0] * 2;"


def test_a_kernel_the_team_cannot_run_runs_between_two_regions(cache, monkeypatch):
    body = ["    float acc = 0;", "    #pragma omp parallel for schedule(static) num_threads(2)",
            "    for (long i = 0; i < 8; i++) {", "        b1[i] = acc;", "    }"]
    assert team_body(body) is None  # acc would exist on thread 0 only
    # the program then runs such a kernel (here: the Gather's, between the conv and the rest)
    # outside the team, as before
    team_text = Kernel.team_text
    monkeypatch.setattr(Kernel, "team_text", lambda k: None if "ga" in k.members else team_text(k))
    g = _net()
    src = render(build_plan(g, HW, GROUPS, strategy="t"), g, threads=2)["model.c"]
    # the conv's region, then the Gather's own loop region; the serial Exp and Add need none
    assert src.count("#pragma omp parallel num_threads(2)") == 1 and src.count("#pragma omp parallel for") == 1
    check(g, GROUPS, cache / "alone", threads=2, engine="onnxruntime", rtol=1e-4, atol=1e-4)


def test_the_team_code_without_openmp_matches_under_the_sanitizers(cache):
    # with the Gather: its shared index check stores the error atomically with a builtin (an
    # ``omp atomic`` pragma failed the strict build without OpenMP)
    g = _net()
    plan, _, plain, ins, cs = run_plan(g, GROUPS, cache, threads=2)
    _, san_prog, san, _, _ = run_plan(g, GROUPS, cache, threads=2, sanitize=True)
    assert "#pragma omp for" in render(plan, g, threads=2)["model.c"]  # the Gather's loop is shared
    ref = reference_outputs(g, ins, cs, engine="onnxruntime")
    for t in g.outputs:
        np.testing.assert_allclose(san[t], plain[t], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(san[t], ref[t], rtol=1e-4, atol=1e-4)
    idx = np.array(ins["i"])
    idx[7] = 512
    with pytest.raises(EmitError, match="out-of-range index"):
        san_prog.run(dict(ins, i=idx), cs)


def test_kernels_in_other_translation_units_join_the_same_team(cache):
    # 16 conv groups: compile_plan spreads the kernels over kernels<j>.c units (one barrier
    # instance each; the driver's is model.c's)
    ch = [16, 24, 32] * 6  # three distinct kernels (repeated ones share a function)
    t = {"x0": [1, 16, 28, 28]}
    nodes = []
    for j in range(16):
        t[f"w{j}"] = {"shape": [ch[j + 1], ch[j], 3, 3], "constant": True}
        nodes += [(f"c{j}", "Conv", [f"x{j}", f"w{j}"], [f"h{j}"], {"pads": [1, 1, 1, 1]}),
                  (f"r{j}", "Relu", [f"h{j}"], [f"x{j + 1}"])]
    g = graph(t, ["x0"], ["x16"], nodes)
    groups = [[f"c{j}", f"r{j}"] for j in range(16)]
    files = render(build_plan(g, HW, groups, strategy="t"), g, threads=2, units=2)
    assert "kernels1.c" in files and "#pragma omp for" in files["kernels0.c"] + files["kernels1.c"]
    assert files["model.c"].count("#pragma omp parallel") == 1
    check(g, groups, cache, threads=2, engine="onnxruntime", rtol=1e-3, atol=1e-4)


BARRIER_PROGRAM = r"""
#include <stdio.h>
static int counter;
int main(void)
{
    int bad = 0;
    #pragma omp parallel num_threads(2) reduction(+:bad)
    {
        unsigned seed = 1234u + (unsigned)SF_TID();
        for (int p = 0; p < 20000; p++) {
            seed = seed * 1103515245u + 12345u;
            /* mostly short waits (spun), now and then a long one (slept) */
            unsigned d = (seed >> 16) % 64 == 0 ? (seed >> 8) % 100000 : (seed >> 8) % 200;
            volatile unsigned x = 0;
            for (unsigned i = 0; i < d; i++) x += i;
            __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
            const int flag = sf_sync(p % 100 == 99 && SF_TID() == 1);
            if (__atomic_load_n(&counter, __ATOMIC_RELAXED) != 2 * (p + 1)) bad += 1;
            if (flag != (p % 100 == 99)) bad += 1000;
            (void)sf_sync(0);
        }
    }
    printf("%d\n", bad);
    return 0;
}
"""


@pytest.mark.parametrize("one_cpu", [False, True], ids=["own-cores", "oversubscribed"])
def test_the_barrier_holds_every_thread_and_agrees_on_the_flag(tmp_path, one_cpu):
    # every thread's increments of a phase are seen after its barrier, none of the next phase's
    # before it; a flag one thread passes is returned to both. Oversubscribed: both threads on
    # one CPU (the barrier's short-spin path; a spinning waiter there holds the core its partner needs)
    from solverfuse.emit.ctext import PRELUDE
    from solverfuse.emit.team import SYNC
    if one_cpu and not hasattr(os, "sched_setaffinity"):
        pytest.skip("no os.sched_setaffinity on this platform")
    src = PRELUDE.replace('#include "model.h"', "") + SYNC + BARRIER_PROGRAM
    (tmp_path / "b.c").write_text(src)
    subprocess.run(["cc", "-O2", "-std=c11", "-fopenmp", "-Wall", "-Wextra", "-Werror", "b.c", "-o", "b"],
                   cwd=tmp_path, check=True, capture_output=True)
    cpu = min(os.sched_getaffinity(0)) if one_cpu else None
    r = subprocess.run([str(tmp_path / "b")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_WAIT_POLICY": "passive"},
                       preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if one_cpu else None)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr


def test_squeezenet_at_two_threads_matches_onnxruntime_in_every_intermediate(cache):
    # a real model: every kernel shape the zoo CNNs have (strided stem conv with a shared input
    # copy, 1x1 and 3x3 convs with Concat, pools, the final conv + pool + Softmax whose row
    # statistics run on thread 0); every ReLU/pool/Concat output is also a graph output, as the
    # final softmax of random weights is flat
    from solverfuse.graph import load_graph
    from solverfuse.onnx_import import import_onnx

    from .conftest import light_model_path
    from .emit_helpers import fuse_greedily
    d = json.loads(import_onnx(str(light_model_path("squeezenet"))).to_json())
    extra = [n["outputs"][0] for n in d["nodes"] if n["op"] in ("Relu", "MaxPool", "Concat")]
    d["outputs"] = list(dict.fromkeys(d["outputs"] + extra))
    g = load_graph(d)
    groups = fuse_greedily(g)
    src = render(build_plan(g, HW, groups, strategy="t"), g, threads=2)["model.c"]
    assert src.count("#pragma omp parallel") == 1
    plan, prog, out, ins, cs = run_plan(g, groups, cache, threads=2)
    ref = reference_outputs(g, ins, cs, engine="onnxruntime")
    for _ in range(3):  # the same results run after run
        for t in g.outputs:
            np.testing.assert_allclose(out[t], ref[t], rtol=1e-3, atol=1e-4 * float(np.abs(ref[t]).max()), err_msg=t)
        out = prog.run(ins, cs)


def test_a_region_with_too_little_work_in_all_runs_serial(cache, monkeypatch):
    """A run of parallel kernels whose work is small in all opens no region (one worker wake-up
    would cost more than the second thread saves; the sum over a run: parallel_groups' doctest).
    The conv here is over the per-kernel threshold; under a region threshold of twice its work it
    runs serial, under half its work in a region. Outputs against ONNX Runtime both ways."""
    g = _net(gather=False)
    work = 2 * 32 * 16 * 9 * 28 * 28  # the conv's flops, counted here from its shape
    groups = [["c", "r"], ["rs"], ["ex"], ["ad"]]
    monkeypatch.setattr(sharing, "PARALLEL_MIN_WORK", 1 << 10)
    for region, pragmas in ((2 * work, 0), (work // 2, 1)):
        monkeypatch.setattr(sharing, "REGION_MIN_WORK", region)
        src = render(build_plan(g, HW, groups, strategy="t"), g, threads=2)["model.c"]
        assert src.count("#pragma omp parallel") == pragmas and ("#pragma omp" in src) == bool(pragmas)
        check(g, groups, cache, threads=2, engine="onnxruntime", rtol=1e-4, atol=1e-4)


def test_tile_loops_with_few_bands_are_shared_tile_by_tile(cache):
    """A 3x3 conv on a 55x55 plane into 64 channels: 5 bands of 11 rows x 8 blocks of 8 channels.
    Its tile loops collapse (5 bands alone would split 3 + 2 between 2 threads); every tile is
    computed once, by one thread: the output matches ONNX Runtime."""
    g = graph({"x": [1, 16, 55, 55], "w": {"shape": [64, 16, 3, 3], "constant": True}}, ["x"], ["y"],
              [("c", "Conv", ["x", "w"], ["h"], {"pads": [1, 1, 1, 1]}), ("r", "Relu", ["h"], ["y"])])
    src = render(build_plan(g, HW, [["c", "r"]], strategy="t"), g, threads=2)["model.c"]
    assert re.search(r"#pragma omp for collapse\(2\) schedule\(guided\) nowait\n\s*for \(long \w+ = 0; \w+ < 5;", src), \
        re.findall(r"#pragma omp.*", src)
    check(g, [["c", "r"]], cache, threads=2, engine="onnxruntime", rtol=1e-4, atol=1e-4)


def test_a_small_kernel_between_parallel_ones_stays_in_their_region(cache, monkeypatch):
    """conv -> MaxPool -> conv, the pool under the per-kernel threshold (AlexNet's pools between its
    convolutions): it runs on the threads in the convs' region, one region where serial it split
    the run in two (``sharing.ABSORB_MAX`` 0). Outputs against ONNX Runtime both ways."""
    g = graph({"x": [1, 16, 28, 28], "w": {"shape": [32, 16, 3, 3], "constant": True},
               "v": {"shape": [32, 32, 3, 3], "constant": True}}, ["x"], ["y"],
              [("c", "Conv", ["x", "w"], ["h"], {"pads": [1, 1, 1, 1]}),
               ("p", "MaxPool", ["h"], ["q"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
               ("d", "Conv", ["q", "v"], ["y"], {"pads": [1, 1, 1, 1]})])
    groups = [["c"], ["p"], ["d"]]
    pool_work = 32 * 28 * 28 + 2 * 32 * 14 * 14 * 4  # its elements in and out and its compares, from the shapes
    monkeypatch.setattr(sharing, "PARALLEL_MIN_WORK", 2 * pool_work)
    for absorb, regions in ((0, 2), (2, 1)):
        monkeypatch.setattr(sharing, "ABSORB_MAX", absorb)
        src = render(build_plan(g, HW, groups, strategy="t"), g, threads=2)["model.c"]
        run = src[src.index("int sf_run("):]
        assert run.count("#pragma omp parallel") == regions, run
        check(g, groups, cache, threads=2, engine="onnxruntime", rtol=1e-4, atol=1e-4)
