"""Probes of the loop's intermediate signals, for tests and noise studies: the optical term at the
node and the two detector readings, computed with the iteration's own stage functions (`step`)."""

from __future__ import annotations

import torch

from aocsim.hardware.engine import keys
from aocsim.hardware.engine.counter_rng import normal_pair
from aocsim.hardware.engine.dynamics import LoopMap
from aocsim.hardware.engine.step import detector_signals, flickered, led_signals, node_drive, nonlinearity, optical


def optical_term(m: LoopMap, z: torch.Tensor, iteration: int = 0) -> torch.Tensor:
    """y_opt: the optical path's contribution at the loop node, [B, N] volts (noise drawn as in an
    iteration of the map `m`: `OpticalLoop.optical`)."""
    loop = m.loop
    drive = node_drive(loop.k0(), m.c, loop.node(iteration, z)[0], m.layout)
    return optical(nonlinearity(z, m.c.sigmoid, m.layout.tanh), m.c, drive, m.layout, m._key(iteration, z.device),
                   m.counters)


def detector_readings(m: LoopMap, z: torch.Tensor, iteration: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, Q): the two detector signals after the gain, [B, N] each; each path draws its own noise
    (an iteration merges the paths' noises into one draw of their difference; `OpticalLoop.detectors`)."""
    loop, c = m.loop, m.c
    light = led_signals(nonlinearity(z, c.sigmoid, m.layout.tanh), c.led_coefficients, constant=True)
    if m.layout.draws:  # RIN: the iteration's own LED draw
        led_draw, _ = normal_pair(m._key(iteration, z.device), m.counters, z.dtype)
        light = flickered(light, c.noise_levels, led_draw, m.layout)
    d_pos, d_neg = detector_signals(light, c.det_t, c.det_offset)
    if m.layout.detector_noise:  # per path: var = a D + b (D signed; 0 where the light is negative), own sub-stream
        draws = keys.normals(m.key.fold(keys.Stream.ITERATION, iteration, 1), (2, *z.shape), dtype=z.dtype, device=z.device)
        a, b = float(c.noise[1]), float(c.noise[2]) / 2
        d_pos = d_pos + torch.sqrt((d_pos * a + b).clamp_min(0.0)) * draws[0]
        d_neg = d_neg + torch.sqrt((d_neg * a + b).clamp_min(0.0)) * draws[1]
    g = loop.node(iteration, z)[0] * loop.optics.gain_scale
    return d_pos * g, d_neg * g
