"""Shared helpers of the emitter tests: build a graph from short node tuples, run a plan's C and
compare it with ONNX's reference evaluator."""
from __future__ import annotations

import numpy as np

from solverfuse import cost
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.plans import convexity_violation, build_plan, order_groups

HW = load_hardware("nvidia-h100")


def host_flags() -> set:
    """The host CPU's feature flags (/proc/cpuinfo's "flags" line; empty where there is none): which
    SIMD builds a test can run here."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(ln.split(":", 1)[1].split()) for ln in f if ln.startswith("flags")), set())
    except OSError:
        return set()


def const(shape) -> dict:
    """A constant tensor's entry for :func:`graph` (its values seeded by the emitter's data)."""
    return {"shape": list(shape), "constant": True}


def graph(tensors: dict, inputs: list, outputs: list, nodes: list, name: str = "t"):
    """tensors: name -> shape or dict; nodes: (name, op, inputs, outputs[, attributes])."""
    ts = {k: (v if isinstance(v, dict) else {"shape": list(v)}) for k, v in tensors.items()}
    ns = [{"name": n[0], "op": n[1], "inputs": n[2], "outputs": n[3], "attributes": n[4] if len(n) > 4 else {}}
          for n in nodes]
    return load_graph({"name": name, "tensors": ts, "inputs": inputs, "outputs": outputs, "nodes": ns})


def unfused(g):
    return [[v] for v in g.index.order]


def fuse_greedily(g):
    """Every node joins the latest group it can legally join (rules, capacity, convexity, order):
    an independent 'fuse as much as is legal' plan, not any strategy of the package."""
    groups: list[list[str]] = []
    for v in g.index.order:
        for grp in reversed(groups):
            cand = grp + [v]
            if cost.group_violation(g, cand, HW) or convexity_violation(g, cand):
                continue
            try:
                order_groups(g, [x for x in groups if x is not grp] + [cand])
            except Exception:
                continue
            grp.append(v)
            break
        else:
            groups.append([v])
    return groups


def run_plan(g, groups, cache_dir, *, seed=1, counters=False, sanitize=False, threads=1, cc=None):
    plan = build_plan(g, HW, groups, strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=cache_dir, counters=counters, sanitize=sanitize,
                        threads=threads, cc=cc)
    ins, cs = random_inputs(g, seed=seed), constants(g, seed=seed)
    return plan, prog, prog.run(ins, cs), ins, cs


def check(g, groups, cache_dir, *, rtol=1e-4, atol=1e-5, engine="reference", **kw):
    """Run the plan's C; every graph output must match the reference (dtype and values)."""
    plan, prog, out, ins, cs = run_plan(g, groups, cache_dir, **kw)
    ref = reference_outputs(g, ins, cs, engine=engine)
    for t in g.outputs:
        assert out[t].shape == ref[t].shape, t
        assert out[t].dtype == ref[t].dtype, (t, out[t].dtype, ref[t].dtype)
        if out[t].dtype.kind == "f":
            np.testing.assert_allclose(out[t], ref[t], rtol=rtol, atol=atol, err_msg=f"tensor {t!r}")
        else:
            np.testing.assert_array_equal(out[t], ref[t], err_msg=f"tensor {t!r}")
    return plan, prog, out


VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def model_counts(g, plan):
    """Per group (read bytes, written bytes) by the cost model's rules, stated here on their own:
    each tensor read from outside once, each tensor written for outside readers or as a graph output
    once; a group of view ops only that writes no graph output moves nothing (its output is its
    input's buffer); a tensor the group reads only as the data operand of its Gather costs the
    bytes gathered (the Gather's output size), capped at its own size; likewise the data operand
    of its Slice costs the window (the Slice's output size)."""
    out = []
    outputs = set(g.outputs)
    for grp in plan.groups:
        members = set(grp.nodes)
        ops = {g.index.node[v].op for v in grp.nodes}
        reads = cost.group_reads(g, grp.nodes)
        writes = cost.group_writes(g, grp.nodes)
        if ops <= VIEW_OPS and writes and not outputs & set(writes):
            out.append((0, 0))
            continue
        rb = 0
        for t in reads:
            users = [g.index.node[c] for c in set(g.index.consumers.get(t, [])) if c in members]
            if len(users) == 1 and users[0].op in ("Gather", "Slice") and users[0].inputs[0] == t \
                    and t not in users[0].inputs[1:]:
                rb += min(g.nbytes(users[0].outputs[0]), g.nbytes(t))  # output dtype = data dtype
            else:
                rb += g.nbytes(t)
        out.append((rb, sum(g.nbytes(t) for t in writes)))
    return out


def exp_errors(x: np.ndarray, got: np.ndarray):
    """A float32 exp ``got`` of ``x`` against float64 exp (NumPy), asserting exactly the same NaNs,
    overflows to inf and underflows to 0; returns (the float64 exp, the mask of finite nonzero
    float32 results, their errors in ulps of the float32 result)."""
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
        want32 = want.astype(np.float32)
    nan = np.isnan(x)
    assert np.isnan(got[nan]).all() and not np.isnan(got[~nan]).any()
    assert (np.isinf(got[~nan]) == np.isinf(want32[~nan])).all(), "overflow to inf differs"
    assert ((got[~nan] == 0) == (want32[~nan] == 0)).all(), "underflow to 0 differs"
    fin = ~nan & np.isfinite(want32) & (want32 != 0)
    return want, fin, np.abs(got[fin].astype(np.float64) - want[fin]) / np.spacing(want32[fin]).astype(np.float64)
