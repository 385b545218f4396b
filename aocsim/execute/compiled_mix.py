"""A token's digital middle (`Mamba2Block.mix`: conv, scan, gate, norm) compiled, for a placement with
`compile`: the same function traced and compiled by Inductor (`backends.graph`), so that its few dozen
small operations run as a few fused loops. Its weights are the model's, constants of the graph (keyed
by their digest, so another model compiles its own); every pass of a compiled placement has the whole
batch (aocsim/execute/ssm_rows.py), so one graph serves a run. The same numbers as eagerly, to float rounding."""

from __future__ import annotations

from typing import Any

import torch

from aocsim.hardware.engine.memo import tensor_digest
from aocsim.hardware.engine import backends
from aocsim.nn.ssm_blocks import Mamba2Block, RMSNorm, TokenCache


def install_compiled_mix(model: Any) -> None:
    """Every block of `model` (a placed copy, its weights fixed) turned into a `CompiledMixBlock`: the same module
    (its weights, maps and functions as they are), its token middle run compiled."""
    for block in model.blocks:
        # the graph's constants are what `mix` reads of the block: keyed on every weight and buffer it holds (a
        # superset, so that no change of `mix` can meet a graph built for other numbers), its norms' eps and
        # its elementwise functions' kind
        held = [*block.named_parameters(), *block.named_buffers()]
        weights = tuple((name, tensor_digest(t)) for name, t in held)
        eps = tuple(m.eps for m in block.modules() if isinstance(m, RMSNorm))
        block.__class__ = CompiledMixBlock  # as a converter swaps a layer's kind, keeping what it holds
        block.mix_key = ("ssm mix", block.cfg, eps, type(block.elementwise).__qualname__, weights)


class CompiledMixBlock(Mamba2Block):
    """A `Mamba2Block` whose `mix` runs through its compiled graph (`install_compiled_mix` makes one)."""

    mix_key: tuple  # the graph's key: the block's configuration and its weights' digests

    def mix(self, p: torch.Tensor, cache: TokenCache) -> tuple[torch.Tensor, TokenCache]:
        def body(p: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor) -> tuple[torch.Tensor, ...]:
            h, after = Mamba2Block.mix(self, p, TokenCache(conv, ssm))
            return h, after.conv, after.ssm

        args = (p.contiguous(), cache.conv.contiguous(), cache.ssm.contiguous())  # one graph per shape, not layout
        graph = backends.graph(self.mix_key, body, args, "the SSM block's token middle", "the same middle")
        h, conv, ssm = graph(*args)
        return h, TokenCache(conv, ssm)
