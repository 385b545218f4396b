"""Command line: `aocsim` (thin: parse, call one library function, print a summary)."""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from aocsim._version import __version__
from aocsim.errors import AocsimError, InputError, UnknownNameError


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn aocsim's own errors into one-line CLI errors (exit code 1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AocsimError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


class _Path(click.Path):
    """click.Path that reports a NUL byte as a usage error (click's os.stat raises ValueError on it)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "\x00" in value:
            self.fail(f"{value!r} contains a NUL byte; expected a file system path", param, ctx)
        return super().convert(value, param, ctx)


@contextlib.contextmanager
def _compute() -> Iterator[int]:
    """Around a command's long work: torch's thread count (--threads or automatic) and progress lines.

    Yields the number of threads; torch's previous setting is restored afterwards.
    """
    import torch

    from aocsim.progress import lines_off_terminal
    from aocsim.threads import choose_threads

    ctx = click.get_current_context(silent=True)
    requested = ctx.find_root().params.get("threads") if ctx is not None else None
    before = torch.get_num_threads()
    threads, note = choose_threads(requested, before)
    if note:
        click.echo(note, err=True)
    torch.set_num_threads(threads)
    try:
        with lines_off_terminal():
            yield threads
    finally:
        torch.set_num_threads(before)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aocsim")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("--threads", type=click.IntRange(1, 1024), default=None,
              help="Torch threads for the work [default: the CPU cores other work leaves free now, "
                   "or OMP_NUM_THREADS].")
def main(verbose: int, threads: int | None) -> None:
    """aocsim: a virtual analog optical computer (AOC) for implicit neural models.

    Runs fixed-point models on an exact reference path (float64) and on
    calibrated, noisy virtual AOC hardware. Units: loop signals in volts (the
    twin's units), time in seconds, optical power in watts.
    """
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("model", default="digits-deq48")
@click.option("--float32", "use_float32", is_flag=True,
              help="DEQ models: evaluate in float32 instead of float64 (forward tolerance 1e-5 instead of 1e-9).")
@click.option("--task", default=None, help="State tracking: evaluate on this group instead of the trained one.")
@click.option("--batch", default=None, type=click.IntRange(1, 100_000),
              help="State tracking: sequences per length [default: 256].")
@click.option("--plot", "plot_path", type=_Path(dir_okay=False, path_type=Path), default=None,
              help="State tracking: accuracy-by-position plot, .png, .svg or .pdf "
                   "[default: MODEL-accuracy-by-position.png, or MODEL-comparison-by-position.png with --compare].")
@click.option("--uniform", is_flag=True, help="State tracking: every element equally likely in the sequences.")
@click.option("--factors", default=None, help="State tracking: lengths in multiples of L, e.g. 1,4,16 "
              "[default: the card's].")
@click.option("--compare", multiple=True, help="State tracking: also evaluate this model (repeatable) on the same "
              "sequences; the plot then shows each model's sequential-mode accuracy against position (log axis).")
@click.option("--device", "torch_device", default="cpu", show_default=True,
              help="Torch device to evaluate on (cpu, cuda, cuda:N).")
@_friendly
def evaluate(model: str, use_float32: bool, task: str | None, batch: int | None, plot_path: Path | None,
             uniform: bool, factors: str | None, compare: tuple[str, ...], torch_device: str) -> None:
    """Evaluate MODEL (a bundled name or a model directory) on its task.

    DEQ classifiers: test-set accuracy and convergence on the exact path.
    State-tracking models: per-token accuracy at the multiples of the training
    length L in the model card (for example L, 4L, 16L; implicit models in
    simultaneous and sequential mode, with iterations per token and the
    agreement of the two modes), on --threads cores; writes a plot of accuracy
    by position.
    """
    import torch

    from aocsim.experiments.evaluate import compare_state_tracking, evaluate_model
    from aocsim.io.model_files import load_model
    from aocsim.io.outputs import check_output_file

    fs = _parse_factors(factors)
    loaded = load_model(model, device=torch_device)
    name = loaded.card["name"]
    if loaded.card.get("task") == "state_tracking":
        if use_float32:
            raise InputError(f"--float32 applies to DEQ models; {name} is a state-tracking model "
                             "(evaluated in the dtype of its weights)")
        if torch.device(torch_device).type != "cpu":  # its word problems and targets are built on the CPU
            raise InputError(f"--device = {torch_device!r} applies to DEQ models; state-tracking models "
                             "evaluate on the CPU")
        models = [loaded]
        for other in compare:
            m = load_model(other)
            if m.card.get("task") != "state_tracking":
                raise InputError(f"--compare {other!r}: {m.card['name']} is a {m.card.get('kind', '?')} model on "
                                 f"task {m.card.get('task')!r}; expected a state-tracking model")
            models.append(m)
        # The plot is written after minutes of evaluation: check its path and format first.
        default = f"{name}-{'comparison' if compare else 'accuracy'}-by-position.png"
        plot = check_output_file(plot_path or _free_path(Path(default)), what="--plot")
        with _compute() as threads:  # one process per thread: the solves are many small operations
            results = compare_state_tracking(models, task=task, factors=fs, batch=batch or 256, uniform=uniform,
                                             progress=True, workers=threads)
        _print_state_tracking(models, results, plot)
        return
    given = [opt for opt, value in (("--task", task), ("--batch", batch), ("--plot", plot_path),
                                    ("--uniform", uniform or None), ("--factors", factors),
                                    ("--compare", compare or None)) if value is not None]
    if given:  # silently ignoring them would report a different evaluation than the one asked for
        raise InputError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to state-tracking "
                         f"models; {name} is a {loaded.card.get('kind', '?')} model on task "
                         f"{loaded.card.get('task')!r}")
    dtype = torch.float32 if use_float32 else torch.float64
    with _compute():
        m = evaluate_model(loaded, dtype=dtype)
    click.echo(f"model {name} ({m['task']}, {m['split']} set, n = {m['n']}, {m['dtype']}, exact path, "
               f"atol {m['atol']:g})")
    click.echo(f"  accuracy            {m['accuracy']:.4f}")
    click.echo(f"  converged           {m['converged_fraction']:.4f} of samples")
    click.echo(f"  iterations          mean {m['iterations_mean']:.2f}, max {m['iterations_max']}")
    click.echo(f"  max residual        {m['residual_max']:.2e}")
    click.echo(f"  without feedback    {m['accuracy_without_feedback']:.4f} accuracy with W = 0 (max |beta W| = "
               f"{m['feedback_max']:.3g}): how much the loop matters")


def _parse_factors(factors: str | None) -> tuple[int, ...] | None:
    """--factors "1,4,16" -> (1, 4, 16); a bad value is a one-line usage error.

    Each factor is at most 1000 (like --batch's bound: the sequences of one length are one batch).
    """
    if factors is None:
        return None
    try:
        fs = tuple(int(f) for f in factors.split(","))
    except ValueError:
        fs = (0,)
    if not 1 <= min(fs) <= max(fs) <= 1000:
        raise click.BadParameter(f"{factors!r}; expected integers from 1 to 1000 separated by commas",
                                 param_hint="--factors")
    return fs


def _print_state_tracking(models: list[Any], results: list[dict[str, Any]], path: Path) -> None:
    from aocsim.experiments.plots import plot_accuracy_by_position, plot_accuracy_comparison

    labels: dict[str, dict[str, Any]] = {}
    for model, result in zip(models, results):
        name = model.card["name"]
        implicit = result["implicit"]
        kind = "implicit" if implicit else f"explicit, {model.config.n_layers} layer(s)"
        click.echo(f"model {name} ({kind}), task {result['group']}, identity-token probability "
                   f"{result['identity_prob']:.4g}")
        if implicit:
            click.echo(f"{'length':>9s} {'mode':>13s} {'accuracy':>9s} {'iter/token':>11s} {'converged':>10s}")
        else:  # one pass per token: no modes, iterations or convergence to report
            click.echo(f"{'length':>9s} {'accuracy':>9s}")
        for key, entry in result["lengths"].items():
            label = f"{key + ' = ' + str(entry['length']):>9s}"
            if not implicit:
                click.echo(f"{label} {entry['simultaneous']['accuracy']:9.4f}")
                continue
            for mode in ("simultaneous", "sequential"):
                e = entry[mode]
                click.echo(f"{label} {mode:>13s} {e['accuracy']:9.4f} "
                           f"{e['iterations_per_token']:11.2f} {e['converged_fraction']:10.4f}")
            click.echo(f"{'':>9s} {'agreement':>13s} {entry['mode_agreement']:9.4f}")
        # An explicit model is evaluated once; its two modes compute the same function, so that
        # one evaluation stands for its sequential mode in the comparison.
        lengths = result["lengths"] if implicit else \
            {k: {**e, "sequential": e["simultaneous"]} for k, e in result["lengths"].items()}
        label = f"{name} ({kind}, recipe rev {model.card['training'].get('revision', 1)})"
        labels[label + (f" #{len(labels) + 1}" if label in labels else "")] = lengths
    name, first = models[0].card["name"], results[0]
    if len(models) > 1:
        plot_accuracy_comparison(labels, path, mode="sequential", train_length=first["train_length"],
                                 title=f"{first['group']}, identity-token probability {first['identity_prob']:.3g}")
    else:
        plot_accuracy_by_position(first["lengths"], path, title=f"{name} on {first['group']}")
    click.echo(f"plot: {path}")


def _free_path(path: Path) -> Path:
    """`path`, or path-1, path-2, ... if it exists (never overwrite a user's file)."""
    candidate, k = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{k}{path.suffix}")
        k += 1
    return candidate


@main.command()
@click.argument("recipe")
@click.option("--out", type=_Path(path_type=Path), default=None,
              help="Output model directory [default: models/RECIPE].")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None, help="Random seed [default: the recipe's].")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override the epochs (digits-deq48).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Override the optimiser steps (state-tracking recipes).")
@click.option("--force", is_flag=True, help="Replace an existing output directory.")
@_friendly
def train(recipe: str, out: Path | None, seed: int | None, epochs: int | None, steps: int | None,
          force: bool) -> None:
    """Train RECIPE and write a model directory (model card + HDF5 weights).

    Recipes: digits-deq48; parity-implicit, parity-explicit{1,2,4}, a5-implicit,
    a5-explicit{1,2,4}, a5xm4-implicit, a5xm4-explicit1. State-tracking runs
    also write a metrics log and HDF5 checkpoints to runs/RECIPE-sSEED/.
    """
    from aocsim.io.outputs import check_output_dir, check_writable_folder
    from aocsim.train import RECIPES, run
    from aocsim.train.recipes import STATE_TRACKING

    if recipe not in RECIPES:
        raise UnknownNameError("recipe", recipe, list(RECIPES))
    check_output_dir(out or Path("models") / recipe, overwrite=force, what="--out")
    # A bar on a terminal, a line every few seconds elsewhere (see _compute).
    options: dict[str, Any] = {"overwrite": force, "progress": True}
    if seed is not None:
        options["seed"] = seed
    if epochs is not None:
        options["epochs"] = epochs
    if steps is not None:
        options["steps"] = steps
    if recipe in STATE_TRACKING:
        options["run_dir"] = Path("runs") / f"{recipe}-s{seed if seed is not None else STATE_TRACKING[recipe].seed}"
        check_writable_folder(options["run_dir"], what="run folder")
    with _compute():
        path = run(recipe, out, **options)
    from aocsim.io.model_files import read_card

    card = read_card(path)
    if card.get("task") == "state_tracking":
        accs = ", ".join(f"{k} {v['simultaneous']['accuracy']:.4f}" for k, v in card["metrics"].items())
        click.echo(f"wrote {path} (per-token accuracy, simultaneous mode: {accs})")
    else:
        test = card["metrics"].get("test", {})
        click.echo(f"wrote {path} (test accuracy {test.get('accuracy', float('nan')):.4f})")


@main.group()
def models() -> None:
    """Bundled trained models."""


@models.command("list")
@_friendly
def models_list() -> None:
    """List the bundled models with their test accuracy."""
    from aocsim.io.model_files import bundled_models, read_card, resolve_model_dir

    for name in bundled_models():
        card = read_card(resolve_model_dir(name))
        metrics = card.get("metrics", {})
        if card.get("task") == "state_tracking":
            summary = "per-token accuracy " + ", ".join(
                f"{k} {v['simultaneous']['accuracy']:.3f}" for k, v in metrics.items())
            task = f"{card['data']['group']} words"
        else:
            acc = metrics.get("test", {}).get("accuracy")
            summary = f"test accuracy {acc:.4f}" if acc is not None else ""
            task = card.get("task", "?")
        click.echo(f"{name:20s} {card.get('kind', '?'):13s} {task:12s} {summary}")


@models.command("table")
@click.argument("roots", nargs=-1, type=_Path(exists=True, file_okay=False, path_type=Path))
@click.option("--mode", type=click.Choice(["simultaneous", "sequential"]), default="simultaneous",
              show_default=True)
@click.option("--markdown", is_flag=True, help="Print a Markdown table.")
@_friendly
def models_table(roots: tuple[Path, ...], mode: str, markdown: bool) -> None:
    """Mean and best per-token accuracy across seeds of the state-tracking models under ROOTS.

    ROOTS default to the bundled models folder (with its seeds/ subfolder).
    """
    from aocsim.experiments.study import collect_cards, format_seed_table, markdown_seed_table, seed_table
    from aocsim.paths import models_dir

    cards = collect_cards(list(roots) or [models_dir(), models_dir() / "seeds"])
    if not cards:
        raise click.ClickException("no state-tracking model cards found")
    rows = seed_table(cards, mode)
    click.echo(markdown_seed_table(rows) if markdown else format_seed_table(rows))


@main.group()
def devices() -> None:
    """Device profiles of virtual AOC machines (devices/*.yaml)."""


@devices.command("list")
@_friendly
def devices_list() -> None:
    """List the bundled device profiles."""
    from aocsim.hardware.profile import available_devices, load_device

    for name in available_devices():
        dev = load_device(name)
        n = dev.channels if dev.channels is not None else "any"
        click.echo(f"{name:12s} {str(n):>4s} channels  {dev['description'].splitlines()[0][:90]}")


@devices.command("show")
@click.argument("name")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Dotted-key override, YAML value (repeatable), e.g. --set slm.bits=6.")
@_friendly
def devices_show(name: str, overrides: tuple[str, ...]) -> None:
    """Show profile NAME (bundled name or .yaml path), its noise budget and its energy figures.

    The budget gives, per noise source, the standard deviation it adds at the
    loop node (millivolts), the SNR against a full-scale sine and the
    effective bits, at the reference operating point of aocsim.hardware.budget.
    The energy lines (aocsim.hardware.energy) give the static powers, TOPS/W
    and the time and energy of one native inference.
    """
    from aocsim.hardware.budget import format_budget, noise_budget
    from aocsim.hardware.energy import format_energy
    from aocsim.hardware.profile import load_device

    dev = load_device(name, _parse_overrides(overrides))
    v = dev.values
    click.echo(f"{dev.name}: {v['description']}")
    click.echo(f"  source   {v['provenance.source']} ({v['provenance.date']}; {v['provenance.licence']})")
    click.echo(f"  file     {dev.origin}" + (f"  overrides {dict(dev.overrides)}" if dev.overrides else ""))
    click.echo(f"  channels {dev.channels if dev.channels is not None else 'any'}; nonlinearity "
               f"{v['nonlinearity.kind']}; SLM bits {v['slm.bits']}; PBS leakage "
               f"{'on' if v['crosstalk.pbs.enabled'] else 'off'}; closed-loop correction "
               f"{'on' if v['closed_loop.enabled'] else 'off'}; round trip {v['loop.round_trip_s'] * 1e9:g} ns")
    click.echo("")
    click.echo(format_budget(noise_budget(dev)))
    click.echo("")
    click.echo(format_energy(dev))


@devices.command("schema")
def devices_schema() -> None:
    """Print the profile schema (Markdown; the source of devices/SCHEMA.md)."""
    from aocsim.hardware.schema import markdown

    click.echo(markdown(), nl=False)


@main.group()
def bench() -> None:
    """Benchmarks (ratios against a yardstick timed in the same run)."""


@bench.command("loop")
@click.option("--device", "profile", default="aoc48", show_default=True, help="Device profile.")
@click.option("--iterations", default=50, show_default=True, type=click.IntRange(min=1),
              help="Loop iterations per timing.")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1), help="Best of N.")
@click.option("--batch", "batches", multiple=True, type=click.IntRange(min=1), default=(1, 64, 1024),
              show_default=True, help="Batch sizes (repeatable).")
@click.option("--compiled/--no-compiled", default=True, show_default=True,
              help="Also time the loop with compile=True (needs a C++ compiler).")
@_friendly
def bench_loop_cmd(profile: str, iterations: int, repeats: int, batches: tuple[int, ...], compiled: bool) -> None:
    """Sample-iterations per second of the folded loop vs the twin-style per-stage loop (float32, CPU)."""
    from aocsim.experiments.bench import bench_loop, format_loop_bench

    try:
        with _compute() as threads:
            rows = bench_loop(profile, tuple(batches), iterations=iterations, repeats=repeats, compiled=compiled)
    except AocsimError as exc:
        if compiled and "compile=True" in str(exc):
            raise AocsimError(f"{exc} (--no-compiled times the eager loop only)") from None
        raise
    click.echo(f"device {profile}, {iterations} iterations per timing, best of {repeats}, "
               f"{threads} torch thread(s)")
    click.echo(format_loop_bench(rows))


@bench.command("sweep")
@click.option("--points", default=16, show_default=True, type=click.IntRange(min=2), help="Points of the sweep.")
@click.option("--workers", "workers", multiple=True, type=click.IntRange(min=1), default=(1, 2), show_default=True,
              help="Local worker counts to time (repeatable); the first is the yardstick.")
@_friendly
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


def _parse_overrides(items: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs, each VALUE read the way profile files are (so 5e7 is a number)."""
    import yaml

    from aocsim.hardware.profile import read_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}; expected KEY=VALUE", param_hint="--set")
        try:
            out[key.strip()] = read_value(raw)
        except yaml.YAMLError:
            raise click.BadParameter(f"{item!r}; the value is not valid YAML", param_hint="--set") from None
    return out


# -- aocsim compare ------------------------------------------------------------------------------

@main.command("compare")
@click.argument("model_names", metavar="[MODEL ...]", nargs=-1)
@click.option("--device", default="aoc48", show_default=True, help="Device profile (name or YAML file).")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Seeds 0..N-1: SLM programming draw, drift and per-iteration noise.")
@click.option("--chips", default=3, show_default=True, type=click.IntRange(min=1),
              help="Chips 0..N-1 (variation.chip_seed): one compilation each.")
@click.option("--stop", type=click.Choice(["tolerance", "readout"]), default="tolerance", show_default=True,
              help="tolerance: the device state at its fixed point; readout: the ADC average after settling.")
@click.option("--fit/--no-fit", default=True, show_default=True,
              help="Compile with the least-squares fit to the calibrated pipeline (else the analytic mapping).")
@click.option("--tiling/--no-tiling", default=True, show_default=True,
              help="DEQs larger than the device: run beta W on optical tiles (else refuse them).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("compare.nc"),
              show_default=True,
              help="NetCDF output (h5netcdf); several models go to one group each (named by the model card).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file (and --plot file).")
@click.option("--plot", "plot_path", type=_Path(dir_okay=False, path_type=Path), default=None,
              help="Figure of accuracy and fixed-point error (.png/.svg/.pdf) [default: --out with .png].")
@click.option("--sequences", default=32, show_default=True, type=click.IntRange(1, 4096),
              help="Sequence models: fresh sequences (every element equally likely).")
@click.option("--length-factor", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Sequence models: their length, in multiples of the training length.")
@click.option("--mode", type=click.Choice(["sequential", "simultaneous"]), default="sequential", show_default=True,
              help="Sequence models: token by token (the RNN) or all tokens at once.")
@click.option("--on-tiles", default="inject,in_proj,out_proj", show_default=True,
              help="Sequence models: which linear maps run on optical tiles (comma-separated); the rest digital.")
@click.option("--elementwise", type=click.Choice(["digital", "analog"]), default="digital", show_default=True,
              help="Sequence models: SiLU and softplus exact, or on modelled analog circuits (docs/DEVICE_RUNS.md).")
@click.option("--averaging", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="Models on tiles: tile passes averaged per product (less noise, more time and energy).")
@click.option("--predistort", is_flag=True, default=False,
              help="Models on tiles: linearise the emitter drive digitally before the DAC (docs/DEVICE_RUNS.md).")
@_friendly
def compare_cmd(model_names: tuple[str, ...], device: str, seeds: int, chips: int, stop: str, fit: bool,
                tiling: bool, out: Path, overwrite: bool, plot_path: Path | None, sequences: int, length_factor: int,
                mode: str, on_tiles: str, elementwise: str, averaging: int, predistort: bool) -> None:
    """Run each MODEL (default digits-deq48 and parity-implicit) on the device next to its exact path.

    DEQ digits models run natively on the test images (larger ones with beta W on optical tiles,
    unless --no-tiling); implicit SSMs as hybrids (linear maps on
    calibrated tiles) on fresh sequences. Prints accuracy (exact vs device, mean +- std over chips x
    seeds), agreement of the device's predictions with the exact ones, iterations, device statuses
    and hardware time (s, 20 ns per round trip), and writes the labelled results to --out (one NetCDF
    group per model when there are several).
    """
    import os

    from aocsim.io.outputs import check_output_file

    from aocsim.execute.ssm import check_on_tiles

    names = model_names or ("digits-deq48", "parity-implicit")
    kinds = check_on_tiles(tuple(k.strip() for k in on_tiles.split(",") if k.strip()))
    plot = check_output_file(plot_path or out.with_suffix(".png"), what="--plot")
    for path, option in ((out, "--out"), (plot, "--plot")):
        if path.exists() and not overwrite:
            raise click.ClickException(f"{option} {path} exists; pass --overwrite to replace it")
    if not out.resolve().parent.is_dir() or not os.access(out.resolve().parent, os.W_OK):
        raise click.ClickException(f"--out {out}: directory {out.resolve().parent} does not exist or is not "
                                   "writable; expected a path in a writable directory")
    from aocsim.experiments.compare import compare, summarize
    from aocsim.io.model_files import load_model
    from aocsim.tasks.digits import load_split

    loaded = {}
    for name in names:  # every model checked before any work
        model = load_model(name)
        task = model.card.get("task")
        if task == "state_tracking" and not model.config.implicit:
            raise click.ClickException(f"model {name!r} is an explicit SSM: it has no fixed point to run on the "
                                       "device loop; expected a DEQ or an implicit SSM")
        if task not in ("digits", "state_tracking"):
            raise click.ClickException(f"model {name!r} has task {task!r}; compare runs digits DEQs and "
                                       "state-tracking implicit SSMs")
        if model.card["name"] in loaded:
            raise click.ClickException(f"model {name!r}: name {model.card['name']!r} given twice; "
                                       "expected distinct models (one NetCDF group each)")
        loaded[model.card["name"]] = model
    from aocsim.execute.deq import resolve_profile
    from aocsim.execute.deq_tiled import check_placement

    profile = resolve_profile(device)
    on_tiles = {name: model.card["task"] != "digits" or check_placement(model, profile, tiling=tiling)
                for name, model in loaded.items()}  # checked before the thread note and any work
    if averaging != 1 or predistort:  # tile settings: refused, or noted, for models without tiles
        native = [name for name, tiled in on_tiles.items() if not tiled]
        if len(native) == len(on_tiles):
            raise click.ClickException(f"--averaging {averaging} / --predistort apply to models on tiles; "
                                       f"{', '.join(native)} run(s) natively on {profile.name}")
        if native:
            click.echo(f"note: --averaging / --predistort do not apply to {', '.join(native)} (native on "
                       f"{profile.name})", err=True)
    results = {}
    with _compute() as threads:  # cores for this machine's load; progress as lines off a terminal
        for name, model in loaded.items():  # one process per core: the solves are many small operations
            options = dict(seeds=tuple(range(seeds)), chips=tuple(range(chips)), progress=True, workers=threads)
            if model.card["task"] == "digits":
                split = load_split(model.weight.dtype)
                tiles = {"averaging": averaging, "predistort": predistort} if on_tiles[name] else {}
                results[name] = compare(model, device, split.x_test, split.y_test, stop=stop, fit=fit,
                                        tiling=tiling, **tiles, **options)
            else:
                from aocsim.tasks.groups import group, word_problems

                g = group(model.card["data"]["group"])
                tokens, targets = word_problems(g, sequences, length_factor * model.card["data"]["train_length"],
                                                identity_prob=1 / g.order, generator=2024)
                results[name] = compare(model, device, tokens, targets, mode=mode, on_tiles=kinds,
                                        elementwise=elementwise, averaging=averaging, predistort=predistort,
                                        **options)
    tmp = out.with_name(f".{out.name}.tmp")
    for i, (name, ds) in enumerate(results.items()):
        group_name = None if len(results) == 1 else name
        ds.to_netcdf(tmp, engine="h5netcdf", mode="w" if i == 0 else "a", group=group_name)
    os.replace(tmp, out)
    for ds in results.values():
        _print_compare(summarize(ds))
    from aocsim.experiments.plots import plot_compare

    plot_compare(results, plot)
    click.echo(f"wrote {out} and {plot}")


def _print_compare(s: dict[str, Any]) -> None:
    def spread(v: tuple[float, float, float]) -> str:
        return f"{100 * v[0]:7.2f} +- {100 * v[1]:.2f} %  (min {100 * v[2]:.2f} %)"

    unit = s.get("unit", "sample")
    mode = f", {s['mode']} mode" if s.get("mode") else ""
    click.echo(f"model {s['model']} on {s['device']}{mode}: {s['runs']} runs (chips x seeds) x {s['samples']} {unit}s")
    if s["accuracy"] is not None:
        click.echo(f"  accuracy exact     {100 * s['accuracy']['exact']:7.2f} %")
        click.echo(f"  accuracy device    {spread(s['accuracy']['device'])}")
    click.echo(f"  agreement          {spread(s['agreement'])}")
    click.echo(f"  iterations         exact {s['iterations']['exact']:.1f}, device {s['iterations']['device']:.1f}")
    click.echo("  device status      " + ", ".join(f"{k} {v}" for k, v in s["status"].items()))
    click.echo(f"  hardware time      {1e6 * s['hardware_time_s']:.2f} us per {unit} (mean)")
    click.echo(f"  energy             {1e6 * s['energy_j']:.2f} uJ per {unit} (mean; docs/PHYSICS.md section 6)")


from aocsim.cli_sweep import plot_cmd, sweep_cmd  # noqa: E402  (they use the helpers above)

main.add_command(sweep_cmd)
main.add_command(plot_cmd)

if __name__ == "__main__":  # pragma: no cover
    main()
