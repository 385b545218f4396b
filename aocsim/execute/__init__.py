"""Placing models on a device: which map runs where, and fitting what is programmed to the calibrated
pipeline (docs/ARCHITECTURE.md): DEQs whose state fits one machine natively (`place_deq`), larger
DEQs with their feedback on tiles (`TiledDEQ`), implicit SSMs as hybrids (`place_ssm`)."""

from aocsim.execute.deq import Compiled, DeviceRun, PlacedDEQ, compile_deq, place_deq
from aocsim.execute.deq_tiled import TiledDEQ, check_placement
from aocsim.execute.fit import Program
from aocsim.execute.ssm import PlacedSSM, place_ssm

__all__ = ["Compiled", "DeviceRun", "PlacedDEQ", "PlacedSSM", "Program", "TiledDEQ", "check_placement",
           "compile_deq", "place_deq", "place_ssm"]
