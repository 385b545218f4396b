"""Hardware-aware training: the device's errors in the training forward pass (implicit SSMs, DEQs).

The model is trained as it will run on a device as a hybrid (docs/DEVICE_RUNS.md, section 2): every
linear map inside its fixed-point function (the injection, each block's input and output
projections) is a tile product there, with limited weight precision and noise on every pass. With
`attach`, each call of those maps in training computes

    y = x Q(W)^T + b + n,    n ~ N(0, (noise max|y|)^2) per element,

Q quantising W to signed `weight_bits` over max |W| (the SLM's grid) with a straight-through
gradient (the gradient of the full-precision map), and n drawn from a seeded generator (the
training run stays reproducible). It is a model of the device's errors, not the calibrated pipeline
itself: the tile programs and calibration of a placement absorb static gains; what they cannot
absorb is quantisation and noise, which is what training sees here. aoc48's tile passes add about
5-10 % noise relative to the signal (docs/DEVICE_RUNS.md, section 2).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from aocsim.hardware.physics import components as C
from aocsim.nn.deq import DEQ
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.solve.backward import Implicit, equilibrium


def quantize_weight(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """W on the SLM's grid: signed `bits` over max |W| (`components.quantize_signed`, the SLM's own
    quantiser), straight-through."""
    m = weight.detach().abs().max().clamp_min(1e-30)
    return m * C.quantize_signed(weight / m, bits)


def attach(model: ImplicitSSM, *, weight_bits: int | None, noise: float, generator: torch.Generator) -> list[Any]:
    """Forward hooks on the maps inside f that add quantisation and noise (module docstring); returns
    the handles (call `.remove()` on each to train or evaluate plainly again)."""
    maps = [model.inject, *(m for block in model.blocks for m in (block.in_proj, block.out_proj))]

    def hook(module: torch.nn.Module, args: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
        y = output
        if weight_bits is not None:  # straight-through: the value of Q(W), the gradient of W
            w = module.weight
            y = y + F.linear(args[0], (quantize_weight(w, weight_bits) - w).detach())
        if noise > 0:
            scale = noise * y.detach().abs().amax()
            y = y + scale * torch.randn(y.shape, generator=generator, dtype=y.dtype).to(y.device)
        return y

    return [m.register_forward_hook(hook) for m in maps]


def deq_logits(model: DEQ, x: torch.Tensor, *, weight_bits: int | None, noise: float, generator: torch.Generator,
               **solve_options: Any) -> torch.Tensor:
    """A DEQ's logits with the loop's errors in training: beta W quantised to `weight_bits` over its
    largest entry (straight-through), and per sample a static error on the loop's input of std
    `noise` x max |U x + b| (what the device's offsets, gains and noise leave at the fixed point);
    the fixed point solved exactly, the gradient implicit."""
    u = model.injection(x)
    if noise > 0:
        u = u + noise * u.detach().abs().amax() * torch.randn(u.shape, generator=generator, dtype=u.dtype).to(u.device)
    op = model.operator()
    if weight_bits is not None:
        op = quantize_weight(op, weight_bits)  # straight-through
    z, _ = equilibrium(lambda z: model.step(z, u, op), torch.zeros_like(u), backward=Implicit(), **solve_options)
    return model.readout(z)
