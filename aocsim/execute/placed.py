"""`PlacedModel`: the base class of every placed kind, and the registry its subclasses join.

A placed model is a model on one chip of a device (aocsim/execute/registry.py `place`). A kind is a
subclass: it declares its name and its Dataset's shape (`kind`, `residual`, `residual_units`, `dims`)
and implements what only it can say (`fits`, `check_inputs`, `prepare`, `exact`, `describe`, `timing`,
`run`); everything else has a default here that a kind overrides where it has more to say (a chip's
seeds as one batch, the maps it fits, tile programs and their error, Dataset attributes, the convergence rule its
summary states, the likely cause of an untrusted result, the noise sites noise injection may use). A
subclass missing a required member is refused when it is defined, not when a run first needs it; defining
one registers it (`KINDS`), in the order the classes are defined, which is the order `placement_class`
asks them whether they take a model. Adding a kind is its module and the import that defines it
(docs/ARCHITECTURE.md).

The base owns construction: every kind calls `super().__init__` and builds what touches the machine (its
loops, compiled programs, fitted tiles, loads) from `run_profile`, never from `profile` (the profile it
was placed on, which the Dataset records): so `run_profile` is the one place where an option every kind
honours would change the machine its runs use, and `run_overrides` records what it changed. A class with
`register=False` is not a kind, neither checked nor registered: a wrapper around a placed model of any kind
(`aocsim.execute.noise_injection.NoiseInjected`, the SNR model and the EMA readout), or a base that kinds
share (`aocsim.execute.hybrid.SSMOnTiles`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch

from aocsim.execute.placement import Placement
from aocsim.execute.run import Run
from aocsim.hardware.profiles.profile import DeviceProfile

REQUIRED = ("kind", "residual", "residual_units", "dims")
ABSTRACT = ("fits", "check_inputs", "prepare", "exact", "describe", "timing", "run")


class PlacedModel:
    """A model on one chip of a device (module docstring)."""

    kind: ClassVar[str]  # aocsim.execute.placement.KINDS
    residual: ClassVar[str]  # which residual the Dataset reports: "abs_residual" or "rel_residual"
    residual_units: ClassVar[str]  # the residual in words ("relative, ...", "device volts (...)")
    residual_cf_units: ClassVar[str] = "1"  # its CF units: "1" (relative, or the model's own units), "V" (volts)
    dims: ClassVar[tuple[str, ...]]  # the Dataset dimensions of one input: ("sample",) or ("sample", "position")
    state_words: ClassVar[str] = "model units"  # the iterated state, as the convergence rule names it

    # Noise injection (aocsim/execute/noise_injection.py): the sites where it may draw noise set by an SNR
    # ('inputs': each block's input projection's input; 'states': the states committed after each token).
    # A kind with sites takes `extras` in `run` (parts attached to its model for the run); none: refused.
    noise_sites: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not register:  # a wrapper around placed models, or a base of kinds: not a kind
            return
        missing = [name for name in REQUIRED if not hasattr(cls, name)]
        missing += [name for name in ABSTRACT if getattr(cls, name) is getattr(PlacedModel, name)]
        if missing:
            raise TypeError(f"placed kind {cls.__name__} lacks {', '.join(missing)}; expected every member of "
                            "aocsim.execute.placed.PlacedModel that has no default")
        if any(k.kind == cls.kind for k in KINDS):
            raise TypeError(f"placed kind {cls.__name__}: kind {cls.kind!r} is taken by another class")
        KINDS.append(cls)

    def __init__(self, model: Any, profile: DeviceProfile, placement: Placement, prepared: Any) -> None:
        """Every kind's construction starts here (module docstring); `prepared`: what `prepare` returned."""
        self.model, self.profile, self.placement = model, profile, placement
        self._run_profile = profile  # an option every kind honours would change the machine here, once

    # -- what every kind must say ------------------------------------------------------------------------

    @staticmethod
    def fits(model: Any, profile: DeviceProfile, placement: Placement) -> bool:
        """Whether this kind runs `model` on `profile`."""
        raise NotImplementedError

    @staticmethod
    def check_inputs(model: Any, inputs: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The inputs (and targets) as tensors, or a one-line InputError."""
        raise NotImplementedError

    @staticmethod
    def prepare(model: Any, calibration: Any, placement: Placement) -> Any:
        """What the placement needs of the model's calibration inputs, once for every chip."""
        raise NotImplementedError

    @staticmethod
    def exact(model: Any, inputs: torch.Tensor, placement: Placement) -> Run:
        """The exact path's run."""
        raise NotImplementedError

    @staticmethod
    def describe(model: Any, placement: Placement) -> str:
        """How the model is placed, in words (the Dataset's `placement` attribute)."""
        raise NotImplementedError

    @staticmethod
    def timing(profile: DeviceProfile, placement: Placement) -> str:
        """What the hardware time counts, in words."""
        raise NotImplementedError

    def run(self, inputs: torch.Tensor, seed: int) -> Run:
        """One weight load with `seed`, then the inputs through it. A kind with `noise_sites` also takes
        `samples` (the inputs' ids, which key their noise) and `extras` (noise injection's parts, attached to its
        model for the run and keyed by the run's key folded with `keys.Stream.SNR`)."""
        raise NotImplementedError

    # -- defaults a kind may override -------------------------------------------------------------------

    @staticmethod
    def fitted_maps(model: Any, placement: Placement) -> dict[str, tuple[int, int]]:
        """The shape [M, K] of each map whose tile program this kind fits under `placement`, by name (none by
        default): `registry.resolve` checks the fit's options against them before any work."""
        return {}

    @staticmethod
    def stacks(placement: Placement) -> bool:
        """Whether `run_seeds` runs a chip's seeds as one batch (then `compare` keeps them in one part)."""
        return False

    def run_seeds(self, inputs: torch.Tensor, seeds: list[int]) -> list[Run]:
        """`run` for every seed."""
        return [self.run(inputs, seed) for seed in seeds]

    # A population (aocsim/experiments/population.py): design points of one shape on one chip, each its own
    # profile (`tile_product.PER_LOAD`) and seeds, run together where the kind can.

    @classmethod
    def fit_population(cls, model: Any, profiles: list[DeviceProfile], prepared: Any, placement: Placement) -> None:
        """Fit what each point's placement fits, together, so that placing each point finds it remembered;
        by default nothing (each point fits what it needs when placed)."""

    @classmethod
    def run_population(cls, placed: list["PlacedModel"], inputs: torch.Tensor, seeds: list[list[int]]
                       ) -> list[list[Run]]:
        """Each point's `run_seeds` (point p placed as placed[p], with its seeds[p]); by default point by point."""
        return [p.run_seeds(inputs, s) for p, s in zip(placed, seeds)]

    @classmethod
    def residual_attributes(cls) -> dict[str, str]:
        """The Dataset attributes of the residual and its trace: CF units, the words, and its kind."""
        return {"units": cls.residual_cf_units, "description": cls.residual_units,
                "kind": "relative" if cls.residual == "rel_residual" else "absolute"}

    @property
    def run_profile(self) -> DeviceProfile:
        """The profile every kind builds this chip's machine from and runs it on (module docstring): the one
        it was placed on, with what a wrapper derived (`derive`: noise set in dB on the device's own noise
        scales noise.multiplier per chip)."""
        return self._run_profile

    def derive(self, values: Mapping[str, Any]) -> None:
        """Runs from now on use `run_profile` with `values` (a wrapper's derived profile, built on this one)."""
        self._run_profile = self._run_profile.with_overrides(dict(values))

    def run_overrides(self) -> dict[str, Any]:
        """The profile keys whose values this chip's runs use differently from the profile it was placed on
        (what a Dataset records beside that profile, so that it names the machine the runs saw)."""
        import numpy as np

        placed, run = self.profile.values, self.run_profile.values
        return {k: v for k, v in run.items() if not np.array_equal(np.asarray(placed.get(k), dtype=object),
                                                                   np.asarray(v, dtype=object))}

    @property
    def program_error(self) -> float:
        """The largest matrix error of this chip's tile programs; 0 for a kind without tiles."""
        return 0.0

    @staticmethod
    def attributes(model: Any, placement: Placement) -> dict[str, Any]:
        """Dataset attributes beyond the placement's."""
        return {}

    @classmethod
    def convergence_rule(cls, rtol: str, atol: str) -> str:
        """The tolerance a device solve meets, in words (the summary's `converged` term)."""
        return f"||f(z) - z|| <= atol {atol} + rtol {rtol} ||f(z)|| ({cls.state_words})"

    @staticmethod
    def iteration_cap(mode: str | None) -> str:
        """The iteration cap in words when the placement leaves it to the kind."""
        return "the kind's default"

    @staticmethod
    def one_pass(model: Any) -> str:
        """'' when `model` iterates to a fixed point per token, so that noise injection may read its iterates
        (ema_alpha), stop them over the batch (snr_convergence 'batch') and measure its own noise (snr_kind
        'device', `noise_db`); else what it is, in words for the wrapper's refusals ('an explicit SSM')."""
        return ""

    def noise_db(self, profile: DeviceProfile, placement: Placement, site: str) -> float:
        """The SNR in dB that this chip's own noise puts at `site` on `profile` (a variant of `run_profile`),
        with `placement`'s other options: what snr_kind 'device' scales noise.multiplier by (an iterating kind
        with `noise_sites`)."""
        raise NotImplementedError

    @staticmethod
    def untrusted_cause(attrs: Mapping[str, Any]) -> str:
        """The likely cause of an untrusted result, from its Dataset's attributes (`device`, the placement's),
        once noise and divergence are ruled out (aocsim/experiments/trust.py): by default, tile programs
        that did not calibrate."""
        device = attrs.get("device", "this device")
        return f"tile programs that did not calibrate on {device} ({tiles_hint(device)})" + (
            "" if device == "aoc48" else "; try --device aoc48")


def tiles_hint(device: str) -> str:
    """Where tile programs that did not calibrate on `device` are explained; off aoc48, the profile they work on."""
    where = "docs/DEVICE_RUNS.md section 1b"
    return where if device == "aoc48" else f"tiles work on aoc48 only today: {where}"


KINDS: list[type[PlacedModel]] = []  # every defined kind, in the order they were defined


def kind_class(kind: str) -> type[PlacedModel] | None:
    """The registered class of a kind name (a Dataset's `kind` attribute), or None (a kind is registered when
    its module is imported: aocsim.execute.registry imports the bundled ones)."""
    return next((k for k in KINDS if k.kind == kind), None)
