"""The hold of an analog partial sum: kT/C noise and charge injection per sampling, leakage while held
(docs/PHYSICS.md section 3).

An analog partial sum (`TiledMatrix`, partial_sums="analog") is the sum of a tile row's partials, formed at
a summing node and sampled onto a hold capacitor C before the ADC converts it, or before the next wave of
tiles adds to it on a time-multiplexed machine (`aocsim.hardware.engine.partial_sums` says when). Each
sampling adds the capacitor's thermal noise and the charge its switch injects as it opens, and a held
value moves with the leakage current while it waits:

    kT/C        std(V) = sqrt(k T / C)                 per sampling, volts at the node, T the chip's (T + dT)
    injection   V -> V + (q0 + k V) / C                per sampling: the switch's channel charge, half of
                                                       W L C_ox (V_gs - V_t), falls as V raises its source
                                                       (valid while it conducts: on the lab profiles V < 0.8 V)
    leakage     V(t) = V(0) - I t / C                  I out of the hold, independent of the held level
                                                       (reverse-biased junctions), I exp(c dT) at dT kelvin

so a sampling keeps (1 + k / C) of the sum and shifts it by q0 / C, and a hold of t seconds shifts it by
-I t / C: 10 fA for 5 ms on 1 pF is 50 uV.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aocsim.hardware.physics import temperature
from aocsim.hardware.physics.noise import BOLTZMANN_J_PER_K

if TYPE_CHECKING:
    from aocsim.hardware.profiles.parts import Parts


@dataclass(frozen=True)
class Hold:
    """A sample-and-hold stage of an analog partial sum.

    Attributes:
        capacitance_f: hold capacitance C, farads; None = no hold noise, and then no leakage or injection
            (`readout.hold_capacitance_f`).
        leakage_a: leakage current I out of the hold at the chip's temperature, amperes; signed
            (`readout.hold_leakage_a` times exp(`environment.hold_leakage_per_k` dT)).
        injection_c: charge q0 injected per sampling at 0 V, coulombs (`readout.hold_injection_c`).
        injection_c_per_v: its signal-dependent part k, coulombs per volt (`readout.hold_injection_c_per_v`).
        temperature_k: the chip's temperature, kelvin (`noise.thermal.temperature_k` plus
            `environment.temperature_delta_k`).
        multiplier: scales the kT/C noise's std like every other drawn noise (`noise.multiplier`).
    """

    capacitance_f: float | None = None
    leakage_a: float = 0.0
    injection_c: float = 0.0
    injection_c_per_v: float = 0.0
    temperature_k: float = 300.0
    multiplier: float = 1.0

    def __post_init__(self) -> None:
        if self.capacitance_f is not None and not 0 < self.capacitance_f < math.inf:
            raise ValueError(f"Hold.capacitance_f = {self.capacitance_f!r}; expected a capacitance > 0 F or None")
        for name in ("temperature_k", "multiplier"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"Hold.{name} = {getattr(self, name)!r}; expected a finite number >= 0")
        for name in ("leakage_a", "injection_c", "injection_c_per_v"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"Hold.{name} = {value!r}; expected a finite number")
            if value != 0 and self.capacitance_f is None:
                raise ValueError(f"Hold.{name} = {value!r} without a hold capacitance "
                                 "(readout.hold_capacitance_f = null); expected 0 or a capacitance")

    @classmethod
    def of(cls, v: Parts) -> "Hold":
        c, r = v.readout.hold_capacitance_f, v.readout
        leakage = float(r.hold_leakage_a) * temperature.leakage(v.environment)
        return cls(None if c is None else float(c), leakage, float(r.hold_injection_c),
                   float(r.hold_injection_c_per_v), temperature.kelvin(v), float(v.noise.multiplier))

    @property
    def noise_std_v(self) -> float:
        """sqrt(k T / C) times the noise multiplier, volts per sampling (0 without a capacitance)."""
        if self.capacitance_f is None:
            return 0.0
        return math.sqrt(BOLTZMANN_J_PER_K * self.temperature_k / self.capacitance_f) * self.multiplier

    @property
    def sampling_gain(self) -> float:
        """1 + k / C: what a sampling keeps of the sum (the injection's signal-dependent part)."""
        return 1.0 if self.capacitance_f is None else 1.0 + self.injection_c_per_v / self.capacitance_f

    @property
    def sampling_step_v(self) -> float:
        """q0 / C: the injection's constant step per sampling, volts."""
        return 0.0 if self.capacitance_f is None else self.injection_c / self.capacitance_f

    def drift_v(self, held_s: float) -> float:
        """-I t / C: how far a value held `held_s` seconds moves, volts (the same at every level)."""
        return 0.0 if self.capacitance_f is None else -self.leakage_a * held_s / self.capacitance_f

    @property
    def acts(self) -> bool:
        """Whether a hold changes anything (noise, injection or leakage); if not, partial sums add exactly as
        before."""
        return self.noise_std_v > 0 or self.leakage_a != 0 or self.injection_c != 0 or self.injection_c_per_v != 0
