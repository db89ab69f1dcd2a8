"""The exported transformers set (tests/data/models): import time, plan time, optimal traffic vs
unfused vs every greedy baseline, and how much import folded; also the laziness check (a model
with ~200 MB of real weights imports and plans about as fast as its light version).

    python benchmarks/models.py             # writes benchmarks/results/models.md (~2-3 min, 2 cores)
    python benchmarks/models.py --out DIR   # elsewhere

Times are wall-clock on a shared machine: read them as orders of magnitude.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from solverfuse import cost, greedy  # noqa: E402
from solverfuse.compare import plan_all, rows_for  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.onnx_import import import_onnx  # noqa: E402
from solverfuse.summary import human_bytes  # noqa: E402
from tests.model_set import MODELS_DIR, model_names  # noqa: E402


def measure(name: str, hw) -> dict:
    path = MODELS_DIR / f"{name}.onnx"
    import json
    import onnx
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    markers = len(json.loads(props.get("solverfuse.lightened", "[]")))  # light weights, not work
    stats: dict = {}
    t = time.perf_counter()
    g = import_onnx(path, stats=stats)
    t_import = time.perf_counter() - t
    t = time.perf_counter()
    plans = plan_all(g, hw, time_limit=300.0, workers=2)
    rows = {r.strategy: r for r in rows_for(g, hw, plans)}
    return {"name": name, "onnx_nodes": stats["onnx_nodes"], "ops": len(g.nodes),
            "folded": stats["folded_nodes"] - markers, "import_s": t_import,
            "plan_s": rows["optimal"].planning_seconds, "status": rows["optimal"].status,
            "qmin": cost.q_min(g), "unfused": cost.unfused_traffic(g),
            "traffic": {k: r.traffic_bytes for k, r in rows.items()}, "total_s": time.perf_counter() - t}


def laziness(hw, vocab: int = 50000, hidden: int = 1024) -> dict:
    """Import + plan an embedding + linear model with real weights (~200 MB) vs its light version."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from solverfuse.api import plan
    from tests.model_set import lighten
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((vocab, hidden), dtype=np.float32), "emb"),
             numpy_helper.from_array(rng.standard_normal((hidden, hidden), dtype=np.float32), "w")]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
             helper.make_node("MatMul", ["e", "w"], ["h"], name="proj"),
             helper.make_node("Tanh", ["h"], ["y"], name="act")]
    model = helper.make_model(helper.make_graph(
        nodes, "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, hidden])], inits),
        opset_imports=[helper.make_opsetid("", 18)])
    d = Path(tempfile.mkdtemp())
    onnx.save(model, str(d / "full.onnx"))
    onnx.save(lighten(model), str(d / "light.onnx"))
    onnx.save(model, str(d / "external.onnx"), save_as_external_data=True, location="external.data")
    out = {"name": f"embedding {vocab}x{hidden} + linear", "full_bytes": (d / "full.onnx").stat().st_size,
           "light_bytes": (d / "light.onnx").stat().st_size}
    for key in ("light", "full", "external"):  # best of 3 (the first run also warms imports and caches)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            plan(import_onnx(d / f"{key}.onnx"), hw, time_limit=60.0)
            times.append(time.perf_counter() - t)
        out[key + "_s"] = min(times)
    for f in d.iterdir():
        f.unlink()
    d.rmdir()
    return out


def markdown(rows: list[dict], lazy: list[dict]) -> str:
    strategies = list(rows[0]["traffic"]) if rows else []
    head = ["model", "ONNX nodes", "ops", "folded", "import s", "plan s", "status", "Q_min",
            "optimal", "unfused"] + [f"{s} / opt" for s in strategies if s != "optimal"]
    lines = ["# The exported transformers set: import, plan, traffic", "",
             "Every model of `tests/data/models` (tiny random-weight configs exported with "
             "`torch.onnx.export`, `_ts` = TorchScript exporter opset 17, `_dynamo` = dynamo "
             "exporter opset 18), planned for `nvidia-h100`. *ops* = nodes left after import "
             "(constant folding, Dropout/Identity elision); *folded* = all-constant ONNX nodes "
             "folded into constants (not counting the light files' ConstantOfShape weight "
             "markers). Traffic in bytes by the one cost model; the baseline "
             "columns are each greedy plan's traffic over the optimum (1.00 = as good).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        opt = r["traffic"]["optimal"]
        cells = [r["name"], str(r["onnx_nodes"]), str(r["ops"]), str(r["folded"]),
                 f"{r['import_s']:.2f}", f"{r['plan_s']:.2f}", r["status"], human_bytes(r["qmin"]),
                 human_bytes(opt), human_bytes(r["unfused"])]
        cells += [f"{r['traffic'][s] / opt:.2f}" for s in strategies if s != "optimal"]
        lines.append("| " + " | ".join(cells) + " |")
    if lazy:
        lines += ["", "## Planning never reads weight data", "",
                  "Import + optimal plan of a model with real weights and of its light version "
                  "(big initializers replaced by ConstantOfShape), best of 3 runs; the full "
                  "file's protobuf is parsed, but shape inference sees the weights only as typed "
                  "inputs and no initializer is converted to an array:", "",
                  "| model | light file | full file | light s | full s (weights inside) | "
                  "full s (external data) |", "|---|---|---|---|---|---|"]
        for z in lazy:
            lines.append(f"| {z['name']} | {human_bytes(z['light_bytes'])} | {human_bytes(z['full_bytes'])} "
                         f"| {z['light_s']:.2f} | {z['full_s']:.2f} | {z['external_s']:.2f} |")
        lines += ["", "With the weights inside the .onnx file, the time left is protobuf parsing the "
                  "file (ONNX cannot skip a field); with external data (how models over 2 GB are "
                  "stored) import never reads the weights."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--models", nargs="*", default=None)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    hw = load_hardware("nvidia-h100")
    rows = []
    for name in args.models or model_names():
        rows.append(measure(name, hw))
        print(f"{name}: {rows[-1]['status']} in {rows[-1]['plan_s']:.2f} s", flush=True)
    lazy = [laziness(hw)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "models.md").write_text(markdown(rows, lazy))
    print(f"wrote {args.out / 'models.md'}")


assert greedy.STRATEGIES  # the baselines the table compares against
if __name__ == "__main__":
    main()
