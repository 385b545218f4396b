"""Noise formulas in physical units and their conversion to twin detector units.

Detector signals D are in the twin's normalised units. A profile fixes the
conversion: one unit of D is `power_per_unit_w` watts of light on a
photodetector, so the photocurrent is I = R P_unit (|D| + bias_units), with
`bias_units` the light present at the LED bias point (assumption). Each
current noise sigma_I converts back to detector units as sigma_I / (R P_unit).

Formulas (B the detection bandwidth, q the electron charge, k Boltzmann):
    shot     var(I) = 2 q I B                       per iteration, per path
    thermal  var(I) = 4 k T B / R_f                 per iteration, per path
    RIN      var(dL / L) = 10^(RIN / 10) B           per iteration, per LED (both paths)
    dark     var(I) = 2 q I_dark B                   per iteration, per path

How the engine combines them: `aocsim.hardware.physics.sources`.
"""

from __future__ import annotations

import math
from typing import Mapping, Any

import torch

ELECTRON_CHARGE_C = 1.602176634e-19
BOLTZMANN_J_PER_K = 1.380649e-23


def shot_current_std_a(current_a: torch.Tensor | float, bandwidth_hz: float) -> torch.Tensor | float:
    """sqrt(2 q I B), amperes (I >= 0)."""
    if isinstance(current_a, torch.Tensor):
        return torch.sqrt(2.0 * ELECTRON_CHARGE_C * current_a * bandwidth_hz)
    return math.sqrt(2.0 * ELECTRON_CHARGE_C * current_a * bandwidth_hz)


def thermal_current_std_a(temperature_k: float, feedback_resistance_ohm: float, bandwidth_hz: float) -> float:
    """sqrt(4 k T B / R_f), amperes."""
    return math.sqrt(4.0 * BOLTZMANN_J_PER_K * temperature_k * bandwidth_hz / feedback_resistance_ohm)


def rin_relative_std(rin_db_per_hz: float, bandwidth_hz: float) -> float:
    """sqrt(10^(RIN/10) B): relative rms intensity fluctuation."""
    return math.sqrt(10.0 ** (rin_db_per_hz / 10.0) * bandwidth_hz)


def shot_noise_std(d: torch.Tensor, v: Mapping[str, Any]) -> torch.Tensor:
    """Per-iteration shot-noise std in detector units for signals d (either path) [B, N]."""
    unit_current = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]  # A per detector unit
    current = unit_current * (d.abs() + v["noise.bias_units"])
    return shot_current_std_a(current, v["noise.bandwidth_hz"]) / unit_current


def dark_shot_noise_std(v: Mapping[str, Any]) -> float:
    """Per-iteration shot-noise std of the mean dark current, detector units."""
    unit_current = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]
    return shot_current_std_a(v["noise.dark.current_a"], v["noise.bandwidth_hz"]) / unit_current


def thermal_noise_std(v: Mapping[str, Any]) -> float:
    """Per-iteration thermal (TIA) noise std in detector units."""
    unit_current = v["noise.responsivity_a_per_w"] * v["noise.power_per_unit_w"]
    return thermal_current_std_a(v["noise.thermal.temperature_k"], v["noise.thermal.feedback_resistance_ohm"],
                                 v["noise.bandwidth_hz"]) / unit_current
