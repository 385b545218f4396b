"""0-dim tensors for the Python numbers of the eager hot paths (the loop's step, the keyed stream).

An eager CPU kernel wraps a Python number in a new tensor and converts it at every call, about 0.5 to 1 us,
as much as a whole pass over a small batch. A kept 0-dim tensor of the operand's own dtype gives the same
bits (the number is exact in that dtype, which the kernel computes in either way) at no cost. While a
compiler traces, the tensors are made in the graph and kept nowhere: kept, the tracer's tensors would
serve later eager calls.
"""

from __future__ import annotations

import torch


def scalars(values: tuple[int | float, ...], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """`values` as 0-dim tensors of `dtype` on `device`, kept for eager calls (one lookup per group).

    Groups are told apart by ==, so -0.0 is served 0.0's tensor (no kernel here tells them apart), and a
    group with a NaN is made anew at each call and not kept (no lookup would find it again). The last
    `SCALARS_KEPT` groups are kept (a tile product's numbers are graph inputs: a sweep's points bring new
    ones). Kept tensors are made outside inference mode, so that a first call inside one does not
    leave inference tensors that a later autograd run would have to save (torch refuses)."""
    if torch.compiler.is_compiling():
        return tuple(torch.full((), v, dtype=dtype, device=device) for v in values)
    key = (values, dtype, device)
    kept = _KEPT.get(key)
    if kept is None:
        with torch.inference_mode(False):
            kept = tuple(torch.full((), v, dtype=dtype, device=device) for v in values)
        if all(v == v for v in values):
            _KEPT[key] = kept
            while len(_KEPT) > SCALARS_KEPT:
                del _KEPT[next(iter(_KEPT))]  # the oldest group
    return kept


SCALARS_KEPT = 1024
_KEPT: dict[tuple, tuple[torch.Tensor, ...]] = {}
