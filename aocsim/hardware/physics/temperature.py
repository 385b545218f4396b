"""How the analog parts follow the chip's temperature after calibration (docs/PHYSICS.md section 3).

`environment.temperature_delta_k` = dT is the chip's temperature change since it was calibrated (its
analog functions fitted, its emitters measured). Each law has its own coefficient, 0 on every bundled
profile, so no bundled figure moves with dT until a study sets them:

    analog function gain   (1 + g_c) -> (1 + g_c)(1 + c_f dT)          c_f = environment.function_gain_per_k
    loop sigmoid amplitude d -> d (1 + c_n dT)                          c_n = environment.loop_gain_per_k
    LED cubic shape        a3, a2 -> (a3, a2)(1 + c_e dT)               c_e = environment.led_cubic_per_k
    hold leakage           I -> I exp(c_l dT)                           c_l = environment.hold_leakage_per_k

and the thermal noise of the hold's capacitor, kT/C, is drawn at the chip's temperature T + dT (T =
`noise.thermal.temperature_k`, the temperature it was calibrated at): physics, no coefficient.

Where a factor is exactly 1 (dT = 0 or its coefficient 0) the callers skip it, so the bits stay as before.
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from aocsim.hardware.profiles.parts import Environment, Parts


def _linear(env: Environment, per_k: float, name: str) -> float:
    factor = 1.0 + float(per_k) * float(env.temperature_delta_k)
    if factor <= 0:
        raise ValueError(f"environment.{name} = {per_k!r} at environment.temperature_delta_k = "
                         f"{env.temperature_delta_k!r} gives a factor {factor:g}; expected 1 + c dT > 0 (a smaller "
                         f"coefficient or temperature change)")
    return factor


def function_gain(env: Environment) -> float:
    """1 + c_f dT: what the analog function circuits' gain is multiplied by since their calibration."""
    return _linear(env, env.function_gain_per_k, "function_gain_per_k")


def loop_sigmoid(v: Parts) -> np.ndarray | None:
    """The loop nonlinearity's coefficients [a, b, c, d, f(, g)] on the chip at dT: the calibrated sigmoid's
    amplitude d times 1 + c_n dT (the profile's own array where the factor is 1; None for tanh, which takes
    no coefficient: `checks`)."""
    coeffs = v.nonlinearity.coeffs
    factor = _linear(v.environment, v.environment.loop_gain_per_k, "loop_gain_per_k")
    if coeffs is None or factor == 1.0:
        return coeffs
    warm = np.array(coeffs, dtype=np.float64)
    warm[3] *= factor
    return warm


def kelvin(v: Parts) -> float:
    """T + dT: the chip's temperature now, kelvin (`noise.thermal.temperature_k` is where it was calibrated)."""
    t = float(v.noise.thermal.temperature_k) + float(v.environment.temperature_delta_k)
    if t < 0:
        raise ValueError(f"environment.temperature_delta_k = {v.environment.temperature_delta_k!r} at "
                         f"noise.thermal.temperature_k = {v.noise.thermal.temperature_k!r} gives {t:g} K; "
                         "expected a temperature >= 0 K")
    return t


def led_shape(env: Environment) -> float:
    """1 + c_e dT: what every emitter's t^3 and t^2 coefficients are multiplied by since they were measured."""
    return _linear(env, env.led_cubic_per_k, "led_cubic_per_k")


def leakage(env: Environment) -> float:
    """exp(c_l dT): what the hold's leakage current is multiplied by (doubling every ln 2 / c_l kelvin)."""
    return math.exp(float(env.hold_leakage_per_k) * float(env.temperature_delta_k))
