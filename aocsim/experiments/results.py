"""The labelled Dataset every `aocsim.compare` returns (variables, units, provenance, written once), and
its headline figures (`summarize`)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch
import xarray as xr

from aocsim._version import __version__
from aocsim.execute.placed import PlacedModel, kind_class
from aocsim.experiments.metrics import METRICS, inference_unit, is_explicit
from aocsim.experiments.trust import trust_attributes, trust_notes
from aocsim.hardware.physics.energy import Activity
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.solve.result import SolveStatus

# What a run's Activity records, as Dataset variables (per chip, seed, sample and position).
ACTIVITY = ("time_s", "dac_conversions", "adc_conversions", "digital_ops", "round_trips", "weight_loads", "busy_s")
DESCRIPTIONS = {
    "dac_conversions": "DAC conversions",
    "adc_conversions": "ADC conversions",
    "digital_ops": "digital operations on converted values (readout averaging, digital partial sums)",
    "round_trips": "loop iterations and tile passes (one round trip each)",
    "weight_loads": "SLM weight loads",
    "busy_s": "module-seconds of passes: modules lit and running (the rest of the modules' time idle)",
}


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


def nll_bits(outputs: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """-log2 of the probability the logits give each target (a softmax over the last dimension)."""
    logp = torch.log_softmax(outputs.detach().double(), dim=-1).gather(-1, targets[..., None].long())[..., 0]
    return (-logp / np.log(2.0)).numpy()


def is_regression(outputs: torch.Tensor) -> bool:
    """One output per sample: a regression (a classifier has at least two classes)."""
    return outputs.shape[-1] == 1


def predictions(outputs: torch.Tensor) -> np.ndarray:
    """What a run answers per sample: the class (argmax of the outputs), or a regression's value (float64)."""
    return outputs[..., 0].detach().double().numpy() if is_regression(outputs) else outputs.argmax(-1).numpy()


def comparison_dataset(placed: Any, model: torch.nn.Module, profile: DeviceProfile, exact: Any,
                       device: dict[str, np.ndarray], activity: Activity, traces: dict[tuple[int, int], np.ndarray],
                       targets: torch.Tensor | None, seeds: list[int], chips: list[int], *,
                       program_error: float = 0.0, run_overrides: list[str] | None = None) -> xr.Dataset:
    """The Dataset of one compare: the exact `Run`, the device's per-run arrays [chip, seed, ...] (incl.
    energy_j), its activity, residual traces per (chip, seed), the worst chip's tile-program error, with
    units, provenance and the verdict of aocsim.experiments.trust."""
    cls = placed.cls
    dims = ("path", "chip", "seed", *cls.dims)
    lengths = device["prediction"].shape[2:]
    regression = is_regression(exact.outputs)
    per_path = {"prediction": predictions(exact.outputs), "iterations": exact.solve.iterations.numpy(),
                "status": exact.solve.status.numpy(), "residual": getattr(exact.solve, cls.residual).double().numpy(),
                "hardware_time_s": np.full(lengths, np.nan)}
    device["hardware_time_s"] = np.asarray(activity.time_s, dtype=np.float64)
    data: dict[str, Any] = {}
    for name, value in per_path.items():
        both = np.stack([np.broadcast_to(value, device[name].shape), device[name]]).astype(device[name].dtype)
        data[name] = (dims, both)
    pred = data["prediction"][1]
    if regression:  # no answers to agree on: how far the device's values lie from the exact path's
        data["output_error"] = (dims[1:], pred[1] - pred[0])
    else:
        data["agreement"] = (dims[1:], pred[1] == pred[0])
    data["fixed_point_error"] = (dims[1:], device["fixed_point_error"])
    data["energy_j"] = (dims[1:], device["energy_j"])
    for name in ACTIVITY[1:]:
        data[name] = (dims[1:], np.asarray(getattr(activity, name), dtype=np.float64))
    if targets is not None and regression:
        data["squared_error"] = (dims, (pred - targets.double().numpy()) ** 2)
    elif targets is not None:
        data["correct"] = (dims, pred == targets.numpy())
        data["nll_bits"] = (dims, np.stack([np.broadcast_to(nll_bits(exact.outputs, targets), device["nll_bits"].shape),
                                            device["nll_bits"]]))
    coords = {"path": ["exact", "device"], "chip": chips, "seed": seeds,
              **{d: np.arange(n) for d, n in zip(cls.dims, lengths)}}
    ds = xr.Dataset(data, coords=coords)
    ds["status"].attrs.update(STATUS_FLAGS)
    ds["residual"].attrs.update(cls.residual_attributes())
    ds["hardware_time_s"].attrs.update(units="s", description=cls.timing(profile, placed.placement))
    ds["fixed_point_error"].attrs["description"] = "||z_device - z_exact||_2 / ||z_exact||_2"
    if regression:
        ds["output_error"].attrs["description"] = "device output - exact output (the model's units)"
        ds["prediction"].attrs["description"] = "the model's output (a regression)"
    if "squared_error" in ds:
        ds["squared_error"].attrs["description"] = "(output - target)^2 (the model's units squared)"
    if "nll_bits" in ds:
        ds["nll_bits"].attrs.update(units="bits", description="-log2 of the probability the output gives the target "
                                                              "(bits per character for a language model)")
    for name, what in DESCRIPTIONS.items():
        ds[name].attrs["description"] = f"{what} per {dims[-1]} on the device path (recorded by the engine)"
    ds["energy_j"].attrs.update(units="J", description=(
        "energy per " + dims[-1] + " on the device path over hardware_time_s (aocsim.hardware.physics.energy: every "
        "module's static powers x time + converter, digital and weight-load energies x counts; docs/PHYSICS.md, "
        "section 6)"))
    if exact.trace is not None and traces:
        ds["residual_trace"] = residual_traces(exact.trace.double().numpy(), traces, len(chips), len(seeds),
                                               cls.residual_attributes())
    card = getattr(model, "card", {}) or {}
    extra = cls.attributes(model, placed.placement)
    ds.attrs.update({
        "aocsim_version": __version__, "model": str(card.get("name", f"<in-memory {type(model).__name__}>")),
        "model_sha256": model_checksum(model), "device": profile.name,
        "device_sha256": hashlib.sha256(profile.to_json().encode()).hexdigest(), "device_json": profile.to_json(),
        "seeds": np.asarray(seeds, dtype=np.int64), "chips": np.asarray(chips, dtype=np.int64),
        "kind": cls.kind, "max_program_error": float(program_error), "placement": placed.describe(model), "modules": int(activity.modules or 1), **placed.placement.attributes(), **extra,
        **({"task": "regression"} if regression else {"classes": int(exact.outputs.shape[-1]),
                                                       "task": str(card.get("task", "classification"))}),
    })
    ds["run_overrides"] = ("chip", list(run_overrides or ["{}"] * len(chips)))
    ds["run_overrides"].attrs["description"] = (
        "the profile keys each chip's runs used with other values than device_json's (JSON; {} where none): noise "
        "set in dB on the device's own noise (snr_kind device) runs with its chip's scaled noise.multiplier")
    for name in ds.variables:  # CF: every variable has units ("1": a count, a fraction, a class or a flag)
        if ds[name].dtype.kind in "iufb":
            ds[name].attrs.setdefault("units", "1")
    ds.attrs.update(trust_attributes(ds))  # `trusted` and `warnings` (aocsim.experiments.trust)
    return ds


STATUS_FLAGS = {"flag_values": np.array([s.value for s in SolveStatus], dtype=np.int64),
                "flag_meanings": " ".join(s.name.lower() for s in SolveStatus),
                "status_names": ", ".join(f"{s.value}: {s.name.lower()}" for s in SolveStatus)}



def residual_traces(exact: np.ndarray, device: dict[tuple[int, int], np.ndarray], chips: int, seeds: int,
                    attributes: dict[str, str]) -> xr.DataArray:
    """Residual per iteration [path, chip, seed, sample, iteration] from the exact path's [sample, I]
    and each (chip, seed) run's [sample, I'], NaN-padded to the longest."""
    length = max(exact.shape[1], *(t.shape[1] for t in device.values()))
    out = np.full((2, chips, seeds, exact.shape[0], length), np.nan)
    out[0, :, :, :, :exact.shape[1]] = exact
    for (ci, si), t in device.items():
        out[1, ci, si, :, :t.shape[1]] = t
    trace = xr.DataArray(out, dims=("path", "chip", "seed", "sample", "iteration"),
                         coords={"path": ["exact", "device"], "sample": np.arange(exact.shape[0]),
                                 "iteration": np.arange(length)})  # chip and seed: the Dataset's
    trace.attrs.update(attributes)  # the residual's (PlacedModel.residual_attributes), per iteration
    trace.attrs["description"] = f"{attributes['description']} per iteration, NaN after the sample stopped (a device early stop: at the round trips its ADC read, NaN between)"
    return trace


def summarize(ds: xr.Dataset) -> dict[str, Any]:
    """The headline figures of a `compare` Dataset (spreads over chips x seeds, one value per run).

    Returns accuracy (exact; device mean, std, min; None without targets), agreement (mean, std, min; None for a
    regression, which has `output_rms` (mean, std, max) instead and, with targets, `mse` (exact; device mean, std, max)),
    mean iterations per path, device status counts, mean hardware time and energy per sample (s, J), the machine's
    optical modules and mean weight loads per sample, and the number
    of runs (chips x seeds) and samples. For sequence models every figure is per token (`unit`). `terms`: one
    line defining each of agreement and the statuses, with the tolerance and iteration cap the run used
    (`terms`); `warnings`: the notes of `aocsim.experiments.trust` (empty when nothing looks wrong).
    """
    runs = ds.sizes["chip"] * ds.sizes["seed"]
    per_run = [d for d in ("sample", "position") if d in ds.dims]

    def value(name: str) -> xr.DataArray:  # one value per chip and seed, as the metric registry reduces it
        return METRICS[name].reduce(ds, per_run)

    def spread(name: str) -> tuple[float, float, float]:  # mean, std and the worst run (its direction's)
        v = value(name)
        return float(v.mean()), float(v.std()), float(v.min() if METRICS[name].better == "max" else v.max())

    def exact(name: str) -> float:  # the exact path: the same at every chip and seed
        return float(value(name).isel(chip=0, seed=0))

    out: dict[str, Any] = {
        "model": ds.attrs["model"], "device": ds.attrs["device"], "runs": runs,
        "samples": int(np.prod([ds.sizes[d] for d in per_run])), "unit": inference_unit(ds),
        "explicit": is_explicit(ds),
        "mode": ds.attrs.get("placement.mode"),
        "agreement": spread("agreement") if METRICS["agreement"].available(ds) else None,
        "iterations": {"exact": float(ds.iterations.sel(path="exact").mean()),
                       "device": float(value("iterations").mean())},
        "hardware_time_s": float(value("time_per_inference_s").mean()),
        "timing": ds.hardware_time_s.attrs.get("description", ""),
        "energy_j": float(value("energy_per_inference_j").mean()),
        "modules": int(ds.attrs.get("modules", 1)),  # a Dataset from before the machine model: one module
        "weight_loads": (float(value("weight_loads_per_inference").mean())
                         if METRICS["weight_loads_per_inference"].available(ds) else 0.0),
        "utilisation": (float(value("module_utilisation").mean())
                        if METRICS["module_utilisation"].available(ds) else None),
        "status": {s.name.lower(): int((ds.status.sel(path="device") == s.value).sum()) for s in SolveStatus},
        "accuracy": None, "terms": terms(ds), "warnings": trust_notes(ds),
    }
    if METRICS["bits_per_character"].available(ds):
        out["bits"] = {"exact": exact("exact_bits_per_character"), "device": spread("bits_per_character")}
    if METRICS["output_rms"].available(ds):
        out["output_rms"] = spread("output_rms")
    if METRICS["mse"].available(ds):
        out["mse"] = {"exact": exact("exact_mse"), "device": spread("mse")}
    if METRICS["accuracy"].available(ds):
        out["accuracy"] = {"exact": exact("exact_accuracy"), "device": spread("accuracy")}
    return out


def terms(ds: xr.Dataset) -> dict[str, str]:
    """One line per term of the summary: agreement and each device status, with the tolerance (the resolved
    placement's `placement.rtol` / `placement.atol` attributes) and the iteration cap the run used; an
    explicit model's one pass instead of the statuses."""
    unit = inference_unit(ds)
    rtol, atol = (f"{v:g}" if v is not None else "?" for v in (ds.attrs.get("placement.rtol"),
                                                              ds.attrs.get("placement.atol")))
    kind = kind_class(str(ds.attrs.get("kind"))) or PlacedModel  # the kind's own words (a file of an unknown kind: defaults)
    rule = kind.convergence_rule(rtol, atol)
    cap = ds.attrs.get("placement.max_iter")
    cap_text = f"{int(cap)} iterations" if cap is not None else kind.iteration_cap(ds.attrs.get("placement.mode"))
    first = ({"output rms": f"root mean square of device output - exact output over a run's {unit}s",
              "mse": f"mean squared error against the targets over a run's {unit}s"}
             if ds.attrs.get("task") == "regression" else
             {"agreement": f"share of {unit}s whose device prediction == exact prediction"})
    if is_explicit(ds):
        return {**first, "one pass": f"an explicit model evaluates its map once per {unit} from z = 0: no fixed "
                                     "point, so no iterations, tolerance or solve status"}
    return {
        **first,
        "converged": f"met the tolerance: {rule}",
        "noise_floor": "stopped above the tolerance, the residual putting the state within the device's predicted noise spread",
        "max_iter": f"the iteration cap ({cap_text}) reached before the tolerance",
        "diverged": "non-finite values (the map diverged)",
    }
