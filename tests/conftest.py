"""Shared fixtures: example graphs, the ONNX light models, hardware profiles, C compilers for
the narrower vector targets."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def light_model_path(name: str) -> Path:
    """Path of an ONNX 'light' model shipped inside the onnx package."""
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def h100():
    from solverfuse.hardware import load_hardware
    return load_hardware("nvidia-h100")


@pytest.fixture
def small_kernels_parallel(monkeypatch):
    """Kernels of 2^18 work (flops + elements) and more run on the threads, as before
    ``sharing.PARALLEL_MIN_WORK`` rose to 2^20: the 2-thread tests that use it check the threaded
    code paths (shared loops, the team's barriers, column shares) on kernels small enough to
    build and run fast, each kernel in a parallel region however small the region
    (``sharing.REGION_MIN_WORK``); the thresholds are speed choices, measured in benchmarks/."""
    from solverfuse.emit import sharing
    monkeypatch.setattr(sharing, "PARALLEL_MIN_WORK", 1 << 18)
    monkeypatch.setattr(sharing, "REGION_MIN_WORK", 0)


@pytest.fixture(scope="session")
def no_avx512_cc(tmp_path_factory):
    """C compilers for this host without AVX-512 (the AVX2 code paths where the host has AVX2 and
    FMA), and without AVX-512 and AVX2 (the portable loops): build name -> cc."""
    out = {}
    for name, flags in (("no-avx512", "-mno-avx512f"), ("portable", "-mno-avx512f -mno-avx2")):
        path = tmp_path_factory.mktemp("cc") / f"cc_{name}.sh"
        path.write_text(f'#!/bin/sh\nexec "${{SF_TEST_CC:-cc}}" "$@" {flags}\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        out[name] = str(path)
    return out
