"""Noise formulas in physical units and their conversion to twin detector units.

Detector signals D are in the twin's normalised units, signed: the signal
swings around the light present at the LED bias point. A profile fixes the
conversion: one unit of D is `power_per_unit_w` watts of light on a
photodetector, and `bias_units` units reach it at the bias point (assumptions),
so the light is P = P_unit (bias_units + D) (`detector_light_w`: its mean, the
bias light, is what the SLM transmits to the detector of the emitters' light,
`aocsim.hardware.physics.light`) and the photocurrent I = R P. Each current noise
sigma_I converts back to detector units as sigma_I / (R P_unit).

Formulas (B the detection bandwidth, q the electron charge, k Boltzmann):
    shot     var(I) = 2 q I B                       per iteration, per path
    thermal  var(I) = 4 k T B / R_f                 per iteration, per path
    RIN      var(dL / L) = 10^(RIN / 10) B           per iteration, per LED (both paths)
    dark     var(I) = 2 q I_dark B                   per iteration, per path

How the engine combines them: `aocsim.hardware.physics.sources`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from aocsim.errors import InputError

if TYPE_CHECKING:
    from aocsim.hardware.profiles.parts import Noise

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


def unit_current_a(noise: Noise) -> float:
    """Photocurrent of one twin detector unit of light: R P_unit (A); a current noise sigma_I is
    sigma_I / unit_current_a detector units."""
    return noise.responsivity_a_per_w * noise.power_per_unit_w


def detector_light_w(d: torch.Tensor | float, noise: Noise) -> torch.Tensor | float:
    """Light on one photodetector, W: P = P_unit (bias_units + D) for the signed detector signal D.

    The signal swings both ways around the bias light, so its mean is the bias light
    P_unit bias_units (`detector_light_w(0.0, noise)`): what the SLM transmits to the detector of the light
    the emitters pay for (`aocsim.hardware.physics.light`). Negative where D < -bias_units: light the
    emitters cannot make (the bias is too small for the signal). `bias_units` must be a number: `auto` is
    resolved per weight load (`aocsim.hardware.engine.load_light.load_parts`).
    """
    if isinstance(noise.bias_units, str):
        raise InputError(f"noise.bias_units = {noise.bias_units!r} follows each weight load; read the light from a "
                         "loaded loop's components (OpticalLoop.load_parts), not the profile's")
    return noise.power_per_unit_w * (d + noise.bias_units)


def shot_noise_std(d: torch.Tensor, noise: Noise) -> torch.Tensor:
    """Per-iteration shot-noise std in detector units for signals d (either path) [B, N]: the shot noise
    of the photocurrent R `detector_light_w(d)` (none where that light would be negative)."""
    current = (noise.responsivity_a_per_w * detector_light_w(d, noise)).clamp_min(0.0)
    return shot_current_std_a(current, noise.bandwidth_hz) / unit_current_a(noise)


def dark_shot_noise_std(noise: Noise) -> float:
    """Per-iteration shot-noise std of the mean dark current, detector units."""
    return shot_current_std_a(noise.dark.current_a, noise.bandwidth_hz) / unit_current_a(noise)


def thermal_noise_std(noise: Noise) -> float:
    """Per-iteration thermal (TIA) noise std in detector units."""
    return thermal_current_std_a(noise.thermal.temperature_k, noise.thermal.feedback_resistance_ohm,
                                 noise.bandwidth_hz) / unit_current_a(noise)
