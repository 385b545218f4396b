"""The light an emitter pays for, written out by hand from a profile's numbers (docs/PHYSICS.md section 6), with
numpy and no aocsim code: the tests of the energy model compare the package's figures with these."""

from __future__ import annotations

import numpy as np


def led_bias_by_hand(v) -> float:
    """d: the largest |P(t)| of the LED cubics over the nonlinearity's full scale: tanh's [-1, 1], or the algebraic
    sigmoid d u (1 + |u|^c)^(-1/c) + f + g z (u = a z + b) over the saturation rails."""
    if v["nonlinearity.kind"] == "tanh":
        t = np.linspace(-1.0, 1.0, 257)
    else:
        a, b, c, dd, f, *g = v["nonlinearity.coeffs"]
        z = np.linspace(v["saturation.low_v"], v["saturation.high_v"], 257)
        u = a * z + b
        t = dd * u * (1 + np.abs(u) ** c) ** (-1 / c) + f + (g[0] if g else 0.0) * z
    return max(float(np.abs(np.polyval(np.asarray(p, dtype=float), t)).max())
               for p in (v["emitter.poly_pos"], v["emitter.poly_neg"]))


def emitter_w_by_hand(v, n: int) -> float:
    """P_emit = 2 N P_unit d / eta: an emitter lights the 2N pixels of both paths with P_unit d each, and the optics
    before the SLM planes pass eta of its light (the SLM's transmission is the detectors' bias, not paid again)."""
    return 2 * n * v["noise.power_per_unit_w"] * led_bias_by_hand(v) / v["energy.optical_link_efficiency"]
