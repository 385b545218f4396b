"""`aocsim evaluate MODEL`: a trained model on its task, exact path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from aocsim.cli.common import MISSING_FOLDERS, Path_, check_torch_device, compute, free_path, friendly
from aocsim.cli.common import torch_device_option


def _device_is_a_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """evaluate --device: refused with one line (in aocsim --device is a device profile; evaluate has none)."""
    if value is not None:
        wanted = value if re.fullmatch(r"cpu|cuda(:\d+)?", value) else "cuda"
        raise click.ClickException("--device names a device profile in aocsim; for the torch device use "
                                   f"--torch-device {wanted}")


@click.command()
@click.argument("model", default="digits-deq48")
@click.option("--float32", "use_float32", is_flag=True,
              help="DEQ models: evaluate in float32 instead of float64 (forward tolerance 1e-5 instead of 1e-9).")
@click.option("--task", default=None, help="State tracking: evaluate on this group instead of the trained one.")
@click.option("--batch", default=None, type=click.IntRange(1, 100_000),
              help="State tracking: sequences per length [default: 256].")
@click.option("--plot", "plot_path", type=Path_(dir_okay=False, path_type=Path), default=None,
              help="State tracking: accuracy-by-position plot, .png, .svg or .pdf "
                   "[default: MODEL-accuracy-by-position.png, or MODEL-comparison-by-position.png with --compare, "
                   "a free name: -1, -2, ... if it exists]; language models: bits-by-position plot [default: none]; "
                   f"{MISSING_FOLDERS}.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --plot file.")
@click.option("--uniform", is_flag=True, help="State tracking: every element equally likely in the sequences.")
@click.option("--factors", default=None, help="State tracking: lengths in multiples of L, e.g. 1,4,16 "
              "[default: the card's].")
@click.option("--compare", multiple=True, help="State tracking: also evaluate this model (repeatable) on the same "
              "sequences; the plot then shows each model's sequential-mode accuracy against position (log axis).")
@torch_device_option(help="DEQ models: the torch device to evaluate on (cpu, cuda, cuda:N; not a device profile: "
                         "evaluate runs the exact path).")
@click.option("--device", hidden=True, expose_value=False, callback=_device_is_a_profile,
              help="Not an option of evaluate: --device names a device profile (--torch-device).")
@friendly
def evaluate(model: str, use_float32: bool, task: str | None, batch: int | None, plot_path: Path | None,
             overwrite: bool, uniform: bool, factors: str | None, compare: tuple[str, ...], torch_device: str) -> None:
    """Evaluate MODEL (a bundled name or a model directory) on its task.

    DEQ classifiers: test-set accuracy and convergence on the exact path.
    State-tracking models: per-token accuracy at the multiples of the training
    length L in the model card (for example L, 4L, 16L; implicit models in
    simultaneous and sequential mode, with iterations per token and the
    agreement of the two modes), on --threads cores; writes a plot of accuracy
    by position.
    Language models (charlm-*): held-out bits per character, overall and by
    position (implicit models in both modes, with iterations per token); a plot
    of bits by position with --plot.
    """
    from aocsim.experiments.evaluate import LANGUAGE, STATE_TRACKING, plan_evaluation

    check_torch_device(torch_device)
    flags = {"float32": "--float32", "torch_device": f"--torch-device {torch_device}", "plot": "--plot"}
    plan = plan_evaluation(model, flag=lambda n: flags.get(n, "--" + n.replace("_", "-")), float32=use_float32,
                           torch_device=torch_device, task=task, batch=batch, uniform=uniform,
                           factors=_parse_factors(factors), compare=compare, plot=plot_path)
    name = plan.name
    if plan.task == LANGUAGE:
        _print_language(plan, _check_plot(plot_path, overwrite) if plot_path is not None else None)
        return
    if plan.task == STATE_TRACKING:
        # The plot is written after minutes of evaluation: check its path and format first.
        default = f"{name}-{'comparison' if compare else 'accuracy'}-by-position.png"
        plot = _check_plot(plot_path or free_path(Path(default)), overwrite)
        with compute() as threads:  # one process per thread: the solves are many small operations
            results = plan.run(progress=True, workers=threads)
        _print_state_tracking(plan.models, results, plot)
        return
    with compute():
        m = plan.run()
    if "profile" in m:  # a twin DEQ: its exact path is the nominal pipeline
        _print_twin(name, m)
        return
    click.echo(f"model {name} ({m['task']}, {m['split']} set, n = {m['n']}, {m['dtype']}, exact path, "
               f"atol {m['atol']:g})")
    click.echo(f"  accuracy            {m['accuracy']:.4f}")
    click.echo(f"  converged           {m['converged_fraction']:.4f} of samples")
    click.echo(f"  iterations          mean {m['iterations_mean']:.2f}, max {m['iterations_max']}")
    click.echo(f"  max residual        {m['residual_max']:.2e}")
    click.echo(f"  without feedback    {m['accuracy_without_feedback']:.4f} accuracy with W = 0 (max |beta W| = "
               f"{m['feedback_max']:.3g}): how much the loop matters")


def _print_twin(name: str, m: dict[str, Any]) -> None:
    bits = f"{m['slm_bits']}-bit SLM" if m["slm_bits"] is not None else "unquantised SLM"
    click.echo(f"model {name} ({m['task']}, {m['split']} set, n = {m['n']}, {m['dtype']}, exact path: the nominal "
               f"{m['profile']} pipeline, {bits}, plain iteration to rtol {m['rtol']:g})")
    metric, fmt = ("accuracy", "{:.4f}") if m["task"] == "digits" else ("mse", "{:.3g}")
    click.echo(f"  {metric:<19s} {fmt.format(m[metric])}")
    click.echo(f"  converged           {m['converged_fraction']:.4f} of samples")
    click.echo(f"  iterations          mean {m['iterations_mean']:.2f}, max {m['iterations_max']}")
    click.echo(f"  max residual        {m['residual_max']:.2e}")
    cut = fmt.format(m[metric + "_without_feedback"])
    click.echo(f"  without feedback    {cut} {metric} with the optical path off (beta = 0 instead of {m['beta']:.3g}: "
               "the readout channels see no input): how much the loop matters")
    click.echo(f"  with W = 0          {fmt.format(m[metric + '_zero_weight'])} {metric} (only the SLM's darkness "
               "couples the channels)")


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



def _check_plot(path: Path, overwrite: bool) -> Path:
    """--plot checked before any work: its format, a place it can be written (missing folders are created
    when it is drawn), and an existing file only replaced with --overwrite."""
    from aocsim.io.outputs import check_output_file

    plot = check_output_file(path, what="--plot")
    if plot.exists() and not overwrite:
        raise click.ClickException(f"--plot {plot} exists; pass --overwrite to replace it")
    return plot


def _print_language(plan: Any, plot: Path | None) -> None:
    """Held-out bits per character of a language model: a table by mode, a summary by position, a plot."""
    from aocsim.experiments.language import bucket_means, plot_bits_by_position, position_buckets

    model = plan.models[0]
    with compute() as threads:
        result = plan.run(progress=True, workers=threads)
    h, name, implicit = result["heldout"], model.card["name"], result["implicit"]
    modes = [m for m in ("simultaneous", "sequential") if m in h]
    kind = "implicit" if implicit else f"explicit, {model.config.n_layers} layer(s)"
    click.echo(f"model {name} ({kind}, {sum(p.numel() for p in model.parameters())} parameters), held-out split: "
               f"{h['windows']} windows x {h['length']} characters, vocabulary {model.config.vocab_size}")
    click.echo(f"{'mode':>13s} {'bits/char':>10s} {'iter/token':>11s} {'converged':>10s}")
    for mode in modes:
        e = h[mode]
        its = f"{e['iterations_per_token']:11.2f}" if implicit else f"{'one pass':>11s}"
        click.echo(f"{mode:>13s} {e['bits_per_character']:10.4f} {its} {e['converged_fraction']:10.4f}")
    if "mode_agreement" in h:
        click.echo(f"{'agreement':>13s} {h['mode_agreement']:10.4f} (same most likely next character)")
    buckets = position_buckets(h["length"])
    click.echo("bits per character by characters seen: " + "  ".join(
        f"{a}" if a == b else f"{a}-{b}" for a, b in buckets))
    for mode in modes:
        click.echo(f"{mode:>13s} " + "  ".join(f"{v:.3f}" for v in bucket_means(h[mode]["bits_by_position"])))
    if not result["same_corpus"]:
        click.echo(f"note: this Python's corpus (SHA-256 {result['corpus']['sha256'][:12]}..., Python "
                   f"{result['corpus']['python']}) is not the one in the card; the figures are on another text",
                   err=True)
    if plot is not None:
        lines = {f"{name}, {mode}": h[mode]["bits_by_position"] for mode in modes}
        plot_bits_by_position(lines, plot, train_length=result["train_length"], title=f"{name}: held-out split")
        click.echo(f"plot: {plot}")
