"""Where the bundled data (device profiles, trained models) lives.

In a source checkout the data sits at the top of the repository (`devices/`,
`models/`); a plain `pip install .` copies the same folders into the package as
`aocsim/_devices` and `aocsim/_models` (see pyproject.toml). Both are looked up
here so that no other module cares how aocsim was installed.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _bundled(installed: str, checkout: str) -> Path:
    for candidate in (_PACKAGE / installed, _PACKAGE.parent / checkout):
        if candidate.is_dir():
            return candidate
    return _PACKAGE.parent / checkout


def devices_dir() -> Path:
    """Folder of the bundled device profiles (`*.yaml`)."""
    return _bundled("_devices", "devices")


def models_dir() -> Path:
    """Folder of the bundled trained models (one sub-folder per model)."""
    return _bundled("_models", "models")
