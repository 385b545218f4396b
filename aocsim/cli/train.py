"""`aocsim train RECIPE` and `aocsim models list|table`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from aocsim.cli.common import MISSING_FOLDERS, Path_, compute, friendly
from aocsim.errors import UnknownNameError


@click.command()
@click.argument("recipe")
@click.option("--out", type=Path_(path_type=Path), default=None,
              help=f"Output model directory [default: models/RECIPE]; {MISSING_FOLDERS}.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None, help="Random seed [default: the recipe's].")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="Override the epochs (digits and twin recipes).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Override the optimiser steps (state-tracking and language recipes).")
@click.option("--force", is_flag=True, help="Replace an existing output directory.")
@friendly
def train(recipe: str, out: Path | None, seed: int | None, epochs: int | None, steps: int | None,
          force: bool) -> None:
    """Train RECIPE and write a model directory (model card + HDF5 weights).

    \b
    Recipes (aocsim.train.RECIPES):
      digits-deq48, digits-deq48-hw (hardware-aware: 9-bit beta W, static
        loop error in training; docs/DEVICE_RUNS.md section 5)
      parity-implicit, parity-implicit-hw (6-bit weights and noise on the
        maps that run on tiles), parity-explicit1, parity-explicit2,
        parity-explicit4
      a5-implicit, a5-explicit1, a5-explicit2, a5-explicit4
      a5xm4-implicit, a5xm4-explicit1
      s5-implicit, s5-explicit1, s5-explicit2, s5-mamba2 (S5 at L = 32, A5
        first, evaluated to 128; the last a plain Mamba2 stack;
        docs/STATE_TRACKING.md), s5-implicit-tuned, s5-explicit1-tuned (6,000
        more steps at L = 32, 40 iterations a step)
      digits-twin48, regression-twin16, regression-twin48 (twin-native DEQs:
        trained through the calibrated pipeline; docs/TWIN_MODELS.md)
      charlm-implicit, charlm-explicit1, charlm-explicit2 (character-level
        language models; docs/LANGUAGE.md), charlm-mamba2 (a plain Mamba2
        LM at charlm-implicit's parameter count and budget)

    State-tracking and language runs also write a metrics log and HDF5
    checkpoints to runs/RECIPE-sSEED/.
    """
    from aocsim.io.outputs import check_output_dir, check_writable_folder
    from aocsim.train import RECIPES, run
    from aocsim.train.recipes import SEQUENCE

    if recipe not in RECIPES:
        raise UnknownNameError("recipe", recipe, list(RECIPES))
    check_output_dir(out or Path("models") / recipe, overwrite=force, what="--out")
    # A bar on a terminal, a line every few seconds elsewhere (see compute).
    options: dict[str, Any] = {"overwrite": force, "progress": True}
    if seed is not None:
        options["seed"] = seed
    if epochs is not None:
        options["epochs"] = epochs
    if steps is not None:
        options["steps"] = steps
    if recipe in SEQUENCE:
        options["run_dir"] = Path("runs") / f"{recipe}-s{seed if seed is not None else SEQUENCE[recipe].seed}"
        check_writable_folder(options["run_dir"], what="run folder")
    with compute():
        path = run(recipe, out, **options)
    from aocsim.io.model_files import read_card

    card = read_card(path)
    if card.get("task") == "state_tracking":
        accs = ", ".join(f"{k} {v['simultaneous']['accuracy']:.4f}" for k, v in card["metrics"].items())
        click.echo(f"wrote {path} (per-token accuracy, simultaneous mode: {accs})")
    elif card.get("task") == "language":
        click.echo(f"wrote {path} (held-out {_bits_summary(card)})")
    elif "mse" in card["metrics"].get("test", {}):
        click.echo(f"wrote {path} (test MSE {card['metrics']['test']['mse']:.3g})")
    else:
        test = card["metrics"].get("test", {})
        click.echo(f"wrote {path} (test accuracy {test.get('accuracy', float('nan')):.4f})")


def _bits_summary(card: dict[str, Any]) -> str:
    """"bits per character 2.1234 (simultaneous), 2.1235 (sequential)" from a language model's card."""
    heldout = card["metrics"]["heldout"]
    modes = [m for m in ("simultaneous", "sequential") if m in heldout]
    return "bits per character " + ", ".join(f"{heldout[m]['bits_per_character']:.4f} ({m})" for m in modes)


@click.group()
def models() -> None:
    """Bundled trained models."""


@models.command("list")
@friendly
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
        elif card.get("task") == "language":
            summary, task = f"held-out {_bits_summary(card)}", "characters"
        else:
            acc, mse = metrics.get("test", {}).get("accuracy"), metrics.get("test", {}).get("mse")
            summary = (f"test accuracy {acc:.4f}" if acc is not None else
                       f"test MSE {mse:.3g}" if mse is not None else "")
            task = card.get("task", "?")
        click.echo(f"{name:20s} {card.get('kind', '?'):13s} {task:12s} {summary}")


@models.command("table")
@click.argument("roots", nargs=-1, type=Path_(exists=True, file_okay=False, path_type=Path))
@click.option("--mode", type=click.Choice(["simultaneous", "sequential"]), default="simultaneous",
              show_default=True)
@click.option("--markdown", is_flag=True, help="Print a Markdown table.")
@friendly
def models_table(roots: tuple[Path, ...], mode: str, markdown: bool) -> None:
    """Mean and best per-token accuracy across seeds of the state-tracking models under ROOTS,
    then held-out bits per character of the language models (both modes).

    ROOTS default to the bundled models folder (with its seeds/ subfolder).
    """
    from aocsim.experiments.study import collect_cards, format_language_table, format_seed_table
    from aocsim.experiments.study import language_table, markdown_seed_table, seed_table
    from aocsim.paths import models_dir

    folders = list(roots) or [models_dir(), models_dir() / "seeds"]
    cards, language = collect_cards(folders), collect_cards(folders, task="language")
    if not cards and not language:
        raise click.ClickException("no state-tracking or language model cards found")
    if cards:
        rows = seed_table(cards, mode)
        click.echo(markdown_seed_table(rows) if markdown else format_seed_table(rows))
    if language:
        if cards:
            click.echo()
        click.echo(format_language_table(language_table(language), markdown=markdown))

