"""The `aocsim` command group: options every command shares; each command group lives in its own module."""

from __future__ import annotations

import logging

import click

from aocsim._version import __version__
from aocsim.cli.bench import bench
from aocsim.cli.compare import compare_cmd
from aocsim.cli.devices import devices
from aocsim.cli.evaluate import evaluate
from aocsim.cli.generate import generate_cmd
from aocsim.cli.sweep import plot_cmd, sweep_cmd
from aocsim.cli.train import models, train


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


for command in (evaluate, train, models, generate_cmd, devices, bench, compare_cmd, sweep_cmd, plot_cmd):
    main.add_command(command)
