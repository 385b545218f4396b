"""The detectors' bias light of one weight load (docs/PHYSICS.md sections 3 and 6).

`noise.bias_units` is a number of detector units, or `auto`: the bias each load needs, so that no detector
needs negative light at full-scale signal (`aocsim.hardware.physics.light.bias_need`: the fullest column's
light at the emitters' bias). Computed once per load from its folded optics, never per iteration. With a
number, a load whose full-scale signals would need more is flagged (`NegativeLightWarning`) where the
loop draws shot noise from that light.
"""

from __future__ import annotations

import warnings

import torch

from aocsim.hardware.physics.light import bias_need
from aocsim.hardware.physics.optics import FoldedOptics
from aocsim.hardware.profiles.parts import Parts

AUTO = "auto"


class NegativeLightWarning(UserWarning):
    """A weight load's full-scale signals would need negative light at the profile's `noise.bias_units`."""


def load_parts(parts: Parts, optics: FoldedOptics, led: torch.Tensor, where: str) -> Parts:
    """The components one load runs with: `noise.bias_units` resolved to this load's need when it is `auto`
    (the profile's otherwise); warns once per load when a numeric bias is short of it and shot noise is on.

    optics: the load's folded optics (m_det, c_det); led [2, 4, N]: its emitters' cubics; where: the
    load's name in the warning (profile, tile).
    """
    bias = parts.noise.bias_units
    if bias != AUTO and not parts.noise.shot.enabled:
        return parts  # nothing reads the light
    need = bias_need(optics.m_det, optics.c_det, led, parts)
    top = float(need.max()) if need.numel() else 0.0
    if bias == AUTO:
        return parts.map_leaves(("noise.bias_units",), lambda key, value: top)
    short = float((need > bias).double().mean())
    if short > 0:
        warnings.warn(f"{where}: {100 * short:.0f} % of the detectors would need negative light at full-scale "
                      f"signal with noise.bias_units = {bias:g}; this load needs {top:.3g} (or set "
                      f"noise.bias_units: auto; docs/PHYSICS.md section 6)", NegativeLightWarning, stacklevel=3)
    return parts
