"""The cases of ``emit_speed.py``, rebuilt from a spec string in any tree (the "before" tree's
subprocess imports this file too): ``zoo:<motif>`` (each large tensor 4096 x cols floats) or
``light:<name>`` (an ONNX light model shipped with the onnx package)."""
from __future__ import annotations

CASES = ["zoo:residual_layernorm_gelu", "zoo:softmax_rows", "zoo:elementwise_chain", "zoo:branches",
         "zoo:center", "zoo:matmul_bias_relu", "light:squeezenet", "light:shufflenet", "light:inception_v1"]


def make_graph(spec: str):
    kind, name = spec.split(":", 1)
    if kind == "zoo":
        from solverfuse import zoo
        if name == "matmul_bias_relu":
            return zoo.matmul_bias_relu(4096, 256, k=64)
        if name == "residual_layernorm_gelu":
            return zoo.residual_layernorm_gelu(4096, 768)
        return getattr(zoo, name)(4096, 1024)
    if kind == "light":
        from pathlib import Path

        import onnx

        from solverfuse.onnx_import import import_onnx
        return import_onnx(str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"))
    raise ValueError(f"unknown case {spec!r}")
