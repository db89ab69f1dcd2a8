"""Elementwise passes whose outputs are too large for the cache write them with non-temporal
stores (emit.passes._streamed_pass: rows in blocks of 256 computed into stack blocks, then
``sf_stream``, a fence after the pass). The threshold is lowered here (monkeypatch) so that the
programs stay small: numerics against ONNX Runtime for two outputs of one input (the branches
motif), a row length that leaves a partial block, a per-column operand; the source has the
streaming copies and a fence after each streamed pass."""
from __future__ import annotations

import pytest

from solverfuse import zoo
from solverfuse.emit import row_loop
from solverfuse.emit.program import render
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, fuse_greedily, graph


@pytest.fixture
def low_threshold(monkeypatch):
    monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)


def _body(g, groups) -> str:
    src = render(build_plan(g, HW, groups, strategy="t"), g, threads=1)["model.c"]
    return src[src.index("static int k0("):]


@pytest.mark.parametrize("rows,cols,streamed", [(64, 1024, True), (7, 1000, True), (5, 40, False)])
def test_branches_stream_both_outputs(rows, cols, streamed, low_threshold, tmp_path):
    """Rows of 1,024 and of 1,000 (a partial last block; the schedule may run the two outputs as
    two passes): both outputs streamed, a fence after each streamed pass. Rows of 40 run as one
    flat loop over all elements (channels.flat_pass): plain stores."""
    g = zoo.branches(rows, cols)
    body = _body(g, fuse_greedily(g))
    passes = body.count("/* pass:")
    assert body.count("sf_stream(&") == (2 if streamed else 0)
    assert body.count("sf_stream_fence();") == (passes if streamed else 0)
    check(g, fuse_greedily(g), tmp_path, rtol=1e-6, atol=1e-6, engine="onnxruntime")


def test_streamed_pass_with_a_per_column_operand(low_threshold, tmp_path):
    """y = Relu(x + c) * 2 with c per column (a broadcast read at the block's index): streamed,
    against ONNX Runtime."""
    g = graph({"x": [9, 300], "c": {"shape": [300], "constant": True},
               "two": {"shape": [], "constant": True, "value": 2.0}}, ["x"], ["y"],
              [("a", "Add", ["x", "c"], ["h"]), ("r", "Relu", ["h"], ["u"]), ("m", "Mul", ["u", "two"], ["y"])])
    groups = [["a", "r", "m"]]
    assert _body(g, groups).count("sf_stream(&") == 1
    check(g, groups, tmp_path, rtol=1e-6, atol=1e-6, engine="onnxruntime")


def test_counters_keep_plain_stores(low_threshold):
    """The instrumented build counts each store: no streamed blocks there."""
    g = zoo.branches(8, 256)
    plan = build_plan(g, HW, fuse_greedily(g), strategy="t")
    src = render(plan, g, threads=1, counters=True)["model.c"]
    assert "sf_stream(&" not in src[src.index("static int k0("):]
