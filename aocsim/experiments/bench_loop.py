"""`aocsim bench loop`: the folded loop's sample-iterations per second against yardsticks timed in the same run.

The yardsticks: the twin-style per-stage loop (aocsim/experiments/reference_loop.py), which must also end in
the same state where nothing is random, and, on the noisy rows, IBM aihwkit-lightning's analog layer
iterated the same way (aocsim/experiments/aihwkit_yardstick.py). Interleaved, best of `repeats`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from aocsim.experiments import aihwkit_yardstick
from aocsim.hardware.engine.loop import OpticalLoop
from aocsim.hardware.profiles.profile import load_device
from aocsim.experiments.reference_loop import PerStageLoop
from aocsim.hardware.physics.sources import without_noise


@dataclass(frozen=True)
class LoopBenchRow:
    """Sample-iterations per second of the folded loop and the per-stage reference."""

    setting: str
    batch: int
    folded_per_s: float
    per_stage_per_s: float
    max_abs_diff: float | None  # final states of the two implementations (deterministic setting only)
    # IBM aihwkit-lightning's AnalogLinear iterated the same way (noisy settings, where it is installed:
    # aocsim/experiments/aihwkit_yardstick.py), eager or compiled as the row is
    aihwkit_per_s: float | None = None

    @property
    def ratio(self) -> float:
        return self.folded_per_s / self.per_stage_per_s


def best_time(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_loop(profile: str = "aoc48", batches: tuple[int, ...] = (1, 64, 1024), *, iterations: int = 50,
               repeats: int = 5, dtype: torch.dtype = torch.float32, seed: int = 0,
               compiled: bool = True) -> list[LoopBenchRow]:
    """Time `iterations` loop steps, folded vs per-stage, deterministic and with all noise on.

    "deterministic" switches the per-iteration noise sources off (static effects
    such as 9-bit weights stay); "all noise" is the profile as it is. With
    `compiled`, each setting is also timed with `compile=True` (the same step compiled,
    `aocsim.hardware.engine.backends`) against the same per-stage measurement.
    """
    rows = []
    for setting, quiet in (("deterministic", True), ("all noise", False)):
        dev = without_noise(load_device(profile)) if quiet else load_device(profile)
        n = dev.channels or 48
        gen = torch.Generator().manual_seed(seed)
        weight = torch.randn(n, n, generator=gen).to(dtype)
        variants = {setting: False}
        if compiled:
            variants[f"{setting}, compiled"] = True
        loops = {name: OpticalLoop(dev, weight, alpha=0.5, beta=18.6, gamma=0.1, compile=flag,
                                   generator=torch.Generator().manual_seed(seed + 1))
                                   .drifted(torch.Generator().manual_seed(seed + 2))
                 for name, flag in variants.items()}
        ref = PerStageLoop(loops[setting])
        yardsticks = {}  # the noisy loop's peer: an analog layer with its DAC, ADC and output noise
        if not quiet and aihwkit_yardstick.available():
            yardsticks = {name: aihwkit_yardstick.analog_loop(n, dtype, compiled=flag, seed=seed)
                          for name, flag in variants.items()}
        for batch in batches:
            x = torch.rand(batch, n, generator=gen).to(dtype)
            z0 = torch.zeros(batch, n, dtype=dtype)

            def per_stage() -> torch.Tensor:
                g = torch.Generator().manual_seed(seed)
                z, z_prev = z0, torch.zeros_like(z0)
                for k in range(iterations):
                    z, z_prev = ref.step(z, x, z_prev=z_prev, generator=g, iteration=k), z
                return z

            timed: dict[str, Callable[[], torch.Tensor]] = {
                name: (lambda loop=loop: loop.iterate(z0, x, iterations,
                                                      generator=torch.Generator().manual_seed(seed)))
                for name, loop in loops.items()}
            timed["per-stage"] = per_stage
            for name, fn in yardsticks.items():
                timed[f"aihwkit {name}"] = lambda fn=fn: fn(z0, x, iterations)
            with torch.no_grad():
                # warm-up (and compilation), and a check that they compute the same thing
                results = {name: fn() for name, fn in timed.items()}
                best = dict.fromkeys(timed, float("inf"))
                for _ in range(repeats):  # interleaved, so load changes hit all of them
                    for name, fn in timed.items():
                        best[name] = min(best[name], best_time(fn, 1))
            work = batch * iterations
            for name in loops:
                diff = (float((results[name] - results["per-stage"]).abs().max())
                        if setting == "deterministic" else None)
                peer = best.get(f"aihwkit {name}")
                rows.append(LoopBenchRow(name, batch, work / best[name], work / best["per-stage"], diff,
                                         None if peer is None else work / peer))
    return rows


def format_loop_bench(rows: list[LoopBenchRow]) -> str:
    peers = any(r.aihwkit_per_s is not None for r in rows)
    lines = [f"{'setting':24s} {'batch':>6s} {'folded (it/s)':>15s} {'per-stage (it/s)':>17s} {'ratio':>7s} "
             f"{'max |diff|':>11s}" + (f" {'aihwkit (it/s)':>15s} {'folded / aihwkit':>17s}" if peers else "")]
    for r in rows:
        diff = "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.1e}"
        line = (f"{r.setting:24s} {r.batch:6d} {r.folded_per_s:15.3e} {r.per_stage_per_s:17.3e} "
                f"{r.ratio:6.2f}x {diff:>11s}")
        if peers:
            line += (f" {'-':>15s} {'-':>17s}" if r.aihwkit_per_s is None else
                     f" {r.aihwkit_per_s:15.3e} {r.folded_per_s / r.aihwkit_per_s:16.2f}x")
        lines.append(line)
    if peers:  # what each side simulates per iteration, so that the ratio is read for what it is
        lines.append("aihwkit draws 1 normal per output and iteration (its output noise); the noisy loop draws 2 per "
                     "channel (each emitter's RIN, each node's detector noise) and computes both LED paths' cubics "
                     "and the calibrated sigmoid (docs/GUIDE.md, aocsim bench loop)")
    return "\n".join(lines)
