"""Placing models on a device: which map runs where, and fitting what is programmed to the calibrated
pipeline (docs/ARCHITECTURE.md). Today: DEQs whose state fits one machine (`place_deq`)."""

from aocsim.execute.deq import Compiled, DeviceRun, PlacedDEQ, compile_deq, place_deq
from aocsim.execute.fit import Program

__all__ = ["Compiled", "DeviceRun", "PlacedDEQ", "Program", "compile_deq", "place_deq"]
