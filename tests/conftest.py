"""Shared fixtures: example graphs, the ONNX light models, hardware profiles."""
from __future__ import annotations

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
