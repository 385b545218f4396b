"""A sweep's folder: one NetCDF file per finished point, written atomically, and the assembled results.

    DIR/spec.json          the spec as canonical JSON and the checksums of the device profile and models
                           (a resumed sweep must be the same one, on the same files)
    DIR/points/KEY.nc      one point's metrics over chip x seed, written to a temporary name and
                           renamed when complete, so a killed sweep leaves whole files or none
    DIR/results.nc         every point in one Dataset (`assemble`), written the same way
    DIR/fits/*.h5          the chips' tile programs and emitter measurements (`aocsim.disk_memo`), each named
                           by everything it was computed from: computed once for all the local points and
                           kept for a resumed sweep (an overwritten sweep keeps them: they cannot be stale)

Only these files are ever removed (`--overwrite`), and only in a folder that holds our spec.json;
a folder with other files and no spec.json is refused.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import xarray as xr

from aocsim.errors import InputError
from aocsim.hardware.profiles.schema import BY_KEY
from aocsim.experiments.metrics import METRICS, units_attribute
from aocsim.experiments.sweep.spec import PLACEMENT, SweepSpec, noise_seed
from aocsim.io.outputs import _check_parent, _usable

SPEC_FILE, POINTS, RESULTS, FITS = "spec.json", "points", "results.nc", "fits"
NOT_RUN = -1  # `trusted` of a point not run yet
TRUST_FLAGS = {"flag_values": np.array([NOT_RUN, 0, 1], dtype=np.int8), "flag_meanings": "not_run untrusted trusted"}
def untrusted_points(ds: xr.Dataset, n: int) -> np.ndarray:
    """The `n` points of a results Dataset or point file (flattened) that compare did not trust (`trusted`
    == 0); none for results written before sweeps kept the verdict."""
    return ds["trusted"].values.ravel() == 0 if "trusted" in ds else np.zeros(n, dtype=bool)


POINT_FILE = re.compile(r"[0-9a-f]{16}\.nc")  # points/KEY.nc


class SweepStore:
    """The files of one sweep in `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.points = self.root / POINTS
        self.fits = self.root / FITS

    @property
    def results(self) -> Path:
        return self.root / RESULTS

    def done(self) -> set[str]:
        """Keys of the finished points (whole files only; temporaries are not counted)."""
        if not self.points.is_dir():
            return set()
        return {p.stem for p in self.points.glob("*.nc")}

    def write_point(self, key: str, ds: xr.Dataset) -> None:
        _atomic_netcdf(ds, self.points / f"{key}.nc")

    def read_point(self, key: str) -> xr.Dataset:
        with xr.open_dataset(self.points / f"{key}.nc", engine="h5netcdf") as ds:
            return ds.load()

    def saved_spec(self) -> dict[str, str] | None:
        """What `prepare` wrote: the spec (canonical JSON) and the fingerprint of the device and models."""
        path = self.root / SPEC_FILE
        if not path.is_file():
            return None
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return saved if isinstance(saved, dict) and {"spec", "fingerprint"} <= set(saved) else None

    def prepare(self, spec: SweepSpec, fingerprint: str, *, resume: bool, overwrite: bool) -> None:
        """Make `root` ready for `spec`: new, resumed (the same spec, device and models) or overwritten
        (our files only). A folder is a sweep's when it holds our spec.json; any other non-empty folder
        is refused whatever the flags, so nothing the user keeps there is touched."""
        if resume and overwrite:
            raise InputError("--resume and --overwrite together; expected one of them")
        root = _usable(self.root, "--out")
        if root.exists() and not root.is_dir():
            raise InputError(f"--out {root} is a file; expected a folder for the sweep")
        _check_parent(root / SPEC_FILE, "--out")  # the folder, or its nearest existing ancestor, is writable
        saved = self.saved_spec()
        if root.exists() and any(root.iterdir()) and saved is None:
            raise InputError(f"--out {root} holds files that are not a sweep's; expected a new or empty folder, "
                             "or a sweep folder")
        if saved is not None and not (resume or overwrite):
            raise InputError(f"--out {root} holds a sweep; pass --resume to finish it or --overwrite to start again")
        if saved is not None and resume and saved["spec"] != spec.text():
            raise InputError(f"--out {root} holds a sweep of a different spec; expected the same spec with --resume, "
                             "or --overwrite")
        if saved is not None and resume and saved["fingerprint"] != fingerprint:
            raise InputError(f"--out {root}: the device profile or a model changed since the sweep started "
                             "(checksums differ); expected the same files with --resume, or --overwrite")
        if saved is not None and overwrite:
            for p in self.points.glob("*.nc") if self.points.is_dir() else ():
                if POINT_FILE.fullmatch(p.name):  # only the files a sweep writes
                    p.unlink()
            if self.results.exists():
                self.results.unlink()
        root.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"spec": spec.text(), "fingerprint": fingerprint})
        if saved is None or json.dumps(saved) != text:  # first, so that the folder is ours from now on
            tmp = root / f".{SPEC_FILE}.tmp"
            tmp.write_text(text)
            os.replace(tmp, root / SPEC_FILE)
        self.points.mkdir(exist_ok=True)
        for stale in [*self.points.glob(".*.nc.tmp"), *root.glob(f".{RESULTS}.tmp"),
                      *self.fits.glob("*.part")]:  # writes a run left
            stale.unlink()


def _atomic_netcdf(ds: xr.Dataset, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    ds.to_netcdf(tmp, engine="h5netcdf")
    os.replace(tmp, path)


def assemble(spec: SweepSpec, store: SweepStore, provenance: dict[str, str], *, partial: bool = False,
             files: list[str] | None = None) -> xr.Dataset:
    """Every point's metrics in one Dataset [model, axes..., chip, seed] with coordinates and provenance;
    `partial`: the points finished so far, NaN where a point is missing (`aocsim sweep status`). `files`:
    each point's file, where it is not its own key (a search's screened trial: fidelity.py)."""
    done, every = store.done(), spec.points()
    named = zip(every, files if files is not None else [p.key for p in every])
    points = [(p, file) for p, file in named if not partial or file in done]
    dims = ("model", *(a.dim for a in spec.axes), "chip", "seed")
    shape = (*spec.shape, len(spec.chips), len(spec.seeds))
    data = {m: np.full(shape, np.nan) for m in spec.metrics}
    seeds = np.zeros((*spec.shape, len(spec.seeds)), dtype=np.int64)
    trusted = np.full(spec.shape, NOT_RUN, dtype=np.int8)  # compare's verdict per point (trust.py)
    warnings = np.full(spec.shape, "", dtype=object)
    attrs: dict[str, dict[str, str]] = {}
    for point, file in points:
        ds = store.read_point(file)
        chips = [int(c) for c in ds.chip.values]  # all of the spec's, or a screen's first ones (fidelity.py)
        if not set(chips) <= set(spec.chips):
            raise InputError(f"{store.points / file}.nc holds chips {chips}; expected chips of the spec's "
                             f"{list(spec.chips)} (a point file of another sweep in this folder?)")
        on = [spec.chips.index(c) for c in chips]  # NaN on the chips a screen did not run
        for m in spec.metrics:
            data[m][point.index][on] = ds[m].transpose("chip", "seed").values
            attrs.setdefault(m, {k: str(v) for k, v in ds[m].attrs.items()})
        seeds[point.index] = [noise_seed(spec.root_seed, point.key, s) for s in spec.seeds]
        if "trusted" in ds:  # a point file written before sweeps kept the verdict: not known
            trusted[point.index], warnings[point.index] = int(ds.trusted), str(ds.warnings.values)
    coords: dict[str, tuple[str, list] | list] = {"model": list(spec.models), "chip": list(spec.chips),
                                                  "seed": list(spec.seeds)}
    for axis in spec.axes:
        for path, values in axis.values.items():
            coords[path] = (axis.dim, list(values))
        if axis.dim not in axis.values:  # zip, draw, a search's trial: numbered along their dimension
            coords[axis.dim] = (axis.dim, list(range(len(axis))))
    out = xr.Dataset({m: (dims, v) for m, v in data.items()}, coords=coords)
    out["noise_seed"] = (("model", *(a.dim for a in spec.axes), "seed"), seeds)
    out["noise_seed"].attrs.update(units="1", description=("the compare seed of each point and seed index: 60 bits "
                                                           "of SHA-256(root_seed, point key, seed index)"))
    point_dims = ("model", *(a.dim for a in spec.axes))
    out["trusted"] = (point_dims, trusted)
    out["trusted"].attrs.update(units="1", **TRUST_FLAGS, description=(
        "compare's verdict on the point (aocsim.experiments.trust): 1 when no check failed; 0 when its result cannot "
        "be trusted (see warnings); -1 not run (or written before sweeps kept it)"))
    out["warnings"] = (point_dims, warnings.astype(str))
    out["warnings"].attrs["description"] = "compare's notes on an untrusted point, one per line ('' when trusted)"
    for m in spec.metrics:
        out[m].attrs.update(attrs.get(m, {}))
        out[m].attrs.update(description=METRICS[m].definition)
        out[m].attrs.setdefault("units", units_attribute(METRICS[m]))  # the point files' own (a residual's)
    for path in (p for a in spec.axes for p in a.values):
        out[path].attrs["description"] = PLACEMENT.get(path, "device profile key (devices/SCHEMA.md)")
        if path in BY_KEY and out[path].dtype.kind in "iuf":
            out[path].attrs["units"] = BY_KEY[path].unit or "1"
    for dim in (a.dim for a in spec.axes if a.dim not in a.values):
        out[dim].attrs["description"] = f"the {dim} index (each {dim} sets the parameters along it)"
    out["chip"].attrs["description"] = "variation.chip_seed: the same simulated chips at every point"
    out["seed"].attrs["description"] = "noise seed index (see noise_seed)"
    out.attrs.update({"spec": spec.text(), "root_seed": spec.root_seed, "device": spec.device, **provenance})
    return out


def write_results(ds: xr.Dataset, store: SweepStore) -> Path:
    _atomic_netcdf(ds, store.results)
    return store.results
