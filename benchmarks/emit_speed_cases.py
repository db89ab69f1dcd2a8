"""The cases of ``emit_speed.py``, rebuilt from a spec string in any tree (the "before" tree's
subprocess imports this file too): ``zoo:<motif>`` (each large tensor 4096 x cols floats) or
``light:<name>`` (an ONNX light model shipped with the onnx package), or one GEMM/conv kernel
with a ReLU epilogue (:data:`KERNELS`, :func:`kernel_flops`): ``gemm:MxKxN`` (Gemm, B [N, K]
transposed: a linear layer, + bias), ``mm:BxMxKxN`` (batched MatMul, both operands inputs: attention's
QK^T), ``conv:CxHxWxMxkxstridexgroup`` (batch 1, padding k//2, + bias)."""
from __future__ import annotations

CASES = ["zoo:residual_layernorm_gelu", "zoo:softmax_rows", "zoo:elementwise_chain", "zoo:branches",
         "zoo:center", "zoo:matmul_bias_relu", "light:squeezenet", "light:shufflenet", "light:inception_v1"]


#: GEMM/conv kernels of the "after packed GEMM" measurement: FC layers, attention, 1x1/3x3 and
#: depthwise convs of ResNet/ShuffleNet-like shapes.
KERNELS = ["gemm:256x1024x1024", "gemm:1x2048x1000", "gemm:64x768x3072", "mm:12x128x64x128",
           "conv:64x56x56x64x1x1x1", "conv:64x56x56x64x3x1x1", "conv:256x14x14x256x3x1x1",
           "conv:116x28x28x116x3x1x116", "conv:232x14x14x232x3x2x232"]


def kernel_flops(spec: str) -> int:
    """Multiply-adds x 2 of a kernel case (0 for the others)."""
    kind, args = spec.split(":", 1)
    v = [int(a) for a in args.split("x")] if kind in ("gemm", "mm", "conv") else []
    if kind == "gemm":
        return 2 * v[0] * v[1] * v[2]
    if kind == "mm":
        return 2 * v[0] * v[1] * v[2] * v[3]
    if kind == "conv":
        c, h, w, m, k, s, g = v
        return 2 * m * (c // g) * k * k * (-(-h // s)) * (-(-w // s))
    return 0


def _kernel_graph(kind: str, v: list):
    from solverfuse.graph import load_graph
    if kind == "gemm":
        m, k, n = v
        ts = {"a": [m, k], "b": {"shape": [n, k], "constant": True}, "c": {"shape": [n], "constant": True}}
        nodes = [{"name": "g", "op": "Gemm", "inputs": ["a", "b", "c"], "outputs": ["h"], "attributes": {"transB": 1}}]
        ins = ["a"]
    elif kind == "mm":
        b, m, k, n = v
        ts = {"a": [b, m, k], "b": [b, k, n]}
        nodes = [{"name": "g", "op": "MatMul", "inputs": ["a", "b"], "outputs": ["h"], "attributes": {}}]
        ins = ["a", "b"]
    else:
        c, h, w, m, k, s, g = v
        ts = {"a": [1, c, h, w], "b": {"shape": [m, c // g, k, k], "constant": True},
              "c": {"shape": [m], "constant": True}}
        p = k // 2
        nodes = [{"name": "g", "op": "Conv", "inputs": ["a", "b", "c"], "outputs": ["h"],
                  "attributes": {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "group": g}}]
        ins = ["a"]
    nodes.append({"name": "r", "op": "Relu", "inputs": ["h"], "outputs": ["y"], "attributes": {}})
    ts = {n: (t if isinstance(t, dict) else {"shape": t}) for n, t in ts.items()}
    return load_graph({"name": f"{kind}_{'x'.join(map(str, v))}", "tensors": ts, "inputs": ins,
                       "outputs": ["y"], "nodes": nodes})


def make_graph(spec: str):
    kind, name = spec.split(":", 1)
    if kind in ("gemm", "mm", "conv"):
        return _kernel_graph(kind, [int(a) for a in name.split("x")])
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
    if kind == "model":  # an exported transformers model of tests/data/models (its stem)
        from pathlib import Path

        from solverfuse.onnx_import import import_onnx
        return import_onnx(str(Path(__file__).resolve().parent.parent / "tests" / "data" / "models" / f"{name}.onnx"))
    raise ValueError(f"unknown case {spec!r}")
