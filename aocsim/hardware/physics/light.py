"""The light a module pays for and the light its detectors need (docs/PHYSICS.md sections 3 and 6).

One unit of the twin's detector signal is `noise.power_per_unit_w` = P_unit on a photodetector. An
emitter driven at d units lights each SLM pixel of its row with d P_unit (a pixel at full transmission
passes d units to its detector), so at its bias it lights the 2N pixels of both paths with 2 N P_unit d,
and the optics before the SLM planes pass eta = `energy.optical_link_efficiency` of its light:

    P_emit = 2 N P_unit d / eta                     optical power of one emitter
    TOPS/W <= 2 N^2 / (N P_emit / eta_wpe t_rt) = eta eta_wpe / (t_rt P_unit d)   (the light's bound)

The SLM's transmission (the weights) is not a loss the emitters pay again: it is what the detectors'
bias light counts (`noise.bias_units`: the column's transmissions at the emitters' bias, `bias_need`).
d is the emitters' bias drive (`led_bias_units`): the largest light swing of the LED cubics over the
nonlinearity's full scale, so that the LED's light stays non-negative (assumption: the LED is biased at
its full-scale swing; one unit for tanh and identity emitters).
"""

from __future__ import annotations

import torch

from aocsim.hardware.physics import components as C
from aocsim.hardware.physics.temperature import loop_sigmoid
from aocsim.hardware.profiles.parts import Parts

DRIVE_POINTS = 257  # the nonlinearity's full scale sampled at this many points


def full_scale_drive(parts: Parts, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """[G]: the nonlinearity's outputs t over its full scale: tanh's [-1, 1], or the sigmoid the loop runs (the
    calibrated one at the chip's temperature, `temperature.loop_sigmoid`) over the node's rails
    [`saturation.low_v`, `saturation.high_v`] (the node's range whether or not it clips there)."""
    if parts.nonlinearity.kind == "tanh":
        return torch.linspace(-1.0, 1.0, DRIVE_POINTS, dtype=dtype)
    z = torch.linspace(parts.saturation.low_v, parts.saturation.high_v, DRIVE_POINTS, dtype=dtype)
    return C.nonlinearity(z, parts.nonlinearity.kind, torch.tensor(loop_sigmoid(parts), dtype=dtype))


def led_bias_units(parts: Parts) -> float:
    """d, detector units: the emitters' bias drive, the largest |P(t)| of the profile's LED cubics (both paths)
    over the nonlinearity's full scale (`full_scale_drive`): the LED's light swings both ways around its bias
    and stays non-negative. 1 for tanh with identity emitters."""
    t = full_scale_drive(parts)[:, None]
    return float(C.led_pair(t, tuple(parts.emitter.poly_pos), tuple(parts.emitter.poly_neg)).abs().max())


def emitter_light_w(parts: Parts, channels: int) -> float:
    """P_emit = 2 N P_unit d / eta, W: the light of one emitter at its bias (module docstring)."""
    return (2.0 * channels * parts.noise.power_per_unit_w * led_bias_units(parts)
            / parts.energy.optical_link_efficiency)


def light_energy_per_op_j(parts: Parts) -> float:
    """P_unit d t_rt / (eta eta_wpe), J: the emitters' electrical energy per operation (2 N^2 operations per
    round trip for N P_emit / eta_wpe of electrical power)."""
    e = parts.energy
    return (parts.noise.power_per_unit_w * led_bias_units(parts) * parts.loop.round_trip_s
            / (e.optical_link_efficiency * e.emitter_wall_plug_efficiency))


def light_bound_tops_per_watt(parts: Parts) -> float:
    """eta eta_wpe / (t_rt P_unit d) / 1e12: TOPS/W of a module whose only cost is its emitters' light
    (`light_energy_per_op_j`); no profile exceeds it."""
    return 1.0 / light_energy_per_op_j(parts) / 1e12


def bias_need(m_det: torch.Tensor, c_det: torch.Tensor, led: torch.Tensor, parts: Parts) -> torch.Tensor:
    """[2N]: per detector (P path, then Q), the bias light in units that keeps its light non-negative at
    full-scale signal: -min over the drive of D = u M_det^T + c_det, each emitter's light u anywhere in its
    range over the nonlinearity's full scale (`full_scale_drive`). For identity emitters and tanh, the
    column's weight transmissions summed (the fullest column's sets a load's bias: docs/PHYSICS.md section 6).

    m_det [2N, 2N], c_det [2N] (`FoldedOptics`), led [2, 4, N] (each emitter's cubics, highest power first).
    """
    with torch.no_grad():
        t = full_scale_drive(parts, m_det.dtype).to(m_det.device)[:, None]
        lights = []
        for cubic in led.detach().unbind(0):  # per path: [G, N] over the drive, Horner
            lights.append(((cubic[0] * t + cubic[1]) * t + cubic[2]) * t + cubic[3])
        u = torch.cat(lights, dim=1)
        low, high = u.min(0).values, u.max(0).values
        m_t = m_det.detach().T
        lowest = low @ m_t.clamp_min(0.0) + high @ m_t.clamp_max(0.0) + c_det.detach()
        return (-lowest).clamp_min(0.0)
