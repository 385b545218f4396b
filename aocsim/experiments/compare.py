"""`compare`: a trained DEQ on a virtual AOC next to its exact path, as a labelled `xarray.Dataset`.

For every chip (`variation.chip_seed`) the model is compiled once (aocsim/execute/deq.py); for every
seed it is loaded onto the SLM (programming draws) and run on all inputs (drift step and per-iteration
noise), with sample indices keying the noise so that results do not depend on the batch. The exact
path (float64 Anderson to 1e-12) is the same for every chip and seed. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import xarray as xr

from aocsim._checks import integer
from aocsim.errors import InputError
from aocsim.execute.deq import EXACT_TOLERANCE, PlacedDEQ, compile_deq, resolve_profile
from aocsim.execute.deq_tiled import DEVICE_TOL as TILED_TOL
from aocsim.execute.deq_tiled import MAX_ITER as TILED_MAX_ITER
from aocsim.execute.deq_tiled import TiledDEQ, check_placement, placement
from aocsim.execute.ssm import check_averaging, check_elementwise
from aocsim.experiments.results import DEVICE_ONLY, comparison_dataset, residual_traces
from aocsim.hardware.engine import keys
from aocsim.hardware.physics.energy import Activity, energy_j
from aocsim.hardware.engine.tiles import PARTIAL_SUMS, check_predistort
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.io.model_files import load_model
from aocsim.nn.deq import DEQ
from aocsim.nn.implicit_ssm import ImplicitSSM
from aocsim.parallel import run_parts
from aocsim.progress import bar
from aocsim.solve.result import SolveStatus

STOPS = ("tolerance", "readout")


def _model(model: DEQ | ImplicitSSM | str | Path) -> DEQ | ImplicitSSM:
    loaded = load_model(model) if isinstance(model, (str, Path)) else model
    if not isinstance(loaded, (DEQ, ImplicitSSM)):
        raise InputError(f"model is a {type(loaded).__name__}; expected a DEQ or an implicit SSM")
    return loaded


def _ids(name: str, values: Any) -> list[int]:
    """A non-empty list of distinct integers >= 0 (seeds, chips)."""
    try:
        out = list(values)
    except TypeError:
        raise InputError(f"{name} = {values!r}; expected a sequence of integers >= 0") from None
    ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in out)
    if not out or not ok or len(set(out)) != len(out):
        raise InputError(f"{name} = {values!r}; expected a non-empty sequence of distinct integers >= 0")
    return [int(v) for v in out]


def _inputs(model: DEQ, inputs: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    k, classes = model.config.input_size, model.config.output_size
    if not isinstance(inputs, torch.Tensor) or inputs.ndim != 2 or inputs.shape[1] != k:
        shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise InputError(f"inputs has shape {shape}; expected a tensor [B, {k}] (the model's input_size = {k})")
    if inputs.shape[0] == 0:
        raise InputError(f"inputs has shape {tuple(inputs.shape)}; expected at least one sample")
    if not inputs.is_floating_point() or not bool(torch.isfinite(inputs).all()):
        raise InputError("inputs contains non-finite or non-float values; expected finite floats")
    if targets is None:
        return inputs, None
    b = inputs.shape[0]
    if not isinstance(targets, torch.Tensor) or targets.shape != (b,) or targets.is_floating_point():
        shape = tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__
        raise InputError(f"targets has shape {shape}; expected an integer tensor [{b}] (one class per input)")
    if bool((targets < 0).any()) or bool((targets >= classes).any()):
        raise InputError(f"targets has values outside [0, {classes}); expected class ids of the model's output")
    return inputs, targets


def compare(model: DEQ | ImplicitSSM | str | Path, device: DeviceProfile | str, inputs: torch.Tensor,
            targets: torch.Tensor | None = None, *, seeds: Sequence[int] = (0,), chips: Sequence[int] = (0,),
            stop: str = "tolerance", max_iter: int | None = None, fit: bool = True, atol: float = 1e-6,
            rtol: float | None = None, fit_inputs: torch.Tensor | None = None, mode: str = "sequential",
            on_tiles: tuple[str, ...] | None = None, tiling: bool = True, tile_size: int | None = None,
            partial_sums: str = "analog", elementwise: str = "digital", averaging: int = 1,
            predistort: bool = False, progress: bool = False, workers: int = 1) -> xr.Dataset:
    """Run `model` on `device` and on its exact path; per chip, seed and sample (and position).

    A DEQ runs natively (aocsim/execute/deq.py); an implicit SSM as a hybrid (aocsim/execute/ssm.py,
    `compare_sequences`): then `inputs` are token ids [B, L], `targets` [B, L], `mode` says how the
    fixed points are reached, `rtol` is the per-token relative residual (default 0.1, about aoc48's
    noise floor), `max_iter` the device's cap, `on_tiles` which linear maps run on tiles (default
    all: `aocsim.execute.ssm.MAP_KINDS`), and the Dataset has a `position` dimension; `stop`, `fit`,
    `atol`, `fit_inputs` and `tiling` are DEQ settings. A DEQ whose state has more variables than the
    device has channels runs as a tiled hybrid (aocsim/execute/deq_tiled.py), or is refused when
    `tiling` is False; tiled, `stop` must be "tolerance", `atol` and `rtol` are in model units (`rtol`
    default 1e-3) and `max_iter` defaults to 100.

    Args:
        model: a loaded DEQ or implicit SSM, a bundled model name or a model directory.
        device: a profile name or `DeviceProfile`.
        inputs: [B, input_size] (digits: pixel / 16), or token ids [B, L].
        targets: class ids [B] (adds `correct`), [B, L] for sequences, or None.
        seeds: keys of the SLM programming draws, the drift step and every iteration's noise.
        chips: values of `variation.chip_seed` (one compilation each).
        stop: "tolerance" (the device state at its fixed point) or "readout" (the ADC average; then
            `iterations` says where the residual settled and `hardware_time_s` is the whole window).
        max_iter: the device's iteration cap (stop="tolerance"; default 2000).
        fit: compile with the least-squares fit (aocsim/execute/fit.py) or the analytic mapping.
        atol, rtol: the device tolerance, device volts (stop="tolerance").
        fit_inputs: inputs whose exact fixed points the fit matches (default: the task's training set).
        tiling: let a DEQ larger than the device run as a tiled hybrid (False: a one-line error).
        tile_size, partial_sums: the tiles of a model on tiles (`TiledMatrix`; default the device's
            channels, analog partial sums); a DEQ that runs natively has none.
        elementwise: an implicit SSM's SiLU and softplus, "digital" (exact) or "analog" (modelled
            circuits: aocsim/execute/elementwise.py).
        averaging: tile passes averaged per product of a model on tiles (the per-pass noise's std
            falls as 1 / sqrt(averaging), hardware time and conversions grow by the factor).
        predistort: a model on tiles gets its emitter drive linearised digitally before the DAC
            (`TiledMatrix`; the LED cubics' nonlinearity is the tiles' largest static error).
        progress: a progress bar over the chip x seed runs (`aocsim.progress`).
        workers: cores for the device runs (`aocsim.parallel.run_parts`: a DEQ's chips, a sequence
            model's chip x seed runs); the results do not depend on it (draws are keyed by chip and seed).

    Returns:
        Dataset with dims path ("exact", "device"), chip, seed, sample: `prediction`, `correct`,
        `iterations`, `status` (`SolveStatus` values; `status_names` attribute), `residual` (model
        units), `hardware_time_s` (NaN on the exact path) over all four; `agreement` (device
        prediction == exact) and `fixed_point_error` (||z_device - z_exact|| / ||z_exact||) over chip,
        seed, sample. Attributes: provenance.

    Example:
        >>> ds = compare("digits-deq48", "aoc48", load_split().x_test, load_split().y_test, seeds=(0, 1))
        >>> float(ds.agreement.mean())
    """
    m = _model(model)
    check_elementwise(elementwise)
    check_averaging(averaging)
    check_predistort(predistort)
    workers = integer(workers, "workers", minimum=1)
    tile_size = None if tile_size is None else integer(tile_size, "tile_size", minimum=1)
    if partial_sums not in PARTIAL_SUMS:
        raise InputError(f"partial_sums = {partial_sums!r}; expected one of {list(PARTIAL_SUMS)}")
    if isinstance(m, ImplicitSSM):
        from aocsim.experiments.compare_sequences import DEVICE_TOL, compare_sequences

        return compare_sequences(m, resolve_profile(device), inputs, targets, seeds=_ids("seeds", seeds),
                                 chips=_ids("chips", chips), mode=mode, tol=DEVICE_TOL if rtol is None else rtol,
                                 max_iter=max_iter, resolve=resolve_profile, progress=progress, workers=workers,
                                 tile_size=tile_size, partial_sums=partial_sums, elementwise=elementwise,
                                 averaging=averaging, predistort=predistort, **({} if on_tiles is None else {"on_tiles": on_tiles}))
    if elementwise != "digital":
        raise InputError(f"elementwise = {elementwise!r} applies to implicit SSMs (their SiLU and softplus); a DEQ's "
                         "nonlinearity is the loop's own (native) or digital (tiled)")
    if on_tiles is not None:
        raise InputError(f"on_tiles = {on_tiles!r} applies to implicit SSMs; a DEQ runs natively, or with beta W on "
                         "tiles when it outgrows the device")
    if stop not in STOPS:
        raise InputError(f"stop = {stop!r}; expected one of {list(STOPS)}")
    seed_ids, chip_ids = _ids("seeds", seeds), _ids("chips", chips)
    base = resolve_profile(device)
    tiled = check_placement(m, base, tiling=tiling)
    if not tiled and (tile_size is not None or partial_sums != "analog" or averaging != 1 or predistort):
        raise InputError(f"tile_size = {tile_size!r}, partial_sums = {partial_sums!r}, averaging = {averaging!r}, "
                         f"predistort = {predistort!r}: "
                         f"DEQ with state_size "
                         f"{m.config.state_size} runs natively on {base.name} (no tiles); expected the defaults")
    if tiled and (stop != "tolerance" or not fit):
        raise InputError(f"stop = {stop!r}, fit = {fit!r}: a DEQ on tiles (state_size {m.config.state_size} > "
                         f"{base.channels} channels) iterates digitally with calibrated tiles; expected "
                         "stop='tolerance' and fit=True")
    max_iter = (TILED_MAX_ITER if tiled else 2000) if max_iter is None else max_iter
    rtol = (TILED_TOL if tiled else 1e-5) if rtol is None else rtol
    x, y = _inputs(m, inputs, targets)
    x = x.to(dtype=m.weight.dtype)
    b = x.shape[0]
    traced = stop == "tolerance"  # the readout runs a fixed window: its residuals say nothing new
    with torch.no_grad():
        exact = m(x, solver="anderson", atol=EXACT_TOLERANCE, rtol=0.0, max_iter=500, trace=traced)
    shape = (2, len(chip_ids), len(seed_ids), b)
    out = {name: np.zeros(shape, dtype=dt) for name, dt in
           (("prediction", np.int64), ("iterations", np.int64), ("status", np.int64), ("residual", np.float64),
            ("hardware_time_s", np.float64))}
    device_only = {name: np.zeros(shape[1:], dtype=np.float64) for name in DEVICE_ONLY}
    out["prediction"][0] = exact.logits.argmax(1).numpy()
    out["iterations"][0] = exact.solve.iterations.numpy()
    out["status"][0] = exact.solve.status.numpy()
    out["residual"][0] = exact.solve.abs_residual.numpy()
    out["hardware_time_s"][0] = np.nan
    traces: dict[tuple[int, int], np.ndarray] = {}
    parts = [(m, resolve_profile(base, chip), tiled, seed_ids, x, exact.z, stop, fit, fit_inputs, max_iter, atol,
              rtol, traced, tile_size, partial_sums, averaging, predistort) for chip in chip_ids]
    runs = bar(run_parts(chip_runs, parts, workers), desc="compare chips", total=len(parts), enabled=progress)
    for ci, per_seed in runs:  # in order of completion: each run is keyed by its chip and seed alone
        for si, run in enumerate(per_seed):
            if traced:
                traces[ci, si] = run.pop("trace")
            for name in DEVICE_ONLY:
                device_only[name][ci, si] = run.pop(name)
            for name, values in run.items():
                out[name][1, ci, si] = values
    ds = _dataset(out, device_only, y, m, base, seed_ids, chip_ids, stop, fit, averaging, predistort)
    if traced:
        ds["residual_trace"] = residual_traces(exact.solve.trace.numpy(), traces, len(chip_ids), len(seed_ids),
                                               "model state units (||f(z) - z||_2), NaN after the sample stopped")
        ds["residual_trace"].attrs["kind"] = "absolute"
    return ds


def chip_runs(m: DEQ, profile: DeviceProfile, tiled: bool, seeds: list[int], x: torch.Tensor,
              exact_z: torch.Tensor, stop: str, fit: bool, fit_inputs: torch.Tensor | None, max_iter: int,
              atol: float, rtol: float, traced: bool, tile_size: int | None = None,
              partial_sums: str = "analog", averaging: int = 1, predistort: bool = False
              ) -> list[dict[str, np.ndarray]]:
    """One chip, every seed: what `compare` records per sample (a dict of arrays per seed).

    Natively the model is compiled once for the chip and loaded onto the SLM per seed; tiled, each
    seed's weight load is calibrated on itself. A module-level function so that
    `aocsim.parallel.run_parts` can run it in another process.
    """
    samples = torch.arange(x.shape[0])
    compiled = None if tiled else compile_deq(m, profile, fit=fit, fit_inputs=fit_inputs)
    out = []
    for seed in seeds:
        key = keys.as_key(seed)
        if compiled is None:
            tiles = TiledDEQ(m, profile, generator=key.fold(0), fit_inputs=fit_inputs, tile_size=tile_size,
                             partial_sums=partial_sums, averaging=averaging, predistort=predistort)
            run = tiles.run(
                x, generator=key.fold(1), samples=samples, max_iter=max_iter, atol=atol, rtol=rtol, trace=traced)
            gain = 1.0  # the state is in model units
        else:
            run = PlacedDEQ(m, profile, compiled, generator=key.fold(0)).run(
                x, generator=key.fold(1), samples=samples, stop=stop, max_iter=max_iter, atol=atol, rtol=rtol,
                trace=traced)
            gain = compiled.gain  # z = a z_d + b
        r = run.solve
        one = {"prediction": run.logits.argmax(1).numpy(), "iterations": r.iterations.numpy(),
               "status": r.status.numpy(), "residual": (gain * r.abs_residual).numpy(),
               "hardware_time_s": run.hardware_time_s.numpy(),
               "fixed_point_error": ((run.z - exact_z).norm(dim=1) / exact_z.norm(dim=1)).numpy()}
        if compiled is None:  # beta W on tiles every iteration; the injection and tanh digital
            dac, adc = tiles.feedback.conversions()
            its = r.iterations.double().numpy()
            one["dac_conversions"], one["adc_conversions"] = its * dac, its * adc
            channels = tiles.feedback.tiles.channels
        else:  # the input through the DAC once, the state through the ADC (K samples when read out)
            channels = m.config.state_size
            k = int(profile.values["readout.samples"]) if stop == "readout" else 1
            one["dac_conversions"] = np.full(x.shape[0], float(channels))
            one["adc_conversions"] = np.full(x.shape[0], float(channels * k))
        one["energy_j"] = np.asarray(energy_j(profile, Activity(one["hardware_time_s"], one["dac_conversions"],
                                                                one["adc_conversions"], channels=channels))["total"])
        if traced:
            one["trace"] = (gain * r.trace).numpy()
        out.append(one)
    return out


def _dataset(out: dict[str, np.ndarray], device_only: dict[str, np.ndarray], targets: torch.Tensor | None, model: DEQ,
             profile: DeviceProfile, seeds: list[int], chips: list[int], stop: str, fit: bool,
             averaging: int = 1, predistort: bool = False) -> xr.Dataset:
    return comparison_dataset(out, device_only, targets, ("path", "chip", "seed", "sample"),
                              {"sample": np.arange(out["prediction"].shape[-1])}, model=model, profile=profile,
                              seeds=seeds, chips=chips, residual_units="model state units (||f(z) - z||_2)",
                              in_memory="<in-memory DEQ>", stop=stop, fit=int(fit),
                              placement=placement(model, profile, averaging, predistort), averaging=averaging,
                              predistort=int(predistort))


def summarize(ds: xr.Dataset) -> dict[str, Any]:
    """The headline figures of a `compare` Dataset (spreads over chips x seeds, one value per run).

    Returns accuracy (exact; device mean, std, min; None without targets), agreement (mean, std, min),
    mean iterations per path, device status counts, mean hardware time and energy per sample (s, J) and the number
    of runs (chips x seeds) and samples. For sequence models every figure is per token (`unit`).
    """
    runs = ds.sizes["chip"] * ds.sizes["seed"]
    per_run = [d for d in ("sample", "position") if d in ds.dims]
    agree = ds.agreement.mean(per_run)
    out: dict[str, Any] = {
        "model": ds.attrs["model"], "device": ds.attrs["device"], "runs": runs,
        "samples": int(np.prod([ds.sizes[d] for d in per_run])), "unit": "token" if "position" in ds.dims else "sample",
        "mode": ds.attrs.get("mode"),
        "agreement": (float(agree.mean()), float(agree.std()), float(agree.min())),
        "iterations": {p: float(ds.iterations.sel(path=p).mean()) for p in ("exact", "device")},
        "hardware_time_s": float(ds.hardware_time_s.sel(path="device").mean()),
        "energy_j": float(ds.energy_j.mean()),
        "status": {s.name.lower(): int((ds.status.sel(path="device") == s.value).sum()) for s in SolveStatus},
        "accuracy": None,
    }
    if "correct" in ds:
        device = ds.correct.sel(path="device").mean(per_run)
        out["accuracy"] = {"exact": float(ds.correct.sel(path="exact").isel(chip=0, seed=0).mean()),
                           "device": (float(device.mean()), float(device.std()), float(device.min()))}
    return out
