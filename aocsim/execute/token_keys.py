"""What keys a placed model's device noise per token (`TokenKeys`): the pass of token (s, t) at visit v
draws from key.fold(TILE_CALL, v, i) for tile i at counter s L + t (aocsim/execute/device_linear.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from aocsim.errors import InputError


@dataclass
class TokenKeys:
    """What keys a device run's noise per token: the sequences' ids [B] and length, and the pass in
    progress (positions [T], visit, and the batch rows in it, from the model's `pass_hook`; rows None:
    all of them, else the rows still iterating, aocsim/nn/ssm_token.py); loads: each batch row's
    weight load (seeds stacked in one batch, aocsim/execute/seed_stack.py; None: one load)."""

    sequences: torch.Tensor
    length: int
    positions: torch.Tensor | None = None
    visit: int = 0
    rows: torch.Tensor | None = None
    loads: torch.Tensor | None = None
    shared: dict[Any, Any] = field(default_factory=dict, repr=False)  # what the maps of one pass share

    def announce(self, positions: torch.Tensor, visit: int, rows: torch.Tensor | None = None) -> None:
        self.positions, self.visit, self.rows = positions, visit, rows
        self.shared.clear()

    def batch_rows(self) -> torch.Tensor:
        """The batch rows of the pass in progress [R] (every row when the pass has them all)."""
        return torch.arange(len(self.sequences)) if self.rows is None else self.rows.to(self.sequences.device)

    def samples(self, leading: tuple[int, ...]) -> torch.Tensor:
        """Counters s L + t of the rows of an input with leading dims [R] (one token each) or [R, T]."""
        ids = self.sequences if self.rows is None else self.sequences[self.rows.to(self.sequences.device)]
        b, t = len(ids), self.positions.numel()
        if tuple(leading) not in ((b, t), (b,) * (t == 1)):
            raise InputError(f"a pass of {tuple(leading)} rows does not match the announced {t} position(s) "
                             f"of {b} sequences")
        return (ids[:, None] * self.length + self.positions[None, :]).reshape(-1)
