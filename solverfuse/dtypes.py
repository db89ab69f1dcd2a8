"""The one map from solverfuse dtype names to NumPy dtypes.

bfloat16 has no NumPy type; it is stored and computed as float32 everywhere (data generation,
the reference evaluator, constants, the emitter's buffers), so every module agrees on it.

>>> np_dtype("float32").name, np_dtype("bool").name, np_dtype("bfloat16").name, np_dtype("int64").name
('float32', 'bool', 'float32', 'int64')
"""
from __future__ import annotations

import numpy as np

from .ops import DTYPE_ALIASES, DTYPE_SIZES


def np_dtype(dtype: str) -> np.dtype:
    """NumPy dtype for one of our dtype names (or an ONNX alias such as ``float``)."""
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if dtype not in DTYPE_SIZES:
        raise ValueError(f"unknown dtype {dtype!r}")
    return np.dtype(np.float32) if dtype == "bfloat16" else np.dtype(dtype)


__all__ = ["np_dtype"]
