"""Implicit models: DEQ cells and implicit state-space models."""

from aocsim.nn.deq import DEQ, DEQConfig, DEQOutput
from aocsim.nn.implicit_ssm import ImplicitSSM, SSMConfig, SSMOutput

__all__ = ["DEQ", "DEQConfig", "DEQOutput", "ImplicitSSM", "SSMConfig", "SSMOutput"]
