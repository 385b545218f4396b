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
@click.option("--float32", "use_float32", is_flag=True, help="Evaluate in float32 instead of float64.")
@_friendly
def evaluate(model: str, use_float32: bool) -> None:
    """Evaluate MODEL (a bundled name or a model directory) on its task's test set.

    Prints accuracy and convergence statistics of the exact path.
    """
    import torch

    from aocsim.experiments.evaluate import evaluate_model
    from aocsim.io.model_files import load_model

    loaded = load_model(model)
    dtype = torch.float32 if use_float32 else torch.float64
    m = evaluate_model(loaded, dtype=dtype)
    click.echo(f"model {loaded.card['name']} ({m['task']}, {m['split']} set, n = {m['n']}, {m['dtype']}, exact path)")
    click.echo(f"  accuracy            {m['accuracy']:.4f}")
    click.echo(f"  converged           {m['converged_fraction']:.4f} of samples")
    click.echo(f"  iterations          mean {m['iterations_mean']:.2f}, max {m['iterations_max']}")
    click.echo(f"  max residual        {m['residual_max']:.2e}")


@main.command()
@click.argument("recipe")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Output model directory [default: models/RECIPE].")
@click.option("--seed", type=int, default=None, help="Random seed [default: the recipe's].")
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="Override the recipe's epochs.")
@click.option("--force", is_flag=True, help="Replace an existing output directory.")
@_friendly
def train(recipe: str, out: Path | None, seed: int | None, epochs: int | None, force: bool) -> None:
    """Train RECIPE and write a model directory (model card + HDF5 weights)."""
    from aocsim.train import run

    options: dict[str, Any] = {"overwrite": force, "progress": sys.stderr.isatty()}
    if seed is not None:
        options["seed"] = seed
    if epochs is not None:
        options["epochs"] = epochs
    path = run(recipe, out, **options)
    from aocsim.io.model_files import read_card

    card = read_card(path)
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
        acc = card.get("metrics", {}).get("test", {}).get("accuracy")
        click.echo(f"{name:24s} {card.get('kind', '?'):6s} task {card.get('task', '?'):10s} "
                   f"test accuracy {acc if acc is None else f'{acc:.4f}'}")


if __name__ == "__main__":  # pragma: no cover
    main()
