"""Implicit models: DEQ cells (exact, or the AOC's calibrated pipeline: TwinDEQ) and implicit state-space models."""

from aocsim.nn.deq import DEQ, DEQConfig, DEQOutput
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig, SSMOutput
from aocsim.nn.twin_deq import TwinDEQ, TwinDEQConfig

__all__ = ["DEQ", "DEQConfig", "DEQOutput", "ImplicitSSM", "SSMConfig", "SSMOutput", "TwinDEQ", "TwinDEQConfig"]
