"""`compare` for sequence models: an implicit SSM on a virtual AOC next to its exact path.

For every chip (`variation.chip_seed`) and seed the model is placed as a hybrid (aocsim/execute/ssm.py:
its linear maps on calibrated tiles, loaded and calibrated with that seed's draws) and run on all
sequences in one execution mode, with that seed keying every tile pass's noise. The exact path
(float, the card's tolerance) is the same for every chip and seed. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import xarray as xr

from aocsim.errors import InputError
from aocsim.execute.ssm import (MAP_KINDS, calibration_inputs, check_averaging, check_elementwise, check_on_tiles,
                                linear_maps, place_ssm, placement)
from aocsim.experiments.results import DEVICE_ONLY, comparison_dataset, hold_last, residual_traces
from aocsim.hardware.engine import keys
from aocsim.hardware.physics.energy import Activity, energy_j
from aocsim.hardware.engine.tiles import check_predistort
from aocsim.hardware.profiles.profile import DeviceProfile
from aocsim.nn.implicit_ssm import MODES, ImplicitSSM
from aocsim.parallel import run_parts
from aocsim.progress import bar
from aocsim.solve.result import SolveStatus

# Relative residual per token on the exact path: far below any device effect in float64; in float32
# the bundled cards' eval_tol (float32 carries about 7 digits).
EXACT_TOL = {torch.float64: 1e-11, torch.float32: 1e-5}
DEVICE_TOL = 0.1  # relative residual per token on a device: about the noise floor of aoc48
ANY_SIZE_TILE = 48  # tiles on a profile of any size (channels: null): those of aoc48


def _tokens(model: ImplicitSSM, tokens: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    tokens = model.check_tokens(tokens)
    if targets is None:
        return tokens, None
    if not isinstance(targets, torch.Tensor) or targets.shape != tokens.shape or targets.is_floating_point():
        shape = tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__
        raise InputError(f"targets has shape {shape}; expected an integer tensor {tuple(tokens.shape)} "
                         "(one class per token)")
    classes = model.config.vocab_size
    if bool((targets < 0).any()) or bool((targets >= classes).any()):
        raise InputError(f"targets has values outside [0, {classes}); expected class ids of the model's output")
    return tokens, targets


def median_over_positions(trace: torch.Tensor) -> np.ndarray:
    """[B, L, I] relative residuals per token and iteration -> [B, I]: per sequence the median over its
    tokens, each token held at its last residual once it stopped (NaN where no token has started)."""
    b, length, its = trace.shape
    held = hold_last(trace.double().numpy().reshape(b * length, its).T).T.reshape(b, length, its)
    with warnings.catch_warnings():  # iterations no token of a sequence has reached: NaN, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(held, axis=1)


def tile_passes(placed_maps: dict[str, Any]) -> tuple[int, int]:
    """(passes per token for the injection, passes per iteration and token for the projections):
    the tile passes of each map on tiles, one round trip each (0 for a digital map)."""
    inject = placed_maps["inject"].passes_per_call if "inject" in placed_maps else 0
    return inject, sum(layer.passes_per_call for name, layer in placed_maps.items() if name != "inject")


def _per_token(run: Any, tolerance: float) -> dict[str, np.ndarray]:
    """Prediction, iterations, status and residual per sequence and position of one run."""
    ok = run.residuals <= tolerance
    return {"prediction": run.logits.argmax(-1).numpy(), "iterations": run.iterations.numpy(),
            "status": torch.where(ok, SolveStatus.CONVERGED.value, SolveStatus.MAX_ITER.value).numpy(),
            "residual": run.residuals.double().numpy()}


def device_run(model: ImplicitSSM, profile: DeviceProfile, calibration: Any, seed: int, x: torch.Tensor,
               exact_z: torch.Tensor, mode: str, tol: float, cap: int, tile_size: int | None,
               kinds: tuple[str, ...], partial_sums: str = "analog", elementwise: str = "digital",
               averaging: int = 1, predistort: bool = False) -> dict[str, np.ndarray]:
    """One chip and seed: the model placed (weight loads and calibration keyed by the seed) and run on
    every sequence; what `compare_sequences` records, as arrays [B, L] (the trace per iteration).
    A module-level function so that `aocsim.parallel.run_parts` can run it in another process."""
    key = keys.as_key(seed)
    placed = place_ssm(model, profile, calibration, generator=key.fold(0), tile_size=tile_size, on_tiles=kinds,
                       partial_sums=partial_sums, elementwise=elementwise, averaging=averaging, predistort=predistort)
    run = placed(x, generator=key.fold(1), mode=mode, tol=tol, max_iter=cap, trace=True)
    out = _per_token(run, tol)
    iterations = run.iterations.double().numpy()
    inject, per_iteration = tile_passes(placed.maps)
    out["hardware_time_s"] = (inject + iterations * per_iteration) * float(profile.values["loop.round_trip_s"])
    (dac0, adc0), (dac, adc) = conversions(placed.maps)
    for functions in placed.functions.values():  # analog SiLU / softplus: each evaluation converted
        dac, adc = dac + functions.conversions()[0], adc + functions.conversions()[1]
    out["dac_conversions"], out["adc_conversions"] = dac0 + iterations * dac, adc0 + iterations * adc
    channels = next((layer.tiles.channels for layer in placed.maps.values()), profile.channels or ANY_SIZE_TILE)
    out["energy_j"] = np.asarray(energy_j(profile, Activity(out["hardware_time_s"], out["dac_conversions"],
                                                            out["adc_conversions"], channels=channels))["total"])
    out["fixed_point_error"] = ((run.z - exact_z).norm(dim=-1) / exact_z.norm(dim=-1)).double().numpy()
    out["trace"] = median_over_positions(run.trace)
    return out


def conversions(placed_maps: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(DAC, ADC) conversions per token: the injection's once, then the projections' per iteration."""
    once = placed_maps["inject"].conversions() if "inject" in placed_maps else (0, 0)
    each = [layer.conversions() for name, layer in placed_maps.items() if name != "inject"]
    return once, (sum(d for d, _ in each), sum(a for _, a in each))


def compare_sequences(model: ImplicitSSM, base: DeviceProfile, tokens: Any, targets: Any = None, *,
                      seeds: list[int], chips: list[int], mode: str = "sequential", tol: float = DEVICE_TOL,
                      max_iter: int | None = None, calibration_tokens: torch.Tensor | None = None,
                      tile_size: int | None = None, on_tiles: tuple[str, ...] = MAP_KINDS, resolve: Any,
                      partial_sums: str = "analog", elementwise: str = "digital", averaging: int = 1,
                      predistort: bool = False, progress: bool = False, workers: int = 1) -> xr.Dataset:
    """Per chip, seed, sequence and position: the device run next to the exact one (`aocsim.compare`).

    Args:
        model: an implicit SSM.
        base: the device profile; `resolve(base, chip)` gives each chip's.
        tokens: int [B, L]; targets: int [B, L] or None.
        seeds, chips: lists of ids (checked by the caller).
        mode: "sequential" (token by token, the RNN) or "simultaneous".
        tol: the device's per-token relative residual ||f(z) - z|| / ||f(z)||.
        max_iter: the device's cap (per token sequentially; default 30, or 3 L + 20 simultaneously).
        calibration_tokens: sequences whose exact-path activations calibrate the tiles (default: 16 of
            the training length drawn from the task with seed 99).
        tile_size: as in `TiledMatrix` (default: the device's channels; `ANY_SIZE_TILE` where it has
            any size).
        on_tiles: which linear maps run on tiles (`place_ssm`; default all).
        partial_sums: "analog" or "digital" (`TiledMatrix`).
        elementwise: SiLU and softplus "digital" (exact) or "analog" (aocsim/execute/elementwise.py).
        averaging: tile passes averaged per product (`DeviceLinear`): less noise, more time.
        predistort: the tiles' emitter drive linearised before the DAC (`TiledMatrix`).
        workers: cores for the chip x seed runs (`aocsim.parallel.run_parts`); the results do not
            depend on it (every run's draws are keyed by its chip and seed).
    """
    if not isinstance(model, ImplicitSSM) or not model.config.implicit:
        raise InputError(f"model is a {type(model).__name__}" + (" (explicit)" if isinstance(model, ImplicitSSM)
                         else "") + "; expected an implicit SSM or a DEQ")
    if mode not in MODES:
        raise InputError(f"mode = {mode!r}; expected one of {list(MODES)}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 1:
        raise InputError(f"tol = {tol!r}; expected a relative residual in (0, 1)")
    kinds = check_on_tiles(on_tiles)
    check_elementwise(elementwise)
    check_averaging(averaging)
    check_predistort(predistort)
    x, y = _tokens(model, tokens, targets)
    b, length = x.shape
    cap = max_iter if max_iter is not None else (30 if mode == "sequential" else 3 * length + 20)
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise InputError(f"max_iter = {max_iter!r}; expected an integer >= 1")
    if calibration_tokens is None:
        from aocsim.tasks.groups import group, word_problems

        card = getattr(model, "card", {}) or {}
        g = group(card.get("data", {}).get("group", "parity"))
        calibration_tokens, _ = word_problems(g, 16, card.get("data", {}).get("train_length", 16),
                                              identity_prob=0.5, generator=99)
    calibration = calibration_inputs(model, model.check_tokens(calibration_tokens))
    if tile_size is None and base.channels is None:
        tile_size = ANY_SIZE_TILE
    exact_tol = EXACT_TOL.get(model.head.weight.dtype, 1e-5)
    with torch.no_grad():
        exact = model(x, mode=mode, tol=exact_tol, max_iter=300 if mode == "sequential" else 3 * length + 100,
                      trace=True)
    shape = (2, len(chips), len(seeds), b, length)
    out = {name: np.zeros(shape, dtype=dt) for name, dt in
           (("prediction", np.int64), ("iterations", np.int64), ("status", np.int64), ("residual", np.float64),
            ("hardware_time_s", np.float64))}
    device_only = {name: np.zeros(shape[1:], dtype=np.float64) for name in DEVICE_ONLY}
    traces: dict[tuple[int, int], np.ndarray] = {}

    exact_run = _per_token(exact, exact_tol)
    for name, values in exact_run.items():
        out[name][0] = values
    out["hardware_time_s"][0] = np.nan
    parts = [(model, resolve(base, chips[ci]), calibration, seeds[si], x, exact.z, mode, tol, cap, tile_size, kinds,
              partial_sums, elementwise, averaging, predistort) for ci in range(len(chips)) for si in range(len(seeds))]
    runs = bar(run_parts(device_run, parts, workers), desc="compare chip x seed", total=len(parts), enabled=progress)
    for i, run in runs:  # in order of completion: each run is keyed by its chip and seed alone
        ci, si = divmod(i, len(seeds))
        traces[ci, si] = run.pop("trace")
        for name in DEVICE_ONLY:
            device_only[name][ci, si] = run.pop(name)
        for name, values in run.items():
            out[name][1, ci, si] = values
    ds = comparison_dataset(out, device_only, y, ("path", "chip", "seed", "sample", "position"),
                            {"sample": np.arange(b), "position": np.arange(length)}, model=model, profile=base,
                            seeds=seeds, chips=chips, residual_units="relative, ||f(z) - z|| / ||f(z)|| per token",
                            in_memory="<in-memory implicit SSM>", mode=mode, tol=tol, exact_tol=exact_tol,
                            placement=placement(kinds, elementwise, averaging, predistort), tile_size=tile_size or base.channels or ANY_SIZE_TILE,
                            partial_sums=partial_sums, elementwise=elementwise, averaging=averaging,
                            predistort=int(predistort), maps_on_tiles=", ".join(n for n in linear_maps(model) if n.split(".")[-1] in kinds))
    ds["residual_trace"] = residual_traces(
        median_over_positions(exact.trace), traces, len(chips), len(seeds),
        "relative, ||f(z) - z|| / ||f(z)|| per token, median over positions, a stopped token at its last value; "
        + ("iterations of each token's solve" if mode == "sequential" else "iterations of the whole sequence"))
    ds["residual_trace"].attrs["kind"] = "relative"
    ds["hardware_time_s"].attrs["description"] = ("tile passes in sequence on one chip, one round trip each: "
                                                  "the injection's, then the projections' per iteration")
    return ds
