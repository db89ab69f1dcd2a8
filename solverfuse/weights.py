"""Weights files: the data of a graph's constants, beside the graph JSON, checked by sha256.

A constant tensor whose data is neither a small ``value`` nor a ``fill`` refers to an array in a
weights file: ``"data": {"file": "mlp.safetensors", "key": "w", "sha256": "..."}``. The file is in
the `safetensors <https://github.com/huggingface/safetensors>`_ layout, written and read here with
NumPy alone (no dependency), because it is trivial to load from C:

* 8 bytes: little-endian uint64 ``N``, the header length;
* ``N`` bytes: a JSON object ``{key: {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...}``
  (plus ``"__metadata__"``), padded with spaces to a multiple of 8;
* the data: every array little-endian, C order, at ``8 + N + b`` .. ``8 + N + e``, each array
  starting on a 64-byte boundary.

``sha256`` is the hex digest of an array's bytes (as stored), so a stale or swapped file is refused
when the array is read. Reading is lazy: :class:`WeightsFile` parses the header only; an array is
memory-mapped and hashed the first time it is asked for. A ``file`` ending in ``.onnx`` refers to an
initializer of that ONNX model (what :func:`solverfuse.onnx_import.import_onnx` records before the
weights are written out). Every problem raises :class:`~solverfuse.errors.GraphError` naming the file.

>>> import tempfile, os, numpy as np
>>> d = tempfile.mkdtemp(); p = os.path.join(d, "w.safetensors")
>>> shas = write_weights(p, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
>>> WeightsFile(p).array("w", shas["w"]).tolist()
[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from .errors import GraphError
from .files import atomic_path

SUFFIX = ".safetensors"
ALIGN = 64
#: safetensors dtype codes <-> our dtype names (bfloat16 data are stored as computed: float32).
CODES = {"float32": "F32", "float16": "F16", "float64": "F64", "int8": "I8", "int16": "I16",
         "int32": "I32", "int64": "I64", "uint8": "U8", "uint16": "U16", "uint32": "U32",
         "uint64": "U64", "bool": "BOOL"}
DTYPES = {v: k for k, v in CODES.items()}


def array_sha256(array: np.ndarray) -> str:
    """Hex sha256 of an array's bytes as stored (little-endian, C order).

    >>> array_sha256(np.zeros(2, np.float32))[:16]
    'af5570f5a1810b7a'
    """
    a = np.ascontiguousarray(array)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return hashlib.sha256(memoryview(a.reshape(-1).view(np.uint8))).hexdigest()


def write_weights(path: Union[str, os.PathLike], arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Write ``arrays`` to one weights file atomically; returns ``{key: sha256}``.

    The file appears complete or not at all (written to a temporary name, then renamed)."""
    path = Path(path)
    header: dict = {"__metadata__": {"format": "solverfuse-weights/1"}}
    offset, layout, shas = 0, [], {}
    for key, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        dt = "bool" if a.dtype == np.bool_ else a.dtype.name
        if dt not in CODES:
            raise GraphError(f"{path}: cannot store {key!r} of dtype {a.dtype}")
        offset = -(-offset // ALIGN) * ALIGN
        header[key] = {"dtype": CODES[dt], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        layout.append((offset, a))
        shas[key] = array_sha256(a)
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-(8 + len(text))) % ALIGN)

    def write(f):
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        pos = 0
        for off, a in layout:
            f.write(b"\0" * (off - pos))
            f.write(memoryview(a.reshape(-1).view(np.uint8)))
            pos = off + a.nbytes
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        write(f)
    return shas


class WeightsFile:
    """A weights file opened lazily: the header at construction, each array on first use."""

    def __init__(self, path: Union[str, os.PathLike]):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                raw = f.read(8)
                if len(raw) != 8:
                    raise ValueError("shorter than its 8-byte header length")
                (n,) = struct.unpack("<Q", raw)
                size = os.fstat(f.fileno()).st_size
                if n > size - 8:
                    raise ValueError(f"header length {n} exceeds the file ({size} bytes)")
                header = json.loads(f.read(n))
        except FileNotFoundError:
            raise GraphError(f"weights file {self.path}: no such file") from None
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise GraphError(f"weights file {self.path}: not a readable weights file ({e})") from None
        if not isinstance(header, dict):
            raise GraphError(f"weights file {self.path}: header is not a JSON object")
        header.pop("__metadata__", None)
        self.start = 8 + n
        self.size = size
        self.header = header
        self._verified: set[str] = set()

    def entry(self, key: str, shape=None, dtype: Optional[str] = None) -> dict:
        """The header entry of ``key``, checked against an expected shape/dtype."""
        e = self.header.get(key)
        if not isinstance(e, dict) or e.get("dtype") not in DTYPES:
            raise GraphError(f"weights file {self.path}: no array {key!r}")
        b, end = e.get("data_offsets", [0, -1])
        want_dt = None if dtype is None else CODES.get("float32" if dtype == "bfloat16" else dtype)
        if shape is not None and list(e.get("shape", [])) != list(shape) or want_dt and e["dtype"] != want_dt:
            raise GraphError(f"weights file {self.path}: {key!r} is {e['dtype']} {e.get('shape')}, "
                             f"the graph expects {want_dt} {list(shape) if shape is not None else '?'}")
        nbytes = int(np.prod(e["shape"], dtype=np.int64)) * np.dtype(_np(e["dtype"])).itemsize
        if end - b != nbytes or self.start + end > self.size or b < 0:
            raise GraphError(f"weights file {self.path}: {key!r} data out of bounds (truncated file?)")
        return e

    def array(self, key: str, sha256: Optional[str] = None, shape=None, dtype: Optional[str] = None) -> np.ndarray:
        """The array ``key`` (read-only memory map), its sha256 checked on first read."""
        e = self.entry(key, shape, dtype)
        b, end = e["data_offsets"]
        dt = np.dtype(_np(e["dtype"])).newbyteorder("<")
        if end == b:
            arr = np.zeros(e["shape"], dt)
        else:
            arr = np.memmap(self.path, dtype=dt, mode="r", offset=self.start + b, shape=tuple(e["shape"]))
        if sha256 and key not in self._verified:
            if array_sha256(arr) != sha256:
                raise GraphError(f"weights file {self.path}: sha256 of {key!r} does not match the graph "
                                 f"(stale or swapped weights file)")
            self._verified.add(key)
        return arr


def _np(code: str) -> str:
    return "bool" if code == "BOOL" else DTYPES[code]


@lru_cache(maxsize=8)
def _open(path: str, mtime: float) -> WeightsFile:
    return WeightsFile(path)


def open_weights(path: Union[str, os.PathLike]) -> WeightsFile:
    """A :class:`WeightsFile`, cached per (path, modification time) within the process."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime
    except OSError:
        raise GraphError(f"weights file {p}: no such file") from None
    return _open(str(p.resolve()), mtime)


@lru_cache(maxsize=2)
def _onnx_initializers(path: str, mtime: float) -> dict:
    import onnx
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 -- protobuf decode errors have no common base
        raise GraphError(f"{path}: not a readable ONNX model ({type(e).__name__})") from None
    return {t.name: t for t in model.graph.initializer}


def onnx_initializer(path: Union[str, os.PathLike], key: str) -> np.ndarray:
    """Initializer ``key`` of the ONNX model at ``path`` (external data resolved beside it)."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime
    except OSError:
        raise GraphError(f"{p}: no such file (weights of the graph)") from None
    inits = _onnx_initializers(str(p.resolve()), mtime)
    if key not in inits:
        raise GraphError(f"{p}: no initializer {key!r}")
    return tensor_array(inits[key], p.parent)


def tensor_array(tensor, base_dir: Union[str, os.PathLike]) -> np.ndarray:
    """An ONNX TensorProto as an array, its external data (if any) read from ``base_dir``."""
    from onnx import numpy_helper
    from onnx.external_data_helper import uses_external_data
    if uses_external_data(tensor):
        info = {e.key: e.value for e in tensor.external_data}
        loc = Path(base_dir) / info.get("location", "")
        if not loc.is_file():
            raise GraphError(f"external data file {loc} of initializer {tensor.name!r}: no such file")
        offset, length = int(info.get("offset", 0) or 0), info.get("length")
        from onnx.helper import tensor_dtype_to_np_dtype
        dt = np.dtype(tensor_dtype_to_np_dtype(tensor.data_type)).newbyteorder("<")
        count = int(np.prod(tensor.dims, dtype=np.int64))
        if length is not None and int(length) != count * dt.itemsize or \
                loc.stat().st_size < offset + count * dt.itemsize:
            raise GraphError(f"external data file {loc} of initializer {tensor.name!r}: "
                             f"too short or wrong length for {list(tensor.dims)} {dt}")
        return np.fromfile(loc, dtype=dt, count=count, offset=offset).reshape(tuple(tensor.dims))
    try:
        return numpy_helper.to_array(tensor)
    except Exception as e:  # noqa: BLE001
        raise GraphError(f"initializer {tensor.name!r}: cannot read its data ({e})") from None
