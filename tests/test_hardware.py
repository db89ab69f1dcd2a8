"""Hardware profiles: bundled files validate and cite sources; the CLI; a non-editable install."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from .conftest import ROOT
from solverfuse.cli import app
from solverfuse.errors import HardwareError
from solverfuse.hardware import Hardware, detect, list_hardware, load_hardware

PROFILES = ROOT / "solverfuse" / "hardware_profiles"
BUNDLED = ["aws-graviton3", "intel-xeon-8480", "nvidia-a100", "nvidia-h100", "nvidia-h200"]
runner = CliRunner()


def _numeric_fields(data: dict) -> list[str]:
    """Top-level fields of a profile file that hold numbers (scalars or tables of numbers)."""
    return [k for k, v in data.items()
            if k != "sources" and (isinstance(v, (int, float)) and not isinstance(v, bool)
                                   or isinstance(v, dict))]


def test_bundled_profiles_are_listed():
    assert list_hardware() == BUNDLED + ["detect"]
    assert sorted(p.stem for p in PROFILES.glob("*.json")) == BUNDLED


@pytest.mark.parametrize("name", BUNDLED)
def test_profile_validates_and_cites_every_number(name):
    data = json.loads((PROFILES / f"{name}.json").read_text())
    hw = load_hardware(name)
    assert hw.name == name
    assert Hardware.model_validate(data) == hw
    missing = [k for k in _numeric_fields(data) if not data["sources"].get(k, "").strip()]
    assert missing == [], f"{name}: no source for {missing}"
    # every source names something checkable (a document, a URL or an explicit assumption)
    assert all(len(s.strip()) >= 10 for s in data["sources"].values())


def test_profiles_are_plausible():
    gpus = [load_hardware(n) for n in BUNDLED if n.startswith("nvidia")]
    cpus = [load_hardware(n) for n in BUNDLED if not n.startswith("nvidia")]
    assert all(h.kind == "gpu" and h.register_bytes == 4 for h in gpus)
    assert all(h.kind == "cpu" and h.register_bytes in (16, 32, 64) for h in cpus)
    h100, h200, a100 = load_hardware("nvidia-h100"), load_hardware("nvidia-h200"), load_hardware("nvidia-a100")
    # H200 is an H100 with faster, larger HBM; A100 is slower than both
    assert h200.dram_bandwidth > h100.dram_bandwidth > a100.dram_bandwidth
    assert h200.cores == h100.cores > a100.cores


def test_detect_reads_the_host():
    hw = detect()
    assert hw.kind == "cpu" and hw.cores == (os.cpu_count() or 1)
    assert hw.l1_bytes > 0 and hw.l2_bytes >= hw.l1_bytes
    assert "estimate" in hw.sources["dram_bandwidth"]


def test_cli_hardware_list():
    r = runner.invoke(app, ["hardware", "list"])
    assert r.exit_code == 0, r.output
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == BUNDLED + ["detect"]


@pytest.mark.parametrize("name", ["nvidia-h100", "aws-graviton3"])
def test_cli_hardware_show(name):
    r = runner.invoke(app, ["hardware", "show", name])
    assert r.exit_code == 0, r.output
    assert Hardware.model_validate(json.loads(r.stdout)) == load_hardware(name)


def test_cli_hardware_show_accepts_a_file(tmp_path):
    data = json.loads((PROFILES / "nvidia-a100.json").read_text())
    data["name"] = "my-a100"
    path = tmp_path / "my a100.json"
    path.write_text(json.dumps(data))
    r = runner.invoke(app, ["hardware", "show", str(path)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["name"] == "my-a100"


def test_cli_hardware_detect():
    r = runner.invoke(app, ["hardware", "detect"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cores"] == (os.cpu_count() or 1)


def _bad_profiles(tmp_path: Path) -> dict[str, Path]:
    good = json.loads((PROFILES / "nvidia-h100.json").read_text())
    cases = {"malformed": "{ not json", "negative": {**good, "register_budget": -4},
             "missing": {k: v for k, v in good.items() if k != "l1_bytes"},
             "unknown-field": {**good, "warp_size": 32}}
    out = {}
    for label, content in cases.items():
        p = tmp_path / f"{label}.json"
        p.write_text(content if isinstance(content, str) else json.dumps(content))
        out[label] = p
    return out


def test_bad_profile_file_is_one_line_exit_2(tmp_path):
    for label, path in _bad_profiles(tmp_path).items():
        with pytest.raises(HardwareError):
            load_hardware(path)
        r = runner.invoke(app, ["hardware", "show", str(path)])
        assert r.exit_code == 2, (label, r.output)
        assert r.stdout == ""
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (label, r.stderr)
        assert "Traceback" not in r.output
    r = runner.invoke(app, ["hardware", "show", "no-such-gpu"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "no-such-gpu" in r.stderr
    r = runner.invoke(app, ["hardware", "show", str(tmp_path / "absent.json")])
    assert r.exit_code == 2 and "does not exist" in r.stderr


def test_non_editable_wheel_ships_the_profiles(tmp_path):
    """`pip wheel` (what a non-editable `pip install .` builds) packs
    solverfuse/hardware_profiles/*.json, and the installed copy loads them without the source tree."""
    src = tmp_path / "src"
    # a copy, so the build writes no build/ or *.egg-info into the shared working tree
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "build", "dist", "*.egg-info", ".venv", "venv", ".pytest_cache",
        ".hypothesis", "out", ".solverfuse-cache", "*.so"))
    dist = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = dist.glob("solverfuse-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n for n in names if n.endswith(".json")) == \
        [f"solverfuse/hardware_profiles/{n}.json" for n in BUNDLED]
    assert "solverfuse/onnx_import.py" in names

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # a wheel is installed by unpacking it
    code = ("import solverfuse, solverfuse.hardware as h; print(solverfuse.__file__); "
            "print(h.list_hardware()); print(h.load_hardware('nvidia-h200').l1_bytes)")
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, listed, l1 = proc.stdout.splitlines()
    assert Path(where).is_relative_to(site)  # the installed copy, not the editable checkout
    assert listed == repr(BUNDLED + ["detect"])
    assert int(l1) == load_hardware("nvidia-h200").l1_bytes
