"""Noise injection: the SNR model and the EMA readout as one wrapper around a placed model of any kind that
has noise sites (`NoiseInjected`; docs/LANGUAGE.md, "Noise set by an SNR"; docs/ARCHITECTURE.md).

The SNR model describes an abstract noisy model, not a placement: noise drawn at a site of the model with a
set SNR, an EMA readout of its iterates, the reference code's stop test over the batch (the parts:
aocsim/execute/snr.py), or the device's own noise scaled to a set SNR (aocsim/execute/snr_mapping.py). The
placement's `NoiseInjection` options ask for it; `registry.Placed.build` wraps a placed model in it when
they ask for anything (`NoiseInjection.injects`): the one place it is applied.

What a kind offers it is declared on `PlacedModel` (aocsim/execute/placed.py): `noise_sites` (where noise
may be drawn; none: the wrapper refuses the kind), `one_pass` (whether the model iterates, which an EMA
readout, a stop test over the batch and the device mapping need), `noise_db` (its own noise in dB at a
site) and `run(..., extras=)` (the parts attached to its model for a run). Per chip the wrapper maps
snr_kind 'device' to a noise.multiplier once (`device_snr`), on the kind's `run_profile`, and the kind's
runs use the profile so derived (`run_overrides` records it); per run it attaches fresh parts (`parts`: the
last run's, their tallies the SNR drawn). Runs that draw parts go seed by seed (their streams are a run's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from aocsim.errors import InputError
from aocsim.execute.option_groups import kinds_words
from aocsim.execute.option_readers import short
from aocsim.execute.placed import KINDS, PlacedModel
from aocsim.execute.placement import NoiseInjection, Placement
from aocsim.execute.run import Run
from aocsim.execute.snr import parts_for
from aocsim.execute.snr_mapping import device_multiplier
from aocsim.hardware.profiles.profile import DeviceProfile


class NoiseInjected(PlacedModel, register=False):
    """A placed model (`inner`) run with the noise its placement's `NoiseInjection` options set (module
    docstring). Its model, profile and placement are the inner one's; so is its machine, on the profile
    this wrapper derives."""

    def __init__(self, inner: PlacedModel) -> None:
        super().__init__(inner.model, inner.profile, inner.placement, None)
        self.inner = inner
        self.parts: list[Any] = []  # the last run's noise, readout and stop test (their tallies: the SNR drawn)
        self.device_snr: tuple[float, float, float] | None = None  # (multiplier, measured dB, the profile's own dB)
        s = self.placement
        if s.snr_kind == "device" and s.snr_db is not None:  # once per chip (docs/LANGUAGE.md, the mapping)
            quiet = dataclasses.replace(s, snr_db=None, ema_alpha=None)
            self.device_snr = device_multiplier(lambda profile: inner.noise_db(profile, quiet, s.snr_site),
                                                inner.run_profile, s.snr_db, s.snr_site)
            inner.derive({"noise.multiplier": self.device_snr[0]})

    # -- what the registry asks of it before any work ---------------------------------------------------

    @staticmethod
    def check(cls: type[PlacedModel], model: Any, placement: Placement) -> None:
        """A one-line InputError for the first noise option set that `cls` cannot take on `model` (the
        option declarations have refused those set for other kinds already)."""
        s = placement
        given = s.noise.given()
        if not s.noise.injects():
            return
        if not cls.noise_sites:
            name = next(n for n in ("snr_db", "snr_states_db", "ema_alpha", "snr_convergence") if n in given)
            takers = [k.kind for k in KINDS if k.noise_sites]
            raise InputError(f"{name} = {short(given[name])} on a {cls.kind}: it has no noise sites "
                             f"(PlacedModel.noise_sites); expected a kind that takes it "
                             f"({kinds_words(takers) if takers else 'none is defined'})")
        what = cls.one_pass(model)
        if what and s.snr_kind == "device" and s.snr_db is not None:
            raise InputError(f"snr_kind = 'device' on {what}: the mapping measures the noise at the implicit "
                             "iteration's sites; expected an implicit SSM (run it on the profile with the "
                             "noise.multiplier the implicit model's mapping gives)")
        if what and s.ema_alpha is not None:
            raise InputError(f"ema_alpha = {s.ema_alpha} on {what}: its one pass has no iterates to average; "
                             "expected an implicit SSM, or no ema_alpha")
        if what and s.snr_convergence == "batch":
            raise InputError(f"snr_convergence = 'batch' on {what}: its one pass per token has no iteration to "
                             "stop; expected an implicit SSM, or snr_convergence 'token'")
        drawn = {"snr_site": s.snr_site} if s.snr_db is not None and s.snr_kind != "device" else {}
        drawn.update({"snr_states_db": "states"} if s.snr_states_db is not None else {})
        for name, site in drawn.items():
            if site not in cls.noise_sites:
                raise InputError(f"{name} = {short(given.get(name, site))} on a {cls.kind}: its noise sites are "
                                 f"{', '.join(map(repr, cls.noise_sites))}; expected one of them")

    @staticmethod
    def draws(noise: NoiseInjection) -> bool:
        """Whether runs draw parts of their own (then a chip's seeds run one by one)."""
        return bool(parts_for(noise))

    @staticmethod
    def words(noise: NoiseInjection) -> str:
        """What it does, appended to the kind's placement words ('' when nothing is set)."""
        return "".join(f"; {words}" for words in noise.words())

    # -- a placed model ------------------------------------------------------------------------------

    @property
    def run_profile(self) -> DeviceProfile:
        return self.inner.run_profile

    @property
    def program_error(self) -> float:
        return self.inner.program_error

    def exact(self, model: Any, inputs: torch.Tensor, placement: Placement) -> Run:  # type: ignore[override]
        """The inner kind's exact path (no noise injected)."""
        return self.inner.exact(model, inputs, placement)

    def run(self, inputs: torch.Tensor, seed: int, *, samples: Any = None) -> Run:
        """The inner model's run with `seed`, fresh parts attached (`parts`)."""
        self.parts = parts_for(self.placement.noise)
        return self.inner.run(inputs, seed, samples=samples, extras=tuple(self.parts))  # type: ignore[call-arg]

    def run_seeds(self, inputs: torch.Tensor, seeds: list[int]) -> list[Run]:
        """`run` for every seed; the inner kind's own (stacked where it stacks) when no part is drawn."""
        if self.draws(self.placement.noise):
            return [self.run(inputs, seed) for seed in seeds]
        self.parts = []
        return self.inner.run_seeds(inputs, seeds)
