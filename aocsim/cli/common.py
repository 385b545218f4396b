"""Helpers shared by the `aocsim` commands: one-line errors, paths, threads and progress, overrides."""

from __future__ import annotations

import contextlib
import functools
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from aocsim.errors import AocsimError

# The rule for every output path (--out, --plot) of every command, in its --help: a missing folder on the way
# is created when the file is written; the path is checked before any work (aocsim/io/outputs.py).
MISSING_FOLDERS = "missing folders are created"

# Two things called "device": --device is a device profile (aoc48, a .yaml file: the virtual AOC) in every
# command; --torch-device is where torch computes (cpu, cuda). A torch device's name given to --device is
# refused with a hint (`profile_option`), never looked up as a profile.
TORCH_NAMES = re.compile(r"(cpu|cuda|cuda:\d+|gpu|mps)", re.IGNORECASE)
PROFILE_HELP = "a bundled name (aocsim devices list) or a .yaml file; not the torch device"


def profile_option(*decls: str, torch_option: bool = False, **kwargs: Any) -> Callable[[Any], Any]:
    """A click option (or, given no "--" name, an argument) naming a device profile. A torch device's name
    (cpu, cuda, cuda:N, gpu, mps) is a one-line error before any work, with the hint
    "did you mean --torch-device ...?" where the command has that option (`torch_option`)."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if isinstance(value, str) and TORCH_NAMES.fullmatch(value.strip()):  # a profile file ends in .yaml
            name = (param.opts[0] if param.opts and param.opts[0].startswith("-") else
                    (param.metavar or param.name or "NAME").upper())
            wanted = "cpu" if value.strip().lower() == "cpu" else "cuda"
            hint = f"; did you mean --torch-device {wanted}?" if torch_option else ""
            raise click.ClickException(f"{name} = {value!r} names a torch device; expected a device profile "
                                       f"(a bundled name: aocsim devices list, or a .yaml file){hint}")
        return value

    if any(d.startswith("-") for d in decls):
        return click.option(*decls, callback=check, **kwargs)
    return click.argument(*decls, callback=check, **kwargs)


def torch_device_option(refusal: str | None = None, **kwargs: Any) -> Callable[[Any], Any]:
    """`--torch-device`: where torch computes (cpu, cuda; not the device profile, which is --device).
    `refusal`: why the command cannot use CUDA (said in its --help; `check_torch_device` refuses cuda
    with it), or None where it can."""
    if refusal is None:
        return click.option("--torch-device", default="cpu", show_default=True, **kwargs)
    return click.option("--torch-device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
                        help=f"Torch device; only cpu runs: {refusal} (not the device profile: --device).",
                        **kwargs)


def check_torch_device(value: str, refusal: str | None = None) -> str:
    """`--torch-device VALUE` checked before any work: one line if torch has no such device, or if the
    command cannot use it (`refusal`, as `torch_device_option`'s)."""
    import torch

    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise click.ClickException(f"--torch-device = {value!r}; expected cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise click.ClickException(f"--torch-device {value}: no CUDA device is available to torch here; "
                                       "expected cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise click.ClickException(f"--torch-device {value}: torch sees {torch.cuda.device_count()} CUDA "
                                       f"device(s); expected cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        if refusal is not None:
            raise click.ClickException(f"--torch-device {value}: {refusal}; expected cpu")
    return value


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
    from aocsim.threads import choose_threads, torch_threads

    ctx = click.get_current_context(silent=True)
    requested = ctx.find_root().params.get("threads") if ctx is not None else None
    threads, note = choose_threads(requested, torch.get_num_threads())
    if note:
        click.echo(note, err=True)
    with torch_threads(threads), lines_off_terminal():
        yield threads


def free_path(path: Path) -> Path:
    """`path`, or path-1, path-2, ... if it exists (never overwrite a user's file)."""
    candidate, k = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{k}{path.suffix}")
        k += 1
    return candidate


def parse_overrides(items: tuple[str, ...], hint: str = "--set") -> dict[str, Any]:
    """KEY=VALUE pairs, each VALUE read the way profile files are (so 5e7 is a number); `hint`: the option
    they came from, for the error."""
    import yaml

    from aocsim.hardware.profiles.profile import read_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}; expected KEY=VALUE", param_hint=hint)
        try:
            out[key.strip()] = read_value(raw)
        except yaml.YAMLError:
            raise click.BadParameter(f"{item!r}; the value is not valid YAML", param_hint=hint) from None
    return out

