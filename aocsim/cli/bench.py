"""`aocsim bench loop|sweep|compare|search`: speed, as ratios against a yardstick timed in the same run."""

from __future__ import annotations


import click

from aocsim.cli.common import PROFILE_HELP, compute, friendly, parse_overrides, profile_option
from aocsim.errors import AocsimError

# Points of `aocsim bench sweep`. A spawned worker starts in about 5 s of CPU (torch, then torch._dynamo,
# which the fits' L-BFGS imports on its first step) while a point takes about 1.6 s: at 16 points that
# start-up is a fifth of a 2-worker run and caps its ratio near 1.6x; 32 points show the scaling a
# sweep of tens to hundreds of points gets (docs/SWEEPS.md section 2 gives both).
SWEEP_POINTS = 32


@click.group()
def bench() -> None:
    """Benchmarks (ratios against a yardstick timed in the same run)."""


@bench.command("loop")
@profile_option("--device", "profile", default="aoc48", show_default=True, help=f"Device profile: {PROFILE_HELP}.")
@click.option("--iterations", default=50, show_default=True, type=click.IntRange(min=1),
              help="Loop iterations per timing.")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1), help="Best of N.")
@click.option("--batch", "batches", multiple=True, type=click.IntRange(min=1), default=(1, 64, 1024),
              show_default=True, help="Batch sizes (repeatable).")
@click.option("--compiled/--no-compiled", default=True, show_default=True,
              help="Also time the loop with compile=True (needs a C++ compiler).")
@friendly
def bench_loop_cmd(profile: str, iterations: int, repeats: int, batches: tuple[int, ...], compiled: bool) -> None:
    """Sample-iterations per second of the folded loop vs the twin-style per-stage loop (float32, CPU)."""
    from aocsim.experiments.bench_loop import bench_loop, format_loop_bench

    try:
        with compute() as threads:
            rows = bench_loop(profile, tuple(batches), iterations=iterations, repeats=repeats, compiled=compiled)
    except AocsimError as exc:
        if compiled and "compile=True" in str(exc):
            raise AocsimError(f"{exc} (--no-compiled times the eager loop only)") from None
        raise
    from aocsim.threads import ONE_THREAD_BELOW

    small = "" if threads == 1 else (f" (an eager loop with fewer than {ONE_THREAD_BELOW:,} state values "
                                     "on one: aocsim.threads.one_thread_below)")
    click.echo(f"device {profile}, {iterations} iterations per timing, best of {repeats}, "
               f"{threads} torch thread(s){small}")
    click.echo(format_loop_bench(rows))


@bench.command("sweep")
@click.option("--points", default=SWEEP_POINTS, show_default=True, type=click.IntRange(min=2), help="Points of the sweep.")
@click.option("--workers", "workers", multiple=True, type=click.IntRange(min=1), default=(1, 2), show_default=True,
              help="Local worker counts to time (repeatable); the first is the yardstick.")
@friendly
def bench_sweep_cmd(points: int, workers: tuple[int, ...]) -> None:
    """Throughput of a CPU-bound sweep (digits-deq48 on aoc48) on 1, 2, ... local workers, one torch
    thread each, as ratios to the first, timed in this run."""
    from aocsim.experiments.bench import bench_sweep, format_sweep_bench
    from aocsim.threads import load_average, usable_cores

    busy = load_average()
    rows = bench_sweep(tuple(workers), points=points)
    click.echo(f"digits-deq48 on aoc48, {points} points (450 images, 1 chip, 1 seed each), 1 torch thread per "
               f"worker, {usable_cores()} cores ({busy or 0:.1f} busy with other work at the start)")
    click.echo(format_sweep_bench(rows))



@bench.command("compare")
@click.option("--sequences", default=256, show_default=True, type=click.IntRange(min=1), help="Fresh sequences.")
@click.option("--length-factor", default=4, show_default=True, type=click.IntRange(min=1),
              help="Their length in multiples of the training length.")
@profile_option("--device", default="aoc48", show_default=True, help=f"Device profile: {PROFILE_HELP}.")
@click.option("--compiled/--no-compiled", default=False, show_default=True,
              help="Also time each case with its tile products compiled (placement compile; needs a C++ compiler).")
@click.option("--seeds", default=1, show_default=True, type=click.IntRange(min=1),
              help="Seeds of each chip (with the chips, run as one batch: docs/DEVICE_RUNS.md); the device's tokens "
                   "count each run's.")
@click.option("--chips", default=1, show_default=True, type=click.IntRange(min=1), help="Chips (0 ... N-1).")
@click.option("--model", "models", multiple=True, type=click.Choice(["parity-implicit", "a5-implicit"]),
              default=("parity-implicit", "a5-implicit"), show_default=True,
              help="Cases to time (repeatable; a5-implicit: plain and at the recommended placement).")
@friendly
def bench_compare_cmd(sequences: int, length_factor: int, device: str, compiled: bool, seeds: int, chips: int,
                      models: tuple[str, ...]) -> None:
    """Tokens per second of parity-implicit and a5-implicit (plain, and at the placement docs/DEVICE_RUNS.md
    recommends) on their exact paths and in `aocsim compare` (`--chips` x `--seeds` runs, sequential mode),
    timed in this run on one torch thread."""
    from aocsim.experiments.bench import COMPARE_CASES, bench_compare, format_compare_bench
    from aocsim.threads import torch_threads

    with torch_threads(1):
        rows = bench_compare(tuple(c for c in COMPARE_CASES if c[1] in models), device=device, sequences=sequences,
                             length_factor=length_factor, compiled=compiled, seeds=seeds, chips=chips)
    click.echo(f"{sequences} sequences of {length_factor}x the training length on {device}, "
               f"{'one chip' if chips == 1 else f'{chips} chips'} x {'one seed' if seeds == 1 else f'{seeds} seeds'}, "
               "sequential mode, 1 torch thread; the exact path "
               "the best of 3 runs, each compare one")
    click.echo(format_compare_bench(rows))


@bench.command("search")
@click.option("--model", "models", multiple=True, type=click.Choice(["parity-implicit", "a5-implicit"]),
              default=("parity-implicit", "a5-implicit"), show_default=True, help="Cases to time (repeatable).")
@click.option("--trials", default=16, show_default=True, type=click.IntRange(min=2), help="Trials of each search.")
@click.option("--batch", default=8, show_default=True, type=click.IntRange(min=2),
              help="Trials per NSGA-II generation (a population).")
@click.option("--placement", "placement", multiple=True, metavar="OPTION=VALUE",
              help="A placement option for every case's trials, over the case's own (repeatable), e.g. "
                   "--placement fit_probes=512 --placement fit_rounds=6: a cheaper calibration "
                   "(`aocsim compare --help` lists the options).")
@friendly
def bench_search_cmd(models: tuple[str, ...], trials: int, batch: int, placement: tuple[str, ...]) -> None:
    """Trials per minute of a co-design search on aoc48 (SLM bits, ADC bits, light) run as populations (a
    generation one call) against point by point, and each trial's cost in exact-path times, timed in this run
    on one torch thread and one worker (docs/SWEEPS.md section 7)."""
    from aocsim.execute.placement import as_placement
    from aocsim.experiments.bench_search import bench_search, case_placement, format_search_bench

    given = parse_overrides(placement, hint="--placement")
    as_placement(given)  # each option and value checked before any search
    rows = bench_search(tuple(models), trials=trials, batch=batch, placement=given)
    click.echo(f"aoc48, NSGA-II, {trials} trials in generations of {batch}, 1 seed, 1 worker, 1 torch thread; "
               f"placements: " + "; ".join(f"{m} {case_placement(m, given) or 'default'}" for m in models))
    click.echo(format_search_bench(rows))

