"""`aocsim compare [MODEL ...]`: models on a device next to their exact paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from aocsim.cli.common import Path_, compute, friendly


# -- aocsim compare ------------------------------------------------------------------------------

@click.command("compare")
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
@click.option("--plot", "plot_path", type=Path_(dir_okay=False, path_type=Path), default=None,
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
@friendly
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
    with compute() as threads:  # cores for this machine's load; progress as lines off a terminal
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

