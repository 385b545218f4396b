"""Placed models: one protocol for every kind, looked up in one explicit registry.

Placing a model on a device for one chip (`place`) gives a placed model whose `run(inputs, seed)`
returns a `Run`: its outputs, the fixed points, a `SolveResult` and the `Activity` the machine
recorded (docs/ARCHITECTURE.md). What a placement does once per chip (compiling, fitting programs)
happens when it is built; what it does per seed (a weight load and its calibration, then the
inferences' noise) in `run`. The exact path of every kind is the same protocol's `exact`.

Adding a model kind is one placement class (the `PlacedModel` protocol) and one entry in
`PLACEMENTS`; its options are declared in aocsim/execute/placement.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from aocsim.errors import InputError
from aocsim.execute.hybrid import HybridSSM
from aocsim.execute.native import NativeDEQ
from aocsim.execute.placement import Placement, as_placement
from aocsim.execute.run import Run
from aocsim.execute.tiled import TiledDEQ
from aocsim.execute.twin import TwinPlaced
from aocsim.hardware.profiles.profile import DeviceProfile, load_device


class PlacedModel(Protocol):
    """A model on one chip of a device (a placement class's instance)."""

    kind: ClassVar[str]  # aocsim.execute.placement.KINDS
    residual: ClassVar[str]  # which residual the Dataset reports: "abs_residual" or "rel_residual"
    residual_units: ClassVar[str]
    dims: ClassVar[tuple[str, ...]]  # the Dataset dimensions of one input: ("sample",) or ("sample", "position")

    def __init__(self, model: Any, profile: DeviceProfile, placement: Placement, prepared: Any) -> None: ...

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool: ...

    @staticmethod
    def check_inputs(model: Any, inputs: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    @staticmethod
    def prepare(model: Any, calibration: Any, placement: Placement) -> Any: ...

    @staticmethod
    def exact(model: Any, inputs: torch.Tensor, placement: Placement) -> Run: ...

    @staticmethod
    def describe(model: Any, placement: Placement) -> str: ...

    def run(self, inputs: torch.Tensor, seed: int) -> Run: ...

    # Optional: `stacks(placement) -> bool` and `run_seeds(inputs, seeds) -> list[Run]`, a chip's seeds run
    # as one batch (`HybridSSM`); `compare` then keeps each chip's seeds in one part.


# The placement classes, asked in order whether they take a model on a profile (`fits`).
PLACEMENTS: tuple[type, ...] = (NativeDEQ, TiledDEQ, HybridSSM, TwinPlaced)


def resolve_profile(device: DeviceProfile | str, chip: int | None = None) -> DeviceProfile:
    """A profile from a name or a profile, with `variation.chip_seed` = chip when given."""
    profile = load_device(device) if isinstance(device, str) else device
    if not isinstance(profile, DeviceProfile):
        raise InputError(f"device = {device!r}; expected a profile name or a DeviceProfile")
    if chip is None:
        return profile
    if isinstance(chip, bool) or not isinstance(chip, int) or chip < 0:
        raise InputError(f"chip = {chip!r}; expected an integer >= 0 (the profile's variation.chip_seed)")
    return profile.with_overrides({"variation.chip_seed": chip})


def placement_class(model: Any, profile: DeviceProfile, placement: Placement | None = None) -> type:
    """The placement class that runs `model` on `profile` (the first in `PLACEMENTS` that fits it),
    or a one-line InputError (a placement's own when it refuses: a DEQ too large with tiling off)."""
    placement = as_placement(placement)
    for cls in PLACEMENTS:
        if cls.fits(model, profile, placement):
            return cls
    raise InputError(f"model is a {type(model).__name__}; expected a DEQ, a twin DEQ or an implicit SSM (the kinds "
                     "with a placement: aocsim.execute.registry.PLACEMENTS)")


@dataclass(frozen=True)
class Placed:
    """What `place` resolves once for a model on a device: its placement class and the placement
    with the kind's defaults filled in."""

    cls: type
    placement: Placement

    @property
    def kind(self) -> str:
        return self.cls.kind


def resolve(model: Any, profile: DeviceProfile, placement: Any = None) -> Placed:
    """The class and the resolved placement of `model` on `profile` (options that do not apply to its
    kind refused with a one-line InputError)."""
    placement = as_placement(placement)
    cls = placement_class(model, profile, placement)
    name = (getattr(model, "card", None) or {}).get("name", f"this {type(model).__name__}")
    return Placed(cls, placement.resolved(cls.kind, f"{name} on {profile.name}"))


def place(model: Any, device: DeviceProfile | str, placement: Any = None, *, chip: int | None = None,
          calibration: Any = None) -> PlacedModel:
    """`model` placed on one chip of `device`: call `.run(inputs, seed)` on it.

    Args:
        model: a DEQ or an implicit SSM.
        device: a profile name or `DeviceProfile`.
        placement: a `Placement` (or a mapping of its options); None = every kind's defaults.
        chip: the chip (`variation.chip_seed`); None keeps the profile's.
        calibration: inputs of the model whose exact-path values the placement fits and calibrates
            on (a DEQ's inputs [B, input_size]; an SSM's token ids [B, L]); needed unless a native
            DEQ compiles without the fit. aocsim.experiments.workloads has each bundled model's.

    Example:
        >>> placed = place(load_model("digits-deq48"), "aoc48", chip=0, calibration=split.x_train)
        >>> run = placed.run(split.x_test, seed=1)     # run.outputs, run.solve, run.activity
    """
    profile = resolve_profile(device, chip)
    placed = resolve(model, profile, placement)
    return placed.cls(model, profile, placed.placement, placed.cls.prepare(model, calibration, placed.placement))
