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
from aocsim.nn.ssm_blocks import Mamba2Block, TokenCache


def install_compiled_mix(model: Any) -> None:
    """Every block of `model` (a placed copy, its weights fixed) runs its token middle compiled."""
    for block in model.blocks:
        block.mix_runner = CompiledMix(block)


class CompiledMix:
    """runner(block, p, cache) of `Mamba2Block.step`: `block.mix` through its compiled graph."""

    def __init__(self, block: Mamba2Block) -> None:
        weights = tuple(tensor_digest(t) for t in (block.conv_weight, block.conv_bias, block.dt_bias, block.A_log,
                                                    block.D, block.out_norm.weight))
        self.key = ("ssm mix", block.cfg, block.out_norm.eps, weights)

    def __call__(self, block: Mamba2Block, p: torch.Tensor, cache: TokenCache) -> tuple[torch.Tensor, TokenCache]:
        def body(p: torch.Tensor, conv: torch.Tensor, ssm: torch.Tensor) -> tuple[torch.Tensor, ...]:
            h, after = block.mix(p, TokenCache(conv, ssm))
            return h, after.conv, after.ssm

        args = (p.contiguous(), cache.conv.contiguous(), cache.ssm.contiguous())  # one graph per shape, not layout
        h, conv, ssm = backends.graph(self.key, body, args, "the SSM block's token middle", "the same middle")(*args)
        return h, TokenCache(conv, ssm)
