"""Compiling a DEQ for one device: which state sits on which channel, and what is programmed.

Two steps, both against the device's deterministic optical map y_opt(z_d)
(`OpticalLoop.optical` on the chip's calibrated profile without per-iteration
noise and without the random programming error, which no compiler can know):

1. `assign_channels`: a dead or weak input channel (an emitter whose mean
   fan-in is below `WEAK_FRACTION` of the median; aoc48's channel 8 has none)
   cannot carry a state to the others, so the least informative state, the one
   whose loop contribution beta W[:, i] tanh(z_i) has the smallest mean power
   at the fixed points, is swapped onto it.
2. `fit_program`: least squares over the fixed points Z* of the exact path,
       min over (W_p, g, c)  mean || a (y_opt(z_d*; W_p, g) + c) - beta W tanh(z*) ||^2,
   z_d* = (z* - b) / a, with W_p the programmed matrix, g the loop gain
   (normalized convention) and c the injection correction, started from the
   analytic mapping and solved by L-BFGS through the calibrated pipeline
   (SLM quantisation straight-through). No labels are used.
See docs/ARCHITECTURE.md (execute/) for where this sits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.hardware.engine.programming import channel_arrays

log = logging.getLogger(__name__)

WEAK_FRACTION = 0.5  # an emitter below half the median fan-in counts as weak
EXACT_FIT = 1e-24  # relative squared error below which the start is taken as exact (float64 rounding)
FIT_ITERATIONS = 200  # L-BFGS iterations (the digits DEQ settles in well under 100)


@dataclass(frozen=True)
class Program:
    """What goes onto the machine for one DEQ, in channel order.

    weight: W_p [N, N] loaded onto the SLM; beta: the loop gain g (normalized convention);
    correction: c [N] volts added to the digital injection (minus the DC offset, plus the fit's term).
    """

    weight: torch.Tensor
    beta: float
    correction: torch.Tensor


def weak_channel(profile: DeviceProfile, n: int) -> int | None:
    """The weakest input channel if its mean fan-in is below WEAK_FRACTION x the median, else None."""
    arrays = channel_arrays(profile.parts, n, dtype=torch.float64, device=torch.device("cpu"))
    strength = 0.5 * (arrays.emitter.fan_in_pos + arrays.emitter.fan_in_neg)
    weakest = int(strength.argmin())
    return weakest if float(strength[weakest]) < WEAK_FRACTION * float(strength.median()) else None


def assign_channels(operator: torch.Tensor, z_star: torch.Tensor, weak: int | None) -> torch.Tensor:
    """order [N]: channel k holds model state order[k]; the least informative state moves to `weak`.

    operator: beta W [N, N]; z_star: exact fixed points [B, N].
    """
    n = operator.shape[0]
    order = torch.arange(n)
    if weak is None:
        return order
    # Mean power that state i sends around the loop: E_b sum_j (beta W_ji tanh(z_bi))^2.
    power = (operator ** 2).sum(0) * (torch.tanh(z_star) ** 2).mean(0)
    least = int(power.argmin())
    order[weak], order[least] = least, weak
    return order


def fit_program(profile: DeviceProfile, start: Program, *, alpha: float, operator: torch.Tensor,
                z_star: torch.Tensor, sigmoid_gain: float, sigmoid_offset: float) -> Program:
    """Least-squares fit of (W_p, g, c) from `start` (see the module docstring); all in channel order.

    Args:
        profile: the chip's profile without noise and without programming error.
        start: the analytic mapping.
        alpha: the model's leak.
        operator: beta W [N, N] of the model; z_star: exact fixed points [B, N], model units.
        sigmoid_gain, sigmoid_offset: a, b of the state map z = a z_d + b.
    """
    a, b = sigmoid_gain, sigmoid_offset
    target = torch.tanh(z_star) @ operator.T
    z_d = (z_star - b) / a
    w = start.weight.detach().clone().requires_grad_(True)
    g = torch.tensor(start.beta, dtype=w.dtype, requires_grad=True)
    c = start.correction.detach().clone().requires_grad_(True)

    def loss() -> torch.Tensor:
        loop = OpticalLoop(profile, w, alpha=alpha, beta=g)
        return ((a * (loop.optical(z_d) + c) - target) ** 2).mean()

    opt = torch.optim.LBFGS([w, g, c], lr=1.0, max_iter=FIT_ITERATIONS, history_size=20,
                            line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        value = loss()
        value.backward()
        return value

    power = float(target.pow(2).mean())
    with torch.enable_grad():
        before = float(loss().detach())
        if before > EXACT_FIT * power:  # an exact start (the ideal device) has nothing to fit
            opt.step(closure)
        after = float(loss().detach())
    log.info("fit: mean squared error %.3g -> %.3g (target power %.3g)", before, after, power)
    if not after <= before:  # a failed line search must not make the mapping worse
        return start
    return Program(w.detach(), float(g.detach()), c.detach())


def affine_fit(target: torch.Tensor, node: torch.Tensor, *, spread: float | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column j, (g_j, o_j) minimising ||node_j - g_j target_j - o_j||^2.

    spread: a gain outside [m / spread, m spread], m the median gain, is taken as m (and its offset
    refitted): a column whose target barely moves (a weak output of a matrix) is mostly noise, and
    dividing by its fitted gain would amplify that noise without bound.
    """
    tm, nm = target.mean(0), node.mean(0)
    tc, nc = target - tm, node - nm
    var = (tc * tc).sum(0)
    gain = torch.where(var > 0, (tc * nc).sum(0) / var.clamp_min(1e-300), torch.ones_like(var))
    gain = torch.where(gain.abs() > 1e-12, gain, torch.ones_like(gain))  # a dead output: report raw
    if spread is not None:
        typical = gain.median()
        odd = (gain < typical / spread) | (gain > typical * spread)
        gain = torch.where(odd, typical, gain)
    return gain, nm - gain * tm
