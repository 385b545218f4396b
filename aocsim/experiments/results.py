"""The labelled Dataset every `aocsim.compare` returns: variables, units and provenance, written once."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch
import xarray as xr

from aocsim._version import __version__
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.solve.result import SolveStatus


def model_checksum(model: torch.nn.Module) -> str:
    """The card's weights checksum, or a SHA-256 of the state dict for an in-memory model."""
    card = getattr(model, "card", None) or {}
    if card.get("weights", {}).get("sha256"):
        return str(card["weights"]["sha256"])
    h = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


DEVICE_ONLY = ("fixed_point_error", "dac_conversions", "adc_conversions", "energy_j")


def comparison_dataset(out: dict[str, np.ndarray], device_only: dict[str, np.ndarray], targets: torch.Tensor | None,
                       dims: tuple[str, ...], coords: dict[str, Any], *, model: torch.nn.Module,
                       profile: DeviceProfile, seeds: list[int], chips: list[int], residual_units: str,
                       in_memory: str, **settings: Any) -> xr.Dataset:
    """`out` (name -> [path, chip, seed, ...]) and the device path's `DEVICE_ONLY` figures (name -> [chip,
    seed, ...]) as a Dataset with agreement, correct (when targets are given), units, status names and
    provenance (+ `settings`)."""
    pred = out["prediction"]
    data: dict[str, Any] = {name: (dims, value) for name, value in out.items()}
    data["agreement"] = (dims[1:], pred[1] == pred[0])
    data.update({name: (dims[1:], device_only[name]) for name in DEVICE_ONLY})
    if targets is not None:
        data["correct"] = (dims, pred == targets.numpy())
    ds = xr.Dataset(data, coords={"path": ["exact", "device"], "chip": chips, "seed": seeds, **coords})
    ds["status"].attrs["status_names"] = ", ".join(f"{s.value}: {s.name.lower()}" for s in SolveStatus)
    ds["residual"].attrs["units"] = residual_units
    ds["hardware_time_s"].attrs["units"] = "s"
    ds["fixed_point_error"].attrs["description"] = "||z_device - z_exact||_2 / ||z_exact||_2"
    for name, what in (("dac_conversions", "injection DAC"), ("adc_conversions", "readout ADC")):
        ds[name].attrs["description"] = f"{what} conversions per {dims[-1]} on the device path (engine counts)"
    ds["energy_j"].attrs.update(units="J", description=(
        "energy per " + dims[-1] + " on the device path over hardware_time_s (aocsim.hardware.physics.energy: static powers "
        "x time + converter energies x conversions; docs/PHYSICS.md, section 6)"))
    card = getattr(model, "card", {}) or {}
    ds.attrs.update({
        "aocsim_version": __version__, "model": str(card.get("name", in_memory)), "model_sha256": model_checksum(model),
        "device": profile.name, "device_sha256": hashlib.sha256(profile.to_json().encode()).hexdigest(),
        "device_json": profile.to_json(), "seeds": np.asarray(seeds, dtype=np.int64),
        "chips": np.asarray(chips, dtype=np.int64), **settings,
    })
    return ds


def hold_last(values: np.ndarray) -> np.ndarray:
    """[iteration, run]: each run's NaNs after its last number replaced by that number (a stopped
    run stays at its final residual)."""
    seen = ~np.isnan(values)
    index = np.where(seen, np.arange(values.shape[0])[:, None], 0)
    np.maximum.accumulate(index, axis=0, out=index)
    held = values[index, np.arange(values.shape[1])[None, :]]
    return np.where(np.maximum.accumulate(seen, axis=0), held, np.nan)


def residual_traces(exact: np.ndarray, device: dict[tuple[int, int], np.ndarray], chips: int, seeds: int,
                    units: str) -> xr.DataArray:
    """Residual per iteration [path, chip, seed, sample, iteration] from the exact path's [sample, I]
    and each (chip, seed) run's [sample, I'], NaN-padded to the longest."""
    length = max(exact.shape[1], *(t.shape[1] for t in device.values()))
    out = np.full((2, chips, seeds, exact.shape[0], length), np.nan)
    out[0, :, :, :, :exact.shape[1]] = exact
    for (ci, si), t in device.items():
        out[1, ci, si, :, :t.shape[1]] = t
    trace = xr.DataArray(out, dims=("path", "chip", "seed", "sample", "iteration"),
                         coords={"iteration": np.arange(length)})
    trace.attrs["units"] = units
    return trace
