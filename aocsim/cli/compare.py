"""`aocsim compare [MODEL ...]`: models on a device next to their exact paths.

The placement flags (--tile-size, --averaging, ...) are made from the placement options'
declarations (aocsim/execute/placement.py): their names, help lines and checks are declared there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import click

from aocsim.cli.common import (MISSING_FOLDERS, PROFILE_HELP, Path_, check_torch_device, compute, friendly,
                               parse_overrides, profile_option, torch_device_option)
from aocsim.execute.placement import DECLARATIONS
from aocsim.experiments.workloads import LENGTH_FACTOR, SEQUENCES


# Why compare (and a sweep's points, each a compare) run on the CPU: said in --help and by --torch-device cuda.
COMPARE_CPU = ("compare's device runs are CPU worker processes of one torch thread each, so that their numbers do "
               "not depend on the workers")


def placement_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One click option per placement option, from its declaration (default None: not given)."""
    for name, d in reversed(list(DECLARATIONS.items())):
        flag = "--" + name.replace("_", "-")
        applies = "; ".join(d.kinds)
        if d.flag == "switch":
            option = click.option(f"{flag}/--no-{name.replace('_', '-')}", name, default=None,
                                  help=f"{d.help} (applies to: {applies})")
        else:
            option = click.option(flag, name, default=None, metavar="VALUE", help=f"{d.help} (applies to: {applies})")
        command = option(command)
    return command


@click.command("compare")
@click.argument("model_names", metavar="[MODEL ...]", nargs=-1)
@profile_option("--device", torch_option=True, default="aoc48", show_default=True,
                help=f"Device profile: {PROFILE_HELP} (--torch-device).")
@torch_device_option(COMPARE_CPU)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Dotted-key override of the device profile, YAML value (repeatable), e.g. --set slm.bits=6.")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Seeds 0..N-1: each weight load's programming draws and its inferences' noise.")
@click.option("--chips", default=3, show_default=True, type=click.IntRange(min=1),
              help="Chips 0..N-1 (variation.chip_seed): one placement each.")
@click.option("--out", type=Path_(dir_okay=False, path_type=Path), default=Path("compare.nc"),
              show_default=True,
              help="NetCDF output (h5netcdf); several models go to one group each (named by the model card); "
                   f"{MISSING_FOLDERS}.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out file (and --plot file).")
@click.option("--plot", "plot_path", type=Path_(dir_okay=False, path_type=Path), default=None,
              help="Figure of accuracy and fixed-point error (.png/.svg/.pdf) [default: --out with .png]; "
                   f"{MISSING_FOLDERS}.")
@click.option("--sequences", default=None, type=click.IntRange(1, 4096),
              help=f"Sequence models: fresh sequences, every element equally likely [default: {SEQUENCES}].")
@click.option("--length-factor", default=None, type=click.IntRange(1, 64),
              help=f"Sequence models: their length, in multiples of the training length [default: {LENGTH_FACTOR}].")
@placement_options
@friendly
def compare_cmd(model_names: tuple[str, ...], device: str, torch_device: str, overrides: tuple[str, ...], seeds: int,
                chips: int, out: Path, overwrite: bool, plot_path: Path | None, sequences: int | None,
                length_factor: int | None, **options: Any) -> None:
    """Run each MODEL (default digits-deq48 and parity-implicit) on the device next to its exact path.

    A DEQ that fits the device runs natively on the test images, a larger one with beta W on optical
    tiles; implicit SSMs run as hybrids (linear maps on calibrated tiles) on fresh sequences. Prints
    accuracy (exact vs device, mean +- std over chips x seeds), agreement of the device's predictions
    with the exact ones (a regression, e.g. regression-twin48: the mean squared error and the device's
    output error instead), iterations, device statuses, hardware time and energy, and writes the
    labelled results to --out. Several models go to one NetCDF group each, named by the model (the
    file's root holds only the list of groups); open one with

    \b
        xr.open_dataset("compare.nc", group="parity-implicit")

    A placement option that applies to none of the models is refused; one that applies to some is
    noted for the others. A result that cannot be trusted (device accuracy at chance while the exact
    path is well above it, agreement far below the model's own accuracy, most solves converged at
    chance) gets a WARNING line naming the likely cause and trusted = 0 in the Dataset's attributes.
    """
    from aocsim.execute.placement import Placement
    from aocsim.execute.registry import resolve_profile
    from aocsim.io.outputs import check_output_file

    check_torch_device(torch_device, COMPARE_CPU)
    names = model_names or ("digits-deq48", "parity-implicit")
    given = Placement(**{k: v for k, v in options.items() if v is not None})  # values checked here
    out = check_output_file(out, suffixes=None, what="--out")  # its missing folders: made by write_groups
    plot = check_output_file(plot_path or out.with_suffix(".png"), what="--plot")
    for path, option in ((out, "--out"), (plot, "--plot")):
        if path.exists() and not overwrite:
            raise click.ClickException(f"{option} {path} exists; pass --overwrite to replace it")
    profile = resolve_profile(device) if not overrides else _with_overrides(device, overrides)
    with compute() as threads:  # cores for this machine's load; progress as lines off a terminal
        from aocsim.experiments.compare import warm_worker
        from aocsim.experiments.compare_models import compare_models
        from aocsim.parallel import Workers

        with Workers(threads, warm=warm_worker) as pool:  # started first: its start-up overlaps the loading
            results = compare_models(names, profile, given, seeds=seeds, chips=chips, sequences=sequences,
                                     length_factor=length_factor, workers=pool,
                                     note=lambda line: click.echo(f"note: {line}", err=True))
            pool.close(wait=False)  # its processes end (about 0.5 s) while the results are written and drawn
    write_groups(results, out)
    from aocsim.experiments.results import summarize

    for ds in results.values():
        _print_compare(summarize(ds))
    from aocsim.experiments.plots import plot_compare

    plot_compare(results, plot)
    click.echo(f"wrote {out} and {plot}")
    if len(results) > 1:
        click.echo(f"{out} holds one group per model; open them all with xr.open_datatree(\"{out}\"), or one with")
        for name in results:
            click.echo(f"  {open_line(out, name)}")


def open_line(out: Path, group: str) -> str:
    """The Python line that opens one model's group of a compare file."""
    return f'xr.open_dataset("{out}", group="{group}")'


def write_groups(results: dict[str, Any], out: Path) -> None:
    """One model: its Dataset at the file's root. Several: one group each, and at the root only attributes
    naming them and the line that opens one (so that xr.open_dataset(out) does not look empty). Written to
    a temporary name and renamed: a failed write leaves no half file."""
    import xarray as xr

    out.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is created (aocsim/io/outputs.py)
    tmp = out.with_name(f".{out.name}.tmp")
    if len(results) == 1:
        next(iter(results.values())).to_netcdf(tmp, engine="h5netcdf", mode="w")
    else:
        index = xr.Dataset(attrs={"groups": ", ".join(results), "open_with": open_line(out, next(iter(results))),
                                  "description": "aocsim compare: one group per model"})
        index.to_netcdf(tmp, engine="h5netcdf", mode="w")
        for name, ds in results.items():
            ds.to_netcdf(tmp, engine="h5netcdf", mode="a", group=name)
    os.replace(tmp, out)


def _with_overrides(device: str, overrides: tuple[str, ...]) -> Any:
    from aocsim.hardware.profiles.profile import load_device

    return load_device(device, parse_overrides(overrides))


def _print_compare(s: dict[str, Any]) -> None:
    from aocsim.units import si

    def spread(v: tuple[float, float, float]) -> str:
        return f"{100 * v[0]:7.2f} +- {100 * v[1]:.2f} %  (min {100 * v[2]:.2f} %)"

    unit = s.get("unit", "sample")
    mode = f", {s['mode']} mode" if s.get("mode") else ""
    explicit = " (explicit: one pass per token)" if s.get("explicit") else ""
    click.echo(f"model {s['model']} on {s['device']}{mode}{explicit}: {s['runs']} runs (chips x seeds) x "
               f"{s['samples']} {unit}s")
    if s.get("bits") is not None and unit in ("token", "character"):
        b = s["bits"]
        words = f"bits per {unit}".ljust(18)
        click.echo(f"  {words} exact {b['exact']:.4f}, device {b['device'][0]:.4f} +- {b['device'][1]:.4f} "
                   f"(max {b['device'][2]:.4f})")
    if s["accuracy"] is not None:
        click.echo(f"  accuracy exact     {100 * s['accuracy']['exact']:7.2f} %")
        click.echo(f"  accuracy device    {spread(s['accuracy']['device'])}")
    if s.get("mse") is not None:
        e = s["mse"]
        click.echo(f"  mse                exact {e['exact']:.3g}, device {e['device'][0]:.3g} +- {e['device'][1]:.2g} "
                   f"(max {e['device'][2]:.3g}; {e['device'][0] / e['exact']:.3f}x exact)")
    if s.get("output_rms") is not None:
        r = s["output_rms"]
        click.echo(f"  output rms         {r[0]:.3g} +- {r[1]:.2g} (max {r[2]:.3g}) device - exact")
    if s["agreement"] is not None:
        click.echo(f"  agreement          {spread(s['agreement'])}")
    if s.get("explicit"):
        click.echo(f"  iterations         none: one pass of the map per {unit} (no fixed point, no solve status)")
    else:
        click.echo(f"  iterations         exact {s['iterations']['exact']:.1f}, device {s['iterations']['device']:.1f}")
        click.echo("  device status      " + ", ".join(f"{k} {v}" for k, v in s["status"].items()))
    if s["hardware_time_s"] == 0 and s["energy_j"] == 0:  # on_tiles 'none': the abstract noise model
        click.echo("  machine            none: every map digital (no hardware time or energy)")
    else:
        busy = f", busy {100 * s['utilisation']:.0f} % of the time" if s.get("utilisation") is not None else ""
        click.echo(f"  machine            {s['modules']} optical module{'s' * (s['modules'] > 1)}, "
                   f"{s['weight_loads']:.3g} weight loads per {unit} (mean){busy}")
        click.echo(f"  hardware time      {si(s['hardware_time_s'], 's')} per {unit} (mean; {s['timing']})")
        click.echo(f"  energy             {si(s['energy_j'], 'J')} per {unit} (mean; docs/PHYSICS.md section 6)")
    click.echo("  where")
    for term, meaning in s["terms"].items():
        click.echo(f"    {term:12s} {meaning}")
    for note in s["warnings"]:
        click.echo(f"  WARNING {note}")
