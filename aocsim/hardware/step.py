"""The one definition of a loop iteration (docs/PHYSICS.md, the loop equation).

    z[k+1] = z + r (y - z),   y = clamp(g (node_scale (D_P - D_Q) + node_lam) + base
                                        + (alpha + gamma) z - gamma z_prev)

with D = u M_det^T + c_det the detector signals of the LED light u = [P+(t), P-(t)],
t = f(z) the analog nonlinearity, g the loop gain at this iteration, base =
inject + k0 (the DAC'd input and the folded constant), r the first-order loop
response. Every execution path runs `iteration`: eagerly with autograd, eagerly
for inference, and compiled (`aocsim.hardware.backends` traces this function).

Two algebraically equal forms, chosen by the layout: without detector noise
the detector stage and both LED cubics fold into one operator on the LED
signals without their constants, q = u - p0 (an [B, 2N] x [2N, N] product);
with detector noise both paths are computed ([2N, 2N]) so that each gets the
variance of its own signal. Per-iteration draws come from the keyed stream
(`aocsim.hardware.keys`): counter (sample, channel) of this iteration's key,
its cosine half for the LED (RIN), its sine half for the detector.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aocsim.hardware.counter_rng import normal_pair


@dataclass(frozen=True)
class Layout:
    """Which stages an iteration has (fixed in a compiled graph; every number is an input)."""

    tanh: bool
    rin: bool
    detector_noise: bool
    momentum: bool
    saturate: bool
    respond: bool

    @property
    def draws(self) -> bool:
        return self.rin or self.detector_noise


@dataclass(frozen=True)
class Constants:
    """Per weight load (and drift state) tensors of the step; see the module docstring.

    sigmoid: [a, b, c, d, f, g] of the calibrated nonlinearity (unused with tanh).
    led: [[p3, p2, p1, p0] of P+, [...] of P-].
    op_t: [2N, N] node operator on q = u - p0 (gain excluded); c1: [N] its constant.
    det_t: [2N, 2N] = M_det^T; det_offset: [2N] (dark current included).
    node_scale, node_lam: [N] each (drift gain included).
    noise: [RIN std, a, 2 b] with var(D_P - D_Q) = a (|D_P| + |D_Q|) + 2 b.
    """

    sigmoid: torch.Tensor
    led: torch.Tensor
    op_t: torch.Tensor
    c1: torch.Tensor
    det_t: torch.Tensor
    det_offset: torch.Tensor
    node_scale: torch.Tensor
    node_lam: torch.Tensor
    noise: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.sigmoid, self.led, self.op_t, self.c1, self.det_t, self.det_offset, self.node_scale,
                self.node_lam, self.noise)


def nonlinearity(z: torch.Tensor, sigmoid: torch.Tensor, tanh: bool) -> torch.Tensor:
    """t = f(z): tanh, or d u (1 + |u|^c)^(-1/c) + f + g z with u = a z + b.

    The fractional powers run as base-2 exp / log (cheaper than pow on CPUs, exact at u = 0).
    """
    if tanh:
        return torch.tanh(z)
    a, b, c, d, f, g = sigmoid.unbind()
    u = a * z + b
    scale = torch.exp2(torch.log2(1.0 + torch.exp2(c * torch.log2(u.abs()))) * (-1.0 / c))
    return d * u * scale + f + g * z


def led_light(t: torch.Tensor, led: torch.Tensor, constant: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Both microLED cubics (Horner), with or without their constant terms p0: (P+(t), P-(t))."""
    p = t * (led[0, 2] + t * (led[0, 1] + t * led[0, 0]))
    q = t * (led[1, 2] + t * (led[1, 1] + t * led[1, 0]))
    return (p + led[0, 3], q + led[1, 3]) if constant else (p, q)


def detector_signals(p: torch.Tensor, q: torch.Tensor, det_t: torch.Tensor, det_offset: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(D_P, D_Q) [B, N] each: the folded optics acting on the LED light."""
    d = torch.addmm(det_offset, torch.cat([p, q], dim=1), det_t)
    n = p.shape[1]
    return d[:, :n], d[:, n:]


def difference_std(d_pos: torch.Tensor, d_neg: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """std of D_P - D_Q from every detector source: sqrt(a (|D_P| + |D_Q|) + 2 b)."""
    return torch.sqrt((d_pos.abs() + d_neg.abs()) * noise[1] + noise[2])


def optical(t: torch.Tensor, c: Constants, gain: torch.Tensor, layout: Layout, key: torch.Tensor | None,
            counters: torch.Tensor | None) -> torch.Tensor:
    """g (node_scale (D_P - D_Q) + node_lam): the optical path's contribution at the node, without k0."""
    if not layout.draws:
        p, q = led_light(t, c.led, constant=False)
        return gain * torch.addmm(c.c1, torch.cat([p, q], dim=1), c.op_t)
    led_draw, det_draw = normal_pair(key, counters, t.dtype)
    p, q = led_light(t, c.led, constant=True)
    if layout.rin:  # one intensity fluctuation per LED, seen by both of its paths
        flicker = 1.0 + c.noise[0] * led_draw
        p, q = p * flicker, q * flicker
    if layout.detector_noise:
        d_pos, d_neg = detector_signals(p, q, c.det_t, c.det_offset)
        diff = d_pos - d_neg + difference_std(d_pos, d_neg, c.noise) * det_draw
        return gain * (c.node_scale * diff + c.node_lam)
    return gain * torch.addmm(c.c1, torch.cat([p - c.led[0, 3], q - c.led[1, 3]], dim=1), c.op_t)


def iteration(z: torch.Tensor, z_prev: torch.Tensor, base: torch.Tensor, c: Constants, node: torch.Tensor,
              key: torch.Tensor | None, counters: torch.Tensor | None, layout: Layout) -> torch.Tensor:
    """z[k+1] from z[k] (and z[k-1] for momentum).

    Args:
        z, z_prev: states [B, N], volts.
        base: inject + k0, [B, N].
        c: the weight load's `Constants`.
        node: [g, alpha + gamma, gamma, low rail, high rail, response] at this iteration.
        key, counters: this iteration's stream key (int64 0-dim) and the (sample, channel) counters
            [B, N] (`keys.sample_counters`); None when the layout draws nothing.
        layout: the stages present.
    """
    y = optical(nonlinearity(z, c.sigmoid, layout.tanh), c, node[0], layout, key, counters) + base
    y = y + node[1] * z
    if layout.momentum:
        y = y - node[2] * z_prev
    if layout.saturate:
        y = torch.clamp(y, node[3], node[4])
    if layout.respond:
        y = z + node[5] * (y - z)
    return y
