"""Placing models on a device (docs/ARCHITECTURE.md): how (`Placement`, every option declared once),
which kind runs a model (`registry.PLACEMENTS`: a DEQ that fits natively, a larger DEQ with its
feedback on tiles, an implicit SSM as a hybrid), and the placed model's `run(inputs, seed)`.

The names are imported on first use, so that the command line reads the placement declarations
(aocsim/execute/placement.py) without starting torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"Placement": "aocsim.execute.placement", "Run": "aocsim.execute.run",
         **{name: "aocsim.execute.registry" for name in ("PLACEMENTS", "place", "placement_class", "resolve",
                                                          "resolve_profile")}}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'aocsim.execute' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
