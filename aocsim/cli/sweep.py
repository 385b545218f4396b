"""`aocsim sweep SPEC`, `aocsim sweep status DIR` and `aocsim plot RESULTS` (thin: parse, call, print)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from aocsim.cli.common import MISSING_FOLDERS, Path_, check_torch_device, compute, friendly, torch_device_option
from aocsim.cli.compare import COMPARE_CPU
from aocsim.execute.placement import DECLARATIONS
from aocsim.experiments.metrics import METRICS

LARGE = 1000  # points above which a sweep prints its size and rough duration and waits for --yes
SWEEP_CPU = f"each point is an aocsim compare; {COMPARE_CPU}"


class _SweepGroup(click.Group):
    """`aocsim sweep SPEC ...` runs a sweep (the `run` command); `aocsim sweep status|show DIR` reports on one.

    A first argument that is neither a command nor a spec (a .yaml/.yml name or an existing file) is an
    unknown command, named with the commands it may have meant."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            first = Path(args[0]) if "\x00" not in args[0] else Path("?")
            if args[0].startswith("-") or first.suffix.lower() in (".yaml", ".yml") or first.exists():
                args = ["run", *args]
        return super().parse_args(ctx, args)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.commands:
            import difflib

            close = difflib.get_close_matches(args[0], list(self.commands), n=2, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {args[0]!r}.{hint} Expected SPEC (a .yaml file) or one of: "
                     f"{', '.join(self.commands)}.")
        return super().resolve_command(ctx, args)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The group's help lists the options of `aocsim sweep SPEC` (the run command) too."""
        super().format_options(ctx, formatter)
        run = self.commands["run"]
        records = [r for p in run.get_params(ctx) if isinstance(p, click.Option) and p.name != "help"
                   and (r := p.get_help_record(ctx)) is not None]
        with formatter.section("Options of aocsim sweep SPEC (the run command)"):
            formatter.write_dl(records)


SWEEP_HELP = f"""Noise-sensitivity and co-design sweeps: `aocsim sweep SPEC --out DIR`, `aocsim sweep status DIR`,
`aocsim sweep show DIR --metric M --by AXIS`.

SPEC is a YAML file: model(s), device (a profile name, or a .yaml file relative to the spec's folder),
data, axes (dotted device profile keys such as slm.bits, noise.power_per_unit_w (W), readout.adc_bits,
or placement.NAME for NAME among {', '.join(DECLARATIONS)}), optional zip and random blocks, seeds,
chips, root_seed, metrics (among {', '.join(METRICS)}; docs/SWEEPS.md).

Instead of axes, a co-design search: a `search:` block (objectives such as {{agreement: max, energy_j:
min}}, constraints such as {{accuracy: ">= 0.99"}} or ">= 99 %", a budget of trials, sampler nsga2, tpe or
random, seed, batch) over a `space:` of parameters ({{int: [2, 9]}}, {{float: [a, b]}}, {{log: [a, b]}},
{{choice: [...]}}); a constraint no point can meet is refused before any trial (docs/SWEEPS.md section 6).

Each point carries compare's verdict (trusted 1 or 0, with its warnings, in results.nc and the tables);
a sweep ends with a WARNING listing the points that cannot be trusted, and an untrusted trial is
infeasible for a search. Each worker process runs torch on one thread: local processes (--workers),
a Dask scheduler (--scheduler) or SLURM jobs (--slurm JOBS). A sweep of more than {LARGE} points says
how long it will take, roughly, and starts only with --yes.
"""


@click.group("sweep", cls=_SweepGroup, help=SWEEP_HELP)
def sweep_cmd() -> None:
    pass


@sweep_cmd.command("run")
@click.argument("spec", type=Path_(dir_okay=False, path_type=Path))
@click.option("--out", type=Path_(file_okay=False, path_type=Path), required=True,
              help=f"The sweep's folder: points/ (one file per finished point) and results.nc; "
                   f"{MISSING_FOLDERS}.")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Local processes, one torch thread each [default: the CPU cores other work leaves free, "
                   "or --threads].")
@click.option("--scheduler", default=None, help="A Dask scheduler, tcp://HOST:PORT (instead of local processes).")
@click.option("--slurm", "slurm_jobs", type=click.IntRange(1, 10_000), default=None, metavar="JOBS",
              help="Run the points on JOBS SLURM jobs through dask-jobqueue, job settings from "
                   "~/.config/dask/jobqueue.yaml (instead of local processes; docs/SWEEPS.md).")
@click.option("--resume", is_flag=True, help="Finish the sweep in --out: run only the points not written yet.")
@click.option("--overwrite", is_flag=True,
              help="Start the sweep in --out again (removes only its own files); replaces an existing --plot.")
@click.option("--plot", "plot_path", type=Path_(dir_okay=False, path_type=Path), default=None,
              help="Also draw the results (.png/.svg/.pdf) [default: none; aocsim plot DIR/results.nc draws them]; "
                   f"{MISSING_FOLDERS}.")
@torch_device_option(SWEEP_CPU)
@click.option("--yes", is_flag=True, help=f"Start a sweep of more than {LARGE} points (it prints its size and a "
                                          "rough duration and waits for this otherwise).")
@friendly
def run_cmd(spec: Path, out: Path, workers: int | None, scheduler: str | None, slurm_jobs: int | None, resume: bool,
            overwrite: bool, plot_path: Path | None, torch_device: str, yes: bool) -> None:
    """Run SPEC's points (each one `aocsim compare`), write --out/results.nc and print a table of the
    metrics per point (mean over chips and seeds)."""
    import time

    from aocsim.experiments.sweep import load_spec, sweep
    from aocsim.experiments.sweep.table import front_table, point_table, untrusted_lines
    from aocsim.io.outputs import check_output_file, check_writable_folder

    other = "--scheduler" if scheduler is not None else "--workers" if workers is not None else None
    if slurm_jobs is not None and other is not None:
        raise click.ClickException(f"--slurm and {other} together; expected one of --slurm, --scheduler and --workers")
    check_torch_device(torch_device, SWEEP_CPU)
    check_writable_folder(out, what="--out")  # created by the sweep; what it holds: checked by the sweep's store
    loaded = load_spec(spec)
    plot = check_output_file(plot_path, what="--plot") if plot_path is not None else None
    if plot is not None and plot.exists() and not overwrite:
        raise click.ClickException(f"--plot {plot} exists; expected a new file name (or --overwrite, which also "
                                   "starts the sweep again)")
    _check_size(loaded, out, resume, workers, yes)
    start = time.perf_counter()
    with compute() as threads:
        if slurm_jobs is not None:
            from aocsim.experiments.sweep.cluster import sweep_on_slurm

            ds = sweep_on_slurm(loaded, out, slurm_jobs, resume=resume, overwrite=overwrite, progress=True)
        else:
            ds = sweep(loaded, out, workers=workers or threads, scheduler=scheduler, resume=resume,
                       overwrite=overwrite, progress=True)
    points = loaded.search.budget if loaded.search else len(loaded.points())
    where = f"{slurm_jobs} SLURM jobs" if slurm_jobs is not None else f"{workers or threads} workers"
    click.echo(f"{points} points x {len(loaded.chips)} chips x {len(loaded.seeds)} seeds in "
               f"{time.perf_counter() - start:.1f} s ({where})" + (" resumed" if resume else ""))
    click.echo(front_table(ds) if loaded.search else point_table(ds))
    for line in untrusted_lines(ds):
        click.echo(line)
    click.echo(f"wrote {out / 'results.nc'}")
    if plot is not None:
        from aocsim.experiments.sweep.plots import plot_sweep

        click.echo(f"wrote {plot_sweep(ds, plot)}")
    click.echo(f"figures: aocsim plot {out / 'results.nc'} (--metric M, --pareto energy); one metric against one "
               f"axis: aocsim sweep show {out} --metric M --by AXIS")


def _check_size(spec: Any, out: Path, resume: bool, workers: int | None, yes: bool) -> None:
    """More than LARGE points left to run: their number and a rough duration, and a one-line refusal
    without --yes (nothing is run or written)."""
    from aocsim.experiments.sweep.estimate import estimate
    from aocsim.experiments.sweep.store import SweepStore
    from aocsim.threads import usable_cores

    if spec.search is not None:  # the trials of its budget not told yet
        from aocsim.experiments.sweep import status

        resumed = resume and SweepStore(out).saved_spec() is not None
        left = spec.search.budget - (status(out)["done"] if resumed else 0)
    else:
        done = SweepStore(out).done() if resume else set()
        left = sum(p.key not in done for p in spec.points())
    if left <= LARGE:
        return
    ctx = click.get_current_context()
    workers = workers or ctx.find_root().params.get("threads") or usable_cores()
    size = estimate(spec, left, workers).describe()
    if not yes:
        raise click.ClickException(f"the sweep has {size}; pass --yes to start it (or fewer values, "
                                   "docs/SWEEPS.md)")
    click.echo(f"note: {size}", err=True)


@sweep_cmd.command("status")
@click.argument("folder", metavar="DIR", type=Path_(file_okay=False, path_type=Path))
@friendly
def status_cmd(folder: Path) -> None:
    """What is done in the sweep folder DIR, and a table of the metrics of the points done so far."""
    from aocsim.experiments.sweep import status
    from aocsim.experiments.sweep.table import open_sweep, point_table, untrusted_lines

    s = status(folder)
    share = 100 * s["done"] / s["total"] if s["total"] else 100.0
    click.echo(f"{folder}: {s['done']} of {s['total']} points done ({share:.0f} %); results.nc "
               + ("written" if s["results"] else "not written yet (aocsim sweep SPEC --out DIR --resume)"))
    if s["done"]:
        ds = open_sweep(folder)
        click.echo(point_table(ds))
        for line in untrusted_lines(ds):
            click.echo(line)


@sweep_cmd.command("show")
@click.argument("source", metavar="DIR", type=Path_(exists=True, path_type=Path))
@click.option("--metric", default=None, help="The metric [default: accuracy, else the first].")
@click.option("--by", default=None, metavar="AXIS", help="The axis (a swept parameter) to order by [default: the "
                                                         "first]; the other axes are listed beside it.")
@click.option("--at", "fixed", multiple=True, metavar="AXIS=VALUE",
              help="Only the points where another axis has this value (repeatable), e.g. --at slm.bits=9.")
@friendly
def show_cmd(source: Path, metric: str | None, by: str | None, fixed: tuple[str, ...]) -> None:
    """One metric of the sweep in DIR (or of a results.nc file): its mean +- std over chips and seeds per
    point, ordered by AXIS, the other axes listed (or fixed with --at). Works on a sweep still running
    (the points done so far)."""
    from aocsim.experiments.sweep.table import open_sweep, show

    ds = open_sweep(source)
    if metric is None:
        metric = "accuracy" if "accuracy" in ds else next(iter(ds.data_vars))
    click.echo(show(ds, metric, by, _pairs(fixed)))


def _pairs(items: tuple[str, ...]) -> dict[str, Any]:
    """AXIS=VALUE pairs, each VALUE read as YAML (1e-5 is a number, analog a string)."""
    from aocsim.hardware.profiles.profile import read_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}; expected AXIS=VALUE", param_hint="--at")
        out[key.strip()] = read_value(raw)
    return out


@click.command("plot")
@click.argument("results", type=Path_(exists=True, dir_okay=False, path_type=Path))
@click.option("--metric", default=None, help="The variable to draw [default: accuracy, else the first metric].")
@click.option("--pareto", type=click.Choice(["energy", "time"]), default=None,
              help="Instead: the Pareto front of accuracy against energy or time per inference.")
@click.option("--against", "other_path", type=Path_(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A search's RESULTS only: another sweep's results.nc (a grid of the same budget) drawn beside "
                   "its front, both hypervolumes up to one reference point.")
@click.option("--out", "out_path", type=Path_(dir_okay=False, path_type=Path), default=None,
              help="The figure (.png/.svg/.pdf) [default: next to RESULTS, named by what it draws: "
                   f"results-accuracy.png, results-pareto-energy.png, results-front.png]; {MISSING_FOLDERS}.")
@click.option("--overwrite", is_flag=True, help="Replace an existing figure.")
@friendly
def plot_cmd(results: Path, metric: str | None, pareto: str | None, other_path: Path | None, out_path: Path | None,
             overwrite: bool) -> None:
    """Draw a sweep's RESULTS (results.nc): a line with a band (one axis), a heat map (two), or a
    Pareto front; the mean over chips and seeds, the band their spread. A search's results: its trials
    in its first two objectives and their front (results-front.png) unless --metric or --pareto. A sweep
    over state noise and input noise (placement.snr_states_db and placement.snr_db, the implicit-LM
    paper's grid): its heat maps, a panel per further setting (docs/LANGUAGE.md, the reference grid)."""
    from aocsim.experiments.sweep.plots import open_results, plot_front, plot_pareto, plot_sweep
    from aocsim.io.outputs import check_output_file

    ds = open_results(results)
    front = "pareto" in ds and metric is None and not pareto  # a search: its front, unless asked otherwise
    if other_path is not None and not front:
        raise click.ClickException(f"--against {other_path}: expected RESULTS of a search, drawn as its front "
                                   "(without --metric or --pareto)")
    if metric is None and not pareto and not front:
        metric = "accuracy" if "accuracy" in ds else next(iter(ds.data_vars))
    name = "front" if front else "pareto-" + pareto if pareto else metric
    out = check_output_file(out_path or results.with_name(f"{results.stem}-{name}.png"), what="--out")
    if out.exists() and not overwrite:
        raise click.ClickException(f"--out {out} exists; pass --overwrite to replace it")
    other = open_results(other_path) if other_path is not None else None
    panels = _snr_grid_panels(ds, metric) if not front and not pareto else None
    if panels is not None:  # the implicit-LM paper's grid: state x input noise, a panel per further setting
        from aocsim.experiments.language import plot_snr_heat_maps

        written: Any = plot_snr_heat_maps(ds, out, metric=str(metric), panels=panels)
    else:
        written = (plot_front(ds, out, other=other) if front else plot_pareto(ds, out, cost=pareto) if pareto
                   else plot_sweep(ds, out, metric=metric))
    click.echo(f"wrote {written}")


def _snr_grid_panels(ds: Any, metric: str | None) -> tuple[str, str] | None:
    """A sweep over both placement.snr_db and placement.snr_states_db (notebooks/sweeps/charlm-snr-reference.yaml)
    is drawn as the reference grid's heat maps, one panel per combination of at most two further swept
    settings (the model among them); None for any other sweep."""
    from aocsim.experiments.language import SNR, STATES_SNR

    if metric not in ds or not all(d in ds[metric].dims and ds.sizes[d] > 1 for d in (SNR, STATES_SNR)):
        return None
    others = [d for d in ds[metric].dims if d not in (SNR, STATES_SNR, "chip", "seed") and ds.sizes[d] > 1]
    return None if len(others) > 2 else tuple((others + ["", ""])[:2])  # type: ignore[return-value]
