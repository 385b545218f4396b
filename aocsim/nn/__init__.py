"""Implicit models: DEQ cells (and, later, implicit state-space models)."""

from aocsim.nn.deq import DEQ, DEQConfig, DEQOutput

__all__ = ["DEQ", "DEQConfig", "DEQOutput"]
