"""Placed models: one base class for every kind, looked up in one registry.

Placing a model on a device for one chip (`place`) gives a placed model whose `run(inputs, seed)`
returns a `Run`: its outputs, the fixed points, a `SolveResult` and the `Activity` the machine
recorded (docs/ARCHITECTURE.md). What a placement does once per chip (compiling, fitting programs)
happens when it is built; what it does per seed (a weight load and its calibration, then the
inferences' noise) in `run`. The exact path of every kind is the same class's `exact`.

Every kind is a subclass of `aocsim.execute.placed.PlacedModel`, registered when it is defined
(`KINDS`); its options are declared in aocsim/execute/option_groups.py. Where the placement's noise options
ask for anything, the kind is wrapped in `NoiseInjected` (aocsim/execute/noise_injection.py), here alone:
`Placed.build`, and its checks, seed stacking and words through `Placed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aocsim.errors import InputError
from aocsim.execute import hybrid, mamba2, native, tiled, twin  # noqa: F401 - defining the kinds registers them
from aocsim.execute import map_fit
from aocsim.execute.noise_injection import NoiseInjected
from aocsim.execute.placed import KINDS, PlacedModel
from aocsim.execute.placement import Placement, as_placement
from aocsim.hardware.profiles.profile import DeviceProfile, load_device


PLACEMENTS = KINDS  # the registry itself: a kind defined later (a plug-in, a test's) joins it


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


def placement_class(model: Any, profile: DeviceProfile, placement: Placement | None = None) -> type[PlacedModel]:
    """The kind that runs `model` on `profile`: the one registered kind whose `fits` takes it (kinds take
    disjoint models), or a one-line InputError (a placement's own when it refuses: a DEQ too large with
    tiling off)."""
    placement = as_placement(placement)
    takers = [cls for cls in KINDS if cls.fits(model, profile, placement)]
    if len(takers) > 1:
        raise InputError(f"model is a {type(model).__name__} that several placed kinds take "
                         f"({', '.join(c.__name__ for c in takers)}); expected exactly one (their fits overlap)")
    if takers:
        return takers[0]
    raise InputError(f"model is a {type(model).__name__}; expected a DEQ, a twin DEQ, an implicit SSM or a plain "
                     "Mamba2 model (the kinds with a placement: aocsim.execute.placed.KINDS)")


@dataclass(frozen=True)
class Placed:
    """What `place` resolves once for a model on a device: its placement class and the placement
    with the kind's defaults filled in; it builds the placed model of each chip (`build`), wrapped in
    noise injection where the placement asks for it (the one place it is applied)."""

    cls: type[PlacedModel]
    placement: Placement

    def build(self, model: Any, profile: DeviceProfile, prepared: Any) -> PlacedModel:
        """`model` placed on the chip `profile` describes (`prepared`: the kind's `prepare`)."""
        placed = self.cls(model, profile, self.placement, prepared)
        return NoiseInjected(placed) if self.placement.noise.injects() else placed

    def stacks(self) -> bool:
        """Whether a chip's seeds run as one batch: where the kind stacks them and no noise is drawn per run."""
        return self.cls.stacks(self.placement) and not NoiseInjected.draws(self.placement.noise)

    def describe(self, model: Any) -> str:
        """How the model is placed, in words (the Dataset's `placement`): the kind's, then noise injection's."""
        return self.cls.describe(model, self.placement) + NoiseInjected.words(self.placement.noise)


def resolve(model: Any, profile: DeviceProfile, placement: Any = None) -> Placed:
    """The class and the resolved placement of `model` on `profile` (options that do not apply to its
    kind refused with a one-line InputError)."""
    placement = as_placement(placement)
    cls = placement_class(model, profile, placement)
    name = (getattr(model, "card", None) or {}).get("name", f"this {type(model).__name__}")
    resolved = placement.resolved(cls.kind, f"{name} on {profile.name}")
    NoiseInjected.check(cls, model, resolved)  # what the kind cannot take of it, before any work
    for shape in cls.fitted_maps(model, resolved).values():  # and what its fits cannot (a sweep's start asks too)
        map_fit.check_probes(map_fit.on_tiles(resolved.tile), shape)
    return Placed(cls, resolved)


def place(model: Any, device: DeviceProfile | str, placement: Any = None, *, chip: int | None = None,
          calibration: Any = None) -> PlacedModel:
    """`model` placed on one chip of `device`: call `.run(inputs, seed)` on it.

    Args:
        model: a DEQ, an implicit SSM or a plain Mamba2 model.
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
    return placed.build(model, profile, placed.cls.prepare(model, calibration, placed.placement))
