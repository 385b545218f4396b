"""aocsim: a virtual analog optical computer for implicit neural models.

Public entry points:
    solve, equilibrium      fixed-point solving (aocsim.solve)
    load_model              trained models from model cards + HDF5 weights
    load_device             device profiles (ideal, aoc16/48-twin, aoc16/48)
    OpticalLoop, loop_step  one iteration of the virtual AOC
    DEQ, DEQConfig          deep equilibrium cells (aocsim.nn)
    compare, sweep          a model on a virtual AOC next to its exact path; sweeps of them (docs/SWEEPS.md)
    compare_all             several models' compares on the same cores at once

The torch-based names are imported on first use (module `__getattr__`), so
that `import aocsim` and `aocsim --help` do not pay torch's start-up time.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from aocsim._version import __version__
from aocsim.errors import AocsimError, InputError, ModelFileError, UnknownNameError

# public name -> module that defines it
_LAZY = {
    "OpticalLoop": "aocsim.hardware.engine.loop", "loop_step": "aocsim.hardware.engine.loop",
    "DeviceProfile": "aocsim.hardware.profiles.profile", "load_device": "aocsim.hardware.profiles.profile",
    "load_model": "aocsim.io.model_files", "compare": "aocsim.experiments.compare",
    "compare_all": "aocsim.experiments.compare",
    "sweep": "aocsim.experiments.sweep",
    "DEQ": "aocsim.nn.deq", "DEQConfig": "aocsim.nn.deq",
    **{name: "aocsim.solve" for name in ("Anderson", "Implicit", "Phantom", "Picard", "SolveResult",
                                          "SolveStatus", "Unrolled", "equilibrium", "solve")},
}

__all__ = [
    "__version__", "AocsimError", "Anderson", "DEQ", "DEQConfig", "DeviceProfile", "Implicit", "InputError",
    "OpticalLoop", "load_device", "loop_step",
    "ModelFileError", "Phantom", "Picard", "SolveResult", "SolveStatus", "UnknownNameError",
    "Unrolled", "compare", "compare_all", "equilibrium", "load_model", "solve", "sweep",
]


# subpackages reachable as attributes after a plain `import aocsim` (aocsim.nn.ImplicitSSM, ...)
_SUBPACKAGES = ("experiments", "hardware", "io", "nn", "tasks", "train")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"aocsim.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module 'aocsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(types.ModuleType):
    """The `aocsim` module object: `aocsim.solve` stays the function.

    Importing the subpackage `aocsim.solve` makes Python bind it as an attribute
    of `aocsim`, which would shadow the lazily exported function of that name.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "solve" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
