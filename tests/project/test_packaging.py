"""A plain (non-editable) install must carry every module, devices/ and models/."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


# Distribution name -> the module it installs, where they differ (the test extra's).
MODULE_OF = {"scikit-learn": "sklearn", "dask-jobqueue": "dask_jobqueue"}
# Test dependencies that run without an import: what starts them.
STARTED_BY = {"pytest-xdist": "pytest -n, the README's test command", "ipykernel": "nbclient, running the notebooks"}


def test_every_test_dependency_is_imported_by_the_code_or_the_tests() -> None:
    """Issue 41, finding 8: the test extra installed about 1 GB of triton that nothing imported."""
    import re
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    sources = "\n".join(p.read_text() for p in [*ROOT.glob("aocsim/**/*.py"), *ROOT.glob("tests/**/*.py"),
                                                    *ROOT.glob("notebooks/*.ipynb")])
    for requirement in extra:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        module = MODULE_OF.get(name, name.replace("-", "_"))
        if name in STARTED_BY:
            continue
        assert re.search(rf"^\s*(import|from) {module}\b|importorskip\(\"{module}\"|\"{module}\"", sources, re.M), \
            f"{requirement} is in the test extra but nothing imports {module}"
