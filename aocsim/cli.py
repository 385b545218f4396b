"""Command line: `aocsim` (thin: parse, call one library function, print a summary)."""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Any, Callable

import click

from aocsim._version import __version__
from aocsim.errors import AocsimError


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn aocsim's own errors into one-line CLI errors (exit code 1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AocsimError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aocsim")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """aocsim: a virtual analog optical computer (AOC) for implicit neural models.

    Runs fixed-point models on an exact reference path (float64) and on
    calibrated, noisy virtual AOC hardware. Units: loop signals in volts (the
    twin's units), time in seconds, optical power in watts.
    """
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("model", default="digits-deq48")
@click.option("--float32", "use_float32", is_flag=True, help="Evaluate in float32 instead of float64 (DEQ models).")
@click.option("--task", default=None, help="State tracking: evaluate on this group instead of the trained one.")
@click.option("--batch", default=256, show_default=True, type=click.IntRange(min=1),
              help="State tracking: sequences per length.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="State tracking: accuracy-by-position plot [default: MODEL-accuracy-by-position.png].")
@click.option("--uniform", is_flag=True, help="State tracking: every element equally likely in the sequences.")
@click.option("--factors", default=None, help="State tracking: lengths in multiples of L, e.g. 1,4,16 "
              "[default: the card's].")
@click.option("--compare", multiple=True, help="State tracking: also evaluate this model (repeatable) on the same "
              "sequences; the plot then shows each model's sequential-mode accuracy against position (log axis).")
@_friendly
def evaluate(model: str, use_float32: bool, task: str | None, batch: int, plot_path: Path | None, uniform: bool,
             factors: str | None, compare: tuple[str, ...]) -> None:
    """Evaluate MODEL (a bundled name or a model directory) on its task.

    DEQ classifiers: test-set accuracy and convergence on the exact path.
    State-tracking models: per-token accuracy at the training length L and at
    4L and 8L, in simultaneous and sequential mode, with iterations per token
    and the agreement of the two modes; writes a plot of accuracy by position.
    """
    import torch

    from aocsim.experiments.evaluate import compare_state_tracking, evaluate_model
    from aocsim.io.model_files import load_model

    loaded = load_model(model)
    if loaded.card.get("task") == "state_tracking":
        try:
            fs = tuple(int(f) for f in factors.split(",")) if factors else None
        except ValueError:
            fs = (0,)
        if fs is not None and min(fs) < 1:
            raise click.BadParameter(f"{factors!r}; expected integers >= 1 separated by commas", param_hint="--factors")
        models = [loaded] + [load_model(m) for m in compare]
        results = compare_state_tracking(models, task=task, factors=fs, batch=batch, uniform=uniform)
        _print_state_tracking(models, results, plot_path)
        return
    dtype = torch.float32 if use_float32 else torch.float64
    m = evaluate_model(loaded, dtype=dtype)
    click.echo(f"model {loaded.card['name']} ({m['task']}, {m['split']} set, n = {m['n']}, {m['dtype']}, exact path)")
    click.echo(f"  accuracy            {m['accuracy']:.4f}")
    click.echo(f"  converged           {m['converged_fraction']:.4f} of samples")
    click.echo(f"  iterations          mean {m['iterations_mean']:.2f}, max {m['iterations_max']}")
    click.echo(f"  max residual        {m['residual_max']:.2e}")


def _print_state_tracking(models: list[Any], results: list[dict[str, Any]], plot_path: Path | None) -> None:
    from aocsim.experiments.plots import plot_accuracy_by_position, plot_accuracy_comparison

    labels: dict[str, dict[str, Any]] = {}
    for model, result in zip(models, results):
        name = model.card["name"]
        kind = "implicit" if result["implicit"] else f"explicit, {model.config.n_layers} layer(s)"
        click.echo(f"model {name} ({kind}), task {result['group']}, identity-token probability "
                   f"{result['identity_prob']:.4g}")
        click.echo(f"{'length':>9s} {'mode':>13s} {'accuracy':>9s} {'iter/token':>11s} {'converged':>10s}")
        for key, entry in result["lengths"].items():
            for mode in ("simultaneous", "sequential"):
                e = entry[mode]
                click.echo(f"{key + ' = ' + str(entry['length']):>9s} {mode:>13s} {e['accuracy']:9.4f} "
                           f"{e['iterations_per_token']:11.2f} {e['converged_fraction']:10.4f}")
            click.echo(f"{'':>9s} {'agreement':>13s} {entry['mode_agreement']:9.4f}")
        label = f"{name} ({kind}, recipe rev {model.card['training'].get('revision', 1)})"
        labels[label + (f" #{len(labels) + 1}" if label in labels else "")] = result["lengths"]
    name, first = models[0].card["name"], results[0]
    if len(models) > 1:
        path = plot_path or _free_path(Path(f"{name}-comparison-by-position.png"))
        plot_accuracy_comparison(labels, path, mode="sequential", train_length=first["train_length"],
                                 title=f"{first['group']}, identity-token probability {first['identity_prob']:.3g}")
    else:
        path = plot_path or _free_path(Path(f"{name}-accuracy-by-position.png"))
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
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Output model directory [default: models/RECIPE].")
@click.option("--seed", type=int, default=None, help="Random seed [default: the recipe's].")
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
    from aocsim.train import run
    from aocsim.train.recipes import STATE_TRACKING

    options: dict[str, Any] = {"overwrite": force, "progress": sys.stderr.isatty()}
    if seed is not None:
        options["seed"] = seed
    if epochs is not None:
        options["epochs"] = epochs
    if steps is not None:
        options["steps"] = steps
    if recipe in STATE_TRACKING:
        options["run_dir"] = Path("runs") / f"{recipe}-s{seed if seed is not None else STATE_TRACKING[recipe].seed}"
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
@click.argument("roots", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
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
    """Show profile NAME (bundled name or .yaml path) and its noise budget.

    The budget gives, per noise source, the standard deviation it adds at the
    loop node (millivolts), the SNR against a full-scale sine and the
    effective bits, at the reference operating point of aocsim.hardware.budget.
    """
    from aocsim.hardware.budget import format_budget, noise_budget
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
        rows = bench_loop(profile, tuple(batches), iterations=iterations, repeats=repeats, compiled=compiled)
    except AocsimError as exc:
        if compiled and "compile=True" in str(exc):
            raise AocsimError(f"{exc} (--no-compiled times the eager loop only)") from None
        raise
    click.echo(f"device {profile}, {iterations} iterations per timing, best of {repeats}")
    click.echo(format_loop_bench(rows))


def _parse_overrides(items: tuple[str, ...]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}; expected KEY=VALUE", param_hint="--set")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise click.BadParameter(f"{item!r}; the value is not valid YAML", param_hint="--set") from None
    return out


if __name__ == "__main__":  # pragma: no cover
    main()
