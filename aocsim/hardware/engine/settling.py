"""When a noisy loop has settled: its stationary spread and the residual it shows (docs/PHYSICS.md section 3).

Each channel j is read as its own linear recurrence about the fixed point (the diagonal of the
loop's Jacobian; the coupling through W is left out), with d = z - z*:

    d[k+1] = a_j d[k] + b d[k-1] + e[k],   var(e) = q_j

a_j = 1 - r + r (alpha + gamma + dy_opt_j / dz_j) and b = -r gamma (r the loop response, gamma the
momentum), q_j the variance one iteration's noise adds at the node after the response. A channel
whose noise-free drive lies beyond a rail is clamped: the rail absorbs its noise (q_j = 0). The
stationary statistics of that AR(2) recurrence are, with D = (1 + b)((1 - b)^2 - a^2):

    spread^2   s_j^2 = q_j (1 - b) / D                       (E d^2)
    residual^2 v_j   = 2 q_j / ((1 + b)(1 - b + a))          (E (z[k+1] - z[k])^2)

(b = 0: s^2 = q / (1 - a^2) and v = 2 q / (1 + a)). A displacement d_j in the slowest mode (the
root mu of mu^2 = a mu + b of largest modulus) adds |1 - mu|^2 d_j^2 to the mean-square residual,
so a state c spreads away (d_j = c s_j) shows

    E r_j^2 = v_j + (c^2 - 1) |1 - mu|^2 s_j^2,

and the loop's residual norm, summed over channels, has mean square sum_j E r_j^2 (`residual_at`).

The machine reads the loop only through its ADC, once every m round trips (`readout.sample_interval_iterations`),
so its early stop sees the difference of two consecutive converted samples, m round trips apart. With the
lag-h autocovariance of the recurrence, c(0) = s^2, c(1) = a s^2 / (1 - b), c(h) = a c(h-1) + b c(h-2)
(b = 0: c(m) = a^m s^2), and the ADC's rounding error (step LSB, variance LSB^2 / 12, independent between
samples when the noise dithers the signal) added to each sample,

    residual^2 v_j(m) = E (z[k+m] - z[k])^2 = 2 (s_j^2 - c(m)) + 2 LSB^2 / 12,

which is v_j at m = 1 without quantisation; a displacement in the slowest mode adds |1 - mu^m|^2 d_j^2.

The per-channel reading leaves the coupling through W out: a collective mode of the full Jacobian A
(a slow eigenvalue lambda, e.g. W of rank one near the stability edge) decays slower than any channel
says, so a state far out along it shows a small residual. `residual_at` takes the gap |1 - mu^m|^2 of
that mode (mu the slowest root of mu^2 = lambda mu + b; `gap_sq`) as a cap on every channel's gap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aocsim.hardware.engine.step import (Constants, Layout, led_light, node_drive, node_noise_variance, nonlinearity,
                                         optical)

STABLE = 0.999  # |a| is held below STABLE (1 - b): a channel read as unstable keeps a finite spread


@dataclass(frozen=True)
class Channels:
    """Per-channel recurrence at a state: q [B, N] the noise variance (0 where clamped), a [B, N], b (scalar)."""

    q: torch.Tensor
    a: torch.Tensor
    b: float

    def spread_sq(self) -> torch.Tensor:
        """s_j^2 [B, N]: the stationary mean square distance of each channel from its fixed point."""
        a, b = self.a, self.b
        return self.q * (1 - b) / ((1 + b) * ((1 - b) ** 2 - a * a))

    def residual_sq(self, interval: int = 1) -> torch.Tensor:
        """v_j(m) [B, N]: the stationary mean square of each channel's residual z[k+m] - z[k], m = `interval`
        (m = 1: 2 q / ((1 + b)(1 - b + a)); otherwise 2 (s^2 - c(m)), the module docstring)."""
        if interval == 1:
            return 2 * self.q / ((1 + self.b) * (1 - self.b + self.a))
        s2 = self.spread_sq()
        older, cov = s2, self.a * s2 / (1 - self.b)  # c(0), c(1)
        for _ in range(interval - 1):
            older, cov = cov, self.a * cov + self.b * older
        return 2 * (s2 - cov)


def gap_sq(a: torch.Tensor, b: float, interval: int) -> torch.Tensor:
    """|1 - mu^m|^2: what a displacement d in the slowest mode of mu^2 = a mu + b (mu the root of largest
    modulus; a complex pair where a^2 + 4 b < 0) adds, times d^2, to the mean square residual over m steps."""
    disc = (a * a + 4 * b).to(torch.complex128)
    mu = (a + torch.where(a < 0, -1.0, 1.0) * disc.sqrt()) / 2
    return (1 - mu ** interval).abs().square().to(a.dtype)


def channels(z: torch.Tensor, z_prev: torch.Tensor, base: torch.Tensor, c: Constants,
             node: tuple[torch.Tensor, ...], layout: Layout) -> Channels:
    """The per-channel recurrence of the iteration from z (z_prev: the state before it, for momentum).

    Args:
        z, z_prev, base: [B, N] volts, as `step.iteration`.
        c, node, layout: the load's constants, (g, alpha + gamma, gamma, low, high, response), the stages.
    """
    g, leak, gamma, low, high, r = (float(v) for v in node)
    r = r if layout.respond else 1.0
    # t = f(z) and the LED cubics act per channel: their slopes by a central difference (autograd
    # through the calibrated sigmoid is NaN at u = 0, where |u|^c has an infinite log-derivative)
    h = torch.finfo(z.dtype).eps ** (1 / 3)
    (p_hi, q_hi), (p_lo, q_lo) = (led_light(nonlinearity(z + s, c.sigmoid, layout.tanh), c.led_coefficients, constant=False)
                                  for s in (h, -h))
    n = z.shape[1]
    slope = g * ((p_hi - p_lo) * c.op_t[:n].diagonal() + (q_hi - q_lo) * c.op_t[n:].diagonal()) / (2 * h)
    t = nonlinearity(z, c.sigmoid, layout.tanh)
    var = node_noise_variance(t, c, g, float(c.noise[1]), float(c.noise[2]), float(c.noise[0]))
    a = 1 - r + r * (leak + slope)
    b = -r * gamma if layout.momentum else 0.0
    if layout.saturate:
        quiet = Layout(layout.tanh, rin=False, detector_noise=False, momentum=False, saturate=False, respond=False)
        y = optical(t, c, node_drive(base, c, node[0], quiet), quiet, None, None) + leak * z
        y = y - gamma * z_prev if layout.momentum else y
        clamped = (y < low) | (y > high)
        var = torch.where(clamped, 0.0, var)
        a = torch.where(clamped, 1 - r, a)
    bound = STABLE * (1 - b)
    return Channels(r * r * var, a.clamp(-bound, bound), b)


def residual_at(ch: Channels, spreads: float, *, interval: int = 1, quantum_var: float = 0.0,
                gap_cap: torch.Tensor | None = None) -> torch.Tensor:
    """[B]: the rms residual norm of a state `spreads` stationary spreads from its fixed point, read every
    `interval` = m iterations through a converter of rounding variance `quantum_var` (LSB^2 / 12): sqrt of
    sum_j v_j(m) + 2 quantum_var + (spreads^2 - 1) min(|1 - mu_j^m|^2, gap_cap) s_j^2 (the module docstring;
    gap_cap [B], the slowest collective mode's gap, or None)."""
    gap = gap_sq(ch.a, ch.b, interval)
    if gap_cap is not None:
        gap = torch.minimum(gap, gap_cap[:, None])
    per_channel = ch.residual_sq(interval) + 2 * quantum_var + (spreads * spreads - 1) * gap * ch.spread_sq()
    return per_channel.sum(1).clamp_min(0).sqrt()
