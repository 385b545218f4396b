"""Implicit models: DEQ cells (exact, or the AOC's calibrated pipeline: TwinDEQ) and implicit state-space models;
the plain Mamba2 language model they are compared with (Mamba2LM)."""

from aocsim.nn.deq import DEQ, DEQConfig, DEQOutput
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig, SSMOutput
from aocsim.nn.mamba2_lm import Mamba2Config, Mamba2LM
from aocsim.nn.twin_deq import TwinDEQ, TwinDEQConfig

__all__ = ["DEQ", "DEQConfig", "DEQOutput", "ImplicitSSM", "Mamba2Config", "Mamba2LM", "SSMConfig", "SSMOutput",
           "TwinDEQ", "TwinDEQConfig"]
