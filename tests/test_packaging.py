"""A plain (non-editable) install must carry every module, devices/ and models/."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_bundled_models_and_profiles(tmp_path: Path) -> None:
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 68 or not (ROOT / "pyproject.toml").is_file():
        pytest.skip("needs the source tree and setuptools >= 68")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("aocsim-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for model_dir in (ROOT / "models").glob("*/card.yaml"):
        assert f"aocsim/_models/{model_dir.parent.name}/card.yaml" in names
        assert f"aocsim/_models/{model_dir.parent.name}/weights.h5" in names
    for profile in (ROOT / "devices").glob("*.yaml"):
        assert f"aocsim/_devices/{profile.name}" in names
    assert "aocsim/tasks/data/digits.npz" in names
    # every module of the source tree is in the wheel (pyproject.toml lists the packages by hand)
    for module in (ROOT / "aocsim").rglob("*.py"):
        assert module.relative_to(ROOT).as_posix() in names, module
