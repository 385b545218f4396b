"""Benchmarks of sweeps and `compare` (`aocsim bench sweep|compare`): speed as ratios against a reference measured in the same run (the loop's: bench_loop.py; a search's: bench_search.py).

Absolute times on shared machines mean little; each figure here is paired with
a yardstick timed in the same process, interleaved, best of `repeats`.
"""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterator
from unittest import mock

import torch

from aocsim.experiments.bench_loop import best_time


@dataclass(frozen=True)
class SweepBenchRow:
    """Points per second of one sweep run on `workers` local processes (one torch thread each)."""

    workers: int
    points: int
    seconds: float

    @property
    def points_per_s(self) -> float:
        return self.points / self.seconds


def bench_sweep(workers: tuple[int, ...] = (1, 2), *, points: int, samples: int = 450) -> list[SweepBenchRow]:
    """The same CPU-bound sweep (digits-deq48 on aoc48, `points` values of noise.multiplier, one chip
    and seed each) on 1, 2, ... local workers, in this run, one after another; each worker runs
    torch on one thread, so the ratio of throughputs is the scaling over processes. The yardstick
    is the first entry of `workers`; its spawned start-up is part of every timing, as for users."""
    import tempfile

    from aocsim.experiments.sweep import parse_spec, sweep

    spec = parse_spec({"model": "digits-deq48", "device": "aoc48", "data": {"samples": samples},
                       "axes": {"noise.multiplier": [1.0 + i / points for i in range(points)]},
                       "metrics": ["accuracy"]})
    rows = []
    for w in workers:
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            sweep(spec, folder, workers=w)
            rows.append(SweepBenchRow(w, points, time.perf_counter() - start))
    return rows


def format_sweep_bench(rows: list[SweepBenchRow]) -> str:
    base = rows[0].points_per_s
    lines = [f"{'workers':>8} {'points':>7} {'seconds':>8} {'points/s':>9} {'vs ' + str(rows[0].workers):>7}"]
    lines += [f"{r.workers:>8} {r.points:>7} {r.seconds:>8.1f} {r.points_per_s:>9.3f} {r.points_per_s / base:>6.2f}x"
              for r in rows]
    return "\n".join(lines)


# The sequence models `aocsim bench compare` times: (label, model, placement).
COMPARE_CASES = (
    ("parity-implicit", "parity-implicit", None),
    ("a5-implicit", "a5-implicit", None),
    ("a5-implicit, recommended placement", "a5-implicit",
     {"on_tiles": "in_proj,out_proj", "averaging": 16, "predistort": True}),
)


@dataclass(frozen=True)
class CompareBenchRow:
    """Tokens per second of a sequence model's exact path and of `aocsim.compare` on a device."""

    case: str
    tokens: int
    exact_s: float  # the model's own sequential prediction (`ImplicitSSM.predict`, its default tolerance), best of 3
    device_s: float  # `compare` on one chip and `seeds` seeds: placement, exact reference and device runs
    warmup_s: float | None = None  # compiled rows: the short run before, which fitted and compiled
    seeds: int = 1
    chips: int = 1  # chips x seeds runs, as one batch (docs/DEVICE_RUNS.md)
    new_process: bool = False  # timed in a new process on the store the first compare wrote
    placed: int | None = None  # fits, emitter measurements and graphs the compare computed (0: none; None: not counted)

    @property
    def calibrated(self) -> bool:
        """A new process's compare that read the chip's calibration from the store."""
        return self.new_process and self.placed == 0

    @property
    def ratio(self) -> float:
        """The device's time per token over the exact path's (each chip's and seed's tokens counted)."""
        return self.device_s / (self.chips * self.seeds * self.exact_s)


def bench_compare(cases: tuple[tuple[str, str, dict | None], ...] = COMPARE_CASES, *, device: str = "aoc48",
                  sequences: int = 256, length_factor: int = 4, compiled: bool = False, seeds: int = 1,
                  chips: int = 1) -> list[CompareBenchRow]:
    """Each case's exact path and its `compare` on `device` (`chips` chips x `seeds` seeds, sequential mode) on
    the same fresh sequences (`aocsim.experiments.workloads`), timed one after the other (the exact path
    the best of three runs, each compare once), with a calibration store of their own (empty at first).

    Per case: the first compare, which places the chip (fits its tile programs, measures its emitters)
    and writes the store; then the same compare timed in a new process (`compare_seconds`), which reads
    the chip's calibration from the store (docs/DEVICE_RUNS.md, the calibration store). With
    `compiled`, a row with the placement's compile switch on (docs/DEVICE_RUNS.md, compiled
    placements): first a two-token compare (`warmup_s`: it compiles the graphs, whose passes have the
    whole batch's rows, and fits the chip with compiled probe products), then the compiled compare,
    its fit memoised (what a second compare or a sweep point on the same chip pays in one process), and
    the compiled compare in a new process, which loads the graphs from the kernel store (the user's:
    kernels depend on the code and the machine alone, `disk_memo.kernel_folder`)."""
    from aocsim.experiments.compare import compare
    from aocsim.experiments.workloads import default_workload
    from aocsim.io.model_files import load_model

    _warm_xarray()
    rows = []
    with _own_store():
        for label, name, placement in cases:
            model = load_model(name)
            w = default_workload(model, sequences=sequences, length_factor=length_factor)
            # the best of three (a half-second run on a shared machine can take twice as long): the conservative yardstick
            exact = best_time(lambda: model.predict(w.inputs, mode="sequential"), 3)

            def row(case: str, timed: tuple[float, int], **more: Any) -> CompareBenchRow:
                return CompareBenchRow(case, w.inputs.numel(), exact, timed[0], seeds=seeds, chips=chips,  # noqa: B023
                                       placed=timed[1], **more)

            rows.append(row(label, _timed_compare(model, device, w, placement, seeds, chips)))
            again = _in_new_process(name, device, sequences, length_factor, placement, seeds, chips)
            rows.append(row(f"{label}, chip calibrated" if not again[1] else f"{label}, new process", again,
                            new_process=True))
            if compiled:
                options = {**(placement or {}), "compile": True}
                warmup = _timed_compare(model, device, w, options, seeds=1, chips=1, tokens=2)[0]
                rows.append(row(f"{label}, compiled", _timed_compare(model, device, w, options, seeds, chips),
                                warmup_s=warmup))
                rows.append(row(f"{label}, compiled, new process",
                                _in_new_process(name, device, sequences, length_factor, options, seeds, chips),
                                new_process=True))
    return rows


def _warm_xarray() -> None:
    """A process's first Dataset imports xarray's optional array modules (dask: about 0.6 s), a cost of
    the process, not of the first compare."""
    import numpy as np
    import xarray as xr

    xr.Dataset({"warm": ("x", np.zeros(1))})


@contextlib.contextmanager
def _own_store() -> Iterator[None]:
    """The calibration store in an empty temporary folder, for this process and the ones it starts (the
    user's own store neither read nor written); the kernel store stays the user's."""
    from aocsim.disk_memo import KERNEL_VARIABLE, STORE_VARIABLE, kernel_folder

    kernels = str(kernel_folder() or "off")
    with (tempfile.TemporaryDirectory(prefix="aocsim-bench-") as folder,
          mock.patch.dict(os.environ, {STORE_VARIABLE: folder, KERNEL_VARIABLE: kernels})):  # restored after
        yield


def compare_seconds(name: str, device: str, sequences: int, length_factor: int, placement: dict | None,
                    seeds: int, chips: int = 1) -> tuple[float, int]:
    """The seconds of one `bench_compare` case's compare in this process, on one torch thread, after
    the model is loaded and the sequences made (in a new process: what a later run pays), and how many
    fits and emitter measurements it computed (0: it read the chip's calibration)."""
    from aocsim.experiments.workloads import default_workload
    from aocsim.io.model_files import load_model

    torch.set_num_threads(1)
    _warm_xarray()
    model = load_model(name)
    return _timed_compare(model, device, default_workload(model, sequences=sequences, length_factor=length_factor),
                          placement, seeds, chips)


def _timed_compare(model: Any, device: str, w: Any, placement: dict | None, seeds: int, chips: int = 1,
                   tokens: int | None = None) -> tuple[float, int]:
    """The seconds of `compare` on workload `w` (its first `tokens` positions; None: all), and how many
    fits, emitter measurements and compiled graphs it computed (`disk_memo.computed`: 0 when it read
    them all)."""
    from aocsim import disk_memo
    from aocsim.experiments.compare import compare

    before = sum(disk_memo.computed.values())
    start = time.perf_counter()
    compare(model, device, w.inputs[:, :tokens], w.targets[:, :tokens], placement=placement,
            calibration=w.calibration, seeds=tuple(range(seeds)), chips=tuple(range(chips)))
    return time.perf_counter() - start, sum(disk_memo.computed.values()) - before


def _in_new_process(*case: Any) -> tuple[float, int]:
    """`compare_seconds(*case)` in a new Python process, which inherits the environment (so the store)
    and this process's import path."""
    code = ("import ast, sys; from aocsim.experiments.bench import compare_seconds; "
            "print(repr(compare_seconds(*ast.literal_eval(sys.argv[1]))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", code, repr(case)], capture_output=True, text=True, env=env)
    try:
        seconds, placed = ast.literal_eval(done.stdout.strip().splitlines()[-1])
        return float(seconds), int(placed)
    except (IndexError, ValueError, SyntaxError, TypeError):
        raise RuntimeError(f"the bench's compare in a new process failed (exit status {done.returncode}):\n"
                           f"{(done.stdout + done.stderr)[-2000:]}") from None


def format_compare_bench(rows: list[CompareBenchRow]) -> str:
    width = max([36] + [len(r.case) for r in rows])
    lines = [f"{'model':{width}s} {'tokens':>7s} {'exact (tok/s)':>14s} {'device (tok/s)':>15s} {'device / exact':>15s}"]
    lines += [f"{r.case:{width}s} {r.tokens:>7d} {r.tokens / r.exact_s:14.0f} "
              f"{r.chips * r.seeds * r.tokens / r.device_s:15.0f} "
              f"{r.ratio:14.1f}x" + (f"  (fitted and compiled in a {r.warmup_s:.0f} s run before)"
                                     if r.warmup_s else "  (a new process; the chip's calibration read from the store)"
                                     if r.calibrated and "compiled" not in r.case else
                                     "  (a new process; the chip's calibration and compiled graphs read from the stores)"
                                     if r.calibrated else "  (a new process; it placed the chip or compiled again)"
                                     if r.new_process else "  (the chip was already placed in this process)"
                                     if r.placed == 0 else "")
              for r in rows]
    return "\n".join(lines)
