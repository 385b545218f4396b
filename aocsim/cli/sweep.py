"""`aocsim sweep SPEC`, `aocsim sweep status DIR` and `aocsim plot RESULTS` (thin: parse, call, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from aocsim.cli.common import Path_, compute, friendly


class _SweepGroup(click.Group):
    """`aocsim sweep SPEC ...` runs a sweep; `aocsim sweep status DIR` reports on one."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("sweep", cls=_SweepGroup)
def sweep_cmd() -> None:
    """Noise-sensitivity and co-design sweeps: `aocsim sweep SPEC --out DIR`, `aocsim sweep status DIR`.

    SPEC is a YAML file: model(s), device, data, axes (dotted device profile keys such as slm.bits,
    noise.power_per_unit_w (W), readout.adc_bits, or placement.tile_size / partial_sums / mode /
    stop / elementwise), optional zip and random blocks, seeds, chips, root_seed, metrics
    (docs/SWEEPS.md). Each worker process runs torch on one thread.
    """


@sweep_cmd.command("run")
@click.argument("spec", type=Path_(dir_okay=False, path_type=Path))
@click.option("--out", type=Path_(file_okay=False, path_type=Path), required=True,
              help="The sweep's folder: points/ (one file per finished point) and results.nc.")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Local processes, one torch thread each [default: the CPU cores other work leaves free, "
                   "or --threads].")
@click.option("--scheduler", default=None, help="A Dask scheduler, tcp://HOST:PORT (instead of local processes).")
@click.option("--resume", is_flag=True, help="Finish the sweep in --out: run only the points not written yet.")
@click.option("--overwrite", is_flag=True, help="Start the sweep in --out again (removes only its own files).")
@click.option("--plot", "plot_path", type=Path_(dir_okay=False, path_type=Path), default=None,
              help="A figure of the results (.png/.svg/.pdf) [default: --out/results.png].")
@friendly
def run_cmd(spec: Path, out: Path, workers: int | None, scheduler: str | None, resume: bool, overwrite: bool,
            plot_path: Path | None) -> None:
    """Run SPEC's points (each one `aocsim compare`) and write --out/results.nc."""
    import time

    from aocsim.experiments.sweep import load_spec, sweep
    from aocsim.experiments.sweep.plots import plot_sweep
    from aocsim.io.outputs import check_output_file

    loaded = load_spec(spec)
    plot = check_output_file(plot_path or out / "results.png", what="--plot")
    start = time.perf_counter()
    with compute() as threads:
        ds = sweep(loaded, out, workers=workers or threads, scheduler=scheduler, resume=resume, overwrite=overwrite,
                   progress=True)
    click.echo(f"{len(loaded.points())} points x {len(loaded.chips)} chips x {len(loaded.seeds)} seeds in "
               f"{time.perf_counter() - start:.1f} s ({workers or threads} workers)" + (" resumed" if resume else ""))
    plot_sweep(ds, plot)
    click.echo(f"wrote {out / 'results.nc'} and {plot}")


@sweep_cmd.command("status")
@click.argument("folder", metavar="DIR", type=Path_(file_okay=False, path_type=Path))
@friendly
def status_cmd(folder: Path) -> None:
    """What is done in the sweep folder DIR."""
    from aocsim.experiments.sweep import status

    s = status(folder)
    share = 100 * s["done"] / s["total"] if s["total"] else 100.0
    click.echo(f"{folder}: {s['done']} of {s['total']} points done ({share:.0f} %); results.nc "
               + ("written" if s["results"] else "not written yet (aocsim sweep SPEC --out DIR --resume)"))


@click.command("plot")
@click.argument("results", type=Path_(exists=True, dir_okay=False, path_type=Path))
@click.option("--metric", default=None, help="The variable to draw [default: accuracy, else the first metric].")
@click.option("--pareto", type=click.Choice(["energy", "time"]), default=None,
              help="Instead: the Pareto front of accuracy against energy or time per inference.")
@click.option("--out", "out_path", type=Path_(dir_okay=False, path_type=Path), default=None,
              help="The figure (.png/.svg/.pdf) [default: RESULTS with .png, or -pareto.png].")
@click.option("--overwrite", is_flag=True, help="Replace an existing figure.")
@friendly
def plot_cmd(results: Path, metric: str | None, pareto: str | None, out_path: Path | None, overwrite: bool) -> None:
    """Draw a sweep's RESULTS (results.nc): a line with a band (one axis), a heat map (two), or a
    Pareto front; the mean over chips and seeds, the band their spread."""
    from aocsim.experiments.sweep.plots import open_results, plot_pareto, plot_sweep
    from aocsim.io.outputs import check_output_file

    default = results.with_name(results.stem + ("-pareto" if pareto else "") + ".png")
    out = check_output_file(out_path or default, what="--out")
    if out.exists() and not overwrite:
        raise click.ClickException(f"--out {out} exists; pass --overwrite to replace it")
    ds = open_results(results)
    written: Any = plot_pareto(ds, out, cost=pareto) if pareto else plot_sweep(ds, out, metric=metric)
    click.echo(f"wrote {written}")
