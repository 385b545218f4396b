"""What a placed model's run returns (`Run`), on the device or on the exact path."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aocsim.errors import InputError
from aocsim.hardware.engine import keys
from aocsim.hardware.physics.energy import Activity
from aocsim.solve.result import SolveResult


@dataclass(frozen=True)
class Run:
    """One batch through a placed model (or its exact path).

    outputs: logits [B, C] (a DEQ) or [B, L, V] (a sequence model); z: the fixed points in model
    units [B, N] or [B, L, D]; solve: status, iterations and residuals per sample [B] or per token
    [B, L]; activity: what the machine did per sample or token (None on the exact path); trace: the
    residual per iteration [B, I] (per sequence: the median over its tokens), or None.
    """

    outputs: torch.Tensor
    z: torch.Tensor
    solve: SolveResult
    activity: Activity | None = None
    trace: torch.Tensor | None = None


def seed_key(seed: keys.Seed) -> keys.Key:
    """The root key of a run (a weight load and its inferences), or a one-line InputError for None."""
    key = keys.as_key(seed, "seed")
    if key is None:
        raise InputError("seed = None; a device run draws its weight load and its noise, so expected an integer "
                         "seed >= 0, a torch.Generator or a Key")
    return key
