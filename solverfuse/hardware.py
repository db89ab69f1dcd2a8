"""Hardware profiles: a pydantic model, the bundled JSON files (``solverfuse/hardware_profiles/``), and
``detect()`` for the host.

A profile holds what the mapping and cost models need: the register budget of one thread (GPU)
or the vector register file (CPU), the L1/shared bytes one kernel's tile may use, caches, DRAM
bandwidth, peak flops, core count, launch overhead, and the GEMM tile its anchors run. Every
number in a bundled profile has its public source in ``sources``.

>>> hw = load_hardware("nvidia-h100")
>>> hw.kind, hw.register_budget, hw.l1_bytes // 1024
('gpu', 255, 227)
"""
from __future__ import annotations

import json
import os
import platform
from importlib import resources
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import HardwareError
from .files import read_text


class GemmTile(BaseModel):
    """The register/L1 tiling an anchor (MatMul/Conv as implicit GEMM) runs with."""
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    stages: int = Field(1, gt=0, description="pipelined copies of the operand tiles")
    accumulator_registers: int = Field(gt=0, description="registers (per thread / vector) of the output micro-tile")


class Hardware(BaseModel):
    """One target. Sizes in bytes, bandwidth in bytes/s, flops in flop/s, times in seconds."""
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    name: str
    description: str
    kind: Literal["gpu", "cpu"]
    register_budget: int = Field(gt=0, description="registers per thread (GPU) / vector registers (CPU) a kernel may use before spilling")
    kernel_base_registers: int = Field(ge=0, description="registers every kernel needs for indices and addresses")
    register_bytes: int = Field(gt=0, description="bytes one register holds (4 on a GPU thread, the vector width on a CPU)")
    l1_bytes: int = Field(gt=0, description="L1/shared memory one kernel's tile may use (per SM or core)")
    l2_bytes: int = Field(gt=0)
    l3_bytes: Optional[int] = Field(None, gt=0)
    dram_bandwidth: float = Field(gt=0, description="bytes/s")
    l2_bandwidth: Optional[float] = Field(None, gt=0, description="bytes/s of a kernel whose bytes fit in L2 "
                                          "(None: DRAM bandwidth, not modelled)")
    l3_bandwidth: Optional[float] = Field(None, gt=0, description="bytes/s of a kernel whose bytes fit in L3 "
                                          "(None: DRAM bandwidth, not modelled)")
    peak_flops: dict[str, float] = Field(description="flop/s per dtype")
    cores: int = Field(gt=0, description="SMs or CPU cores")
    launch_overhead_s: float = Field(ge=0)
    gemm_tile: GemmTile
    window_tile_elements: int = Field(gt=0, description="output elements a pooling/LRN tile computes at once")
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("peak_flops")
    @classmethod
    def _positive(cls, v):
        if not v or any(x <= 0 for x in v.values()):
            raise ValueError("peak_flops needs positive entries")
        return v

    @model_validator(mode="after")
    def _monotone(self):
        # the time objective's bound needs bandwidth non-increasing in a kernel's working set
        l3 = self.l3_bandwidth or self.dram_bandwidth
        if l3 < self.dram_bandwidth or (self.l2_bandwidth or l3) < l3:
            raise ValueError("bandwidths must not grow with the working set: l2_bandwidth >= l3_bandwidth >= "
                             "dram_bandwidth")
        return self

    def bandwidth(self, working_set: int) -> float:
        """Bytes/s of a kernel moving ``working_set`` bytes: L2's bandwidth when they fit in L2,
        L3's when they fit in L3, else DRAM's (a level without a stated bandwidth uses the next).
        Never grows with the working set.

        >>> hw = load_hardware("detect")
        >>> hw.bandwidth(1024) >= hw.bandwidth(hw.l2_bytes + 1) >= hw.bandwidth(1 << 40) == hw.dram_bandwidth
        True
        """
        l3 = self.l3_bandwidth or self.dram_bandwidth
        if working_set <= self.l2_bytes and self.l2_bandwidth:
            return self.l2_bandwidth
        if self.l3_bytes is not None and working_set <= self.l3_bytes:
            return l3
        return self.dram_bandwidth

    def peak(self, dtype: str) -> float:
        """Peak flop/s for a dtype (falls back to float32)."""
        return self.peak_flops.get(dtype, self.peak_flops.get("float32", max(self.peak_flops.values())))


def _bundled() -> dict[str, Path]:
    root = resources.files("solverfuse").joinpath("hardware_profiles")
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".json")}


def list_hardware() -> list[str]:
    """Names of the bundled profiles (plus ``detect``).

    >>> "nvidia-a100" in list_hardware() and "detect" in list_hardware()
    True
    """
    return sorted(_bundled()) + ["detect"]


def load_hardware(spec: Union[str, os.PathLike, Hardware, None] = "nvidia-h100") -> Hardware:
    """A profile by bundled name, ``detect``, a JSON file path, or a Hardware (returned as is)."""
    if isinstance(spec, Hardware):
        return spec
    if spec is None:
        spec = "nvidia-h100"
    spec = str(spec)
    if spec == "detect":
        return detect()
    bundled = _bundled()
    if spec in bundled:
        text, where = bundled[spec].read_text(), spec
    elif spec.endswith(".json") or os.path.sep in spec:
        path = Path(spec)
        if not path.exists():
            raise HardwareError(f"hardware file {spec!r} does not exist")
        text, where = read_text(path, HardwareError), spec
    else:
        raise HardwareError(f"unknown hardware {spec!r} (known: {', '.join(list_hardware())})")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise HardwareError(f"{where}: a hardware profile must be a JSON object, got {type(data).__name__}")
        return Hardware.model_validate(data)
    except json.JSONDecodeError as e:
        raise HardwareError(f"{where}: malformed JSON at line {e.lineno}: {e.msg}") from None
    except RecursionError:
        raise HardwareError(f"{where}: JSON nested too deeply") from None
    except ValidationError as e:
        err = e.errors()[0]
        raise HardwareError(f"{where}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _cache_sizes() -> dict[int, int]:
    """Data/unified cache size per level from sysfs (Linux); empty elsewhere."""
    out: dict[int, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if (d / "type").read_text().strip() == "Instruction":
                continue
            level = int((d / "level").read_text())
            size = (d / "size").read_text().strip()
            mult = {"K": 1024, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            out[level] = int(size.rstrip("KMG")) * mult
        except (OSError, ValueError):
            continue
    return out


def detect() -> Hardware:
    """A CPU profile for this host: core count and caches from the OS, vector width from cpuinfo.

    Bandwidths, launch overhead and peak flops cannot be read from the OS; they are estimates, per
    core times the core count, marked as such in ``sources``: the bandwidths (DRAM 9.6 GB/s, L3
    54.8 GB/s, L2 110.7 GB/s per core) and the per-kernel overhead of an emitted C call (5 ns) as
    measured on the development host (an AMD EPYC, one thread) by ``benchmarks/host_profile.py``
    (``benchmarks/results/host_profile.md``), the flops as 16 fp32 flop/cycle at 2.5 GHz.
    """
    caches = _cache_sizes()
    cores = os.cpu_count() or 1
    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        pass
    machine = platform.machine().lower()
    # The budget is 32 at every vector width. mapping.py's count adds up the values of a group's
    # ops, not the registers live at once, and its x86 threshold comes from real kernels: with
    # AVX2's 16 ymm, Inductor's residual + LayerNorm + GELU loop (13 ops, count 20) compiles
    # with no spill inside the loop (its only stack traffic is around the Sleef exp call, whose
    # ABI clobbers every ymm), and a GEMM's 12 accumulators are free again when its epilogue
    # runs. A budget of 16 made those real kernels illegal and every GEMM epilogue unfusable.
    if "avx512f" in flags:
        vbytes = 64
    elif machine in ("aarch64", "arm64"):
        vbytes = 16
    else:
        vbytes = 32
    model = next((ln.split(":", 1)[1].strip() for ln in flags.splitlines() if ln.startswith("model name")),
                 platform.processor() or machine)
    return Hardware(
        name="detect", description=f"this host: {model}, {cores} cores", kind="cpu",
        register_budget=32, kernel_base_registers=4, register_bytes=vbytes,
        l1_bytes=caches.get(1, 32 * 1024), l2_bytes=caches.get(2, 1 << 20), l3_bytes=caches.get(3),
        dram_bandwidth=9.6e9 * cores, l2_bandwidth=110.7e9 * cores,
        l3_bandwidth=54.8e9 * cores if caches.get(3) else None,
        peak_flops={"float32": 2.5e9 * 16 * cores}, cores=cores, launch_overhead_s=5e-9,
        gemm_tile={"m": 6, "n": 2 * vbytes // 4, "k": 256, "stages": 1, "accumulator_registers": 12},
        window_tile_elements=vbytes // 4,
        sources={"cores": "os.cpu_count()", "caches": "/sys/devices/system/cpu/cpu0/cache",
                 "register_budget": "32 at every vector width (AVX-512: 32 zmm, arm64: 32 v; AVX2: 16 ymm, but "
                                    "the real Inductor kernels of tests/test_torch_compile.py count up to 20 "
                                    "and do not spill: see detect's comment)",
                 "dram_bandwidth": "estimate: 9.6 GB/s per core, as measured on the development host (AMD EPYC, "
                                   "triad at 4 x L3, one thread) by benchmarks/host_profile.py",
                 "l2_bandwidth": "estimate: 110.7 GB/s per core, as measured on the development host (triad at "
                                 "L2/2, one thread) by benchmarks/host_profile.py",
                 "l3_bandwidth": "estimate: 54.8 GB/s per core, as measured on the development host (triad at "
                                 "L3/2, one thread) by benchmarks/host_profile.py",
                 "launch_overhead_s": "estimate: 5 ns per kernel of an emitted C call at one thread, as measured "
                                      "on the development host by benchmarks/host_profile.py (2-6 ns)",
                 "peak_flops": "estimate: 2.5 GHz x 16 fp32 flop/cycle per core (not measured)"})
