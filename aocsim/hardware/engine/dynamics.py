"""The device iteration as a map for `aocsim.solve`: the loop's own dynamics, driven by the one solver loop.

`LoopMap(loop, x, key, samples)` is called once per loop iteration with z[k]
and returns z[k+1]; it keeps z[k-1] (momentum), the iteration index (schedules,
keys) and, for the readout, the running ADC average. It tells the driver what
the noise predicts for the residual (`noise_floor`, the solver's `NoisyMap`
protocol), so the solve can say "settled at the noise floor". `advance(z, n)`
runs n iterations with no checks (compiled blocks where the layout allows): the
fixed-count path of the driver. What an inference did, for time and energy, is
`loop_activity` (docs/PHYSICS.md section 6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aocsim.hardware.engine import backends
from aocsim.hardware.physics import components as C
from aocsim.hardware.engine import keys, settling, step
from aocsim.hardware.physics.energy import Activity
from aocsim.hardware.profiles.parts import Parts, Readout
from aocsim.solve.result import SolveResult


FUSED_BLOCK = 5  # compiled iterations per call when nothing changes between them
KEY_BLOCK = 32  # iteration keys derived per tensor computation (eager per-call overhead: one key costs as many)
# The early stop's default patience in ADC samples: the noise-floor status averages the last PATIENCE squared
# differences of consecutive samples (the first against the initial state; docs/PHYSICS.md sections 3 and 6).
PATIENCE = 3


class LoopMap:
    """One inference of `loop`, an `OpticalLoop` (not imported: loop.py imports this module), on input x
    (see the module docstring)."""

    def __init__(self, loop: Any, x: torch.Tensor, batch: int, key: keys.Key | None,
                 samples: torch.Tensor, *, readout: bool = False, record: bool = False) -> None:
        self.loop, self.key, self.k = loop, key, 0
        self.c = loop.constants()
        self.layout = loop.layout()
        inject = loop.injection(x)
        self.base = (inject + loop.k0()).expand(batch, loop.n)
        self.counters = keys.sample_counters(samples, loop.n) if self.layout.draws else None
        self.z_prev: torch.Tensor | None = None
        self.z_before: torch.Tensor | None = None
        self.fast = loop.compile and not torch.is_grad_enabled()
        self._keys: tuple[tuple[torch.Tensor, ...], int] = ((), 0)  # a block of iteration keys and its first
        self._node: tuple[torch.Tensor, ...] | None = None  # the node's values, with constant schedules
        self._drive: tuple[torch.Tensor, torch.Tensor] | None = None  # and its drive (`step.node_drive`)
        self._constant_node = loop.constant_schedules  # (a property: read once, not per iteration)
        self.states: list[torch.Tensor] | None = [] if record else None
        v = loop.parts
        self.readout = readout
        if readout:
            self.settle, self.interval = v.readout.settle_iterations, v.readout.sample_interval_iterations
            self.samples = v.readout.samples
            self.total = self.settle + (self.samples - 1) * self.interval + 1
            self.adc = (float(v.readout.range_v[0]), float(v.readout.range_v[1]), v.readout.adc_bits)
            self.sum: torch.Tensor | None = None
            self.taken = 0

    def _key(self, k: int, device: torch.device) -> torch.Tensor | None:
        """Iteration k's stream key (int64 0-dim), from blocks of `KEY_BLOCK` derived at once."""
        if not self.layout.draws:
            return None
        block, first = self._keys
        if not 0 <= k - first < len(block) or block[0].device != device:
            block, first = keys.fold_block(self.key, keys.Stream.ITERATION, k, KEY_BLOCK, device).unbind(), k
            self._keys = block, first
        return block[k - first]

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """z[k+1] from z[k]; advances the iteration index."""
        k, loop = self.k, self.loop
        z_prev = self.z_prev if self.z_prev is not None else torch.zeros_like(z)
        # The node's values and drive are the same at every iteration with constant schedules, and kept for
        # inference only: with autograd each iteration makes its own, so that a trainable gain's gradient
        # sums its iterations' terms as one step per iteration does (and no value kept without a graph
        # serves a later call with one).
        keep = self._constant_node and not torch.is_grad_enabled()
        node = self._node if keep and self._node is not None else loop.node(k, z)
        if keep:
            self._node = node
        key = self._key(k, z.device)
        if self.fast:
            out = backends.compiled(z, z_prev, self.base, self.c, node, key, self.counters, self.layout)[0]
        else:
            drive = self._drive if keep and self._drive is not None else step.node_drive(
                self.base, self.c, node[0], self.layout)
            if keep:
                self._drive = drive
            out = step.iteration(z, z_prev, drive, self.c, node, key, self.counters, self.layout)
        self.z_before, self.z_prev, self.k = self.z_prev, z, k + 1  # z_before: the momentum term's state
        if self.states is not None:
            self.states.append(out)
        if self.readout and k >= self.settle and (k - self.settle) % self.interval == 0 and self.taken < self.samples:
            reading = C.quantize_range(out, *self.adc)
            self.sum = reading if self.sum is None else self.sum + reading
            self.taken += 1
        return out

    def advance(self, z: torch.Tensor, n: int) -> torch.Tensor:
        """n iterations with no residual checks (compiled blocks of FUSED_BLOCK where nothing changes)."""
        loop = self.loop
        if self.fast and not self.layout.draws and self.states is None and not self.readout and loop.constant_schedules:
            z_prev = self.z_prev if self.z_prev is not None else torch.zeros_like(z)
            node = loop.node(self.k, z)
            while n >= FUSED_BLOCK:
                z, z_prev = backends.compiled(z, z_prev, self.base, self.c, node, None, None, self.layout,
                                              steps=FUSED_BLOCK)
                n, self.k = n - FUSED_BLOCK, self.k + FUSED_BLOCK
            self.z_prev = z_prev
        for _ in range(n):
            z = self(z)
        return z

    def reading(self) -> torch.Tensor:
        """The readout: the mean of the ADC samples taken so far."""
        if not self.readout or self.sum is None:
            raise RuntimeError("internal: no readout samples were taken")
        return self.sum / self.taken

    def channels(self, z: torch.Tensor) -> settling.Channels:
        """The per-channel recurrence of the iteration just taken from z (`settling.channels`)."""
        z_prev = self.z_before if self.z_before is not None else torch.zeros_like(z)
        with torch.no_grad():
            return settling.channels(z, z_prev, self.base, self.c, self.loop.node(max(self.k - 1, 0), z), self.layout)

    def noise_floor(self, z: torch.Tensor, spreads: float) -> torch.Tensor:
        """[B]: the rms residual the loop shows at a state `spreads` stationary spreads from its fixed point
        (`settling.residual_at`; the solver's NoisyMap protocol). Called after the iteration from z."""
        if not self.layout.draws:
            return torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        return settling.residual_at(self.channels(z), spreads)


def loop_activity(parts: Parts, channels: int, iterations: Any, *, readout: bool) -> Activity:
    """What one native inference does on the machine (per sample when `iterations` is an array).

    The input goes in once through the DAC (N conversions) and stays; the loop runs in analog. The ADC
    can sample every channel once per `readout.sample_interval_iterations` = m round trips (its rate:
    160 ns at 20 ns per round trip on the AOC), and each sample is compared or summed digitally (N
    operations). Readout stop: the machine runs its whole window, `readout.settle_iterations` then
    K = `readout.samples` samples every m round trips (N K conversions, averaged), whatever the
    solve's iterations. Early stop (a tolerance, or the noise floor): the stop is decided on the
    converted samples themselves (`sampling`), so k = j m round trips are j samples read, ceil(k / m)
    for any k (docs/PHYSICS.md section 6).
    """
    rt = float(parts.loop.round_trip_s)
    m = int(parts.readout.sample_interval_iterations)
    its = np.asarray(iterations, dtype=np.float64)
    if readout:
        k = int(parts.readout.samples)
        window = parts.readout.settle_iterations + (k - 1) * m + 1
        trips = np.full_like(its, float(window))
        return Activity(trips * rt, channels, channels * k, channels * k, round_trips=trips, channels=channels)
    samples = np.maximum(np.ceil(its / m), 1.0)
    return Activity(samples * m * rt, channels, channels * samples, channels * samples, round_trips=samples * m,
                    channels=channels)


def stop_rule(sampling: Readout, *, readout: bool) -> str:
    """The stop rule behind a native inference's time and energy, in words (`loop_activity`)."""
    m = int(sampling.sample_interval_iterations)
    if readout:
        return (f"readout stop: {sampling.settle_iterations} round trips to settle, then "
                f"{sampling.samples} ADC samples, one every {m}")
    return (f"early stop: the ADC samples every {m} round trips; stopped when two consecutive samples meet the "
            f"tolerance or the last {PATIENCE} differences put the state at the noise floor")


@dataclass(frozen=True)
class LoopSolve(SolveResult):
    """A solve on the loop: `SolveResult` plus what the machine did per sample (`activity`: round
    trips, conversions, time; `loop_activity`)."""

    activity: Activity | None = None

    @property
    def hardware_time_s(self) -> torch.Tensor:
        """[B] seconds on the machine (the activity's time: the solve's round trips, or the readout window)."""
        return torch.as_tensor(self.activity.time_s, dtype=torch.float64)
