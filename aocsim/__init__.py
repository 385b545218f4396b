"""aocsim: a virtual analog optical computer for implicit neural models.

Public entry points:
    solve, equilibrium      fixed-point solving (aocsim.solve)
    load_model              trained models from model cards + HDF5 weights
    load_device             device profiles (ideal, aoc16/48-twin, aoc16/48)
    OpticalLoop, loop_step  one iteration of the virtual AOC
    DEQ, DEQConfig          deep equilibrium cells (aocsim.nn)
"""

from aocsim._version import __version__
from aocsim.errors import AocsimError, InputError, ModelFileError, UnknownNameError
from aocsim.experiments.compare import compare
from aocsim.hardware.loop import OpticalLoop, loop_step
from aocsim.hardware.profile import DeviceProfile, load_device
from aocsim.io.model_files import load_model
from aocsim.nn import registry as _registry  # noqa: F401  (registers model kinds)
from aocsim.nn.deq import DEQ, DEQConfig
from aocsim.solve import (Anderson, Implicit, Phantom, Picard, SolveResult, SolveStatus, Unrolled,
                          equilibrium, solve)

__all__ = [
    "__version__", "AocsimError", "Anderson", "DEQ", "DEQConfig", "DeviceProfile", "Implicit", "InputError",
    "OpticalLoop", "load_device", "loop_step",
    "ModelFileError", "Phantom", "Picard", "SolveResult", "SolveStatus", "UnknownNameError",
    "Unrolled", "compare", "equilibrium", "load_model", "solve",
]
