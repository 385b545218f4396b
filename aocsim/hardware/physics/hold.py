"""The hold of an analog partial sum: kT/C noise per sampling and droop while held (docs/PHYSICS.md section 3).

An analog partial sum (`TiledMatrix`, partial_sums="analog") is the sum of a tile row's partials, formed at
a summing node and sampled onto a hold capacitor C before the ADC converts it, or before the next wave of
tiles adds to it on a time-multiplexed machine (`aocsim.hardware.engine.partial_sums` says when). Each
sampling adds the capacitor's thermal noise, and a held value leaks away while it waits:

    kT/C     std(V) = sqrt(k T / C)            per sampling, volts at the node
    droop    V(t) = V(0) exp(-r t)              r the fractional droop rate, 1/s

A rate r at a held V is a leakage current I = r C V: r = 100 /s is 100 pA on 1 pF at 1 V.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aocsim.hardware.physics.noise import BOLTZMANN_J_PER_K

if TYPE_CHECKING:
    from aocsim.hardware.profiles.parts import Parts


@dataclass(frozen=True)
class Hold:
    """A sample-and-hold stage of an analog partial sum.

    Attributes:
        capacitance_f: hold capacitance C, farads; None = no kT/C noise (`readout.hold_capacitance_f`).
        droop_per_s: fractional droop rate r of a held value, 1/s; 0 = none (`readout.hold_droop_per_s`).
        temperature_k: T, kelvin (`noise.thermal.temperature_k`).
        multiplier: scales the kT/C noise's std like every other drawn noise (`noise.multiplier`).
    """

    capacitance_f: float | None = None
    droop_per_s: float = 0.0
    temperature_k: float = 300.0
    multiplier: float = 1.0

    def __post_init__(self) -> None:
        if self.capacitance_f is not None and not 0 < self.capacitance_f < math.inf:
            raise ValueError(f"Hold.capacitance_f = {self.capacitance_f!r}; expected a capacitance > 0 F or None")
        for name in ("droop_per_s", "temperature_k", "multiplier"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"Hold.{name} = {getattr(self, name)!r}; expected a finite number >= 0")

    @classmethod
    def of(cls, v: Parts) -> "Hold":
        c = v.readout.hold_capacitance_f
        return cls(None if c is None else float(c), float(v.readout.hold_droop_per_s),
                   float(v.noise.thermal.temperature_k), float(v.noise.multiplier))

    @property
    def noise_std_v(self) -> float:
        """sqrt(k T / C) times the noise multiplier, volts per sampling (0 without a capacitance)."""
        if self.capacitance_f is None:
            return 0.0
        return math.sqrt(BOLTZMANN_J_PER_K * self.temperature_k / self.capacitance_f) * self.multiplier

    def retained(self, held_s: float) -> float:
        """exp(-r t): the fraction of a value left after `held_s` seconds on the hold."""
        return math.exp(-self.droop_per_s * held_s)

    @property
    def acts(self) -> bool:
        """Whether a hold changes anything (noise or droop); if not, partial sums add exactly as before."""
        return self.noise_std_v > 0 or self.droop_per_s > 0
