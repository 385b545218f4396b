"""Command line: `aocsim` (thin: parse, call one library function, print a summary). Each command group
is a module here (evaluate, train and models, devices, bench, compare, sweep and plot); `app.main` gathers them."""

from aocsim.cli.app import main

__all__ = ["main"]
