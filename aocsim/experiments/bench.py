"""Benchmarks: speed as ratios against a reference measured in the same run.

Absolute times on shared machines mean little; each figure here is paired with
a yardstick timed in the same process, interleaved, best of `repeats`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from aocsim.hardware.loop import OpticalLoop
from aocsim.hardware.profile import load_device
from aocsim.hardware.reference import PerStageLoop

QUIET = {"noise.shot.enabled": False, "noise.thermal.enabled": False, "noise.rin.enabled": False}


@dataclass(frozen=True)
class LoopBenchRow:
    """Sample-iterations per second of the folded loop and the per-stage reference."""

    setting: str
    batch: int
    folded_per_s: float
    per_stage_per_s: float
    max_abs_diff: float | None  # final states of the two implementations (deterministic setting only)

    @property
    def ratio(self) -> float:
        return self.folded_per_s / self.per_stage_per_s


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_loop(profile: str = "aoc48", batches: tuple[int, ...] = (1, 64, 1024), *, iterations: int = 50,
               repeats: int = 5, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[LoopBenchRow]:
    """Time `iterations` loop steps, folded vs per-stage, deterministic and with all noise on.

    "deterministic" switches the per-iteration noise sources off (static effects
    such as 9-bit weights stay); "all noise" is the profile as it is.
    """
    rows = []
    for setting, overrides in (("deterministic", QUIET), ("all noise", {})):
        dev = load_device(profile, overrides)
        n = dev.channels or 48
        gen = torch.Generator().manual_seed(seed)
        weight = torch.randn(n, n, generator=gen).to(dtype)
        loop = OpticalLoop(dev, weight, alpha=0.5, beta=18.6, gamma=0.1,
                           generator=torch.Generator().manual_seed(seed + 1)).drifted(gen)
        ref = PerStageLoop(loop)
        for batch in batches:
            x = torch.rand(batch, n, generator=gen).to(dtype)
            z0 = torch.zeros(batch, n, dtype=dtype)

            def folded() -> torch.Tensor:
                return loop.iterate(z0, x, iterations, generator=torch.Generator().manual_seed(seed))

            def per_stage() -> torch.Tensor:
                g = torch.Generator().manual_seed(seed)
                z, z_prev = z0, torch.zeros_like(z0)
                for k in range(iterations):
                    z, z_prev = ref.step(z, x, z_prev=z_prev, generator=g, iteration=k), z
                return z

            with torch.no_grad():
                a, b = folded(), per_stage()  # warm-up, and a check that both compute the same thing
                diff = float((a - b).abs().max()) if setting == "deterministic" else None
                t_fold, t_ref = float("inf"), float("inf")
                for _ in range(repeats):  # interleaved, so load changes hit both
                    t_fold = min(t_fold, _best_time(folded, 1))
                    t_ref = min(t_ref, _best_time(per_stage, 1))
            work = batch * iterations
            rows.append(LoopBenchRow(setting, batch, work / t_fold, work / t_ref, diff))
    return rows


def format_loop_bench(rows: list[LoopBenchRow]) -> str:
    lines = [f"{'setting':14s} {'batch':>6s} {'folded (it/s)':>15s} {'per-stage (it/s)':>17s} {'ratio':>7s} "
             f"{'max |diff|':>11s}"]
    for r in rows:
        diff = "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.1e}"
        lines.append(f"{r.setting:14s} {r.batch:6d} {r.folded_per_s:15.3e} {r.per_stage_per_s:17.3e} "
                     f"{r.ratio:6.2f}x {diff:>11s}")
    return "\n".join(lines)
