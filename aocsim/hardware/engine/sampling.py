"""The loop as its ADC reads it: the map an early stop judges (docs/PHYSICS.md sections 3 and 6).

The machine sees its loop only through the readout ADC, which samples every channel once every
m = `readout.sample_interval_iterations` round trips (`readout.adc_bits` over `readout.range_v`). An early
stop (a tolerance, or the noise floor) is therefore decided on those samples: `SampledLoop` is called once
per sample with the last converted sample, runs the loop's m round trips from its own analog state (the
loop never sees the converted values), and returns the next converted sample. The solver's residual is
then the difference of two consecutive converted samples, its patience counts samples, and the state it
returns is a converted sample: the stop is priced as it reads (`dynamics.loop_activity`).

Its noise floor is the sampled one (`settling.residual_at` with the lag m and the ADC's rounding
variance), with every channel's gap capped by the slowest collective mode of the loop's full Jacobian
A = dz[k+1] / dz[k] at the state (coupling through W included), estimated by power iteration on
(I + A) / 2 (its dominant eigenvalue (1 + lambda) / 2 belongs to the eigenvalue lambda of A nearest +1,
the slowest decaying mode; a leak near -1 maps near 0). The vector is kept between samples, so a few
steps per sample follow the Jacobian as the state settles.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from aocsim.hardware.engine import settling, step
from aocsim.hardware.engine.dynamics import LoopMap
from aocsim.hardware.physics import components as C
from aocsim.solve.result import SolveResult

POWER_STEPS = 2  # power-iteration steps per sample (two noise-free evaluations each)


class SampledLoop:
    """`loop_map` read by its ADC every `interval` round trips (the module docstring; a `NoisyMap`)."""

    def __init__(self, loop_map: LoopMap, interval: int, adc: tuple[float, float, int | None]) -> None:
        self.inner, self.interval, self.adc = loop_map, interval, adc
        low, high, bits = adc
        self.quantum_var = 0.0 if bits is None else C.code_step(low, high, bits) ** 2 / 12
        self.analog: torch.Tensor | None = None  # the loop's own state (never converted)
        self.before: torch.Tensor | None = None  # the state the sample's last round trip started from
        self.vector: torch.Tensor | None = None  # the power iteration's vector, [B, N] unit rows

    def __call__(self, sample: torch.Tensor) -> torch.Tensor:
        """The next converted sample, `interval` round trips after the last (the first call starts the loop
        from `sample`, the initial state)."""
        z = sample if self.analog is None else self.analog
        for _ in range(self.interval - 1):
            z = self.inner(z)
        self.before = z
        self.analog = self.inner(z)
        return C.quantize_range(self.analog, *self.adc)

    def advance(self, sample: torch.Tensor, n: int) -> torch.Tensor:
        """n samples with no residual checks."""
        for _ in range(n):
            sample = self(sample)
        return sample

    def noise_floor(self, sample: torch.Tensor, spreads: float) -> torch.Tensor:
        """[B]: the rms difference of two consecutive converted samples at a state `spreads` stationary spreads
        from the fixed point (`settling.residual_at`, the lag m, the ADC's rounding and the collective cap)."""
        if not self.inner.layout.draws or self.before is None:
            return torch.zeros(sample.shape[0], dtype=sample.dtype, device=sample.device)
        ch = self.inner.channels(self.before)
        lam = self.slowest_eigenvalue(self.before)
        bound = settling.STABLE * (1 - ch.b)
        cap = settling.gap_sq(lam.clamp(-bound, bound), ch.b, self.interval)
        return settling.residual_at(ch, spreads, interval=self.interval, quantum_var=self.quantum_var, gap_cap=cap)

    def slowest_eigenvalue(self, z: torch.Tensor) -> torch.Tensor:
        """[B]: lambda of A (the noise-free Jacobian at z, the momentum state held) nearest +1, from
        `POWER_STEPS` more steps of the power iteration on (I + A) / 2 (the norm ratio of a unit vector)."""
        m = self.inner
        quiet = dataclasses.replace(m.layout, rin=False, detector_noise=False)
        z_prev = m.z_before if m.z_before is not None else torch.zeros_like(z)
        node = m.loop.node(max(m.k - 1, 0), z)
        h = torch.finfo(z.dtype).eps ** (1 / 3)
        if self.vector is None:  # a fixed start with no special direction (any mode has weight in it)
            start = torch.randn(z.shape[1], generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            self.vector = (start / start.norm()).to(z).expand_as(z).clone()
        v, grow = self.vector, torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        with torch.no_grad():
            drive = step.node_drive(m.base, m.c, node[0], quiet)
            for _ in range(POWER_STEPS):
                jv = (step.iteration(z + h * v, z_prev, drive, m.c, node, None, None, quiet)
                      - step.iteration(z - h * v, z_prev, drive, m.c, node, None, None, quiet)) / (2 * h)
                w = (v + jv) / 2
                grow = w.norm(dim=1)
                v = w / grow.clamp_min(torch.finfo(z.dtype).tiny)[:, None]
        self.vector = v
        return 2 * grow - 1


def sampled_solve(loop_map: LoopMap, z0: torch.Tensor, max_iter: int, **options: Any
                  ) -> tuple[SolveResult, torch.Tensor]:
    """The early stop on the ADC's samples (`aocsim.solve.solve` of a `SampledLoop`; options: atol, rtol,
    trace, patience, floor_spreads). Sample j + 1 is read to judge sample j, so a sample stopped at
    solver step j ran j + 1 samples of m round trips (at most `max_iter` round trips, at least one
    sample). With atol and rtol None, a fixed count: max_iter // m samples (at least one), no stop.
    Returns the result (z: the last converted sample) and the round trips [B]."""
    from aocsim.solve.core import solve

    r = loop_map.loop.parts.readout
    every = int(r.sample_interval_iterations)
    sampled = SampledLoop(loop_map, every, (float(r.range_v[0]), float(r.range_v[1]), r.adc_bits))
    if options.get("atol") is None and options.get("rtol") is None:  # a fixed count: whole samples, no stop
        samples = max(max_iter // every, 1)
        result = solve(sampled, z0, solver="picard", max_iter=samples, return_best=False, early_stop=False,
                       **options)
        read = torch.full_like(result.iterations, samples)  # all of them, a trace's exact-zero residuals included
    else:
        result = solve(sampled, z0, solver="picard", max_iter=max(max_iter // every - 1, 0), return_best=False,
                       return_value=True, **options)
        read = result.iterations + 1
    if result.trace is not None:
        result = dataclasses.replace(result, trace=on_round_trips(result.trace, every))
    return result, read * every


def on_round_trips(trace: torch.Tensor, every: int) -> torch.Tensor:
    """A per-sample residual trace [B, J] on the round-trip axis [B, J m + 1]: the residual read with sample
    j + 1 at index (j + 1) m, the round trip it was read at; NaN where the machine read nothing. So a run's
    trace ends at its iterations, as an exact path's does, and lines up with it round trip for round trip."""
    out = torch.full((trace.shape[0], trace.shape[1] * every + 1), float("nan"), dtype=trace.dtype,
                     device=trace.device)
    out[:, every::every] = trace
    return out
