"""Checks on output paths, run before any long work starts.

Training for minutes and then failing to write the result is the worst way to
learn that a path is wrong; these checks probe the file system up front (a
temporary file or folder, removed at once) and raise one-line `InputError`s.

The rule for every output path (each command's --out and --plot, and the library's writers): a
missing folder on the way is created, by the writer at write time (figures, NetCDF files, model
folders); these checks run before any work and make sure that it can be: the nearest existing
folder above the path is a folder and writable. They create nothing themselves.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from aocsim.errors import InputError

PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _usable(path: str | Path, what: str) -> Path:
    """`path` as a Path the OS can look up (no NUL byte, no name over 255 bytes)."""
    text = str(path)
    if not text or "\x00" in text or any(len(part.encode(errors="surrogateescape")) > 255
                                         for part in Path(text).parts):
        raise InputError(f"{what} = {text[:60]!r}; expected a file system path (no NUL byte, names of at most "
                         "255 bytes)")
    return Path(text)


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


def _probe_writable(folder: Path, what: str, path: Path) -> None:
    """Create and remove a temporary file in `folder` (permission bits alone miss read-only mounts)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(f"{what} = {str(path)!r}: cannot write in {folder} ({exc.strerror or exc}); "
                         "expected a writable location") from None


def _check_parent(path: Path, what: str) -> None:
    base = _existing_ancestor(path.parent)
    if not base.is_dir():
        raise InputError(f"{what} = {str(path)!r}: {base} is a file, not a folder; expected a path in a folder")
    _probe_writable(base, what, path)


def check_output_dir(path: str | Path, *, overwrite: bool, what: str = "out_dir") -> Path:
    """`path` as a folder that can be (re)written: absent, or present with `overwrite`."""
    path = _usable(path, what)
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise InputError(f"{what} = {str(path)!r} exists; refusing to overwrite it (pass --force / "
                             "overwrite=True)")
        if not path.is_dir():
            raise InputError(f"{what} = {str(path)!r} is a file; expected a folder to replace")
    _check_parent(path, what)
    return path


def check_output_file(path: str | Path, *, suffixes: tuple[str, ...] | None = PLOT_SUFFIXES,
                      what: str = "path") -> Path:
    """`path` as a file that can be written, with one of `suffixes` (its format; None: any name); its
    missing folders can be created (the writer creates them)."""
    path = _usable(path, what)
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise InputError(f"{what} = {str(path)!r}: unknown format {path.suffix or '(no suffix)'!r}; expected a "
                         f"file name ending in {', '.join(suffixes)}")
    if path.is_dir():
        raise InputError(f"{what} = {str(path)!r} is a folder; expected a file name")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{what} = {str(path)!r} exists and is read-only; expected a writable file")
    _check_parent(path, what)
    return path


def check_writable_folder(path: str | Path, *, what: str = "folder") -> Path:
    """`path` as a folder files can be added to (existing, or creatable with its missing parents); nothing
    is replaced."""
    path = _usable(path, what)
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{what} = {str(path)!r} is a file; expected a folder")
        _probe_writable(path, what, path)
    else:
        _check_parent(path, what)
    return path
