"""Whether this machine can build compile=True kernels (a C++ compiler and Python's headers)."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

NO_TOOLCHAIN = (shutil.which("g++") is None and shutil.which("c++") is None) or not (
    Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
