"""A folder of results too costly to compute twice (a chip's tile programs, its emitters' measured
cubics), shared by the processes of one sweep and kept for its resumption.

`aocsim.execute.device_linear.fit_maps` and `aocsim.hardware.engine.emitter_calibration.measured_shapes`
memoise in memory per process; while `use(folder)` is open they also look in `folder` (a sweep's
`fits/`, docs/SWEEPS.md) and write what they computed there. An entry is named by the SHA-256 of
everything its computation reads (the same key as the memory's), holds tensors and numbers in one
HDF5 file, and is written to a temporary name and renamed, so that processes writing the same entry
at once leave one whole file. A folder that cannot be written to is read, or left alone; an entry
that cannot be read is computed again (and written over).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from aocsim._version import __version__

_FOLDER: Path | None = None


@contextlib.contextmanager
def use(folder: str | Path | None) -> Iterator[None]:
    """While open, `load` and `save` use `folder` (None: no folder, memory only)."""
    global _FOLDER
    before, _FOLDER = _FOLDER, None if folder is None else Path(folder)
    try:
        yield
    finally:
        _FOLDER = before


def _text(key: tuple) -> str:
    return repr((__version__, key))  # another version may compute another result from the same inputs


def _path(kind: str, key: tuple) -> Path | None:
    if _FOLDER is None:
        return None
    return _FOLDER / f"{kind}-{hashlib.sha256(_text(key).encode()).hexdigest()[:32]}.h5"


def load(kind: str, key: tuple) -> list[dict[str, Any]] | None:
    """The records saved for (`kind`, `key`) in the folder (tensors as torch tensors), or None."""
    path = _path(kind, key)
    if path is None or not path.exists():
        return None
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("key") != _text(key):  # a hash collision, or another version's file
                return None
            return [{name: torch.from_numpy(np.array(g[name])) for name in g}
                    | {name: _number(value) for name, value in g.attrs.items()}
                    for g in (f[str(i)] for i in range(int(f.attrs["records"])))]
    except (OSError, KeyError):  # not a whole entry (a disk error, a file put there by hand): computed again
        return None


def save(kind: str, key: tuple, records: list[dict[str, Any]]) -> None:
    """Write `records` (tensors, and numbers or tuples of numbers) for (`kind`, `key`), if a folder is in use."""
    path = _path(kind, key)
    if path is None:
        return
    import h5py

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        with h5py.File(partial, "w") as f:
            f.attrs["key"], f.attrs["records"] = _text(key), len(records)
            for i, record in enumerate(records):
                g = f.create_group(str(i))
                for name, value in record.items():
                    if isinstance(value, torch.Tensor):
                        g.create_dataset(name, data=value.detach().cpu().numpy())
                    else:
                        g.attrs[name] = np.asarray(value)
        os.replace(partial, path)
    except OSError:  # a folder this process cannot write to: the memory keeps the result
        return


def _number(value: Any) -> Any:
    array = np.asarray(value)
    if array.ndim:
        return tuple(array.tolist())
    return array.item()
