"""Noise and precision effects of the virtual AOC, one class each.

A source declares the profile keys that switch it on, when it is drawn
(static per chip or weight load, per inference, per iteration, per readout),
what its draws are and how they act, and its row in the noise budget. The
engine, the budget, `without_noise(profile)` and the layout of the
random streams all read `SOURCES`; adding a source is adding one class here
(docs/PHYSICS.md section 3 has the formulas).

Per-iteration sources act at two places, each with its own half of one
SplitMix64 output per (sample, channel), so their draws are independent:
- slot "led": relative intensity noise, one draw per microLED, multiplying
  both of its paths' light;
- slot "detector": every detector noise (shot, thermal, dark-current shot),
  independent Gaussians with var(D) = a D + b per path (D signed, the bias
  light in b), merged into one draw of the balanced difference with variance
  a (D_P + D_Q) + 2 b (zero where the light would be negative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from aocsim.hardware.profiles.parts import Noise, Parts
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.hardware.physics.noise import (BOLTZMANN_J_PER_K, ELECTRON_CHARGE_C, detector_light_w, rin_relative_std,
                                           unit_current_a)

PER_ITERATION, STATIC, PER_INFERENCE, PER_READOUT = "per iteration", "static", "per inference", "per readout"


@dataclass(frozen=True)
class Source:
    """One effect: when it is drawn, what switches it on and off, what it costs.

    Attributes:
        name: its row label in the noise budget.
        when: PER_ITERATION, STATIC, PER_INFERENCE or PER_READOUT.
        keys: the profile keys it reads.
        off: overrides that switch it off (`without_noise`).
        enabled: the device's components -> whether it acts.
        slot: for per-iteration sources, which draw it uses ("led" or "detector").
    """

    name: str
    when: str
    keys: tuple[str, ...]
    off: Mapping[str, Any]
    enabled: Callable[[Parts], bool]
    slot: str | None = None

    def label(self, v: Parts) -> str:
        """The budget row label (with the bits where the source has them)."""
        return self.name


@dataclass(frozen=True)
class DetectorSource(Source):
    """Additive detector noise, var(D) = a D + b per path in squared detector units (times the multiplier^2)."""

    coefficients: Callable[[Parts], tuple[float, float]] = lambda v: (0.0, 0.0)

    def variance_coefficients(self, v: Parts) -> tuple[float, float]:
        if not self.enabled(v):
            return 0.0, 0.0
        a, b = self.coefficients(v)
        m2 = v.noise.multiplier ** 2
        return a * m2, b * m2


def _shot(v: Parts) -> tuple[float, float]:
    # I = R detector_light_w(D) = R P_unit (bias + D): var(I) = 2 q I B, in detector units a D + a bias with
    # a = 2 q B / (R P_unit). The loop's D also carries each detector's dark current (`dark_offset_units`), so
    # a D counts that current's shot noise too.
    a = 2.0 * ELECTRON_CHARGE_C * v.noise.bandwidth_hz / unit_current_a(v.noise)
    return a, a * detector_light_w(0.0, v.noise) / v.noise.power_per_unit_w


def _thermal(v: Parts) -> tuple[float, float]:
    var_i = (4.0 * BOLTZMANN_J_PER_K * v.noise.thermal.temperature_k * v.noise.bandwidth_hz
             / v.noise.thermal.feedback_resistance_ohm)
    return 0.0, var_i / unit_current_a(v.noise) ** 2


def _dark_shot(v: Parts) -> tuple[float, float]:
    # Shot noise of the mean dark current (its detector-to-detector spread changes it by a few %); with shot
    # noise on, the shot term already counts it (the detector signal carries the dark current), so none here.
    if v.noise.shot.enabled:
        return 0.0, 0.0
    var_i = 2.0 * ELECTRON_CHARGE_C * v.noise.dark.current_a * v.noise.bandwidth_hz
    return 0.0, var_i / unit_current_a(v.noise) ** 2


@dataclass(frozen=True)
class _DarkShot(DetectorSource):
    def label(self, v: Parts) -> str:
        return f"{self.name} (in the shot noise)" if v.noise.shot.enabled else self.name


def rin_std(noise: Noise) -> float:
    """Relative rms intensity fluctuation of one LED per iteration (0 when RIN is off)."""
    if not noise.rin.enabled:
        return 0.0
    return rin_relative_std(noise.rin.rin_db_per_hz, noise.bandwidth_hz) * noise.multiplier


@dataclass(frozen=True)
class _Bits(Source):
    bits: Callable[[Parts], int | None] = lambda v: None

    def label(self, v: Parts) -> str:
        extra = f", mean of {v.readout.samples}" if self.keys[0] == "readout.adc_bits" else ""
        return f"{self.name} ({self.bits(v)} bits{extra})"


SHOT = DetectorSource("shot noise", PER_ITERATION, ("noise.shot.enabled", "noise.bandwidth_hz", "noise.bias_units"),
                      {"noise.shot.enabled": False}, lambda v: v.noise.shot.enabled, "detector", _shot)
THERMAL = DetectorSource("thermal (TIA) noise", PER_ITERATION,
                         ("noise.thermal.enabled", "noise.thermal.temperature_k",
                          "noise.thermal.feedback_resistance_ohm"),
                         {"noise.thermal.enabled": False}, lambda v: v.noise.thermal.enabled, "detector", _thermal)
DARK = _DarkShot("dark-current shot noise", PER_ITERATION, ("noise.dark.enabled", "noise.dark.current_a",
                                                            "noise.shot.enabled"),
                 {"noise.dark.enabled": False}, lambda v: v.noise.dark.enabled, "detector", _dark_shot)
RIN = Source("LED RIN", PER_ITERATION, ("noise.rin.enabled", "noise.rin.rin_db_per_hz"), {"noise.rin.enabled": False},
             lambda v: v.noise.rin.enabled, "led")
DARK_OFFSET = Source("dark-current offset", STATIC, ("noise.dark.enabled", "noise.dark.relative_spread"),
                     {"noise.dark.enabled": False}, lambda v: v.noise.dark.enabled)
SLM_BITS = _Bits("SLM quantisation", STATIC, ("slm.bits",), {"slm.bits": None},
                 lambda v: v.slm.bits is not None, bits=lambda v: v.slm.bits)
PROGRAMMING = Source("SLM programming error", STATIC, ("slm.programming_error_levels", "slm.bits"),
                     {"slm.programming_error_levels": 0.0}, lambda v: v.slm.programming_error_levels > 0)
VARIATION = Source("chip-to-chip variation", STATIC, ("variation.enabled", "variation.relative_std",
                                                       "variation.chip_seed"),
                   {"variation.enabled": False}, lambda v: v.variation.enabled and v.variation.relative_std > 0)
LED_CUBICS = Source("LED cubic spread", STATIC, ("emitter.cubic_spread", "variation.chip_seed"),
                    {"emitter.cubic_spread": 0.0}, lambda v: v.emitter.cubic_spread > 0)
DAC = _Bits("injection DAC", STATIC, ("injection.dac_bits", "injection.clip"), {"injection.dac_bits": None},
            lambda v: v.injection.dac_bits is not None and v.injection.clip is not None,
            bits=lambda v: v.injection.dac_bits)
ADC = _Bits("readout ADC", PER_READOUT, ("readout.adc_bits", "readout.range_v", "readout.samples"),
            {"readout.adc_bits": None}, lambda v: v.readout.adc_bits is not None, bits=lambda v: v.readout.adc_bits)
HOLD = Source("analog partial-sum hold (kT/C, tiled)", PER_READOUT,
              ("readout.hold_capacitance_f", "noise.thermal.temperature_k", "readout.hold_leakage_a",
               "readout.hold_injection_c", "readout.hold_injection_c_per_v", "environment.temperature_delta_k"),
              {"readout.hold_capacitance_f": None, "readout.hold_leakage_a": 0.0, "readout.hold_injection_c": 0.0,
               "readout.hold_injection_c_per_v": 0.0}, lambda v: v.readout.hold_capacitance_f is not None)
DRIFT = Source("drift (offset step)", PER_INFERENCE, ("drift.enabled", "drift.offset_std_v_per_inference"),
               {"drift.enabled": False}, lambda v: v.drift.enabled)

DETECTOR_SOURCES: tuple[DetectorSource, ...] = (SHOT, THERMAL, DARK)
SOURCES: tuple[Source, ...] = (SHOT, THERMAL, DARK, RIN, SLM_BITS, PROGRAMMING, VARIATION, DARK_OFFSET, LED_CUBICS,
                               DAC, ADC, HOLD, DRIFT)
SLOTS = ("led", "detector")  # the two halves (cosine, sine) of one Box-Muller pair


def detector_coefficients(v: Parts) -> tuple[float, float]:
    """(a, b) of every enabled detector source together: var(D) = a D + b per path."""
    a = b = 0.0
    for s in DETECTOR_SOURCES:
        sa, sb = s.variance_coefficients(v)
        a, b = a + sa, b + sb
    return a, b


def active_slots(v: Parts) -> frozenset[str]:
    """The per-iteration draw slots the profile uses; empty = an iteration draws nothing."""
    return frozenset(s.slot for s in SOURCES if s.when == PER_ITERATION and s.enabled(v)
                     and not (v.noise.multiplier == 0.0))


def noise_free_overrides(v: Parts, *, static: bool = False) -> dict[str, Any]:
    """Overrides that silence every per-iteration source and the partial-sum hold's kT/C noise
    (noise.multiplier = 0, which keeps their settings, the hold's droop and the static dark-current
    offsets) and, with static=True, switch off every other random effect (programming error, chip
    variation, dark current, the emitters' cubic spread, drift). Bits stay."""
    out: dict[str, Any] = {}
    scaled = [s for s in SOURCES if s.when == PER_ITERATION or s is HOLD]  # what the multiplier scales
    if any(s.enabled(v) for s in scaled) and v.noise.multiplier != 0.0:
        out["noise.multiplier"] = 0.0
    if static:
        for s in SOURCES:
            if s.when in (STATIC, PER_INFERENCE) and s.enabled(v) and s not in (SLM_BITS, DAC):
                out.update(s.off)
    return out


def dark_offset_units(noise: Noise) -> float:
    """Mean dark current in detector units (I_dark / (R P_unit))."""
    return noise.dark.current_a / unit_current_a(noise) if noise.dark.enabled else 0.0


def std_to_snr(std: float, amplitude: float) -> tuple[float, float]:
    """SNR (dB) against a full-scale sine of `amplitude`, and ENOB = (SNR - 1.76) / 6.02."""
    snr = math.inf if std == 0 else 20 * math.log10(amplitude / math.sqrt(2) / std)
    return snr, (snr - 1.76) / 6.02


def without_noise(profile: "DeviceProfile", *, static: bool = False) -> "DeviceProfile":
    """`profile` with every per-iteration noise source off (and, with static=True, every other random
    effect: programming error, chip variation, dark-current offsets, the emitters' cubic spread, drift).
    Precision limits (bits) stay. The sources and their switches: `SOURCES`."""
    off = noise_free_overrides(profile.parts, static=static)
    return profile.with_overrides(off) if off else profile
