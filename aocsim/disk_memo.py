"""A folder of results too costly to compute twice (a chip's tile programs, its emitters' measured
cubics): the calibration store, which every process reads and writes, and a sweep's own folder.

`aocsim.execute.map_fit.fit_maps` and `aocsim.hardware.engine.emitter_calibration.measured_shapes`
memoise in memory per process, and look in a folder too: by default the user's calibration store
(`store_folder`: as a machine keeps its calibration, a chip placed once on this computer is read back
by every later run), and while `use(folder)` is open that folder instead (a sweep's `fits/`,
docs/SWEEPS.md; `use(None)`: memory only). An entry is named by the SHA-256 of everything its
computation reads (the same key as the memory's, with aocsim's version, a digest of its source code
and what of the machine decides the bits, `machine`: torch's build, the CPU, the thread count), holds
tensors and numbers
in one HDF5 file, and is written to a temporary name and renamed, so that processes writing the
same entry at once leave one whole file. A folder that cannot be written to is read, or left alone;
an entry that cannot be read is computed again (and written over). docs/DEVICE_RUNS.md, the
calibration store. Compiled graphs (`aocsim.hardware.engine.backends`) are kept beside it, in the
kernel store (`kernel_folder`), under the same kind of key.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from aocsim._version import __version__

STORE_VARIABLE = "AOCSIM_CACHE_DIR"  # the stores' parent folder, or "off"
KERNEL_VARIABLE = "AOCSIM_KERNEL_DIR"  # the kernel store's own folder, or "off" (`kernel_folder`)
STORE_ENTRIES = 4000  # at most (about 10-150 kB each: a chip's emitters of one module, a model's programs)
KERNEL_ENTRIES = 200  # compiled graphs kept at most (about 2 MB each)
_STORE = object()  # `_FOLDER` when no `use` is open: the calibration store
_FOLDER: Path | None | object = _STORE
computed: Counter[str] = Counter()  # results this process computed and offered to the folder, by kind


def store_root() -> Path | None:
    """The folder of aocsim's stores: `$AOCSIM_CACHE_DIR`, by default `${XDG_CACHE_HOME:-~/.cache}/aocsim`;
    None with AOCSIM_CACHE_DIR=off (read on every call, so that spawned workers and tests see what the
    environment says now)."""
    value = os.environ.get(STORE_VARIABLE, "").strip()
    if value.lower() == "off":
        return None
    if value:
        return Path(value).expanduser()
    try:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no home folder to be found: memory only
        return None
    return cache / "aocsim"


def store_folder() -> Path | None:
    """The calibration store: `store_root()/calibration` (None: off)."""
    root = store_root()
    return None if root is None else root / "calibration"


def kernel_folder() -> Path | None:
    """The kernel store (compiled graphs, `aocsim.hardware.engine.backends`): `$AOCSIM_KERNEL_DIR` where
    set (off: none), else `store_root()/kernels` (None: off). A folder of its own, so that a run can keep
    its kernels while computing its calibration afresh (the tests do)."""
    value = os.environ.get(KERNEL_VARIABLE, "").strip()
    if value:
        return None if value.lower() == "off" else Path(value).expanduser()
    root = store_root()
    return None if root is None else root / "kernels"


def kernel_path(key: tuple) -> Path | None:
    """Where the kernel store keeps the compiled graph of `key`, named like a calibration entry by the
    SHA-256 of the key, the code and the machine (None: no kernel store)."""
    folder = kernel_folder()
    return None if folder is None else folder / f"graph-{_digest(key)[:32]}.pt2"


def keep_kernel(built: Path, path: Path) -> None:
    """A package just built copied into the kernel store at `path` (a unique temporary name, then renamed),
    the store's least recently used packages forgotten beyond `KERNEL_ENTRIES`."""
    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=f"{path.stem}.", suffix=".part", dir=path.parent)
        os.close(handle)
        shutil.copyfile(built, partial)
        os.replace(partial, path)
        partial = None
        _prune(path.parent, ".pt2", KERNEL_ENTRIES)
    except OSError:  # a folder this process cannot write to: the memory keeps the graph
        return
    finally:
        if partial is not None:
            with contextlib.suppress(OSError):
                os.unlink(partial)


def current_folder() -> Path | None:
    """The folder `load` and `save` use now (None: memory only)."""
    return store_folder() if _FOLDER is _STORE else _FOLDER  # type: ignore[return-value]


@contextlib.contextmanager
def use(folder: str | Path | None) -> Iterator[None]:
    """While open, `load` and `save` use `folder` instead of the store (None: no folder, memory only)."""
    global _FOLDER
    before, _FOLDER = _FOLDER, None if folder is None else Path(folder)
    try:
        yield
    finally:
        _FOLDER = before


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of aocsim's Python source (each module's path and bytes): part of every entry's key, so
    that an entry computed by other code (another release, a change in a checkout) is not read.
    Computed when this module is imported (the end of this file): a checkout edited while a process
    runs does not file the old code's results under the new code's digest."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _torch_build() -> str:
    return hashlib.sha256(torch.__config__.show().encode()).hexdigest()  # its BLAS, LAPACK and flags


# /proc/cpuinfo's fields that name a CPU and what it can do (x86, then Arm); not its clock or its core's place
CPU_FIELDS = ("vendor_id", "model name", "cpu family", "model", "stepping", "cache size", "flags",
              "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "CPU revision", "Features")


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU (`cpu_identity` of /proc/cpuinfo on Linux; elsewhere what `platform` says). MKL picks its
    kernels (least squares, torch's exp2 and log2) by the CPU itself, not by the vector instructions torch
    reports: on one AVX-512 machine, MKL told to use AVX2 changed a least-squares solution's bits."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return cpu_identity(info.read()) or platform.processor()
    except OSError:
        return platform.processor()


def cpu_identity(cpuinfo: str) -> str:
    """Vendor, model and a digest of the first processor's `CPU_FIELDS` in /proc/cpuinfo's text ("" if it has
    none): a hypervisor may name two generations alike ("Intel(R) Xeon(R) Processor"), which their flags
    tell apart; the clock and the core's place do not count."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    named = [f"{name}={fields[name]}" for name in CPU_FIELDS if name in fields]
    if not named:
        return ""
    digest = hashlib.sha256("\n".join(named).encode()).hexdigest()[:16]
    return " / ".join([fields.get("vendor_id") or fields.get("CPU implementer", ""),
                       fields.get("model name") or fields.get("CPU part", ""), digest])


def machine() -> tuple:
    """What besides the code and the inputs decides a result's bits: torch's version and build, the
    CPU (its architecture, the vector instructions torch's kernels use, and its model, by which MKL
    picks its own), the thread count (a reduction's rounding follows it), float32 matmul precision and,
    where CUDA is in use, the GPUs."""
    gpus = (tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
            if torch.cuda.is_initialized() else ())
    return (torch.__version__, _torch_build(), platform.machine(), torch.backends.cpu.get_cpu_capability(),
            cpu_model(), torch.get_num_threads(), torch.get_float32_matmul_precision(), gpus)


def _digest(key: tuple) -> str:
    return hashlib.sha256(repr((__version__, code_digest(), machine(), key)).encode()).hexdigest()


def _path(kind: str, digest: str) -> Path | None:
    where = current_folder()
    return None if where is None else where / f"{kind}-{digest[:32]}.h5"


def load(kind: str, key: tuple) -> list[dict[str, Any]] | None:
    """The records saved for (`kind`, `key`) in the folder (tensors as torch tensors), or None."""
    digest = _digest(key)
    path = _path(kind, digest)
    if path is None or not path.exists():
        return None
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("key") != digest:  # a file put there by hand (or a collision of the name's 128 bits)
                return None
            records = [{name: torch.from_numpy(np.array(g[name])) for name in g}
                       | {name: _number(value) for name, value in g.attrs.items()}
                       for g in (f[str(i)] for i in range(int(f.attrs["records"])))]
    except (OSError, KeyError):  # not a whole entry (a disk error, a file put there by hand): computed again
        return None
    with contextlib.suppress(OSError):  # used now: the store forgets the least recently used first
        os.utime(path)
    return records


def save(kind: str, key: tuple, records: list[dict[str, Any]]) -> None:
    """Write `records` (tensors, and numbers or tuples of numbers) for (`kind`, `key`), if a folder is in
    use; `computed[kind]` counts the calls (each a result this process computed)."""
    computed[kind] += 1
    digest = _digest(key)
    path = _path(kind, digest)
    if path is None:
        return
    import h5py

    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=f"{path.stem}.", suffix=".part", dir=path.parent)
        os.close(handle)  # a name no other process or machine sharing the folder uses
        with h5py.File(partial, "w") as f:
            f.attrs["key"], f.attrs["records"] = digest, len(records)
            for i, record in enumerate(records):
                g = f.create_group(str(i))
                for name, value in record.items():
                    if isinstance(value, torch.Tensor):
                        g.create_dataset(name, data=value.detach().cpu().numpy())
                    else:
                        g.attrs[name] = np.asarray(value)
        os.replace(partial, path)
        partial = None
        if _FOLDER is _STORE:
            _prune(path.parent, ".h5", STORE_ENTRIES)
    except OSError:  # a folder this process cannot write to: the memory keeps the result
        return
    finally:
        if partial is not None:  # a write that failed or was interrupted leaves no part behind
            with contextlib.suppress(OSError):
                os.unlink(partial)


def _prune(store: Path, suffix: str, keep: int) -> None:
    """A store's least recently used entries (files ending `suffix`) deleted beyond `keep` (a sweep's
    folder keeps every entry: its resumption reads them), and parts a killed process left a day ago or more."""
    entries = []
    for path in store.iterdir():
        with contextlib.suppress(OSError):  # deleted meanwhile by another process
            if path.suffix == suffix:
                entries.append((path.stat().st_mtime, path))
            elif path.suffix == ".part" and path.stat().st_mtime < time.time() - 86400:
                path.unlink()
    for _, path in sorted(entries)[:max(len(entries) - keep, 0)]:
        with contextlib.suppress(OSError):
            path.unlink()


def _number(value: Any) -> Any:
    array = np.asarray(value)
    if array.ndim:
        return tuple(array.tolist())
    return array.item()


code_digest()  # this process's code, as imported (`code_digest`)
