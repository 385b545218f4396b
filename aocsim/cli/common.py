"""Helpers shared by the `aocsim` commands: one-line errors, paths, threads and progress, overrides."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from aocsim.errors import AocsimError

# The rule for every output path (--out, --plot) of every command, in its --help: a missing folder on the way
# is created when the file is written; the path is checked before any work (aocsim/io/outputs.py).
MISSING_FOLDERS = "missing folders are created"

def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn aocsim's own errors into one-line CLI errors (exit code 1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AocsimError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


class Path_(click.Path):
    """click.Path that reports a NUL byte as a usage error (click's os.stat raises ValueError on it)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "\x00" in value:
            self.fail(f"{value!r} contains a NUL byte; expected a file system path", param, ctx)
        return super().convert(value, param, ctx)


@contextlib.contextmanager
def compute() -> Iterator[int]:
    """Around a command's long work: torch's thread count (--threads or automatic) and progress lines.

    Yields the number of threads; torch's previous setting is restored afterwards.
    """
    import torch

    from aocsim.progress import lines_off_terminal
    from aocsim.threads import choose_threads

    ctx = click.get_current_context(silent=True)
    requested = ctx.find_root().params.get("threads") if ctx is not None else None
    before = torch.get_num_threads()
    threads, note = choose_threads(requested, before)
    if note:
        click.echo(note, err=True)
    torch.set_num_threads(threads)
    try:
        with lines_off_terminal():
            yield threads
    finally:
        torch.set_num_threads(before)


def free_path(path: Path) -> Path:
    """`path`, or path-1, path-2, ... if it exists (never overwrite a user's file)."""
    candidate, k = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{k}{path.suffix}")
        k += 1
    return candidate


def parse_overrides(items: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs, each VALUE read the way profile files are (so 5e7 is a number)."""
    import yaml

    from aocsim.hardware.profiles.profile import read_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}; expected KEY=VALUE", param_hint="--set")
        try:
            out[key.strip()] = read_value(raw)
        except yaml.YAMLError:
            raise click.BadParameter(f"{item!r}; the value is not valid YAML", param_hint="--set") from None
    return out

