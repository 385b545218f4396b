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
    progress (from the model run's `on_pass`): its positions [T] and visit, and the batch rows in it
    (rows None: all of them, else the rows still iterating, aocsim/execute/token_loop.py); or, with rows on
    their own tokens (aocsim/execute/ssm_rows.py), each row's position [R] and visit (int64 [R]). loads:
    each batch row's weight load (seeds stacked in one batch, aocsim/execute/seed_stack.py; None: one
    load)."""

    sequences: torch.Tensor
    length: int
    positions: torch.Tensor | None = None
    visit: int | torch.Tensor = 0
    rows: torch.Tensor | None = None
    loads: torch.Tensor | None = None
    shared: dict[Any, Any] = field(default_factory=dict, repr=False)  # what the maps of one pass share

    def announce(self, positions: torch.Tensor, visit: int | torch.Tensor, rows: torch.Tensor | None = None) -> None:
        self.positions, self.visit, self.rows = positions, visit, rows
        self.shared.clear()

    @property
    def per_row(self) -> bool:
        """Whether the pass in progress has each row on its own token and visit."""
        return isinstance(self.visit, torch.Tensor)

    def batch_rows(self) -> torch.Tensor:
        """The batch rows of the pass in progress [R] (every row when the pass has them all)."""
        return torch.arange(len(self.sequences)) if self.rows is None else self.rows.to(self.sequences.device)

    def samples(self, leading: tuple[int, ...]) -> torch.Tensor:
        """Counters s L + t of the rows of an input with leading dims [R] (one token each) or [R, T]."""
        ids = self.sequences if self.rows is None else self.sequences[self.rows.to(self.sequences.device)]
        b, t = len(ids), self.positions.numel()
        if self.per_row:
            if tuple(leading) != (b,):
                raise InputError(f"a pass of {tuple(leading)} rows does not match the announced {b} rows, each "
                                 "on its own token")
            return ids * self.length + self.positions.to(ids.device)
        if tuple(leading) not in ((b, t), (b,) * (t == 1)):
            raise InputError(f"a pass of {tuple(leading)} rows does not match the announced {t} position(s) "
                             f"of {b} sequences")
        return (ids[:, None] * self.length + self.positions[None, :]).reshape(-1)

    def pass_visit(self, part: str) -> int:
        """The pass's visit, for a part that keys by the pass (not with rows on their own tokens)."""
        if self.per_row:
            raise InputError(f"{part} keys its draws by the pass, but this run has each row on its own token "
                             "(aocsim/execute/ssm_rows.py); expected a run token by token (PlacedSSM.keyed decides)")
        return int(self.visit)

    def calls(self) -> int | torch.Tensor:
        """The tile products' call of the pass: its visit, or each row's [R] (`per_row`)."""
        return self.visit.to(self.sequences.device) if self.per_row else self.visit
